"""A disturbed trial is seen (#49): a real competing process during one repetition of a real tiny model's campaign.

The runner (this test's thread) and the competing busy loops are pinned to one core (os.sched_setaffinity) and run
under the round-robin real-time policy (SCHED_RR, priority 1), so that the only processes that can take that core from
the runner are the loops the test starts: every other job on the machine (another test, another engineer's run, under
any nice value or cgroup) is an ordinary task, which a real-time task always preempts; the kernel leaves ordinary tasks
at most 5 % of the core (sched_rt_runtime_us). With BUSY loops taking turns with the runner, it gets about 1/(BUSY+1)
of the core: other processes use about 0.8 of a core on the runner's core and its thread waits about 0.8 of the
window. The campaign's rule says 0.5, so the disturbed trial crosses it by far and a quiet one stays far below it, on
an idle machine or a loaded one (measured: tests/benchmarks/README.md, #49).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from iteralab.run.runner import run_campaign
from iteralab.run.summary import Progress
from iteralab.store import reading
from iteralab.store.disturbance import is_disturbed
from iteralab.store.views import campaign_views
from tests.tiny import corpus_rows, write_campaign, write_corpus

BUSY = 4  # busy loops on the runner's core during the disturbed repetition
THRESHOLD = 0.5
REAL_TIME = os.sched_param(1)  # SCHED_RR priority of the runner and its competitors (root or CAP_SYS_NICE)
RULE = f"other_cpu_share = {THRESHOLD}"  # the rest as the defaults: the decision does not use a disturbed trial
# A loop ends on its own after a minute, should the test die before it stops them: a real-time loop never outlives it.
LOOP = ("import sys, time\nend = time.monotonic() + 60\nsys.stdout.write('spinning\\n'); sys.stdout.flush()\n"
        "while time.monotonic() < end:\n    pass\n")


class Competitor(Progress):
    """Start BUSY busy loops on CORE as trial SEQUENCE's measured window begins; stop them as it ends.

    Only the window: loops running through the trial's model load and writing made them five times slower too, seconds
    of the suite that showed nothing more (#50). The runner calls attach() just before its window is watched and timed,
    and the work's after_window() just after the watch has read the processes: the loops start at the one and stop at
    the other.
    """

    def __init__(self, sequence: int, core: int):
        super().__init__(quiet=True)
        self.sequence, self.core, self.loops, self.pids = sequence, core, [], []

    def attach(self, inference):
        super().attach(inference)
        if not self.label.startswith(f"{self.sequence}/"):
            return
        after_window = inference.after_window

        def stopped_first(*args, **kwargs):
            self.stop()
            return after_window(*args, **kwargs)

        inference.after_window = stopped_first
        for _ in range(BUSY):
            loop = subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
            os.sched_setaffinity(loop.pid, {self.core})
            os.sched_setscheduler(loop.pid, os.SCHED_RR, REAL_TIME)
            self.loops.append(loop)
        for loop in self.loops:
            assert loop.stdout.readline() == "spinning\n"  # each one is spinning before the window goes on
        self.pids = [loop.pid for loop in self.loops]

    def done(self, status: str):
        self.stop()
        super().done(status)

    def stop(self):
        for loop in self.loops:
            loop.kill()
            loop.wait()
            loop.stdout.close()
        self.loops = []


@pytest.fixture
def one_core():
    """Pin this thread (the runner runs in it) to one of its cores, real-time round-robin; undo both afterwards."""
    before, policy, param = os.sched_getaffinity(0), os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_RR, REAL_TIME)
    except PermissionError:
        pytest.skip("the real-time policy needs root or CAP_SYS_NICE: without it other jobs on the machine could "
                    "disturb the quiet repetitions, and the test would pass or fail by chance")
    core = max(before)
    os.sched_setaffinity(0, {core})
    try:
        yield core
    finally:
        os.sched_setaffinity(0, before)
        os.sched_setscheduler(0, policy, param)


@pytest.mark.slow
def test_a_busy_loop_during_one_repetition_marks_that_trial_disturbed_and_rerun_completes_the_variant(
        tmp_path, tiny_model, one_core, cli):
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(160))
    campaign = write_campaign(tmp_path, tiny_model, corpus, name="busy", repetitions=3, batch_sizes=(1,), disturbance=RULE)
    runs = tmp_path / "runs"
    competitor = Competitor(sequence=2, core=one_core)
    try:
        result = run_campaign(campaign_file=campaign, runs_dir=runs, quiet=True, progress=competitor)
    finally:
        competitor.stop()
    first, busy, third = result.trials
    assert [t["status"] for t in result.trials] == ["ok"] * 3
    # The busy trial: marked, with the other processes' share of the runner's core and the loops named among them.
    assert busy["interference"]["disturbed"] is True, busy["interference"]["host"]
    crossed = busy["interference"]["crossed"]
    assert [c["what"] for c in crossed] == ["other_cpu_share"]
    assert crossed[0]["value"] > THRESHOLD and crossed[0]["waited_share"] > THRESHOLD
    assert crossed[0]["threshold"] == THRESHOLD and "of a core on this process's cores" in crossed[0]["text"]
    assert busy["interference"]["host"]["cores_watched"] == [one_core]
    assert {p["pid"] for p in crossed[0]["other_processes"]} & set(competitor.pids)
    # The quiet ones: measured, below the rule.
    for quiet in (first, third):
        host = quiet["interference"]["host"]
        assert quiet["interference"]["disturbed"] is False, host
        assert min(host["other_cpu_share"], host["waited_share"]) < THRESHOLD
    # The decision sets the disturbed trial aside: two clean repetitions of three.
    view = campaign_views(reading.load(runs))[0]
    assert view.variants[0].ok == 2 and busy["record_id"] in view.variants[0].disturbed
    # --rerun-disturbed measures that repetition again (sequence 2, naming the disturbed trial); nothing else runs.
    code, out, err = cli("run", campaign, "--runs", runs, "--resume", "--rerun-disturbed", "--quiet", "--json")
    assert code == 0, err
    assert json.loads(out)["resumed"]["retried"] == [busy["record_id"]]
    view = campaign_views(reading.load(runs))[0]
    retried = [t for t in view.trials if t.get("retry_of") == busy["record_id"]]
    assert len(retried) == 1 and retried[0]["sequence"] == 2 and retried[0]["status"] == "ok"
    assert not is_disturbed(retried[0]), retried[0]["interference"]["host"]
    assert view.variants[0].ok == 3 and len(view.trials) == 4  # the disturbed row stays as evidence
    # Nothing is left to measure again.
    code, _, err = cli("run", campaign, "--runs", runs, "--resume", "--rerun-disturbed", "--quiet")
    assert code != 0 and "no repetition's latest trial was measured as disturbed" in err
