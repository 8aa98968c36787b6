"""Start worker processes safely from any caller (spawned, without the caller's main script), and pause the collector."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import sys
from collections.abc import Callable


def available_cores() -> int:
    """Return the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def spawned_pool(count: int, initializer: Callable | None = None, initargs: tuple = ()):
    """Return a pool of COUNT spawned processes (use it in a ``with``), each started by INITIALIZER(*INITARGS).

    Spawned, not forked: the parent may have read records with pandas and pyarrow, which start threads, and a threaded
    process is never safely forked. Every task's function must live in iteralab.
    """
    with _main_not_imported():
        return multiprocessing.get_context("spawn").Pool(count, initializer=initializer, initargs=initargs)


@contextlib.contextmanager
def _main_not_imported():
    """Start workers that do not import the caller's main script.

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


@contextlib.contextmanager
def collector_paused():
    """Pause Python's cyclic garbage collector for a burst of allocation; it resumes as it was (the caller's choice kept)."""
    # Reading records or rendering a campaign allocates hundreds of thousands of containers that die by reference count:
    # the collector only scanned the long-lived heap again and again (a sixth of a campaign's rendering, three times a
    # load). What cycles a burst leaves are collected once it resumes.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
