"""The load generator's own CPU while a level's requests were in flight (#64), sampled from its process tree.

AIPerf spends 8 to 11 s of CPU starting its services before a level's first request, and a level of a small model may
last a fraction of a second: its whole-process CPU time (getrusage's children) over the level's seconds read as tens
of cores, and every level looked client-bound. Sampling the tree's CPU with wall-clock times, as AIPerf stamps its
requests, gives what it used between the level's first send and its last answer.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time

import psutil

INTERVAL_S = 0.05  # a sample every 50 ms: a level of 0.3 s still has six


class TreeSampler:
    """Sample the cumulative CPU seconds of a process and its descendants, each with the wall clock in ns."""

    def __init__(self, pid: int, interval_s: float = INTERVAL_S):
        self.pid, self.interval_s, self.samples = pid, interval_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-generator-cpu", daemon=True)
        self._seen: dict[tuple[int, float], float] = {}  # (pid, start) -> its last CPU seconds: an ended one keeps them

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        """Add one sample: every process of the tree now, plus what those that ended had used."""
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.pid)
            for process in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    self._seen[(process.pid, process.create_time())] = times.user + times.system
        self.samples.append((time.time_ns(), sum(self._seen.values())))


def in_flight(samples: list[tuple[int, float]], rows) -> float | None:
    """Return the CPU seconds from a level's first send to its last answer (its profiling rows' times)."""
    timed = [row for row in rows if row["phase"] == "profiling" and row["sent_ns"] and row["end_ns"]]
    if not timed:
        return None
    return between(samples, min(row["sent_ns"] for row in timed), max(row["end_ns"] for row in timed))


def between(samples: list[tuple[int, float]], start_ns: int, end_ns: int) -> float | None:
    """Return the CPU seconds used from START_NS to END_NS, interpolated between samples; None when they do not cover it."""
    if len(samples) < 2 or end_ns <= start_ns or samples[0][0] > start_ns or samples[-1][0] < end_ns:
        return None
    return max(0.0, _at(samples, end_ns) - _at(samples, start_ns))


def _at(samples: list[tuple[int, float]], moment: int) -> float:
    for (before, used_before), (after, used_after) in itertools.pairwise(samples):
        if before <= moment <= after:
            return used_before if after == before else used_before + (used_after - used_before) * (moment - before) / (after - before)
    return samples[-1][1]
