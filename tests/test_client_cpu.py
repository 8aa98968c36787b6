"""The load generator's CPU while a level's requests are in flight (#64): start-up left out, descendants counted."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest

from iteralab.serving import client_cpu

BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end:\n    pass\n"
BURN_THEN_SLEEP = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {BURN!r}])
exec({BURN!r})
child.wait()
time.sleep(0.6)
"""

def test_between_interpolates_the_cumulative_cpu_over_a_window():
    """Regression for #64: the CPU of a level is read between its first send and its last answer, never the whole run's
    (AIPerf's start-up made every level of a small model look client-bound)."""
    samples = [(0, 0.0), (1_000_000_000, 10.0), (2_000_000_000, 10.5), (3_000_000_000, 11.5)]
    assert client_cpu.between(samples, 1_500_000_000, 2_500_000_000) == pytest.approx(0.75)
    assert client_cpu.between(samples, 1_000_000_000, 2_000_000_000) == pytest.approx(0.5)
    assert client_cpu.between(samples, 500, 4_000_000_000) is None  # past the last sample: not covered
    rows = [{"phase": "warmup", "sent_ns": 0, "end_ns": 900_000_000},
            {"phase": "profiling", "sent_ns": 1_000_000_000, "end_ns": 1_600_000_000},
            {"phase": "profiling", "sent_ns": 1_200_000_000, "end_ns": 2_000_000_000}]
    assert client_cpu.in_flight(samples, rows) == pytest.approx(0.5)
    assert client_cpu.in_flight(samples, rows[:1]) is None


def test_a_sampled_process_tree_counts_its_children_and_its_time_apart():
    """The sampler sums a process and its descendants (a child that ended keeps its seconds) and dates each sample with
    the wall clock: the burning part of the run holds the CPU, the sleeping part none."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time_ns()
    process = subprocess.Popen([sys.executable, "-c", BURN_THEN_SLEEP])
    with client_cpu.TreeSampler(process.pid) as sampler:
        process.wait(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sampled = sampler.samples[-1][1]
    assert sampled >= 0.7  # both burners' 0.4 s, the spawned child's counted after it ended
    assert whole - sampled < 0.3  # only the interpreter's start before the first sample is missed
    last_second = client_cpu.between(sampler.samples, sampler.samples[-1][0] - 400_000_000, sampler.samples[-1][0])
    assert last_second is not None and last_second < 0.1  # the sleep used nothing
    assert sampler.samples[0][0] >= started
