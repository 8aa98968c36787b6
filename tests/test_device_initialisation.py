"""CUDA's initialisation (#44) in the projection's one-time costs: a run's manifest times it once per process, and each
of the run's trials counts it once in its one-time seconds; a manifest without the field counts nothing and says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from iteralab.core.errors import UserError
from iteralab.decision.report import decide
from iteralab.decision.text import describe_report, report_dict
from iteralab.money.catalog import load_catalog
from iteralab.store import reading, records
from iteralab.store.trials import ONE_TIME_PHASES, initialisation, trial_table
from iteralab.store.views import campaign_views
from tests import factory

FIXTURES = Path(__file__).parent / "fixtures" / "demo-runs"
RTX_4090 = factory.machine("NVIDIA GeForce RTX 4090", cuda="12.8", driver="570.86", torch="2.13.0+cu128")
QUESTION = {"corpora": 10, "entries": None, "window_start": "2026-09-28T09:00:00+07:00", "window_end": "2026-10-01T09:00:00+07:00",
            "time_zone": "Asia/Jakarta", "window_hours": "72", "deadline": None, "deadline_hours": None, "budget": None}
TIMED = {"duration_ns": 2_500_000_000, "devices": ["cuda:0"], "what": "torch.cuda.init() and the first synchronisation"}


def _write(folder: Path, initialisation: dict | None, *, run_id: str = "run-4090", seconds=(10.0, 11.0, 12.0)) -> None:
    """Write one RTX 4090 run of three b8 trials whose manifest carries INITIALISATION (None: no such field at all)."""
    manifest = factory.manifest("cuda", run_id, environment=RTX_4090, decision=QUESTION)
    if initialisation is not None:
        manifest["device_initialisation"] = initialisation
    records.append(folder, manifest)
    for repetition, value in enumerate(seconds, start=1):
        records.append(folder, factory.trial(manifest, "b8", seconds=value, repetition=repetition, sequence=repetition,
                                             gpu=True, batch_size=8))


def _report(folder: Path):
    (view,) = campaign_views(reading.load(folder))
    return decide(view, load_catalog()), view


def test_the_one_time_range_grows_by_the_runs_cuda_initialisation_exactly_once(tmp_path):
    _write(tmp_path / "without", None)
    _write(tmp_path / "timed", TIMED)
    (before, _), (after, view) = _report(tmp_path / "without"), _report(tmp_path / "timed")
    (row_before,), (row_after,) = before.rows, after.rows
    # Four one-time phases of 1 ms each in every trial (factory.trial), then 2.5 s once per trial for its run.
    assert row_before.one_time_seconds == pytest.approx((0.004, 0.004), abs=1e-12)
    assert row_after.one_time_seconds == pytest.approx((2.504, 2.504), abs=1e-12)
    assert row_after.one_time_seconds[1] - row_before.one_time_seconds[1] == pytest.approx(2.5, abs=1e-12)
    assert row_after.window_seconds == row_before.window_seconds  # the measured window is not touched
    # The projection: the same windows times the corpora per lot, plus 2.5 s more at each end.
    for low, high in zip(row_before.hours, row_after.hours, strict=True):
        assert (high - low) * 3600 == pytest.approx(2.5, abs=1e-9)
    assert list(trial_table(view)["one_time_s"]) == pytest.approx([2.504] * 3, abs=1e-12)
    # Said in the report: the JSON's row and the text's line, once per run.
    (ranked,) = [*report_dict(after)["ranked"], *report_dict(after)["infeasible"]]
    found = ranked["device_initialisation"]
    assert found["one_time_s"] == {"min": 2.504, "max": 2.504}
    assert [(run["run_id"], run["seconds"], run["devices"]) for run in found["runs"]] == [("run-4090", 2.5, ["cuda:0"])]
    assert str(found["what"]) == "CUDA initialisation (once per process)"
    text = describe_report(after)
    assert "one-time seconds 2.504 to 2.504, each counting its run's CUDA initialisation (once per process) once: " \
           "run-4090 2.500 s" in text
    assert all("device_initialisation" not in row for row in report_dict(before)["ranked"] + report_dict(before)["infeasible"])
    assert "CUDA initialisation" not in describe_report(before)


def test_two_runs_count_their_own_initialisation_and_a_manifest_without_the_field_counts_nothing(tmp_path):
    merged = tmp_path / "runs"
    _write(merged, TIMED, run_id="run-new")
    _write(merged, None, run_id="run-old", seconds=(10.5, 11.5))
    report, _ = _report(merged)
    (row,) = report.rows
    assert len(row.summary.trials) == 5
    # The old run's trials: 4 ms; the new run's: 4 ms + 2.5 s. The range spans both, nothing is guessed for the old one.
    assert row.one_time_seconds == pytest.approx((0.004, 2.504), abs=1e-12)
    runs = {run["run_id"]: run for run in report_dict(report)[("ranked" if row.feasible else "infeasible")][0]
            ["device_initialisation"]["runs"]}
    assert runs["run-new"]["seconds"] == 2.5 and runs["run-new"]["reason"] is None
    assert runs["run-old"]["seconds"] is None
    assert "nothing is counted" in str(runs["run-old"]["reason"])
    assert "run-old: not recorded: this run's manifest has no device_initialisation" in describe_report(report)


def test_a_cpu_run_whose_manifest_says_why_nothing_was_timed_adds_nothing_and_is_not_said(tmp_path):
    _write(tmp_path / "cpu", {"duration_ns": None, "devices": [], "reason": "no variant runs on a GPU"})
    _write(tmp_path / "without", None)
    (cpu, _), (without, _) = _report(tmp_path / "cpu"), _report(tmp_path / "without")
    assert cpu.rows[0].one_time_seconds == without.rows[0].one_time_seconds
    assert cpu.rows[0].initialisation == ()
    assert json.dumps(report_dict(cpu), default=str, sort_keys=True).replace(cpu.campaign, "") \
        == json.dumps(report_dict(without), default=str, sort_keys=True).replace(without.campaign, "")


@pytest.mark.parametrize("duration", ["2.5", -1, True, 1e400])
def test_an_unreadable_duration_counts_nothing_and_says_why(tmp_path, duration):
    manifest = {"device_initialisation": {"duration_ns": duration, "devices": ["cuda:0"]}}
    found = initialisation(manifest)
    assert found["seconds"] is None and found["recorded"] and "not a number of nanoseconds" in str(found["reason"])
    if duration != 1e400:  # infinity is no JSON: no record holds it
        # The manifest schema refuses such a record at writing: one from another machine is a problem named on reading.
        with pytest.raises(UserError, match=r"refusing to write manifest: device_initialisation\.duration_ns"):
            _write(tmp_path, {"duration_ns": duration, "devices": ["cuda:0"]}, seconds=(10.0,))


def test_the_classify_fixture_without_the_field_decides_as_before(tmp_path):
    runs = shutil.copytree(FIXTURES, tmp_path / "runs")
    loaded = reading.load(runs)
    assert not any("device_initialisation" in manifest for manifest in loaded.of_kind("manifest"))
    (view,) = campaign_views(loaded)
    report = decide(view, load_catalog())
    figures = report_dict(report)
    assert all("device_initialisation" not in row for row in figures["ranked"] + figures["infeasible"])
    assert "CUDA initialisation" not in describe_report(report)
    # Each configuration's one-time range is its trials' one-time phases alone, as before.
    for row in report.rows:
        sums = [sum(trial["phases"][name]["duration_ns"] or 0 for name in ONE_TIME_PHASES if name in trial["phases"]) / 1e9
                for trial in row.summary.counted if trial["status"] == "ok"]
        assert row.one_time_seconds == ((min(sums), max(sums)) if sums else (None, None))


def test_the_pages_say_each_runs_cuda_initialisation_and_what_is_counted(tmp_path, cli):
    runs = tmp_path / "runs"
    _write(runs, TIMED, run_id="run-new")
    _write(runs, None, run_id="run-old", seconds=(10.5, 11.5))
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    manifests = {m["run_id"]: m["record_id"] for m in reading.load(runs).of_kind("manifest")}
    folder = tmp_path / "site" / "campaigns" / "cuda"
    campaign = BeautifulSoup((folder / "index.html").read_text(encoding="utf-8"), "html.parser")
    new = campaign.find(id=f"initialisation-{manifests['run-new']}").get_text(" ", strip=True)
    assert new.startswith("CUDA initialisation (once per process): 2.5") and "counted once in the one-time seconds" in new
    old = campaign.find(id=f"initialisation-{manifests['run-old']}")
    assert old.find(class_="missing") is not None and "nothing is counted" in old.find(class_="missing")["data-missing"]
    trials = BeautifulSoup((folder / "trials.html").read_text(encoding="utf-8"), "html.parser")
    loaded = reading.load(runs).of_kind("trial")
    for trial in loaded:
        section = trials.find(id=f"{trial['record_id']}-phases")
        (note,) = section.select("p.initialisation")
        said = note.get_text(" ", strip=True)
        assert said.startswith("CUDA initialisation (once per process):")
        if trial["manifest_id"] == manifests["run-new"]:
            assert note.find(class_="missing") is None and "counted once" in said
        else:
            assert note.find(class_="missing") is not None and "nothing counted" in said
        # Not a row of the phase table: the trial's phases stay the phases it recorded.
        assert [row.th.get_text() for row in section.select("tbody tr")] == list(factory.PHASES)


def test_a_campaign_whose_manifests_predate_the_field_shows_no_initialisation(tmp_path, cli):
    runs = tmp_path / "runs"
    _write(runs, None)
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    folder = tmp_path / "site" / "campaigns" / "cuda"
    for page in ("index.html", "trials.html", "decision.html"):
        assert "CUDA initialisation" not in (folder / page).read_text(encoding="utf-8")
