"""What an adaptation checks and says before and around its training (#61), each fast: the data refused as the campaign
file is read (shared entries counted and named, unlabelled training entries by line and id), no warm-up asked of it,
the training order's passes, the window's timers on a GPU without a synchronisation, the rates' figures, the cost per
validated model, and the other processes named by the time they used."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import ClassVar

import pytest

from iteralab.core.errors import UserError
from iteralab.machine import interference
from iteralab.machine.interference import Process, host_figures, host_sample
from iteralab.pages.render import fmt
from iteralab.run import runner
from iteralab.run.campaign import load_campaign
from iteralab.workloads import adapt, training
from tests.tiny import build_model, corpus_rows, write_adaptation_campaign, write_corpus


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("checks") / "model")


def refusal(path) -> str:
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    return str(caught.value)


def test_validation_entries_in_the_training_split_are_refused_before_any_model_loads_all_counted(model, tmp_path,
                                                                                                  monkeypatch):
    campaign = write_adaptation_campaign(tmp_path, model)
    rows = corpus_rows(60, seed=3)
    write_corpus(tmp_path / "tiny-adapt-train.jsonl", rows[:15] + rows[40:60] + [{**rows[0], "id": "renamed"}])
    write_corpus(tmp_path / "tiny-adapt-validation.jsonl", [*rows[40:60], {**rows[1], "id": "same-text"}, *rows[15:40]])

    def never(*_):
        raise AssertionError("the model was loaded before the data were checked")

    monkeypatch.setattr(adapt, "check_model", never)
    with pytest.raises(UserError) as caught:
        runner.prepare(campaign, tmp_path / "runs")
    said = str(caught.value)
    shared = [row["id"] for row in rows[40:60]] + ["same-text"]
    assert "21 validation entries are also in the training split" in said and "(same id or text)" in said
    assert ", ".join(shared[:20]) + " (the first 20 of 21; at most 20 are named)" in said
    write_corpus(tmp_path / "tiny-adapt-train.jsonl", rows[:39] + rows[40:41])
    write_corpus(tmp_path / "tiny-adapt-validation.jsonl", rows[40:60])
    assert "1 validation entry is also in the training split" in refusal(campaign)


def test_every_unlabelled_training_entry_is_named_with_its_line_and_id(model, tmp_path):
    campaign = write_adaptation_campaign(tmp_path, model)
    rows = corpus_rows(60, seed=3)[:40]
    for index in (1, 4, 30):
        rows[index] = {key: value for key, value in rows[index].items() if key != "label"}
    write_corpus(tmp_path / "tiny-adapt-train.jsonl", rows)
    said = refusal(campaign)
    assert "tiny-adapt-train.jsonl: every entry of a training split needs its gold label; 3 have none: line 2 (id " \
           "doc-001), line 5 (id doc-004), line 31 (id doc-030)" in said


def test_an_adaptation_needs_no_warm_up_a_classification_still_does(model, tmp_path, tiny_campaign):
    campaign = write_adaptation_campaign(tmp_path, model)
    campaign.write_text(campaign.read_text().replace("[protocol.warmup]\nbatches = 0\n", ""))
    assert load_campaign(campaign).protocol["warmup"] == {"batches": 0, "passes": 1, "inputs": adapt.NO_WARMUP["inputs"]}
    plain = tiny_campaign()
    plain.write_text(plain.read_text().replace("[protocol.warmup]\nbatches = 1\npasses = 1\n", ""))
    assert "[protocol] warmup: is required" in refusal(plain)


def test_every_pass_refuses_an_update_larger_than_the_split_and_the_dry_run_names_each_variants_own_rate(model, tmp_path):
    from iteralab.run.summary import describe_plan

    campaign = write_adaptation_campaign(tmp_path, model, adaptation='shuffle = "every_pass"\n', variants=(
        '\n[[variants]]\nname = "huge"\nbatch_size = 48\nchanges_effective_batch = true\n'))
    assert ("[variants] huge: an effective batch of 48 × 1 × 1 device = 48 examples is more than the training split's "
            "40 entries") in refusal(campaign)
    rated = write_adaptation_campaign(tmp_path, model, name="rated", variants=(
        '\n[[variants]]\nname = "lora-fast"\nbatch_size = 8\nmethod = "lora"\nlearning_rate = 1e-2\nweight_decay = 0.01\n'))
    said = describe_plan(runner.prepare(rated, tmp_path / "runs"))
    assert "  lora-fast: lora, 8 × 1 × 1 device = 8 examples per update; trains 290 of 4,308 parameters; its own learning " \
           "rate 0.01; its own weight decay 0.01" in said
    assert "Classifier head: loaded from the checkpoint" in said
    assert "[protocol.warmup] is not used by an adaptation" in said


def test_the_order_once_wraps_and_says_so_every_pass_reshuffles_without_crossing():
    entries = list(range(10))
    once = training.TrainingOrder(entries, 1, "once", 4)
    taken = []
    for _ in range(3):
        once.begin_update()
        taken.append(once.take(2) + once.take(2))
    assert sorted(taken[0] + taken[1] + taken[2][:2]) == entries  # the third update holds the end and the start again
    assert taken[2][2:] == taken[0][:2] and once.record() == {"shuffle": "once", "passes": 2,
                                                              "entries_skipped_at_pass_ends": 0, "updates_across_passes": 1}
    every = training.TrainingOrder(entries, 1, "every_pass", 4)
    updates = []
    for _ in range(5):
        every.begin_update()
        updates.append(every.take(4))
    assert updates[:2] == taken[:2]  # the first pass is the one "once" takes
    assert sorted(updates[0] + updates[1]) != entries[:8] and set(updates[2]) | set(updates[3]) <= set(entries)
    assert updates[2] + updates[3] != (taken[0] + taken[1])  # the second pass reshuffled
    assert every.record() == {"shuffle": "every_pass", "passes": 3, "entries_skipped_at_pass_ends": 4,
                              "updates_across_passes": 0}
    again = training.TrainingOrder(entries, 1, "every_pass", 4)
    assert [again.begin_update() or again.take(4) for _ in range(5)] == updates  # seeded


def test_the_window_timers_use_cuda_events_read_after_the_window_without_a_synchronisation(monkeypatch):
    import torch

    class Event:
        made: ClassVar[list] = []

        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None
            Event.made.append(self)

        def record(self):
            self.at = len(Event.made) * 2.0  # milliseconds on a stream's clock, stand-ins

        def elapsed_time(self, end):
            return end.at - self.at

    def synchronised(*_):
        raise AssertionError("a timer synchronised the device inside the window")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronised)
    timers = training.WindowTimers("cuda:0")
    start = timers.mark(on_host=True)
    timers.lap("data", start, on_host=True)
    start = timers.mark()
    start = timers.lap("forward", start)
    timers.lap("backward", start)
    start = timers.mark()
    timers.lap("optimizer_step", start)
    found = timers.record()
    assert len(Event.made) == 5 and found["forward_s"] == found["backward_s"] == 0.002
    assert found["optimizer_step_s"] == 0.002 and found["data_s"] >= 0
    assert found["window_parts"]["timer"] == "cuda_events" and found["window_parts"]["timed"] == {
        "data": 1, "forward": 1, "backward": 1, "optimizer_step": 1}
    assert training.WindowTimers("cuda:0", enabled=False).mark() is None


def test_rates_under_ten_keep_three_significant_figures():
    assert [str(fmt(value, "rate3", code="en")) for value in (0.257, 2.5, 55.5, 1234.56, 0.01234)] == [
        "0.257/s", "2.50/s", "55.5/s", "1,234.6/s", "0.0123/s"]


def test_cost_offers_the_cost_per_validated_model(cli):
    code, out, err = cli("cost", "--gpu", "rtx-4090", "--days", "3", "--lots", "1", "--accepted-results", "2",
                         "--unit", "model")
    assert (code, err) == (0, "") and "Cost per validated model: 23.57 USD (47.14 / 2 accepted results)" in out
    code, out, _ = cli("cost", "--gpu", "rtx-4090", "--days", "3", "--lots", "1", "--accepted-results", "0",
                       "--unit", "model", "--json")
    assert code == 0 and '"cost_per_validated_model_note": "undefined: no result was accepted, so the spend buys no ' \
                         'validated model"' in out and '"unit": "model"' in out and "corpus" not in out


def test_the_busiest_other_processes_are_those_that_used_the_time():
    """A process started during the window and its children that ended in it (waited for by it) count, ahead of the
    long-lived ones by the time they used, whichever cores they last ran on."""
    before = {10: Process("idle", 500, 0, 1, 5, 0), 11: Process("shell", 100, 3, 1, 6, 40), 12: Process("cc1", 30, 3, 11, 90, 0)}
    after = {10: Process("idle", 501, 0, 1, 5, 0), 11: Process("shell", 101, 1, 1, 6, 40 + 30 + 250),
             13: Process("python3", 90, 1, 1, 200, 0)}
    used = interference._used(before, after)
    # The shell waited for children worth 280 ticks, 30 of them cc1's before the window: 250 in it, and 1 of its own.
    assert [(item[2], item[0], item[1], item[4]) for item in used] == [(11, 251, 250, False), (13, 90, 0, True),
                                                                       (10, 1, 0, False)]


@pytest.mark.slow
def test_a_window_names_a_process_started_in_it_with_the_children_it_waited_for():
    busy = f"{sys.executable} -c 'x = 0\nfor i in range(3 * 10**6): x += i'"
    start = host_sample()
    shell = subprocess.Popen(["/bin/sh", "-c", f"{busy}; {busy}; touch /dev/null; sleep 3"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both children ended and were waited for: the shell sleeps
            names = [process.name for process in interference._processes().values() if process.parent == shell.pid]
            if names == ["sleep"]:
                break
            time.sleep(0.05)
        figures = host_figures(start, host_sample())
    finally:
        shell.kill()
        shell.wait()
    named = next(item for item in figures["busiest_others"] if item["pid"] == shell.pid)
    assert named["started_in_window"] and named["ended_children_cpu_share"] > 0.05 and named["cpu_share"] > 0.05
    assert figures["busiest_others"][0]["cpu_share"] >= named["cpu_share"]
    assert figures["processes_cpu_share"] >= named["cpu_share"] - 0.01 and "steal_share" in figures



def test_the_run_summary_offers_an_adaptations_trial_ids_for_exclude_only():
    """Regression for #61: run ended an adaptation with "(for deliver and exclude)", though deliver takes no model."""
    from iteralab.run.runner import RunResult
    from iteralab.run.summary import describe_run

    said = {kind: describe_run(RunResult("run-1", None, {"campaign": "c", "workload": {"kind": kind}, "protocol": {}}))
            for kind in ("adapt", "classify")}
    assert "--run run-1 (for exclude)" in said["adapt"] and "(for deliver and exclude)" in said["classify"]


def test_an_adaptations_max_length_beyond_the_models_positions_is_refused_before_timing(model, tmp_path):
    """Regression for #61: the positions check held for classify and generate, not for an adaptation's two splits."""
    campaign = write_adaptation_campaign(tmp_path, model)
    campaign.write_text(campaign.read_text(encoding="utf-8").replace("max_length = 24", "max_length = 100"), encoding="utf-8")
    with pytest.raises(UserError, match=r"\[protocol\] max_length = 100 is beyond the model's 64 positions"):
        runner.prepare(campaign, tmp_path / "runs")
    (tmp_path / "fits").mkdir()
    fits = write_adaptation_campaign(tmp_path / "fits", model)
    manifest = runner._manifest(runner.prepare(fits, tmp_path / "runs"))
    assert (manifest["context"]["positions"], manifest["context"]["max_length"]) == (64, 24)


def test_an_adaptation_that_fails_in_a_backward_names_its_microbatch(model, tmp_path, monkeypatch):
    """Regression for #61: a failure inside an adaptation's phases said neither which entries nor how long they were."""
    from tests.tiny import failing_on_load

    monkeypatch.setattr(adapting_module(), "load_model",
                        failing_on_load(adapting_module().load_model, 1, lambda: RuntimeError("the head's backward failed")))
    campaign = write_adaptation_campaign(tmp_path, model, repetitions=1)
    result = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False,
                                 warn=lambda _: None)
    failed = result.trials[0]
    assert (failed["status"], failed["failed_phase"]) == ("error", "first_backward")
    found = failed["phases"]["first_backward"]["failed_at"]
    assert found["entries"] == 8 and len(found["entry_ids"]) == 8 and found["tokens"]["padded_to"] >= found["tokens"]["max"]
    assert "on a batch of 8 entries (" in failed["error"]


def adapting_module():
    from iteralab.workloads import adapting

    return adapting
