"""Run independent build jobs on several cores: spawned workers, each given what every job shares once."""

from __future__ import annotations

from collections.abc import Callable

from iteralab.core import processes

# Below this much work, starting workers costs more than it saves (each imports the site's code, about a second).
MIN_WORK = 2000

_shared: dict = {}


def shared() -> dict:
    """Return what every job of the current run shares (set in this process, or in a worker when it starts)."""
    return _shared


def _share(values: dict) -> None:
    _shared.clear()
    _shared.update(values)


def choose_workers(requested: int | None, work: int, jobs: int) -> int:
    """Return how many processes to use: REQUESTED when given, else one per core for enough WORK."""
    if requested is not None:
        wanted = requested
    elif work < MIN_WORK:
        return 1
    else:
        wanted = processes.available_cores()
    return max(1, min(wanted, jobs))


def run(function: Callable, tasks: list[tuple], workers: int, common: dict) -> list:
    """Call FUNCTION on each of TASKS (argument tuples, heaviest first) on WORKERS processes; return results in order.

    COMMON is what every task reads through ``shared()``: sent once to each worker, not with every task.
    """
    _share(common)
    if workers <= 1 or len(tasks) <= 1:
        return [function(*task) for task in tasks]
    try:  # a worker reads only its campaigns' records, from their files
        pool = processes.spawned_pool(workers, initializer=_share, initargs=(common,))
    except OSError:  # no process can be started here (a sandbox, no /dev/shm): the build is slower, not lost
        return [function(*task) for task in tasks]
    with pool:
        return pool.starmap(function, tasks, chunksize=1)
