"""Start worker processes safely from any caller: spawned, and without importing the caller's main script."""

from __future__ import annotations

import contextlib
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
