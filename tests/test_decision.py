"""The decision report over folders merged from several machines; every expected figure is worked out by hand here."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from decimal import Decimal

import pytest

from iteralab.decision.report import decide
from iteralab.decision.text import report_dict
from iteralab.money.catalog import load_catalog
from iteralab.store import reading, records
from iteralab.store.views import campaign_views
from tests import factory

RTX_4090 = factory.machine("NVIDIA GeForce RTX 4090", cuda="12.8", driver="570.86", torch="2.13.0+cu128")
RTX_6000_ADA = factory.machine("NVIDIA RTX 6000 Ada Generation", cuda="12.8", driver="570.86", torch="2.13.0+cu128")
CPU = factory.machine(None, cpu="Test CPU", threads=2)
# Monday 09:00 to Thursday 09:00 in Jakarta: 72 h, exactly the 3-day package.
QUESTION = {"corpora": 10, "entries": None, "window_start": "2026-09-28T09:00:00+07:00", "window_end": "2026-10-01T09:00:00+07:00",
            "time_zone": "Asia/Jakarta", "window_hours": "72", "deadline": None, "deadline_hours": None, "budget": "50.00"}


def write_machine(folder, run_id, environment, durations, *, question=QUESTION, campaign="merged", failures=()):
    """Write one machine's run: a manifest and five trials per variant with the given measured windows (seconds)."""
    manifest = factory.manifest(campaign, run_id, environment=environment, decision=question)
    records.append(folder, manifest)
    written = {}
    sequence = 0
    for variant, seconds in durations.items():
        for repetition, value in enumerate(seconds, start=1):
            sequence += 1
            trial = factory.trial(manifest, variant, seconds=value, repetition=repetition, sequence=sequence,
                                  gpu=environment["gpus"] is not None, batch_size=int(variant[1:]))
            records.append(folder, trial)
            written.setdefault(variant, []).append(trial)
    for variant in failures:
        sequence += 1
        records.append(folder, factory.trial(manifest, variant, status="oom", repetition=6, sequence=sequence,
                                             failed_phase="measured_window", entries_completed=40, error="CUDA out of memory",
                                             gpu=True, batch_size=int(variant[1:])))
    return manifest, written


@pytest.fixture
def merged(tmp_path):
    """Three machines' runs/ folders, two teams' deliverables and two rentals, merged by copying as the README says."""
    target = tmp_path / "runs"
    machines = {}
    for name, environment, durations, failures in (
        ("run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108], "b8": [30, 31, 32, 33, 34]}, ()),
        ("run-ada", RTX_6000_ADA, {"b1": [90, 91, 92, 93, 94], "b8": [25, 26, 27, 28, 29]}, ("b8",)),
        ("run-cpu", CPU, {"b1": [500, 510, 520, 530, 540]}, ()),
    ):
        folder = tmp_path / name
        machines[name] = write_machine(folder, name, environment, durations, failures=failures)
        shutil.copytree(folder, target, dirs_exist_ok=True)
    trials = machines["run-4090"][1]["b8"]
    # Two teams delivered the same corpus from their own copies: one deliverable.
    team_a, team_b = tmp_path / "team-a", tmp_path / "team-b"
    records.append(team_a, factory.deliverable("merged", trials[0]))
    records.append(team_b, factory.deliverable("merged", trials[1]))
    records.append(team_a, factory.rental("merged", runs=["run-4090"]))
    records.append(team_b, factory.rental("merged", runs=["run-cpu"]))  # an RTX 4090 package named for a CPU run
    for team in (team_a, team_b):
        shutil.copytree(team, target, dirs_exist_ok=True)
    return target


def report_of(runs):
    loaded = reading.load(runs)
    (view,) = campaign_views(loaded)
    return decide(view, load_catalog()), loaded, view


def test_merged_machines_never_pool_and_the_report_matches_the_hand_worked_figures(merged):
    report, loaded, view = report_of(merged)
    data = report_dict(report)
    rows = {row["label"]: row for row in data["ranked"] + data["infeasible"]}
    a8 = "b8 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"
    a1 = "b1 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"
    ada1, ada8 = (f"{v} · 1× NVIDIA RTX 6000 Ada Generation · torch 2.13.0+cu128" for v in ("b1", "b8"))
    cpu1 = "b1 · CPU Test CPU, 2 threads · torch 2.13.0"
    assert sorted(rows) == sorted([a8, a1, ada1, ada8, cpu1])  # two variants × three machines, never pooled
    assert rows[a8]["measured_window_s"] == [30, 31, 32, 33, 34]
    assert rows[ada8]["trials"] == {"ok": 5, "oom": 1}
    # Ten corpora, one lot: 10 × window + 4 one-time phases of 1 ms each.
    assert rows[a8]["projected_hours"] == {"min": f"{(300 + 0.004) / 3600:.4f}", "median": f"{(320 + 0.004) / 3600:.4f}",
                                           "max": f"{(340 + 0.004) / 3600:.4f}"}
    # 72 h window: the 3-day package covers it; a lot is priced once.
    assert rows[a8]["planned"]["total"] == "47.14" and rows[a8]["planned"]["days"] == 3 and rows[a8]["lots"] == 1
    assert rows[ada1]["planned"]["total"] == "55.71"
    assert rows[cpu1]["planned"] is None and rows[cpu1]["planned_reason"] == "not in the catalog: CPU"
    # Observed: the 4090 rental counts for both 4090 configurations, once each; the CPU-linked rental for nothing.
    assert rows[a8]["observed"]["spend"] == "47.14" and rows[a1]["observed"]["spend"] == "47.14"
    assert rows[a8]["observed"]["shared_with_configurations"] == 1
    assert rows[cpu1]["observed"]["spend"] is None
    assert rows[cpu1]["observed"]["reason"] == "no rental linked to its runs"
    assert any("names run run-cpu, whose manifest observed no GPU" in p for p in data["problems"])
    # Two teams' deliverables of one corpus are one deliverable: 47.14 ÷ 1, not ÷ 2 (regression for #13).
    assert rows[a8]["observed"]["deliverables"] == 1
    assert rows[a8]["observed"]["cost_per_validated_corpus"] == "47.14"
    assert rows[a1]["observed"]["cost_reason"] == "undefined: no accepted deliverable"
    assert view.cost()["deliverables"] == 1
    assert any("repeats the corpus" in p for p in loaded.problems)
    # Feasibility: budget 50.00 excludes the RTX 6000 Ada (55.71). The CPU buys no package, so it spends nothing of the
    # budget: it meets the question, ranked after every priced rental (#45; it used to fail 'budget: cannot be checked').
    assert [row["label"] for row in data["ranked"]] == [a8, a1, cpu1]
    assert rows[ada1]["conditions_failed"] == ["budget: planned 55.71 exceeds the ceiling 50.00"]
    assert rows[cpu1]["conditions_failed"] == []
    # Same planned spend, but every b8 repetition beat every b1 one: separated, not a tie.
    assert data["cheapest"] == rows[a8]["configuration"] and data["gap_money"] == "0.00" and data["tie"] is None
    assert "plans the same spend, but the repetitions separate them: median 32.000 s against 104.000 s" in data["answer"]
    assert data["fastest"] is None  # the cheapest is also the fastest
    assert data["to_measure"] == [{"gpu": "b200", "gpu_name": "B200", "days": 7, "periods": 1, "package": "one 7-day package",
                                   "price_for_window": "2071.00", "currency": "USD", "single_package": None,
                                   "reason": None, "time": None, "quality": None}]
    assert data["summary"] == f"no rental needed: {cpu1} meets the question" and data["owned"] == rows[cpu1]["configuration"]


def test_equal_spend_and_overlapping_durations_is_a_tie(tmp_path):
    write_machine(tmp_path, "run-a", RTX_4090, {"b1": [30, 34, 31, 33, 32], "b8": [31, 35, 30, 32, 33]})
    report, _, _ = report_of(tmp_path)
    assert report.tie is not None and report.tie.startswith("Tie: ")
    assert report.gap_money == Decimal("0.00")
    assert "tie at 47.14 USD" in report.summary_line


def test_deadline_window_and_lots_divide_independent_corpora(tmp_path):
    # 1,000 corpora; b1 takes 100-108 s a corpus: 1,000 × 108 s = 30 h on one lot, over the 24 h deadline.
    question = {**QUESTION, "corpora": 1000, "deadline_hours": "24", "budget": None}
    write_machine(tmp_path, "run-a", RTX_4090, {"b1": [100, 102, 104, 106, 108]}, question=question)
    report, _, _ = report_of(tmp_path)
    (row,) = report.rows
    # Two lots: 500 corpora each, 500 × 108 s + 4 ms = 15.0 h, within 24 h; priced 2 × 47.14.
    assert row.lots == 2 and row.plan.total == Decimal("94.28")
    assert f"{row.hours[2]:.4f}" == f"{(500 * 108 + 0.004) / 3600:.4f}"
    assert row.feasible
    assert row.plan.describe().startswith("2 lots × 3-day RTX 4090 at 47.14 USD per lot, catalog 2026-09-24, ")
    single = {**QUESTION, "corpora": 10, "budget": None}
    write_machine(tmp_path / "one", "run-b", RTX_4090, {"b1": [100, 102, 104, 106, 108]}, question=single)
    (one,) = report_of(tmp_path / "one")[0].rows
    assert one.plan.describe().startswith("1 lot × 3-day RTX 4090 at 47.14 USD per lot, catalog 2026-09-24, ")


def test_entries_are_one_stream_that_lots_do_not_divide(tmp_path):
    question = {**QUESTION, "corpora": None, "entries": 100_000, "deadline_hours": "24", "budget": None}
    write_machine(tmp_path, "run-a", RTX_4090, {"b1": [100, 102, 104, 106, 108]}, question=question)
    report, _, _ = report_of(tmp_path)
    (row,) = report.rows
    # 100,000 entries = 1,000 × the 100-entry corpus on one stream: 30 h, past both the deadline (24 h).
    assert row.lots == 1
    assert row.conditions == (f"deadline: projected up to {(1000 * 108 + 0.004) / 3600:.2f} h, later than the 24 h until the deadline",)
    assert report.ranked == [] and report.summary_line == "no feasible configuration among 1"


def test_window_no_package_covers_is_planned_in_consecutive_periods_bought_explicitly(tmp_path):
    """Regression for #20: only a 3-day RTX 6000 Ada package is listed, so 96 h is planned as two, 2 × 55.71 = 111.42."""
    question = {**QUESTION, "window_hours": "96", "budget": None}
    write_machine(tmp_path, "run-ada", RTX_6000_ADA, {"b8": [25, 26, 27, 28, 29]}, question=question)
    report, _, _ = report_of(tmp_path)
    (row,) = report.rows
    assert (row.plan.periods, row.plan.days, row.plan.total, row.plan.single, row.plan_reason) == (
        2, 3, Decimal("111.42"), None, None)
    data = report_dict(report)["ranked"][0]["planned"]
    assert (data["periods"], data["total"], data["package"], data["single_package"]) == (
        2, "111.42", "2 consecutive 3-day periods, bought explicitly; no automatic extension", None)
    assert "The ranking uses the 2 consecutive 3-day periods (111.42 USD): a second period may come on another machine" \
        in report.answer


def test_same_hardware_other_driver_stays_apart_with_the_difference_named(tmp_path):
    newer = {**RTX_4090, "driver_version": "575.51"}
    write_machine(tmp_path / "a", "run-a", RTX_4090, {"b8": [30, 31, 32, 33, 34]})
    write_machine(tmp_path / "b", "run-b", newer, {"b8": [29, 30, 31, 32, 33]})
    for part in ("a", "b"):
        shutil.copytree(tmp_path / part, tmp_path / "runs", dirs_exist_ok=True)
    _, _, view = report_of(tmp_path / "runs")
    labels = sorted(summary.label for summary in view.variants)
    assert labels == ["b8 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128 · CUDA 12.8 · driver 570.86",
                      "b8 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128 · CUDA 12.8 · driver 575.51"]
    assert all(len(summary.seconds) == 5 for summary in view.variants)


def test_without_a_decision_table_the_report_says_which_question_is_missing(tmp_path):
    write_machine(tmp_path, "run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}, question=None)
    report, _, _ = report_of(tmp_path)
    assert not report.question.declared
    assert "states no [decision] table" in report.answer
    assert report.ranked[0].plan_reason == "not in the catalog: CPU"
    assert report.answer.startswith(f"{report.ranked[0].label} meets the question without a rental: ")  # #45


def test_decide_cli_prints_the_table_and_json(merged, cli):
    code, out, _ = cli("decide", "merged", "--runs", merged)
    assert code == 0 and "Cheapest feasible configuration: b8 · 1× NVIDIA GeForce RTX 4090" in out
    code, out, _ = cli("decide", "merged", "--runs", merged, "--json")
    data = json.loads(out)
    assert code == 0 and data["ranked"][0]["planned"]["total"] == "47.14"
    code, _, err = cli("decide", "nope", "--runs", merged)
    assert code == 1 and "campaign nope has no records" in err


DECISION_TABLE = ('\n[decision]\ncorpora = 3\nwindow_start = "2026-09-28T09:00"\nwindow_end = "2026-10-02T09:00"\n'
                  'time_zone = "Asia/Jakarta"\n')


@pytest.mark.slow
def test_a_real_cpu_run_copied_beside_another_machines_stays_its_own_configuration(tiny_campaign, tmp_path, cli):
    real = tmp_path / "cpu-machine"
    campaign = tiny_campaign(repetitions=2, batch_sizes=(1,), extra_variants=DECISION_TABLE)
    assert cli("run", campaign, "--runs", real, "--quiet")[0] == 0
    (manifest,) = reading.load(real).of_kind("manifest")
    assert manifest["protocol"]["decision"]["window_hours"] == "96"  # Monday 09:00 to Friday 09:00
    # Another machine ran the same campaign under the same protocol on an RTX 4090; its folder is copied in.
    other = tmp_path / "gpu-machine"
    gpu_manifest = factory.manifest("tiny", "run-gpubox", fingerprint=manifest["protocol_fingerprint"], environment=RTX_4090)
    gpu_manifest["protocol"], gpu_manifest["corpus"] = manifest["protocol"], manifest["corpus"]
    records.append(other, gpu_manifest)
    for repetition in (1, 2):
        gpu_trial = factory.trial(gpu_manifest, "b1", seconds=0.05, repetition=repetition, sequence=repetition, gpu=True)
        gpu_trial["variant_config"] = {**manifest["variants"]["b1"], "device": "cuda"}
        records.append(other, gpu_trial)
    merged = tmp_path / "runs"
    for folder in (real, other):
        shutil.copytree(folder, merged, dirs_exist_ok=True)
    report, _, view = report_of(merged)
    hardware = sorted(summary.configuration.hardware for summary in view.variants)
    assert len(view.variants) == 2 and hardware[0] == "1× NVIDIA GeForce RTX 4090" and hardware[1].startswith("CPU ")
    cpu_row = next(row for row in report.rows if row.summary.configuration.device == "cpu")
    assert len(cpu_row.summary.trials) == 2 and cpu_row.plan_reason == "not in the catalog: CPU"
    assert cpu_row.summary.configuration.cpu_model == manifest["environment"]["cpu"]["model"]
    gpu_row = next(row for row in report.rows if row.summary.configuration.device == "gpu")
    # 96 h window: only the 7-day RTX 4090 package covers it (110.00), but two 3-day periods bought explicitly cost
    # 2 × 47.14 = 94.28: the plan uses them and keeps the single package beside them (#20).
    assert (gpu_row.plan.days, gpu_row.plan.periods, gpu_row.plan.total) == (3, 2, Decimal("94.28"))
    assert (gpu_row.plan.single.days, gpu_row.plan.single.total) == (7, Decimal("110.00"))
    assert cli("build", "--runs", merged, "--out", tmp_path / "site")[0] == 0
    import csv

    with open(tmp_path / "site" / "campaigns" / "tiny" / "trials.csv", encoding="utf-8", newline="") as handle:
        hardware = sorted(row["hardware"].split(",")[0] for row in csv.DictReader(handle))
    assert hardware[:2] == ["1× NVIDIA GeForce RTX 4090"] * 2 and all(h.startswith("CPU ") for h in hardware[2:])
    assert len(hardware) == 4


def test_rentals_link_to_runs_whose_manifests_show_the_card(merged, cli, tmp_path):
    # The factory's runs were recorded just now: a rental started yesterday covers them.
    yesterday = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    code, out, _ = cli("rental", "add", "--campaign", "merged", "--gpu", "rtx-4090", "--lots", "1", "--days", "3",
                       "--start", yesterday, "--run", "run-4090", "--runs", merged)
    assert code == 0 and "paid for run(s) run-4090" in out
    before = sorted(p.read_bytes() for p in merged.rglob("*.jsonl"))
    for run, start, message in (("run-cpu", yesterday, "observed no GPU (CPU Test CPU): the hardware does not match"),
                                ("run-ada", yesterday, "observed NVIDIA RTX 6000 Ada Generation"),
                                ("run-elsewhere", yesterday, "--run run-elsewhere is not a run of campaign merged"),
                                # Regression for #20: a run outside the rental's period is refused at rental add --run.
                                ("run-4090", "2026-09-28T09:00", "outside the rental's period (2026-09-28T09:00:00+07:00 to "
                                 "2026-10-01T09:00:00+07:00); check --start, --end and --run; nothing was recorded")):
        code, _, err = cli("rental", "add", "--campaign", "merged", "--gpu", "rtx-4090", "--lots", "1", "--days", "3",
                           "--start", start, "--run", run, "--runs", merged)
        assert code == 1 and message in err and "Traceback" not in err
    assert sorted(p.read_bytes() for p in merged.rglob("*.jsonl")) == before  # a refused rental writes nothing


def test_a_machine_with_more_cards_than_the_rental_covers_is_not_counted(tmp_path):
    write_machine(tmp_path, "run-two", factory.machine("NVIDIA GeForce RTX 4090", count=2), {"b8": [30, 31, 32, 33, 34]})
    records.append(tmp_path, factory.rental("merged", runs=["run-two"]))
    report, _, _ = report_of(tmp_path)
    (row,) = report.rows
    assert row.observed_spend is None and row.lots == 2 and row.plan.total == Decimal("94.28")
    assert any("covers 1 card(s) but run run-two observed 2" in p for p in report.problems)


def test_note_new_drafts_a_note_the_site_renders_and_never_overwrites(merged, cli, tmp_path):
    notes = tmp_path / "notes"
    assert cli("note", "new", "merged", "--runs", merged, "--notes", notes, "--author", "QA <team>")[0] == 0
    text = (notes / "merged-decision.md").read_text(encoding="utf-8")
    assert "decision: b8 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128" in text and "selected_variant: b8" in text
    assert "budget: planned 55.71 exceeds the ceiling 50.00" in text
    code, _, err = cli("note", "new", "merged", "--runs", merged, "--notes", notes)
    assert code == 1 and "already exists; it was not overwritten" in err
    assert cli("build", "--runs", merged, "--out", tmp_path / "site", "--notes", notes)[0] == 0
    page = (tmp_path / "site" / "notes" / "merged-decision.html").read_text(encoding="utf-8")
    assert "QA &lt;team&gt;" in page and "../campaigns/merged/decision.html" in page


def test_site_pages_csv_and_bundle_never_pool_machines(merged, cli, tmp_path):
    from bs4 import BeautifulSoup

    assert cli("build", "--runs", merged, "--out", tmp_path / "site")[0] == 0
    base = tmp_path / "site" / "campaigns" / "merged"
    page = BeautifulSoup((base / "index.html").read_text(encoding="utf-8"), "html.parser")
    rows = [row.th.get_text() for row in page.select("table.variants tbody tr")]
    assert len(rows) == 5 and sum(label.startswith("b1 · ") for label in rows) == 3
    assert page.select_one("#decision-link a")["href"] == "decision.html"
    separation = page.select_one("#separation").get_text()
    assert "b1 · 1× NVIDIA GeForce RTX 4090" in separation and "b1 · CPU Test CPU" in separation
    decision = BeautifulSoup((base / "decision.html").read_text(encoding="utf-8"), "html.parser")
    assert [tr["id"] for tr in decision.select("#feasible table.decision tbody tr")] == [
        f"config-{row['configuration']}" for row in report_dict(report_of(merged)[0])["ranked"]]
    assert decision.select_one("tr.cheapest .badge").get_text() == "cheapest"
    assert [c.get_text() for c in decision.select("#to-measure tbody th")] == ["B200"]
    assert decision.select_one("#decision-charts table") is not None  # every chart has its data beside it
    index = BeautifulSoup((tmp_path / "site" / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert "no rental needed: b1 · CPU Test CPU, 2 threads · torch 2.13.0 meets the question" in index.get_text()
    table = (base / "trials.csv").read_text(encoding="utf-8")
    assert "configuration,variant,hardware,software" in table.splitlines()[0]
    import zipfile

    with zipfile.ZipFile(base / "evidence-merged.zip") as bundle:
        names = bundle.namelist()
        decision_json = json.loads(bundle.read(next(n for n in names if n.endswith("data/decision.json"))))
    assert decision_json["ranked"][0]["planned"]["total"] == "47.14"


@pytest.mark.parametrize(("table", "message"), [
    ('corpora = 2\nentries = 5\n', "either as corpora or as entries"),
    ('window_start = "2026-09-28T09:00"\n', "give both window_start and window_end"),
    ('window_start = "2026-09-28T09:00"\nwindow_end = "2026-09-27T09:00"\n', "must be after window_start"),
    ('time_zone = "Mars/Olympus"\n', "is not an IANA time zone"),
    ('deadline = "2026-09-29T09:00"\n', "a deadline date needs window_start"),
    ('budget = "12.345"\n', "is not an amount"),
    ('window_hours = 0\n', "must be more than 0"),
    ('corpus = 2\n', "unknown key(s) corpus"),
])
def test_bad_decision_tables_name_the_key(tiny_campaign, tmp_path, cli, table, message):
    campaign = tiny_campaign(extra_variants="\n[decision]\n" + table)
    code, _, err = cli("run", campaign, "--dry-run", "--runs", tmp_path / "runs")
    assert code == 1 and "[decision]" in err and message in err


def test_the_fastest_option_is_shown_when_it_is_not_the_cheapest(tmp_path):
    question = {**QUESTION, "budget": None}
    write_machine(tmp_path / "a", "run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108]}, question=question)
    write_machine(tmp_path / "b", "run-ada", RTX_6000_ADA, {"b8": [25, 26, 27, 28, 29]}, question=question)
    for part in ("a", "b"):
        shutil.copytree(tmp_path / part, tmp_path / "runs", dirs_exist_ok=True)
    report, _, _ = report_of(tmp_path / "runs")
    assert report.cheapest.summary.configuration.gpu_name == "NVIDIA GeForce RTX 4090"
    assert report.fastest.summary.configuration.gpu_name == "NVIDIA RTX 6000 Ada Generation"
    # 55.71 - 47.14 = 8.57 more; median projections 10 × 104 s and 10 × 27 s: 770 s = 12.8 min apart.
    assert report.gap_money == Decimal("8.57") and f"{report.gap_hours * 60:.1f}" == "-12.8"
    assert "Runner-up: b8 · 1× NVIDIA RTX 6000 Ada Generation · torch 2.13.0+cu128, 8.57 USD more, 12.8 min faster" in report.answer
    assert "Fastest feasible: b8 · 1× NVIDIA RTX 6000 Ada Generation" in report.answer


def test_decision_report_reads_the_catalog_it_is_given_and_names_the_campaigns_there(merged, tmp_path, monkeypatch):
    from iteralab.core.errors import UserError
    from iteralab.decision.report import decision_report

    cheaper = factory.price_file(tmp_path / "prices.csv")
    monkeypatch.chdir(merged.parent)  # the runs folder defaults to ./runs, as on the command line
    assert decision_report(campaign="merged").ranked[0].plan.total == Decimal("47.14")
    assert decision_report(campaign="merged", runs=merged, catalog=cheaper).ranked[0].plan.total == Decimal("40.00")
    records.append(merged, factory.manifest("another", "run-x"))
    with pytest.raises(UserError) as error:
        decision_report(campaign="nope", runs=merged)
    assert str(error.value) == f"campaign nope has no records in {merged}; campaigns there: another, merged"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as error:
        decision_report(campaign="nope", runs=tmp_path / "empty")
    assert str(error.value).endswith("campaigns there: none")


A8, A1 = (f"{v} · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128" for v in ("b8", "b1"))
CPU1 = "b1 · CPU Test CPU, 2 threads · torch 2.13.0"
PACKAGE = "1 lot × 3-day RTX 4090 at 47.14 USD per lot, catalog 2026-09-24"
TEN = "10 independent corpora like the campaign's within the 72 h access window"
PRICE_NOTE = "a price says nothing about a card's throughput."
# The answer's first sentence (#21): what to rent, or what to measure next and why.
RENT_4090 = "Rent 1 lot of RTX 4090, one 3-day package, for 47.14 USD, and run {variant} there. "


def test_the_answers_read_in_full(merged, tmp_path):
    """Every sentence of the plain-language answer, for the merged, fastest, tie and no-question cases."""
    report, _, _ = report_of(merged)
    # The CPU needs no package, so the budget does not exclude it: it meets the question and is said first (#45).
    assert report.answer == (
        f"{CPU1} meets the question without a rental: it meets the quality thresholds and is projected at 1.39 h to "
        f"1.50 h for {TEN}. Renting adds nothing the question asks for; the cheapest feasible rental, {A8}, plans 47.14 "
        "USD and is projected at up to 5.7 min. "
        f"Cheapest feasible configuration: {A8}. Planned 47.14 USD for {PACKAGE}, 71.91 h of the package spare after the "
        f"work; projected 5.0 min to 5.7 min for {TEN}. Runner-up: {A1} plans the same spend, but the repetitions "
        "separate them: median 32.000 s against 104.000 s per corpus, the ranges do not overlap. To measure: B200 "
        f"(2,071.00 USD for one lot in one 7-day package); {PRICE_NOTE}")
    assert report.summary_line == f"no rental needed: {CPU1} meets the question"
    question = {**QUESTION, "budget": None}
    write_machine(tmp_path / "a", "run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108]}, question=question)
    write_machine(tmp_path / "b", "run-ada", RTX_6000_ADA, {"b8": [25, 26, 27, 28, 29]}, question=question)
    # A folder of its own: tmp_path/runs is the merged fixture's, whose CPU meets the question and is said first (#45).
    for part in ("a", "b"):
        shutil.copytree(tmp_path / part, tmp_path / "gpus", dirs_exist_ok=True)
    ada8 = "b8 · 1× NVIDIA RTX 6000 Ada Generation · torch 2.13.0+cu128"
    assert report_of(tmp_path / "gpus")[0].answer == RENT_4090.format(variant="b1") + (
        f"Cheapest feasible configuration: {A1}. Planned 47.14 USD for {PACKAGE}, 71.7 h of the package spare after the "
        f"work; projected 16.7 min to 18.0 min for {TEN}. Runner-up: {ada8}, 8.57 USD more, 12.8 min faster (median "
        f"projection). Fastest feasible: {ada8}, projected 4.5 min (median), planned 55.71 USD. To measure: B200 "
        f"(2,071.00 USD for one lot in one 7-day package); {PRICE_NOTE}")
    write_machine(tmp_path / "tie", "run-a", RTX_4090, {"b1": [30, 34, 31, 33, 32], "b8": [31, 35, 30, 32, 33]})
    tie = report_of(tmp_path / "tie")[0]
    assert tie.answer == RENT_4090.format(variant="b1") + (
        f"Cheapest feasible configuration: {A1}. Planned 47.14 USD for {PACKAGE}, 71.91 h of the package spare after the "
        f"work; projected 5.0 min to 5.7 min for {TEN}. Tie: {A1} and {A8} both plan 47.14 USD and the repetitions do "
        f"not separate their durations. {A1} and {A8}: the series has not separated them. The spread of the repetitions "
        "(5.000 s) is comparable to the difference between medians (0.000 s) and their ranges overlap. To measure: B200 "
        f"(2,071.00 USD for one lot in one 7-day package), RTX 6000 Ada (55.71 USD for one lot in one 3-day package); {PRICE_NOTE}")
    assert tie.summary_line == f"tie at 47.14 USD: {A1} and {A8}"
    write_machine(tmp_path / "cpu", "run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}, question=None)
    cpu = report_of(tmp_path / "cpu")[0]
    cpu1 = "b1 · CPU Test CPU, 2 threads · torch 2.13.0"
    # #45: a CPU that meets the question is said first, without a rental; measuring a card is then only to compare.
    assert cpu.answer == (
        f"{cpu1} meets the question without a rental: it meets the quality thresholds and is projected at 5.0 s to 5.0 s "
        "for 1 corpus like the campaign's (no access window stated). Renting adds nothing the question asks for; a card is "
        "worth measuring only to compare. Measure next on RTX 4090, the cheapest card not measured for this window (47.14 "
        "USD for one lot), then copy that machine's runs/ folder here and build again. To measure: B200 (2,071.00 USD for "
        "one lot in one 7-day package), RTX 4090 (47.14 USD for one lot in one 3-day package), RTX 6000 Ada (55.71 USD for "
        f"one lot in one 3-day package); {PRICE_NOTE} The campaign file states no [decision] table, so this answer assumes "
        "one corpus and no window.")
    assert cpu.summary_line == f"no rental needed: {cpu1} meets the question"


def test_runner_up_pace_fastest_by_median_unpriced_fastest_and_cards_no_package_covers(tmp_path):
    """Regression for #13 (mutants of the answer): slower, same pace, fastest by median not by max, a CPU fastest."""
    question = {**QUESTION, "budget": None}
    ada1 = "b1 · 1× NVIDIA RTX 6000 Ada Generation · torch 2.13.0+cu128"
    write_machine(tmp_path / "a", "run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}, question=question)
    write_machine(tmp_path / "b", "run-ada", RTX_6000_ADA, {"b1": [40, 41, 42, 43, 44]}, question=question)
    for part in ("a", "b"):
        shutil.copytree(tmp_path / part, tmp_path / "slower", dirs_exist_ok=True)
    # Ten corpora: medians 10 × 32 s and 10 × 42 s, 100 s = 1.7 min apart.
    assert f"Runner-up: {ada1}, 8.57 USD more, 1.7 min slower (median projection)." in report_of(tmp_path / "slower")[0].answer
    write_machine(tmp_path / "c", "run-ada", RTX_6000_ADA, {"b1": [30, 31, 32, 33, 34]}, question=question)
    for part in ("a", "c"):
        shutil.copytree(tmp_path / part, tmp_path / "same", dirs_exist_ok=True)
    assert f"Runner-up: {ada1}, 8.57 USD more, the same median projection." in report_of(tmp_path / "same")[0].answer
    # The fastest by median projection, not by its slowest repetition.
    write_machine(tmp_path / "d", "run-ada", RTX_6000_ADA, {"b1": [20, 21, 22, 23, 200], "b8": [25, 26, 27, 28, 29]},
                  question=question)
    for part in ("a", "d"):
        shutil.copytree(tmp_path / part, tmp_path / "median", dirs_exist_ok=True)
    fastest = report_of(tmp_path / "median")[0]
    assert fastest.fastest.label == ada1 and f"Fastest feasible: {ada1}, projected 3.7 min (median), planned 55.71 USD." \
        in fastest.answer
    # An unpriced CPU that is fastest says why it has no plan; a 96 h window no single RTX 6000 Ada package covers.
    wide = {**question, "window_hours": "96"}
    write_machine(tmp_path / "e", "run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}, question=wide)
    write_machine(tmp_path / "f", "run-cpu", CPU, {"b1": [1, 1, 1, 1, 1]}, question=wide)
    for part in ("e", "f"):
        shutil.copytree(tmp_path / part, tmp_path / "cpu", dirs_exist_ok=True)
    answer = report_of(tmp_path / "cpu")[0].answer
    # 10 corpora × 1 s + 4 ms of one-time phases: 10.0 s, in seconds, not "0.2 min" (#21).
    assert "Fastest feasible: b1 · CPU Test CPU, 2 threads · torch 2.13.0, projected 10.0 s (median), not in the catalog: CPU." \
        in answer
    assert ("To measure: B200 (2,071.00 USD for one lot in one 7-day package), RTX 6000 Ada (111.42 USD for one lot in 2 "
            "consecutive 3-day periods, bought explicitly; no automatic extension);") in answer


def test_an_entries_workload_and_a_campaign_without_trials_read_plainly(tmp_path):
    question = {**QUESTION, "corpora": None, "entries": 1000, "budget": None}
    write_machine(tmp_path / "a", "run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}, question=question)
    assert "for 1,000 entries (10.00 × the campaign's corpus), processed as one stream within the 72 h access window." \
        in report_of(tmp_path / "a")[0].answer
    records.append(tmp_path / "empty", factory.manifest("merged", "run-0", decision=QUESTION))
    empty = report_of(tmp_path / "empty")[0]
    assert empty.rows == [] and empty.summary_line == "nothing measured yet"


def test_the_figures_match_pandas_grouping_with_exclusions_failures_and_an_even_count(merged):
    """Regression for #22: the figures are grouped over plain columns now; pandas' groupby is the reference."""
    from iteralab.decision.report import _figures
    from iteralab.store.trials import trial_table

    (view,) = campaign_views(reading.load(merged))
    table = trial_table(view)
    table.loc[0, "excluded_by"] = "exclusion-x"  # an excluded trial counts in no figure
    table.loc[1, "window_s"] = table.loc[2, "window_s"] + 0.25  # four windows left in its configuration: an even median
    kept = table[table["excluded_by"].isna()]
    ok = kept[kept["status"] == "ok"]
    counts = kept.groupby(["configuration_key", "status"]).size().unstack(fill_value=0)
    window = ok.groupby("configuration_key")["window_s"].agg(["min", "median", "max"])
    once = ok.groupby("configuration_key")["one_time_s"].agg(["min", "max"])
    figures = _figures(table)
    assert sorted(figures) == sorted(counts.index)
    assert any(sum(found["statuses"].values()) == 4 for found in figures.values())
    for key, found in figures.items():
        assert found["statuses"] == {status: int(count) for status, count in counts.loc[key].items() if count}
        assert list(found["statuses"]) == sorted(found["statuses"])
        assert found["window"] == tuple(float(window.loc[key, c]) for c in ("min", "median", "max"))
        assert found["one_time"] == tuple(float(once.loc[key, c]) for c in ("min", "max"))


def test_a_signed_note_whose_figures_changed_is_named_and_drafted_again_without_moving_files(tmp_path, cli):
    """Regression for #37: after an exclusion the decision page's figures moved, the signed note's did not, and nothing said so."""
    from bs4 import BeautifulSoup

    from tests import hostile

    runs, notes, site = tmp_path / "runs", tmp_path / "notes", tmp_path / "site"
    shutil.copytree(hostile.FIXTURE, runs)
    campaign = hostile.CAMPAIGN
    assert cli("note", "new", campaign, "--runs", runs, "--notes", notes, "--author", "A. Reviewer")[0] == 0
    note = notes / f"{campaign}-decision.md"
    signed = note.read_text(encoding="utf-8")
    assert "\nfigures: " in signed
    code, out, err = cli("build", "--runs", runs, "--out", site, "--notes", notes)
    assert code == 0, err
    page = (site / "notes" / f"{campaign}-decision.html").read_text(encoding="utf-8")
    assert "drafted from figures" not in page and "drafted from figures" not in (site / "index.html").read_text(encoding="utf-8")
    # An exclusion moves the figures: the build and the note page name the note as drafted from other figures.
    trial = next(t for t in reading.load(runs).of_kind("trial") if t["status"] == "ok" and t["record_id"] not in
                 {x for e in reading.load(runs).of_kind("exclusion") for x in e["trials"]})
    assert cli("exclude", "--campaign", campaign, "--rule", "host log shows a neighbour's job", "--trial", trial["record_id"],
               "--document", "ticket 99", "--runs", runs)[0] == 0
    code, out, err = cli("build", "--runs", runs, "--out", site, "--notes", notes)
    assert code == 0, err
    page = BeautifulSoup((site / "notes" / f"{campaign}-decision.html").read_text(encoding="utf-8"), "html.parser")
    warning = page.select_one("#note-problems").get_text(" ", strip=True)
    assert "drafted from figures" in warning and f"iteralab note new {campaign} --again" in warning
    # Drafted again: the signed note is kept aside, never rendered, and the new draft matches the records.
    code, out, err = cli("note", "new", campaign, "--runs", runs, "--notes", notes, "--again")
    assert code == 0, err
    assert (notes / "superseded" / note.name).read_text(encoding="utf-8") == signed and "superseded" in out
    assert cli("build", "--runs", runs, "--out", site, "--notes", notes)[0] == 0
    page = (site / "notes" / f"{campaign}-decision.html").read_text(encoding="utf-8")
    assert "drafted from figures" not in page and "unsigned" in page  # the new draft waits for its signature
