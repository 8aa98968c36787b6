"""Run independent build jobs on several cores: forked workers that inherit the records already read."""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
from collections.abc import Callable

# Below this much work, starting workers costs more than it saves (a fork, then re-importing nothing).
MIN_WORK = 2000

_jobs: list[Callable[[], object]] = []


def _run(index: int):
    return _jobs[index]()


def available_cores() -> int:
    """Return the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _single_threaded() -> bool:
    # Forking a process that runs other threads (a chart renderer, torch, BLAS) can deadlock the child.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1]) == 1
    except OSError:
        pass
    return False


def choose_workers(requested: int | None, work: int, jobs: int) -> int:
    """Return how many processes to use: REQUESTED when given, else one per core for enough WORK."""
    if requested is not None:
        wanted = requested
    elif work < MIN_WORK:
        return 1
    else:
        wanted = available_cores()
    wanted = max(1, min(wanted, jobs))
    if wanted > 1 and not (sys.platform == "linux" and _single_threaded()):
        return 1  # a fork would not be safe here; the same jobs run in this process, with the same output
    return wanted


def run(jobs: list[Callable[[], object]], workers: int) -> list:
    """Run JOBS (callables, heaviest first) on WORKERS processes; return their results in job order."""
    if workers <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    global _jobs
    _jobs = jobs
    # Objects the workers only read stay shared with this process: keep the collector from touching them.
    gc.freeze()
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return pool.map(_run, range(len(jobs)), chunksize=1)
    finally:
        _jobs = []
        gc.unfreeze()
