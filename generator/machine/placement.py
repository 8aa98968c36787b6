"""How a campaign uses a machine's cards ([placement]): one card, or one model placed across several, verified after loading.

The source: "two cards need a verified software placement; their memory does not become one space". Each card's peak is
therefore recorded apart (run.trial.PhaseClock), and a placement that left a declared card without any of the model is
refused rather than timed as if it had used it.
"""

from __future__ import annotations

import importlib
import re

from iteralab.declared.tables import Table

ONE_CARD, ACROSS_CARDS, PER_CARD = "one_card", "across_cards", "per_card"
MODES = (ONE_CARD, ACROSS_CARDS, PER_CARD)
MAX_CARDS = 64
DEFAULT = {"mode": ONE_CARD}


def read_placement(table: Table, variants, kind: str) -> dict:
    """Read [placement]: mode one_card (the default, as before it existed), across_cards or per_card with its devices."""
    placement = {"mode": table.get("mode", str, default=ONE_CARD, choices=MODES)}
    if placement["mode"] == PER_CARD:
        placement["devices"] = _devices(table)
        _per_card_notes(table, variants, kind, placement["devices"])
    elif placement["mode"] == ACROSS_CARDS:
        placement["devices"] = _devices(table)
        if kind not in ("classify", "generate"):
            table.note("mode", f"across_cards places a model for inference; a campaign whose [workload] kind is {kind!r} "
                               "trains on one card (leave [placement] out)")
        first = placement["devices"][0] if placement["devices"] else None
        for variant in variants:
            if variant.device.startswith("cuda") and first and _index(variant.device) != _index(first):
                table.note("devices", f"variant {variant.name} has device = {variant.device!r}, but its inputs go to the "
                                      f"first card of the placement, {first}: set its device to {first!r}")
    elif "devices" in table.data:
        table.used.add("devices")
        table.note("devices", "one_card uses each variant's own device; devices belong to mode = \"across_cards\" or "
                              "\"per_card\"")
    table.finish()
    return placement


def _per_card_notes(table: Table, variants, kind: str, devices: list[str]) -> None:
    """Refuse, before any timing, what one trial per card at the same time cannot honour."""
    if kind not in ("classify", "generate"):
        table.note("mode", f"per_card runs inference on every card at once; a campaign whose [workload] kind is {kind!r} "
                           "trains on one card (leave [placement] out)")
    for variant in variants:
        if not variant.device.startswith("cuda"):
            table.note("devices", f"variant {variant.name} has device = {variant.device!r}: per_card runs each variant on "
                                  "every declared card, so its device must be the first of them")
        elif devices and _index(variant.device) != _index(devices[0]):
            table.note("devices", f"variant {variant.name} has device = {variant.device!r}; per_card runs it on every "
                                  f"declared card and records it under the first: set its device to {devices[0]!r}")
        if variant.compile:
            # TorchDynamo compiles under process-wide state: two threads compiling at once is not supported.
            table.note("devices", f"variant {variant.name} has compile = true: torch.compile cannot run in the set's "
                                  "threads at the same time; set compile = false, or use mode = \"one_card\"")


def _devices(table: Table) -> list[str]:
    devices = table.data.get("devices")
    table.used.add("devices")
    if devices is None:
        table.note("devices", "is required: the cards the model is placed across (across_cards) or each runs a trial "
                              "(per_card), e.g. [\"cuda:0\", \"cuda:1\"]")
        return []
    if not isinstance(devices, list) or not all(isinstance(d, str) and re.fullmatch(r"cuda:\d{1,4}", d) for d in devices):
        table.note("devices", f"must be a list of cards such as [\"cuda:0\", \"cuda:1\"], not {devices!r}")
        return []
    if len(set(devices)) != len(devices) or not 2 <= len(devices) <= MAX_CARDS:
        table.note("devices", f"must name {MAX_CARDS} or fewer different cards, at least two: one card is mode = \"one_card\"")
        return []
    return devices


def _index(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def placement_of(protocol: dict) -> dict:
    """Return the campaign's placement; one written before [placement] existed uses one card per trial."""
    return protocol.get("placement") or DEFAULT


def describe(protocol: dict) -> list[str]:
    """Say the declared placement in a dry run's plan (nothing when the campaign declares none, as before)."""
    placement = protocol.get("placement")
    if not placement:
        return []
    if placement["mode"] == ACROSS_CARDS:
        return [f"Placement: one model across {', '.join(placement['devices'])} (transformers' device_map \"balanced\" "
                "through accelerate, checked after loading: a card left without a part is refused; each card's peak "
                "memory recorded apart)"]
    if placement["mode"] == PER_CARD:
        return [f"Placement: one trial per card on {', '.join(placement['devices'])} at the same time (a thread and a model "
                "copy per card, each on its own copy of the corpus, timed on its own card, its memory recorded apart); "
                "a set interrupted on any card runs again whole"]
    return ["Placement: one card per trial (each variant's device)"]


def cards_of(device: str, protocol: dict) -> tuple[str, ...]:
    """Return the cards a trial on DEVICE uses: the placement's across cards, else DEVICE itself (none on a CPU; per_card:
    its own card, the trial's DEVICE)."""
    if not device.startswith("cuda"):
        return ()
    placement = placement_of(protocol)
    return tuple(placement["devices"]) if placement["mode"] == ACROSS_CARDS else (device,)


def cards(variant, protocol: dict) -> tuple[str, ...]:
    """Return the cards a trial of VARIANT uses."""
    return cards_of(variant.device, protocol)


def declared_cards(variant, protocol: dict) -> tuple[str, ...]:
    """Return every card a variant's trials need on this machine: per_card's declared cards, else its trial's cards."""
    placement = placement_of(protocol)
    if placement["mode"] == PER_CARD and variant.device.startswith("cuda"):
        return tuple(placement["devices"])
    return cards(variant, protocol)


def devices_used(cards: tuple[str, ...]) -> list[str]:
    """Name CARDS by index for the trial record: "cuda" is cuda:0, as store.configuration reads a variant's device."""
    return [card if ":" in card else "cuda:0" for card in cards]


def _cuda():
    import torch

    return torch.cuda


def accelerate():
    """Import accelerate, which transformers needs to place one model across cards; refuse clearly without it."""
    try:
        return importlib.import_module("accelerate")
    except ImportError:
        raise RuntimeError("[placement] mode = \"across_cards\" places the model with transformers' device_map, which needs "
                           "the package accelerate: pip install accelerate (or leave [placement] out to use one card)") from None


def dtype_option(dtype) -> dict:
    """from_pretrained's option that loads the weights in DTYPE (transformers 4.56 renamed torch_dtype to dtype); none
    for None. Without it transformers 5 keeps the checkpoint's saved dtype: a bf16 checkpoint would run an fp32 variant
    in bf16 (#63)."""
    if dtype is None:
        return {}
    import transformers

    major, minor = (int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    return {("dtype" if (major, minor) >= (4, 56) else "torch_dtype"): dtype}


def load_options(variant, protocol: dict, dtype) -> dict:
    """Return from_pretrained's extra options: the variant's dtype (loaded in it: a model that needs two cards at bf16
    would not load at fp32 first, a checkpoint saved in bf16 runs an fp32 variant in fp32) and, across cards, a balanced
    device_map over the placement's cards with each card's whole memory."""
    devices = cards(variant, protocol)
    if len(devices) < 2:
        return dtype_option(dtype)
    accelerate()
    # Only the declared cards, none of the host's memory: a model that does not fit them fails to load, never spills.
    memory = {_index(device): _cuda().get_device_properties(_index(device)).total_memory for device in devices}
    return {"device_map": "balanced", "max_memory": memory, **dtype_option(dtype)}


def verify(model, variant, protocol: dict) -> dict:
    """Check that the loaded model holds a part on every declared card and nowhere else; return modules per card."""
    devices = cards(variant, protocol)
    mapping = getattr(model, "hf_device_map", None) or {}
    held = {}
    for where in mapping.values():
        name = f"cuda:{where}" if isinstance(where, int) else str(where)
        held[name] = held.get(name, 0) + 1
    unused, elsewhere = [d for d in devices if d not in held], sorted(set(held) - set(devices))
    if unused or elsewhere:
        raise RuntimeError(f"the placement across {', '.join(devices)} put the model's modules on "
                           f"{', '.join(f'{d} ({n})' for d, n in sorted(held.items())) or 'no card'}: "
                           + (f"{', '.join(unused)} holds none of it (a model this small fits one card: use mode = "
                              "\"one_card\")" if unused else f"{', '.join(elsewhere)} is not a declared card"))
    return {device: held[device] for device in devices}


def placed(model, variant, protocol: dict, dtype):
    """Put the loaded MODEL where the variant runs: on its device, or (already placed across cards) checked there."""
    if len(cards(variant, protocol)) < 2:
        return model.to(device=variant.device, dtype=dtype)
    verify(model, variant, protocol)
    return model
