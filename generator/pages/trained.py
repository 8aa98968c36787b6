"""What a trial page says of how an adaptation trained (#61): where its classifier head came from, the optimizer settings
it trained with (those its variant sets for itself named), its training order, how the window's parts were timed, and,
for a LoRA adapter, the base model's path the adapter's file holds, the revision that ties it to its base and the
modules inside it. Every value from a record is escaped; a value of another type than the runner writes is left out."""

from __future__ import annotations

from markupsafe import escape

from iteralab.core.language import Figure, Joined, Recorded, Text
from iteralab.pages.render import say_value

SHUFFLES = {"once": Text("shuffled once, from the start again after the end"),
            "every_pass": Text("shuffled anew for each pass, no update across two passes")}


def _list(values) -> list:
    return values if isinstance(values, list) else []


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _strings(values) -> str:
    return ", ".join(str(value) for value in _list(values))


def _number(value):
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _head(head: dict) -> Text:
    if head.get("state") == "initialised":
        return Text("initialised for training ({weights}) with seed {seed}, as [adaptation] new_head declares",
                    weights=_strings(head.get("initialised_weights")), seed=str(head.get("seed")))
    return Text("loaded from the checkpoint")


def _optimizer(optimizer: dict) -> Text:
    rate, decay = _number(optimizer.get("learning_rate")), _number(optimizer.get("weight_decay"))
    own = [key for key in _list(optimizer.get("set_by_variant")) if isinstance(key, str)]
    said = Text("{optimizer}, learning rate {rate}, weight decay {decay}, {schedule} schedule",
                optimizer=str(optimizer.get("optimizer")), rate=f"{rate:g}" if rate is not None else "—",
                decay=f"{decay:g}" if decay is not None else "—", schedule=str(optimizer.get("schedule")))
    if not own:
        return Joined("; ", [said, Text("all of them the campaign's [adaptation] settings")])
    return Joined("; ", [said, Text("set by the variant itself: {keys}", keys=", ".join(own))])


def _order(order: dict) -> Text:
    return Joined(": ", [SHUFFLES.get(str(order.get("shuffle")), Text("not recorded")), Text(
        "{passes} pass(es) begun, {skipped} entries skipped at the ends of passes, {across} update(s) across two passes",
        passes=Figure(_number(order.get("passes")) or 0), skipped=Figure(_number(order.get("entries_skipped_at_pass_ends")) or 0),
        across=Figure(_number(order.get("updates_across_passes")) or 0))])


def training_items(block: dict, code: str) -> str:
    """Return a trial's head, optimizer settings, training order and how its window's parts were timed, as <dt>/<dd>
    items of its adaptation section; nothing for what a record written before them lacks."""
    items = []
    for key, heading, say in (("head", Text("Classifier head"), _head), ("optimizer", Text("Optimizer"), _optimizer),
                              ("order", Text("Training order"), _order)):
        if isinstance(block.get(key), dict):
            items.append((heading, say(block[key])))
    parts = block.get("window_parts")
    if isinstance(parts, dict) and isinstance(parts.get("how"), str):
        items.append((Text("Window's parts timed by"), Recorded(parts["how"])))
    return "".join(f"<dt>{escape(heading.say(code))}</dt><dd>{escape(say_value(said, code))}</dd>"
                   for heading, said in items)


def base_part(export: dict, code: str) -> str:
    """Return what a LoRA export adds to its sentence: the base model's path its adapter_config.json holds, the revision
    that ties it to its base, and the modules inside the adapter (the classifier head); empty for a whole model."""
    base = export.get("base_model")
    if not isinstance(base, dict):
        return ""
    said = Text(" Its adapter_config.json holds a path to the base model, {path}, not the model itself: load the adapter "
                "over the base whose revision is {revision}.", path=str(base.get("path")), revision=str(base.get("revision")))
    inside = _strings(export.get("inside_adapter"))
    if inside:
        said = Joined("", [said, Text(" The classifier head is inside the adapter (trained whole: {modules}).",
                                      modules=inside)])
    return said.say(code)



def weights_of(found: dict) -> dict | None:
    """Return a fine-tuning configuration's weights (its sizing row's ``adaptation``): the parameters its trials trained
    with (a new head and a LoRA adapter included) and their bytes in fp32, not the base checkpoint's (#61); else None."""
    found = _dict(found)
    parameters = _dict(found.get("parameters")).get("total_parameters")
    if not isinstance(parameters, int) or isinstance(parameters, bool):
        return None
    estimate = _dict(_dict(found.get("memory")).get("estimate")).get("weights_bytes")
    return {"parameters": parameters, "bytes": estimate if isinstance(estimate, int) else parameters * 4}


def weights_row(row: dict) -> dict:
    """Return a sizing ROW with a fine-tuning configuration's own weights (``weights_of``); any other row as it is."""
    weights = weights_of(row.get("adaptation"))
    return {**row, "parameters": weights["parameters"], "bits": 32, "estimate": weights["bytes"]} if weights else row
