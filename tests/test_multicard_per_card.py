"""One trial per card at the same time (#44, [placement] mode = "per_card"): a record per card, each timed and its memory
read on its own card, the set planned on a lot that holds all its cards, its throughput over its slowest card's window.

No GPU here. torch.cuda is stood in for with two cards (the hardware, as in test_multicard_placement.py), and the model's
work runs for real on the CPU in place of each card's: runner._measure is called as it is, with the trial's variant on
the CPU, while the trial's clock, its memory and the card it runs on are the card's. The runner, the threads, the records,
the resumption and the decision are the real ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from decimal import Decimal
from types import SimpleNamespace

import pytest
import torch

from iteralab.core.errors import UserError
from iteralab.decision.report import decide
from iteralab.decision.text import describe_report, report_dict
from iteralab.machine import devices, placement
from iteralab.machine import phases as trial
from iteralab.money.catalog import load_catalog
from iteralab.run import per_card, runner
from iteralab.run.campaign import load_campaign
from iteralab.run.runner import run_campaign
from iteralab.store import reading, records
from iteralab.store.configuration import configuration_of
from iteralab.store.views import campaign_views
from tests import factory
from tests.test_multicard_placement import Cards, declared

PER_CARD = '\n[placement]\nmode = "per_card"\ndevices = ["cuda:0", "cuda:1"]\n'
TWO_B200 = factory.machine("NVIDIA B200", count=2, cuda="12.8", driver="570.86", torch="2.13.0+cu128")


class Machine(Cards):
    """Two B200 cards as torch.cuda sees them, each thread's current card written down."""

    OutOfMemoryError = torch.cuda.OutOfMemoryError

    def __init__(self, events):
        super().__init__(events=events)
        self.current = {}

    def is_initialized(self):
        return False

    def init(self):
        self.events.append("init")

    def empty_cache(self):
        self.events.append(f"empty_cache {self.current.get(threading.current_thread().name)}")

    @contextlib.contextmanager
    def device(self, card):
        self.current[threading.current_thread().name] = card
        yield


class Torch:
    """torch as it is, with its cuda stood in for."""

    def __init__(self, cuda):
        self.cuda = cuda

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.fixture
def two_cards(monkeypatch):
    """Stand in for a machine with two B200 cards; the model's work runs on the CPU; return what the cards saw."""
    seen = SimpleNamespace(events=[], windows=[], barrier=None, failing=None, interrupt=False)
    cuda = Machine(seen.events)
    stand_in = Torch(cuda)
    monkeypatch.setattr(trial, "_torch", lambda: stand_in)
    monkeypatch.setattr(per_card, "_torch", lambda: SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(devices, "_torch_cuda", lambda: cuda)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    facts = runner.machine_facts
    monkeypatch.setattr(runner, "machine_facts", lambda: {**facts(), **{k: TWO_B200[k] for k in ("gpus", "gpu_count")}})
    measure = runner._measure

    def on_the_cpu(prepared, runs_dir, variant, trial_id, clock, progress, got):
        card = clock.device
        assert cuda.current[threading.current_thread().name] == card  # the thread's current device is its card
        if card == seen.failing:
            raise RuntimeError(f"{card} fell off the bus")
        phase = clock.phase

        @contextlib.contextmanager
        def meeting(name):
            with phase(name):
                if name == "measured_window" and seen.barrier:
                    seen.barrier.wait()  # every card inside its window at once: one card after the other breaks it
                    seen.windows.append(card)
                if name == "measured_window" and seen.interrupt:
                    if card == "cuda:0":
                        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the handler runs in the main thread
                    assert progress.stop.wait(60)  # every card's next batch comes after the main thread heard it
                yield

        clock.phase = meeting
        measure(prepared, runs_dir, per_card.OnCard(variant, "cpu"), trial_id, clock, progress, got)

    monkeypatch.setattr(runner, "_measure", on_the_cpu)
    return seen


def test_per_card_is_read_and_what_it_cannot_honour_is_refused_before_timing(tiny_campaign, tmp_path, tiny_model):
    campaign = load_campaign(declared(tiny_campaign(name="sets", batch_sizes=(1,)), PER_CARD))
    assert campaign.protocol["placement"] == {"mode": "per_card", "devices": ["cuda:0", "cuda:1"]}
    assert placement.describe(campaign.protocol)[0].startswith("Placement: one trial per card on cuda:0, cuda:1 at the same time")
    for table, device, message in [
        ('\n[placement]\nmode = "per_card"\ndevices = ["cuda:0"]\n', "cuda:0", "at least two"),
        ('\n[placement]\nmode = "per_card"\n', "cuda:0", "is required"),
        (PER_CARD, "cpu", "variant b1 has device = 'cpu': per_card runs each variant on every declared card"),
        (PER_CARD, "cuda:1", "set its device to 'cuda:0'"),
    ]:
        with pytest.raises(UserError) as caught:
            load_campaign(declared(tiny_campaign(name="wrong", batch_sizes=(1,)), table, device=device))
        assert message in str(caught.value)
    compiled = tiny_campaign(name="compiled", batch_sizes=(1,))
    compiled.write_text(compiled.read_text(encoding="utf-8").replace("batch_size = 1\n", "batch_size = 1\ncompile = true\n", 1))
    with pytest.raises(UserError, match=r"torch\.compile cannot run in the set's threads at the same time"):
        load_campaign(declared(compiled, PER_CARD))
    from tests.tiny import write_adaptation_campaign

    adapt = write_adaptation_campaign(tmp_path, tiny_model)
    adapt.write_text(adapt.read_text(encoding="utf-8") + PER_CARD, encoding="utf-8")
    with pytest.raises(UserError, match="per_card runs inference on every card at once; a campaign whose"):
        load_campaign(adapt)
    # A machine with one card: the second declared card is missing, said before anything is timed.
    with pytest.raises(UserError) as caught:
        devices.check_devices(campaign, Cards(count=1))
    assert "[placement] runs variant b1 on each of cuda:0, cuda:1, but this machine has 1 CUDA device(s)" in str(caught.value)
    events, ticks = [], iter([0, 10])
    cuda = Cards(events=events)
    cuda.is_initialized, cuda.init = (lambda: False), (lambda: events.append("init"))
    assert devices.initialise_devices(campaign, cuda, lambda: next(ticks))["devices"] == ["cuda:0", "cuda:1"]
    assert per_card.devices_of(campaign) == ["cuda:0", "cuda:1"]  # both watched for other processes before any trial


def test_each_card_runs_its_trial_at_the_same_time_with_its_own_clock_and_record(tiny_campaign, tmp_path, two_cards):
    import torch

    two_cards.barrier = threading.Barrier(2, timeout=60)
    campaign = declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=2), PER_CARD)
    initialisers = {name: getattr(torch.nn.init, name) for name in dir(torch.nn.init) if name.endswith("_")}
    result = run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert [t["error"] for t in result.trials] == [None] * 4
    # The cards' models loaded one at a time: two loads at once left torch.nn.init's functions empty for the rest of
    # the process (transformers swaps them during a load), and every model built afterwards uninitialised.
    assert {name: getattr(torch.nn.init, name) for name in initialisers} == initialisers
    assert [t["status"] for t in result.trials] == ["ok"] * 4 and sorted(two_cards.windows) == ["cuda:0", "cuda:0",
                                                                                               "cuda:1", "cuda:1"]
    loaded = reading.load(tmp_path / "runs")
    trials = [r for r in loaded.of_campaign("sets") if r["kind"] == "trial"]
    starts = [r for r in loaded.of_campaign("sets") if r["kind"] == "start"]
    assert all(records.validate(record) == [] for record in [*trials, *starts])
    bad = {**trials[0], "per_card": {**trials[0]["per_card"], "card": "gpu0"}}  # the schema reads per_card now
    assert records.validate(bad) != []
    sets = {}
    for found in trials:
        sets.setdefault(found["per_card"]["set"], []).append(found)
        assert found["memory"]["device"] == found["per_card"]["card"]  # its own card
        assert found["memory"]["devices_used"] == ["cuda:0", "cuda:1"]  # the configuration's cards: the set's
        assert "at the same time" in found["memory"]["host_rss_scope"]
        assert "gpu_cards" not in found["phases"]["measured_window"]  # one card's peaks: never a sum of the set's
    assert len(sets) == 2 and all(sorted(t["per_card"]["card"] for t in members) == ["cuda:0", "cuda:1"]
                                  for members in sets.values())
    assert {t["sequence"] for t in sets[trials[0]["per_card"]["set"]]} == {trials[0]["sequence"]}  # one step of the plan
    # Each card's clock waited for, reset and read its own card only.
    for card in ("cuda:0", "cuda:1"):
        assert f"reset {card}" in two_cards.events and f"allocated {card}" in two_cards.events
    assert {"empty_cache cuda:0", "empty_cache cuda:1"} <= set(two_cards.events)  # each card's cache, in its thread
    measured = trials[0]["phases"]["measured_window"]
    own = {"cuda:0": 5 * 2**30, "cuda:1": 7 * 2**30}[trials[0]["per_card"]["card"]]
    assert measured["gpu_peak_allocated_bytes"] == own
    manifest = next(r for r in loaded.of_campaign("sets") if r["kind"] == "manifest")
    configuration = configuration_of(trials[0], manifest)
    assert configuration.cards == 2 and configuration.gpu_name == "NVIDIA B200"
    assert len({configuration_of(t, manifest).key for t in trials}) == 1  # both cards' trials: one configuration
    assert configuration.hardware == "2 of 2× NVIDIA B200"  # how the lot was used, said even when it used every card


def test_the_decision_counts_whole_sets_over_their_slowest_card_and_plans_a_lot_with_both(tiny_campaign, tmp_path, two_cards):
    campaign = declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=2), PER_CARD)
    run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    (view,) = campaign_views(reading.load(tmp_path / "runs"))
    report = decide(view, load_catalog())
    (row,) = report.rows
    windows = {}
    for found in row.summary.trials:
        windows.setdefault(found["per_card"]["set"], []).append(found["phases"]["measured_window"]["duration_ns"] / 1e9)
    slowest = sorted(max(seconds) for seconds in windows.values())
    assert (row.window_seconds[0], row.window_seconds[2]) == (slowest[0], slowest[1])  # the slowest card of each set
    assert row.together["cards"] == 2 and row.together["complete_sets"] == 2
    entries = view.corpus["entries"]
    assert row.together["throughput"][0] == pytest.approx(2 * entries / slowest[1])  # both cards' entries, slowest window
    # One B200 lot holds both cards; its K corpora take ceil(K / 2) windows of a set.
    assert row.plan.lots == 1 and row.plan.card.cards_per_lot >= 2
    low = (slowest[0] * 1 + row.one_time_seconds[0]) / 3600  # the question's one corpus: one round of the set
    assert row.hours[0] == pytest.approx(low)
    (ranked,) = report_dict(report)["ranked"]
    assert (ranked["per_card"]["cards"], ranked["per_card"]["complete_sets"]) == (2, 2)
    assert ranked["per_card"]["set_throughput_entries_per_s"]["min"] == pytest.approx(2 * entries / slowest[1], rel=1e-5)
    text = describe_report(report)
    assert "2 cards at the same time, one corpus each: median" in text
    assert "s per set of 2 corpora (its slowest card's window)" in text and " s per corpus;" not in text


def test_the_projection_runs_two_corpora_per_round_of_a_set():
    from iteralab.decision.plan import project

    row = SimpleNamespace(window_seconds=(10.0, 10.0, 10.0), one_time_seconds=(2.0, 2.0), together={"cards": 2})
    question = SimpleNamespace(entries=None, unit="corpus", corpora=5)
    assert project(row, question, 100, 1)[1] == pytest.approx((3 * 10.0 + 2.0) / 3600)  # ceil(5 / 2) rounds
    alone = SimpleNamespace(window_seconds=(10.0, 10.0, 10.0), one_time_seconds=(2.0, 2.0), together=None)
    assert project(alone, question, 100, 1)[1] == pytest.approx((5 * 10.0 + 2.0) / 3600)


def test_a_failure_on_one_card_is_that_cards_row_and_the_set_is_counted_in_no_window(tiny_campaign, tmp_path, two_cards):
    two_cards.failing = "cuda:1"
    campaign = declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=1), PER_CARD)
    result = run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    statuses = {t["per_card"]["card"]: (t["status"], t["error"]) for t in result.trials}
    assert statuses["cuda:0"] == ("ok", None)
    assert statuses["cuda:1"][0] == "error" and "cuda:1 fell off the bus" in statuses["cuda:1"][1]
    (view,) = campaign_views(reading.load(tmp_path / "runs"))
    (row,) = decide(view, load_catalog()).rows
    assert row.statuses == {"error": 1, "ok": 1}
    assert row.window_seconds == (None, None, None) and row.together["complete_sets"] == 0  # never one card's figure × 2


def test_an_interrupted_set_runs_again_whole(tiny_campaign, tmp_path, two_cards):
    campaign = declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=1), PER_CARD)
    runs = tmp_path / "runs"
    path = run_campaign(campaign_file=campaign, runs_dir=runs, quiet=True, stages=False).records_file
    # As if the process had died while cuda:1 worked: its trial record never written, cuda:0's was.
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if not (json.loads(line)["kind"] == "trial" and json.loads(line)["per_card"]["card"] == "cuda:1")]
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    resumed = run_campaign(campaign_file=campaign, runs_dir=runs, quiet=True, stages=False, resume=True)
    interrupted = [t for t in resumed.trials if t["status"] == "interrupted"]
    again = [t for t in resumed.trials if t["status"] == "ok"]
    assert [t["per_card"]["card"] for t in interrupted] == ["cuda:1"] and interrupted[0]["memory"]["device"] == "cuda:1"
    assert sorted(t["per_card"]["card"] for t in again) == ["cuda:0", "cuda:1"]  # the whole set, cuda:0 too
    first = interrupted[0]["per_card"]["set"]
    assert {t["per_card"]["set"] for t in again} != {first} and all(t["per_card"]["retry_of"] == first for t in again)
    (view,) = campaign_views(reading.load(runs))
    (row,) = decide(view, load_catalog()).rows
    assert row.together["sets"] == 2 and row.together["complete_sets"] == 1
    assert row.plan is not None and row.plan.total > Decimal(0)


def test_the_pages_say_each_cards_trial_and_peaks_apart_and_the_placement_in_the_protocol(tiny_campaign, tmp_path,
                                                                                           two_cards, cli):
    from bs4 import BeautifulSoup

    runs = tmp_path / "runs"
    run_campaign(campaign_file=declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=1), PER_CARD),
                 runs_dir=runs, quiet=True, stages=False)
    # Beside it, a model placed across the two cards: each phase keeps each card's peaks (gpu_cards).
    manifest = factory.manifest("across", "run-across", environment=TWO_B200)
    manifest["protocol"]["placement"] = {"mode": "across_cards", "devices": ["cuda:0", "cuda:1"]}
    records.append(runs, manifest)
    across = factory.trial(manifest, gpu=True)
    across["memory"]["devices_used"] = ["cuda:0", "cuda:1"]
    for phase in across["phases"].values():
        phase["gpu_cards"] = {"cuda:0": {"gpu_peak_allocated_bytes": 5 * 2**30, "gpu_peak_reserved_bytes": 6 * 2**30},
                              "cuda:1": {"gpu_peak_allocated_bytes": 7 * 2**30, "gpu_peak_reserved_bytes": 8 * 2**30}}
    records.append(runs, across)
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0

    def page(campaign, name):
        return BeautifulSoup((tmp_path / "site" / "campaigns" / campaign / name).read_text(encoding="utf-8"), "html.parser")

    protocol = page("sets", "index.html").select_one("#protocol dl.protocol").get_text(" ", strip=True)
    assert "one trial per card at the same time on cuda:0, cuda:1, each on its own copy of the corpus" in protocol
    assert "one model placed across cuda:0, cuda:1" in page("across", "index.html").select_one("#protocol").get_text(" ")
    sets = page("sets", "trials.html")
    lines = [p.get_text(" ", strip=True) for p in sets.select("p.per-card")]
    assert len(lines) == 2 and any("ran on cuda:0 at the same time as cuda:1" in line for line in lines)
    assert not sets.select("table.cards")  # one card's trial: its peaks are the phase table's
    (table,) = page("across", "trials.html").select("table.cards")
    assert "each card's peak is apart, and their memory is not one space" in table.caption.get_text()
    heads = [th.get_text(" ", strip=True) for th in table.select("thead th")]
    assert heads[1:] == ["cuda:0 · GPU peak allocated", "cuda:0 · GPU peak reserved", "cuda:1 · GPU peak allocated",
                         "cuda:1 · GPU peak reserved"]
    window = next(tr for tr in table.select("tbody tr") if tr.th.get_text(strip=True) == "measured_window")
    cells = [td.get_text(" ", strip=True) for td in window.select("td")]
    assert cells[0].startswith("5,368,709,120") and cells[3].startswith("8,589,934,592")  # each card's own, never a sum
    # The campaign page's variants table says its figures are each card's own; the decision page gives the set's.
    variants = page("sets", "index.html").select_one("table.variants caption").get_text(" ", strip=True)
    assert "each window and throughput here is one card's own" in variants
    details = page("sets", "decision.html").select_one("table.decision-details tbody tr").get_text(" ", strip=True)
    assert "per set of 2 corpora at once (its slowest card's window); 1 of 1 set(s) with every card ok" in details
    assert "one card's own" not in page("across", "index.html").select_one("table.variants caption").get_text(" ")
    # trials.csv and the Python API name each record's card and set, so a spreadsheet groups the sets as the decision
    # does; a campaign without per_card keeps its columns.
    import csv

    from iteralab import open_runs

    site = tmp_path / "site" / "campaigns"
    rows = list(csv.DictReader((site / "sets" / "trials.csv").read_text(encoding="utf-8").split("\n")))
    assert sorted(row["card"] for row in rows) == ["cuda:0", "cuda:1"] and len({row["card_set"] for row in rows}) == 1
    assert rows[0]["card_set"].startswith("set-")
    assert "card" not in (site / "across" / "trials.csv").read_text(encoding="utf-8").split("\n", 1)[0].split(",")
    trials = open_runs(runs).trials.set_index("record_id")
    assert {record_id: trials.at[record_id, "card"] for record_id in (row["record_id"] for row in rows)} == \
        {row["record_id"]: row["card"] for row in rows}
    assert trials.loc[trials["campaign"] == "across", "card"].isna().all()
    code, out, _ = cli("trials", "sets", "--runs", runs)
    assert code == 0 and sorted(line.split("  on ")[1].split()[0] for line in out.splitlines()) == ["cuda:0", "cuda:1"]


def test_sets_measured_on_two_cards_are_never_planned_on_lots_of_one_card(tmp_path):
    environment = factory.machine("NVIDIA GeForce RTX 4090", count=2, cuda="12.8", driver="570.86", torch="2.13.0+cu128")
    manifest = factory.manifest("pairs", "run-pairs", environment=environment)
    manifest["protocol"]["placement"] = {"mode": "per_card", "devices": ["cuda:0", "cuda:1"]}
    records.append(tmp_path, manifest)
    for repetition in (1, 2):
        for card, seconds in (("cuda:0", 30.0), ("cuda:1", 40.0)):
            found = factory.trial(manifest, seconds=seconds, repetition=repetition, sequence=repetition, gpu=True)
            found["memory"].update(device=card, devices_used=["cuda:0", "cuda:1"])
            found["per_card"] = {"set": f"set-{repetition}", "card": card, "cards": ["cuda:0", "cuda:1"]}
            records.append(tmp_path, found)
    (view,) = campaign_views(reading.load(tmp_path))
    (row,) = decide(view, load_catalog()).rows
    assert row.window_seconds == (40.0, 40.0, 40.0)  # each set's slowest card, never the faster one's 30 s
    assert row.together["throughput"] == (5.0, 5.0, 5.0)  # 2 × 100 entries over 40 s
    assert row.plan is None and row.plan_reason.startswith(
        "no plan: one trial per card ran on 2 cards of one machine at the same time, and a lot of RTX 4090")


def test_ctrl_c_stops_every_card_of_the_set_at_its_next_batch_and_the_run_stops(tiny_campaign, tmp_path, two_cards):
    two_cards.interrupt, two_cards.barrier = True, threading.Barrier(2, timeout=60)  # both in their windows at Ctrl-C
    campaign = declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=2), PER_CARD)
    result = run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert result.interrupted and len(result.trials) == 2  # the second set never started
    assert {(t["per_card"]["card"], t["status"], t["error"], t["failed_phase"]) for t in result.trials} == {
        ("cuda:0", "interrupted", "received SIGINT", "measured_window"),
        ("cuda:1", "interrupted", "received SIGINT", "measured_window")}
    two_cards.interrupt = False
    resumed = run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False, resume=True)
    assert [t["status"] for t in resumed.trials] == ["ok"] * 4  # the interrupted set again, whole, then the second
