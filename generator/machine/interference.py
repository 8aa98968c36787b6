"""What else used the machine during a measured window, read from the machine before and after it (#49).

Host: the CPU time other processes used on the cores this process may run on (/proc/stat's busy time of those cores
less this process's own CPU time, and of it what no process used: steal and interrupts), how long this process's threads
waited for a CPU (/proc/self/task/*/schedstat), the other processes that used the most CPU time in the window
(/proc/PID/stat: those started in it, and children that ended in it through their parent), the load average at the
start and the end, the CPU frequency against its maximum, and the threads torch used. GPU: see gpu_watch. What cannot be read is None with its reason, never 0.
The samples are taken outside the timed interval: the window's duration does not include them.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import NamedTuple

from iteralab.core.language import Text
from iteralab.machine import gpu_watch
from iteralab.machine.disturbance import SOURCE_DECLARED, SOURCE_DEFAULT, judge, rule_of

PROC = Path("/proc")
CPUFREQ = Path("/sys/devices/system/cpu")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
BUSIEST = 8  # other processes named per window, the busiest first
# Sessions the trial itself started and their processes' CPU is its own (a serving engine, its load generator, #64).
OWN_SESSIONS: set[int] = set()
NO_PROC = Text("not read: this system has no readable /proc (Linux only)")


def _cpu_ticks(cores: set[int]) -> dict | None:
    """Busy ticks (all but idle and iowait) summed over CORES, from /proc/stat, with those of them no process used:
    interrupts (irq, softirq) and steal (a hypervisor running other machines); None where it cannot be read."""
    try:
        lines = (PROC / "stat").read_text().splitlines()
    except OSError:
        return None
    ticks = {"busy": 0, "interrupts": 0, "steal": 0}
    for line in lines:
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            fields = [int(value) for value in values[:8]] + [0] * (8 - len(values[:8]))  # user nice system idle
            ticks["busy"] += sum(fields) - fields[3] - fields[4]  # iowait irq softirq steal
            ticks["interrupts"] += fields[5] + fields[6]
            ticks["steal"] += fields[7]
    return ticks


def _waited_ns() -> dict[str, int]:
    """Nanoseconds each of this process's threads has waited on a run queue (schedstat's second field)."""
    waited = {}
    with contextlib.suppress(OSError):
        for task in (PROC / "self" / "task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                waited[task.name] = int((task / "schedstat").read_text().split()[1])
    return waited


class Process(NamedTuple):
    """One other process as /proc/PID/stat gives it at a sample."""

    name: str
    ticks: int  # CPU ticks so far, all its threads (utime + stime)
    last_cpu: int  # the CPU it last ran on
    parent: int
    start: int  # ticks after boot it started at: a pid used again is another process
    children: int  # ticks of the children it has waited for (cutime + cstime): those ended during the window count here
    session: int = 0  # its session id: a serving engine's and the load generator's are the trial's own (#64)


def _processes() -> dict[int, Process]:
    """Every other process at this moment, from /proc/PID/stat."""
    found, own = {}, os.getpid()
    with contextlib.suppress(OSError):
        for entry in PROC.iterdir():
            if entry.name.isdigit() and int(entry.name) != own:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    text = (entry / "stat").read_text()
                    name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
                    found[int(entry.name)] = Process(name, int(rest[11]) + int(rest[12]), int(rest[36]), int(rest[1]),
                                                     int(rest[19]), int(rest[13]) + int(rest[14]), int(rest[3]))
    return found


def _frequency(cores: set[int]) -> dict:
    """Mean current and maximum frequency of CORES in MHz (cpufreq), or None with the reason."""
    current, maximum = [], []
    for core in sorted(cores):
        folder = CPUFREQ / f"cpu{core}" / "cpufreq"
        with contextlib.suppress(OSError, ValueError):
            current.append(int((folder / "scaling_cur_freq").read_text()) / 1000)
            maximum.append(int((folder / "cpuinfo_max_freq").read_text()) / 1000)
    if not current:
        return {"mhz": None, "max_mhz": None,
                "reason": Text("not read: {folder} has no cpufreq (a virtual machine often hides it)", folder=str(CPUFREQ))}
    return {"mhz": round(sum(current) / len(current)), "max_mhz": round(sum(maximum) / len(maximum)) if maximum else None,
            "reason": None}


def _load() -> list[float] | None:
    with contextlib.suppress(OSError, AttributeError):
        return [round(value, 2) for value in os.getloadavg()]
    return None


def host_sample() -> dict:
    """Read the host's counters at one moment (before or after a window)."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    times = os.times()
    return {"time": time.monotonic(), "cores": cores, "busy_ticks": _cpu_ticks(cores), "own_cpu": time.process_time(),
            "ended_children_cpu": times.children_user + times.children_system, "own_sessions": frozenset(OWN_SESSIONS),
            "waited": _waited_ns(), "processes": _processes(), "load": _load(), "frequency": _frequency(cores)}


def host_figures(start: dict, end: dict) -> dict:
    """Turn two samples into the window's host figures: shares are cores on average (1.0: one core all the time)."""
    wall = end["time"] - start["time"]
    # The trial's own processes are not interference (#64): a serving engine and the load generator run for the trial,
    # each in a session it registered. Those alive at the end count their ticks; a load generator that ended was waited
    # for, so its time is in this process's children's (counted only when the window had such sessions).
    sessions = start["own_sessions"] | end["own_sessions"]
    mine = {pid for pid, process in end["processes"].items() if process.session in sessions}
    spawned = sum(ticks for ticks, _, pid, _, _ in _used(start["processes"], end["processes"]) if pid in mine) / TICKS
    spawned += end["ended_children_cpu"] - start["ended_children_cpu"] if sessions else 0.0
    own = end["own_cpu"] - start["own_cpu"] + spawned
    figures = {"window_s": round(wall, 6), "cores_watched": sorted(start["cores"]), "own_cpu_s": round(own, 4),
               "own_processes_cpu_s": round(spawned, 4),
               "load_average_start": start["load"], "load_average_end": end["load"],
               "cpu_frequency_start": start["frequency"], "cpu_frequency_end": end["frequency"], "reasons": {}}
    if start["busy_ticks"] is None or end["busy_ticks"] is None or wall <= 0:
        figures.update(other_cpu_s=None, other_cpu_share=None)
        figures["reasons"]["other_cpu_share"] = NO_PROC
    else:
        # /proc/stat counts in ticks (1/TICKS s): a share is uncertain by about two ticks over the window.
        other = max(0.0, (end["busy_ticks"]["busy"] - start["busy_ticks"]["busy"]) / TICKS - own)
        figures.update(other_cpu_s=round(other, 4), other_cpu_share=round(other / wall, 4),
                       resolution_s=round(2 / TICKS, 4),
                       # Of the other time, what no process of this machine used (#61: the busiest named did not add up)
                       **{f"{part}_share": round((end["busy_ticks"][part] - start["busy_ticks"][part]) / TICKS / wall, 4)
                          for part in ("steal", "interrupts")})
    if not end["waited"] or wall <= 0:
        figures.update(waited_s=None, waited_share=None)
        figures["reasons"]["waited_share"] = Text("not read: /proc/self/task/*/schedstat is missing (a kernel without "
                                                  "scheduler statistics)")
    else:
        waited = sum(ns - start["waited"].get(tid, 0) for tid, ns in end["waited"].items()) / 1e9
        figures.update(waited_s=round(waited, 4), waited_share=round(waited / wall, 4))
    used = [item for item in _used(start["processes"], end["processes"]) if item[2] not in mine] if wall > 0 else []
    figures["processes_cpu_share"] = round(sum(item[0] for item in used) / TICKS / wall, 4) if wall > 0 else None
    figures["busiest_others"] = [
        {"pid": pid, "name": process.name, "cpu_share": round(ticks / TICKS / wall, 3),
         "ended_children_cpu_share": round(children / TICKS / wall, 3), "started_in_window": fresh,
         "on_watched_cores": process.last_cpu in start["cores"]} for ticks, children, pid, process, fresh in used[:BUSIEST]]
    return figures


def _used(before: dict[int, Process], after: dict[int, Process]) -> list[tuple]:
    """The CPU ticks each other process used during the window, the busiest first: (ticks, of them its children's that
    ended in the window, pid, process, whether it started in the window).

    Regression for #61 (other processes used 1.36 of a core, the busiest named 0.008): only processes alive at both
    samples were counted, and those on the runner's cores came first whatever their time. A process started during the
    window counts all its ticks; a parent counts its children that ended during it (their time moves to its cutime when
    it waits for them), less what they had used before the window began.
    """
    gone: dict[int, int] = {}  # parent -> ticks its children that ended had used before the window
    for pid, old in before.items():
        if pid not in after or after[pid].start != old.start:
            gone[old.parent] = gone.get(old.parent, 0) + old.ticks + old.children
    used = []
    for pid, now in after.items():
        then = before.get(pid)
        fresh = then is None or then.start != now.start
        own = now.ticks - (0 if fresh else then.ticks)
        children = max(0, now.children - (0 if fresh else then.children) - gone.get(pid, 0))
        if own + children > 0:
            used.append((own + children, children, pid, now, fresh))
    return sorted(used, key=lambda item: (-item[0], item[2]))


def threads() -> dict:
    """The threads torch computes with, and OMP_NUM_THREADS as set (None with the reason where it is not set)."""
    import torch

    omp = os.environ.get("OMP_NUM_THREADS")
    return {"torch_intra_op": torch.get_num_threads(), "torch_inter_op": torch.get_num_interop_threads(),
            "omp_num_threads": omp, "omp_num_threads_reason": None if omp else Text("not set: torch chose its own count")}


class Watch:
    """Sample the machine before and after a measured window; ``record`` is the trial's interference object."""

    def __init__(self, device: str, protocol: dict):
        self.device, self.rule, self.record = device, rule_of(protocol), None
        self.source = SOURCE_DECLARED if "disturbance" in protocol else SOURCE_DEFAULT

    @contextlib.contextmanager
    def window(self):
        """Wrap the measured window: the samples are outside it, the record is made however the window ended."""
        gpu_start, host_start = gpu_watch.sample(self.device), host_sample()
        try:
            yield self
        finally:
            host, gpu = host_figures(host_start, host_sample()), gpu_watch.figures(gpu_start, gpu_watch.sample(self.device))
            crossed = judge(host, gpu, self.rule)
            self.record = {"disturbed": bool(crossed), "crossed": crossed, "rule": self.rule, "rule_source": self.source,
                           "host": host, "gpu": gpu, "threads": threads()}


def busy_warnings(devices=("cpu",), warn=None) -> list[str]:
    """Say what already uses the machine before the first trial: a load average above the usable cores, other processes
    on a GPU of DEVICES; each with what to do, each given to WARN too. Empty on a quiet machine."""
    warnings, cores = [], len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load = _load()
    if load is not None and load[0] > cores:
        warnings.append(Text("the machine is already busy: its load average is {load} for {cores} usable cores. Trials "
                             "measured now may be marked disturbed; stop the other jobs (top shows them) or wait, and see "
                             "the README on a quiet machine", load=load[0], cores=cores))
    for device in sorted({device for device in devices if device.startswith("cuda")}):
        gpu = gpu_watch.figures(*(2 * [gpu_watch.sample(device)]))
        if gpu.get("other_processes"):
            pids = ", ".join(str(process["pid"]) for process in gpu["other_processes"])
            warnings.append(Text("{device} already runs other processes (pid {pids}): trials on it may be marked "
                                 "disturbed; stop them or choose another GPU", device=device, pids=pids))
    for warning in warnings if warn else ():
        warn(warning)
    return warnings
