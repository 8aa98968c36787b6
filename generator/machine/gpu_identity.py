"""Which card the vendor's tools must read for a torch device, and which process they list is this runner (#63).

torch numbers the devices this process may see: CUDA_VISIBLE_DEVICES (and on ROCm ROCR_VISIBLE_DEVICES, then
HIP_VISIBLE_DEVICES) renumbers them, by index, by UUID or by MIG id. nvidia-smi, NVML and amd-smi number every card of
the host, and inside a container amd-smi lists the host's cards too. A card is therefore found by the UUID torch gives
(nvidia-smi -i and NVML take it), else through the visibility variables' indexes; what cannot be told is a reason, never
another tenant's card.

Inside a container the driver lists host PIDs, so os.getpid() is not among the processes the tools list. This process is
then recognised by the memory it holds: a block is allocated on the card, and the listed process whose memory grew by
that block is this one (once per card and process).
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from iteralab.machine.smi import run_tool

PROBE_BYTES = 64 * 1024**2  # the block whose allocation shows which listed process is this one
SLACK_BYTES = (4 * 1024**2, 32 * 1024**2)  # below and above the block: the tools round to MiB, the driver adds pages
SAME_NAMESPACE = "its PID is listed (the tool and this process share a PID namespace)"
NO_CONTEXT = "this process holds no CUDA context yet: every process listed is another one"
_OWN: dict[tuple, dict] = {}  # (this process, the card) -> how it was recognised there
_PLACES: dict[tuple, dict] = {}  # AMD cards found through amd-smi list, per device and visibility settings


def _torch():
    import torch

    return torch


def device_index(device: str) -> int:
    number = device.partition(":")[2]
    return int(number) if number.isdigit() else 0


def _variables(hip: bool) -> tuple[str, ...]:
    """The visibility variables in the order the runtime applies them: each renumbers what the one before left."""
    return ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES") if hip else ("CUDA_VISIBLE_DEVICES",)


def physical_index(index: int, environ=None, hip: bool = False) -> tuple[int | None, str | None]:
    """The host's index (the vendor tool's) of the device torch calls INDEX, from the visibility variables' indexes."""
    environ = os.environ if environ is None else environ
    chain = None
    for name in _variables(hip):
        value = environ.get(name)
        if hip and name == "HIP_VISIBLE_DEVICES" and value is None:
            value = environ.get("CUDA_VISIBLE_DEVICES")  # HIP reads CUDA's variable where its own is not set
        if value is None or not value.strip():
            continue
        items = [item.strip() for item in value.split(",") if item.strip()]
        if not all(item.isdigit() for item in items):
            return None, f"{name}={value} names the devices by UUID or MIG id, and torch gives no UUID for device {index}"
        numbers = [int(item) for item in items]
        chain = numbers if chain is None else [chain[number] for number in numbers if number < len(chain)]
    if chain is None:
        return index, None
    if index >= len(chain):
        return None, f"device {index} is not among the visible devices {chain}"
    return chain[index], None


def _properties(torch, index: int) -> tuple[str, str | None]:
    """The name and UUID torch gives device INDEX (empty and None where this build or driver gives none)."""
    with contextlib.suppress(Exception):  # a CPU build of torch, no driver: the visibility variables are all there is
        properties = torch.cuda.get_device_properties(index)
        uuid = str(getattr(properties, "uuid", "") or "").strip()
        return str(getattr(properties, "name", "") or ""), uuid if uuid.strip("0-") else None
    return "", None


def is_mig(name: str, index: int, environ=None) -> bool:
    """Tell whether device INDEX is a MIG slice: torch names it '... MIG 3g.40gb', or CUDA_VISIBLE_DEVICES gives a MIG id."""
    environ = os.environ if environ is None else environ
    listed = [item.strip() for item in (environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if item.strip()]
    return bool(re.search(r"\bMIG\b", name)) or (index < len(listed) and listed[index].startswith("MIG-"))


def locate(device: str, torch=None, environ=None) -> dict:
    """Where the vendor's tools find the card torch calls DEVICE: selector (what -i / -g take), how it was found, whether
    it is a MIG slice, or the reason it cannot be told (selector None)."""
    torch = torch or _torch()
    environ = os.environ if environ is None else environ
    index, hip = device_index(device), bool(getattr(torch.version, "hip", None))
    name, uuid = _properties(torch, index)
    if hip:
        return _amd_place(torch, index, uuid, environ)
    mig = is_mig(name, index, environ)
    if uuid:
        selector = uuid if uuid.startswith(("GPU-", "MIG-")) else ("MIG-" if mig else "GPU-") + uuid
        return {"selector": selector, "by": "uuid", "mig": mig, "reason": None}
    physical, reason = physical_index(index, environ)
    return {"selector": None if physical is None else str(physical), "by": "index", "mig": mig, "reason": reason}


def _plain(uuid: str | None) -> str:
    return re.sub(r"[^0-9a-f]", "", (uuid or "").lower().removeprefix("gpu-"))


def parse_amd_list(text: str) -> list[dict]:
    """`amd-smi list --json`: each card's index (gpu), bdf, uuid and, from ROCm 6.4, its HIP id and HIP UUID."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data") or data.get("gpus") or [data]
    found = []
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict):
            fields = {key.lower(): value for key, value in entry.items()}
            if str(fields.get("gpu", "")).isdigit():
                found.append({"gpu": int(fields["gpu"]), "bdf": fields.get("bdf"), "uuid": fields.get("uuid"),
                              "hip_id": fields.get("hip_id"), "hip_uuid": fields.get("hip_uuid")})
    return found


def _amd_place(torch, index: int, uuid: str | None, environ) -> dict:
    key = (index, uuid, *(environ.get(name) for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                          "CUDA_VISIBLE_DEVICES", "PATH")))
    if key not in _PLACES:
        _PLACES[key] = _amd_find(torch, index, uuid, environ)
    return _PLACES[key]


def _amd_find(torch, index: int, uuid: str | None, environ) -> dict:
    physical, reason = physical_index(index, environ, hip=True)
    text, _ = run_tool(["amd-smi", "list", "--json"])
    try:
        listed = parse_amd_list(text) if text else []
    except (ValueError, AttributeError):
        listed = []
    found, by = [card for card in listed if uuid and _plain(uuid) in (_plain(card["uuid"]), _plain(card["hip_uuid"]))], "uuid"
    if not found and physical is not None:
        found, by = [card for card in listed if str(card["hip_id"]) == str(physical)], "hip_id"
    if found:
        return {"selector": str(found[0]["gpu"]), "by": by, "bdf": found[0]["bdf"], "mig": False, "reason": None}
    narrowed = any(environ.get(name) for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"))
    count = None
    with contextlib.suppress(Exception):
        count = torch.cuda.device_count()
    if physical is not None and (narrowed or not listed or len(listed) == count):
        return {"selector": str(physical), "by": "index", "mig": False, "reason": None}
    return {"selector": None, "by": None, "mig": False, "reason": reason or (
        f"amd-smi lists {len(listed)} GPUs and torch sees {count}: this process sees part of the host's cards, and amd-smi "
        "gives no HIP id or UUID to tell which one is device " f"{index} (ROCm 6.4 and later do); not read")}


def recognise(key: str, processes: list[dict] | None, reread, device: str, cuda=None) -> dict:
    """Which of PROCESSES (the card's, as the tool listed them) is this process: {"pids": [...], "how": ...}; pids None
    where it cannot be told. REREAD lists them again; KEY names the card (once recognised, it is not probed again)."""
    own = os.getpid()
    if processes is None:
        return {"pids": None, "how": "the tool did not list the card's processes"}
    if any(process["pid"] == own for process in processes):
        return {"pids": [own], "how": SAME_NAMESPACE}
    if (own, key) in _OWN:
        return _OWN[(own, key)]
    if not processes:
        return {"pids": [], "how": "no process listed on the card"}
    cuda = cuda or _torch().cuda
    with contextlib.suppress(Exception):
        if not cuda.is_initialized():
            return {"pids": [], "how": NO_CONTEXT}
    found = _probe(processes, reread, device, cuda)
    if found["pids"]:
        _OWN[(own, key)] = found
    return found


def _probe(before: list[dict], reread, device: str, cuda) -> dict:
    """Allocate a block on DEVICE beyond what the allocator caches, list the processes again: whose memory grew by it."""
    try:
        reserved = cuda.memory_reserved(device)
        size = PROBE_BYTES + max(0, reserved - cuda.memory_allocated(device))  # more than the cache can hand out
        pointer = cuda.caching_allocator_alloc(size, device)
        try:
            cuda.synchronize(device)
            grown = cuda.memory_reserved(device) - reserved
            after = reread()
        finally:
            cuda.caching_allocator_delete(pointer)
    except Exception as error:  # out of memory, a fatal CUDA error, a stand-in without an allocator
        return {"pids": None, "how": f"not recognised: allocating {PROBE_BYTES // 1024**2} MiB to find this process "
                                     f"failed ({type(error).__name__}: {str(error)[:120]})"}
    if after is None or grown < PROBE_BYTES:
        return {"pids": None, "how": "not recognised: the tool did not list the processes again, or the block came from "
                                     "the allocator's cache"}
    earlier = {process["pid"]: process.get("used_memory_bytes") for process in before}
    new = [process["pid"] for process in after if process["pid"] not in earlier]
    low, high = grown - SLACK_BYTES[0], grown + SLACK_BYTES[1]
    grew = [process["pid"] for process in after if process["pid"] in earlier and process.get("used_memory_bytes") is not None
            and earlier[process["pid"]] is not None and low <= process["used_memory_bytes"] - earlier[process["pid"]] <= high]
    found = grew if len(grew) == 1 else new if len(new) == 1 and not grew else []
    if len(found) != 1:
        return {"pids": None, "how": f"not recognised: after allocating {grown // 1024**2} MiB, {len(grew)} listed "
                                     f"processes grew by it and {len(new)} appeared"}
    how = "appeared when it allocated" if found == new else "grew by"
    return {"pids": found, "how": f"recognised by its memory: pid {found[0]} (as the driver numbers it, in another PID "
                                  f"namespace) {how} the {grown // 1024**2} MiB block this process allocated"}


def forget() -> None:
    """Drop what was found (the tests' machines change between tests)."""
    _OWN.clear()
    _PLACES.clear()
