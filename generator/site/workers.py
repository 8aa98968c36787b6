"""Run independent build jobs on several cores: spawned workers, each given what every job shares once."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Callable

# Below this much work, starting workers costs more than it saves (each imports the site's code, about a second).
MIN_WORK = 2000

_shared: dict = {}


def shared() -> dict:
    """Return what every job of the current run shares (set in this process, or in a worker when it starts)."""
    return _shared


def _share(values: dict) -> None:
    _shared.clear()
    _shared.update(values)


def available_cores() -> int:
    """Return the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def choose_workers(requested: int | None, work: int, jobs: int) -> int:
    """Return how many processes to use: REQUESTED when given, else one per core for enough WORK."""
    if requested is not None:
        wanted = requested
    elif work < MIN_WORK:
        return 1
    else:
        wanted = available_cores()
    return max(1, min(wanted, jobs))


def run(function: Callable, tasks: list[tuple], workers: int, common: dict) -> list:
    """Call FUNCTION on each of TASKS (argument tuples, heaviest first) on WORKERS processes; return results in order.

    COMMON is what every task reads through ``shared()``: sent once to each worker, not with every task.
    """
    _share(common)
    if workers <= 1 or len(tasks) <= 1:
        return [function(*task) for task in tasks]
    # Spawned, not forked: the parent has read the records with pandas and pyarrow, which start threads, and a
    # threaded process is never safely forked. A worker reads only its campaigns' records, from their files.
    with _main_not_imported():
        pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_share, initargs=(common,))
    with pool:
        return pool.starmap(function, tasks, chunksize=1)


@contextlib.contextmanager
def _main_not_imported():
    """Start workers that do not import the caller's main script: every task's function lives in iteralab.

    A spawned worker imports the parent's main module first; a script calling build_site without an
    ``if __name__ == "__main__":`` guard would then run again in each worker, and each would fail and be started anew.
    """
    main = sys.modules["__main__"]
    saved = dict(main.__dict__)
    main.__spec__ = None  # what multiprocessing reads to import the main module by name...
    main.__dict__.pop("__file__", None)  # ...or by path
    try:
        yield
    finally:
        for name in ("__spec__", "__file__"):
            if name in saved:
                setattr(main, name, saved[name])
