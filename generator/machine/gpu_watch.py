"""The GPU side of a window's interference: other processes on the trial's GPU, its clocks and throttle reasons (#49).

NVIDIA: NVML when nvidia-ml-py is installed (throttle reasons, SM clock, power and thermal violation time, compute
processes), nvidia-smi otherwise. AMD: amd-smi metric and process (JSON). Each reader turns what the tool said into one
snapshot; ``figures`` compares the snapshots before and after the window. What cannot be read is None with its reason.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import importlib
import json
import os

from iteralab.core.language import Text
from iteralab.machine import gpu_identity
from iteralab.machine.smi import run_tool

# NVML's clocks event (throttle) reason bits: nvmlClocksEventReason*/nvmlClocksThrottleReason* in nvml.h.
NVIDIA_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                  0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                  0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
# Those that slow the card down for power or heat: a disturbance. Idle, a set clock or sync boost are not.
DISTURBING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
              "ppt", "socket_thermal", "vr_thermal", "hbm_thermal", "prochot"}
NVML_POLICIES = {"power": 0, "thermal": 1}  # NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL
# The card holding its clocks under its power limit: what an H100 or MI300X does under any full load (#63). Recorded with
# its figures, apart from the throttle reasons; the rule counts it only where [protocol.disturbance] power_capping = true.
POWER_CAPPING = {"sw_power_cap", "power", "ppt"}
AMD_THROTTLES = ("ppt", "socket_thermal", "vr_thermal", "hbm_thermal", "prochot")
NO_GPU = Text("no GPU: the variant runs on the CPU")


def reasons_of(mask: int) -> list[str]:
    """Name the bits of an NVML clocks event reasons mask."""
    return [name for bit, name in NVIDIA_REASONS.items() if mask & bit]


def from_nvml(values: dict) -> dict:
    """A snapshot from what NVML answered (as recorded: mask, clocks in MHz, violation ns, processes)."""
    return {"source": "nvml", "reasons": reasons_of(values["clocks_event_reasons"]), "sm_clock_mhz": values.get("sm_clock_mhz"),
            "max_sm_clock_mhz": values.get("max_sm_clock_mhz"), "violation": values.get("violation") or {},
            "processes": [{"pid": p["pid"], "used_memory_bytes": p.get("used_memory_bytes")} for p in values["processes"]],
            "reason": None}


def _nvml_handles(pynvml, selector: str, mig: bool) -> tuple:
    """The card's handle (a MIG slice's parent: clocks and throttling are the whole card's) and the processes' handle."""
    if not selector.isdigit():
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(selector)
        except (TypeError, ctypes.ArgumentError):  # a release of nvidia-ml-py that takes bytes only
            handle = pynvml.nvmlDeviceGetHandleByUUID(selector.encode())
        if mig:
            return pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle), handle
        return handle, handle
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(selector))
    return handle, handle


def _nvml_values(selector: str, mig: bool = False) -> dict:
    pynvml = importlib.import_module("pynvml")
    pynvml.nvmlInit()
    try:
        card, slice_ = _nvml_handles(pynvml, str(selector), mig)
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        violation = {}
        for name, policy in NVML_POLICIES.items():
            with contextlib.suppress(Exception):  # not supported on every card
                violation[name] = int(pynvml.nvmlDeviceGetViolationStatus(card, policy).violationTime)
        return {"clocks_event_reasons": int(reasons(card)),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(card, pynvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(card, pynvml.NVML_CLOCK_SM),
                "violation": violation,
                "processes": [{"pid": p.pid, "used_memory_bytes": p.usedGpuMemory}
                              for p in pynvml.nvmlDeviceGetComputeRunningProcesses(slice_)]}
    finally:
        pynvml.nvmlShutdown()


def parse_nvidia_smi(gpu_text: str, apps_text: str) -> dict:
    """A snapshot from `nvidia-smi -i N --query-gpu=clocks.sm,clocks.max.sm,clocks_event_reasons.active
    --format=csv,noheader,nounits` and `nvidia-smi -i N --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`."""
    row = next(csv.reader(gpu_text.strip().splitlines(), skipinitialspace=True))
    processes = [{"pid": int(r[0]), "used_memory_bytes": int(float(r[1]) * 1024**2) if r[1].strip().isdigit() else None}
                 for r in csv.reader(apps_text.strip().splitlines(), skipinitialspace=True) if r and r[0].strip().isdigit()]
    return {"source": "nvidia-smi", "reasons": reasons_of(int(row[2], 16)), "sm_clock_mhz": int(row[0]),
            "max_sm_clock_mhz": int(row[1]), "violation": {}, "processes": processes, "reason": None}


def _nvidia(selector, mig: bool = False) -> dict:
    """Read the card SELECTOR names (its UUID, or its host index) through NVML, else nvidia-smi."""
    try:
        return from_nvml(_nvml_values(str(selector), mig))
    except Exception as error:  # no nvidia-ml-py, no driver, no permission: nvidia-smi is asked next
        nvml_reason = "nvidia-ml-py is not installed" if isinstance(error, ImportError) else f"NVML failed: {error}"
    if mig:
        return _unread(f"{nvml_reason}; a MIG slice: nvidia-smi's --query-gpu reads whole cards, and its process list is "
                       "every slice's (install nvidia-ml-py to read the slice)")
    text, reason = run_tool(["nvidia-smi", "-i", str(selector), "--query-gpu=clocks.sm,clocks.max.sm,clocks_event_reasons.active",
                             "--format=csv,noheader,nounits"])
    apps, apps_reason = run_tool(["nvidia-smi", "-i", str(selector), "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"]) if text else (None, None)
    try:
        snapshot = parse_nvidia_smi(text, apps or "") if text else _unread(f"{nvml_reason}; {reason}")
        if text and apps is None and "no output" not in (apps_reason or ""):  # no row: no process; a failure: unknown
            snapshot.update(processes=None, processes_reason=apps_reason)
        return snapshot
    except (ValueError, IndexError, StopIteration):
        return _unread(f"{nvml_reason}; nvidia-smi printed something unreadable: {' '.join(text.split())[:120]!r}")


def _active(value) -> bool:
    value = value.get("value") if isinstance(value, dict) else value
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value > 0
    return isinstance(value, str) and value.strip().upper() in ("ACTIVE", "TRUE", "YES")


def _number(value):
    value = value.get("value") if isinstance(value, dict) else value
    with contextlib.suppress(TypeError, ValueError):
        return int(value)
    return None


def _first(data):
    if isinstance(data, dict):
        data = data.get("gpu_data") or [data]
    return data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}


def parse_amd_smi(metric_text: str, process_text: str) -> dict:
    """A snapshot from `amd-smi metric -g N --json` (throttle, clock) and `amd-smi process -g N --json`."""
    metric = _first(json.loads(metric_text))
    throttle, clock = metric.get("throttle") or {}, (metric.get("clock") or {}).get("gfx_0") or {}
    reasons = [name for name in AMD_THROTTLES if _active(throttle.get(f"{name}_violation_status"))
               or _active(throttle.get(f"{name}_violation_activity"))]
    accumulated = {name: _number(throttle.get(f"{name}_accumulated")) for name in AMD_THROTTLES}
    processes = []
    for entry in (_first(json.loads(process_text)).get("process_list") or []) if process_text else []:
        info = entry.get("process_info", entry) if isinstance(entry, dict) else {}
        if isinstance(info, dict) and _number(info.get("pid")) is not None:
            memory = info.get("mem_usage")
            unit = memory.get("unit") if isinstance(memory, dict) else None
            processes.append({"pid": _number(info["pid"]), "used_memory_bytes": _number(memory) * 1024**2
                              if unit == "MB" and _number(memory) is not None else None})
    return {"source": "amd-smi", "reasons": reasons, "sm_clock_mhz": _number(clock.get("clk")),
            "max_sm_clock_mhz": _number(clock.get("max_clk")),
            "violation": {name: value for name, value in accumulated.items() if value is not None},
            "processes": processes, "reason": None}


def _amd(selector) -> dict:
    """Read the card SELECTOR names (amd-smi's own index) through amd-smi."""
    metric, reason = run_tool(["amd-smi", "metric", "-g", str(selector), "--json"])
    if not metric:
        return _unread(reason)
    process, _ = run_tool(["amd-smi", "process", "-g", str(selector), "--json"])
    try:
        return parse_amd_smi(metric, process or "")
    except (ValueError, AttributeError, TypeError):
        return _unread(f"amd-smi printed something unreadable: {' '.join(metric.split())[:120]!r}")


def _unread(reason: str) -> dict:
    return {"source": None, "reasons": None, "sm_clock_mhz": None, "max_sm_clock_mhz": None, "violation": {},
            "processes": None, "reason": reason}


def _torch():
    import torch

    return torch


def _read(place: dict, hip: bool) -> dict:
    return _amd(place["selector"]) if hip else _nvidia(place["selector"], place.get("mig", False))


def sample(device: str) -> dict | None:
    """Read the trial's GPU at one moment (the card torch calls DEVICE, found by its UUID); None for a CPU variant."""
    if not device.startswith("cuda"):
        return None
    torch = _torch()
    place = gpu_identity.locate(device, torch)
    if place["selector"] is None:
        return _unread(place["reason"])
    hip = bool(getattr(torch.version, "hip", None))
    snapshot = _read(place, hip)
    snapshot["card"] = {"selector": place["selector"], "by": place["by"], "mig": place.get("mig", False)}
    if snapshot["reason"] is None:
        own = gpu_identity.recognise(place["selector"], snapshot["processes"],
                                     lambda: _read(place, hip).get("processes"), device, torch.cuda)
        snapshot.update(own_pids=own["pids"], own_how=own["how"])
    return snapshot


def _others(start: dict, end: dict, own_pid: int | None) -> tuple[list | None, str | None, list]:
    """The processes other than this one, why they are unknown (None) where they are, and this process's PIDs seen."""
    if start["processes"] is None or end["processes"] is None:
        return None, start.get("processes_reason") or end.get("processes_reason"), []
    listed = {p["pid"]: p for p in [*start["processes"], *end["processes"]]}
    if own_pid is not None:
        own = {own_pid}
    else:
        own = {os.getpid(), *(start.get("own_pids") or []), *(end.get("own_pids") or [])}
    unrecognised = own_pid is None and os.getpid() not in listed and None in (start.get("own_pids", []), end.get("own_pids", []))
    how = start.get("own_how") if start.get("own_pids", []) is None else end.get("own_how")
    if unrecognised and len(listed) == 1:  # the one process listed may be this one, under a PID of another namespace
        return None, f"one process is listed on the card (pid {next(iter(listed))}), and this process was {how}", []
    others = sorted((p for pid, p in listed.items() if pid not in own), key=lambda p: p["pid"])
    return others, (f"this process was {how}: every process listed is counted as another" if unrecognised else None), \
        sorted(pid for pid in listed if pid in own)


def figures(start: dict | None, end: dict | None, own_pid: int | None = None) -> dict:
    """The window's GPU figures: throttle reasons at either end or with violation time between (power capping apart),
    the processes other than this one (recognised by PID, or by its memory where the PIDs are the host's)."""
    if start is None or end is None:
        return {"source": None, "reason": NO_GPU, "throttle_reasons": None, "other_processes": None}
    unread = start.get("reason") or end.get("reason")
    if unread:
        return {"source": start.get("source") or end.get("source"), "reason": unread, "throttle_reasons": None,
                "other_processes": None}
    seen, delta = [*start["reasons"], *end["reasons"]], {}
    for name, value in end["violation"].items():  # time the card spent held back during the window
        if value is not None and start["violation"].get(name) is not None and value > start["violation"][name]:
            seen.append(name)
            delta[name] = value - start["violation"][name]
    crossed = sorted({name for name in seen if name in DISTURBING or name in NVML_POLICIES})
    others, processes_reason, own = _others(start, end, own_pid)
    return {"source": end["source"], "reason": None, "card": end.get("card"),
            "throttle_reasons": [name for name in crossed if name not in POWER_CAPPING],
            "power_capping": [name for name in crossed if name in POWER_CAPPING], "violation_delta": delta,
            "reasons_start": start["reasons"], "processes_reason": processes_reason,
            "reasons_end": end["reasons"], "sm_clock_mhz_start": start["sm_clock_mhz"], "sm_clock_mhz_end": end["sm_clock_mhz"],
            "max_sm_clock_mhz": end["max_sm_clock_mhz"], "own_processes": own, "own_recognised_by": end.get("own_how"),
            "other_processes": others}
