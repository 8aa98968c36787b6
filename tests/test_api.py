"""The public Python API (#50): a runs folder read as check, build and decide read it, as pandas tables that count the
same trials as the site, the decision report that ``decide --json`` prints, the site's charts, and the runner's phase clock.
"""

from __future__ import annotations

import csv
import inspect
import json
import shutil
import subprocess
import sys
from decimal import Decimal
from functools import cached_property

import pytest
from bs4 import BeautifulSoup

import iteralab
from iteralab.api import Runs
from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory
from tests.conftest import ROOT
from tests.test_cache import FIXTURE
from tests.test_generation_pages import write_gpu_campaign

DEMO = "demo-rotten-tomatoes"
GENERATION = "gen-gpu"

# The public names and their signatures: a test fails when one disappears or changes (a notebook written against them
# would break). Change this table only with the README's "From Python and Jupyter" section.
SIGNATURES = {
    "open_runs": "(path: 'Path | str', *, catalog: 'Path | str | None' = None) -> 'Runs'",
    "Runs": "(path: 'Path | str', *, catalog: 'Path | str | None' = None)",
    "Runs.decide": "(self, campaign: 'str', *, lang: 'str' = 'en') -> 'dict'",
    "Runs.chart": "(self, campaign: 'str', name: 'str', *, lang: 'str' = 'en')",
    "PhaseClock": "(device: 'str', phases: 'dict' = <factory>, current: 'str | None' = None, host_scope: 'str' = 'peak "
                  "resident set size of the runner process during the phase (VmHWM, reset at phase start)') -> None",
    "PhaseClock.phase": "(self, name: 'str')",
}
TABLES = ("problems", "trials", "campaigns", "manifests", "rentals")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The demo's real records, a classification campaign with a failed trial and a rental, and a generation campaign."""
    folder = tmp_path_factory.mktemp("api") / "runs"
    shutil.copytree(FIXTURE, folder)
    manifest = factory.manifest()
    records.append(folder, manifest)
    for repetition, seconds in enumerate((1.0, 1.2, 0.9), start=1):
        records.append(folder, factory.with_prediction_file(folder, factory.trial(manifest, "b1", seconds=seconds,
                                                                                  repetition=repetition, sequence=repetition)))
    records.append(folder, factory.trial(manifest, "b8", status="oom", repetition=1, sequence=9, failed_phase="measured_window",
                                         entries_completed=48, error="OutOfMemoryError: CUDA out of memory", batch_size=8))
    records.append(folder, factory.rental(total="220.00", lots=2, price="110.00"))
    write_gpu_campaign(folder)
    return folder


@pytest.fixture(scope="module")
def site(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("api-site") / "site"
    build_site(runs=runs, out=out)
    return out


@pytest.fixture(scope="module")
def opened(runs):
    return iteralab.open_runs(runs)


def test_import_iteralab_imports_neither_torch_pandas_nor_altair_until_a_call_needs_them():
    """Each stage in a fresh interpreter: the import, the phase clock made, the runs opened, a chart, a phase timed."""
    script = f"""
import json, sys
heavy = lambda: sorted(name for name in ("torch", "pandas", "altair") if name in sys.modules)
seen = {{}}
import iteralab
seen["import"] = heavy()
clock = iteralab.PhaseClock("cpu")
seen["clock"] = heavy()
runs = iteralab.open_runs({str(FIXTURE)!r})
seen["open_runs"] = heavy()
runs.chart({DEMO!r}, "durations")
seen["chart"] = heavy()
with clock.phase("forward"):
    sum(range(1000))
seen["phase"] = heavy()
print(json.dumps(seen))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["import"] == [] and seen["clock"] == []
    # Reading the records reads them through the record store's pandas table: pandas, still neither altair nor torch.
    assert seen["open_runs"] == ["pandas"]
    assert seen["chart"] == ["altair", "pandas"]
    assert seen["phase"] == ["altair", "pandas", "torch"]


def test_every_public_name_is_there_with_its_signature():
    assert sorted(iteralab.__all__) == ["PhaseClock", "Runs", "open_runs"]
    found = {}
    for name in SIGNATURES:
        owner, _, member = name.partition(".")
        target = getattr(iteralab, owner)
        found[name] = str(inspect.signature(getattr(target, member) if member else target))
    assert found == SIGNATURES
    for table in TABLES:
        assert isinstance(inspect.getattr_static(Runs, table), cached_property), table
    assert set(iteralab.__all__) <= set(dir(iteralab))
    with pytest.raises(AttributeError, match="no attribute 'open_run'"):
        iteralab.open_run  # noqa: B018


def test_the_trials_table_has_a_row_for_each_trial_on_the_sites_trials_pages(opened, site):
    shown = {}
    for page in sorted((site / "campaigns").glob("*/trials.html")):
        index = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").select("ol.trial-index > li")
        shown[page.parent.name] = [item.a.get_text() for item in index]
    assert set(shown) == {DEMO, "camp", GENERATION}
    trials = opened.trials
    assert len(trials) == sum(len(ids) for ids in shown.values()) == 20 + 4 + 6
    for campaign, ids in shown.items():
        assert trials.loc[trials["campaign"] == campaign, "record_id"].tolist() == ids  # the same trials, in run order


def test_the_trials_table_has_trials_csvs_columns_typed_and_what_counts(opened, site):
    trials = opened.trials
    with open(site / "campaigns" / DEMO / "trials.csv", encoding="utf-8", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert set(written[0]) <= set(trials.columns)
    assert {"campaign", "kind_of_work", "accepted", "excluded", "counted", "reference", "variant_batch_size"} <= set(trials.columns)
    assert str(trials["measured_window_s"].dtype) == "float64" and str(trials["warmup_s"].dtype) == "float64"
    assert str(trials["prefill_s"].dtype) == "float64"  # a generation campaign's own phase
    assert str(trials["repetition"].dtype) == "Int64" and str(trials["variant_batch_size"].dtype) == "Int64"
    assert {str(trials[flag].dtype) for flag in ("accepted", "excluded", "counted", "reference")} == {"boolean"}
    by_id = trials.set_index("record_id")
    failed = by_id[by_id["status"] == "oom"].iloc[0]
    # A phase the failed trial never reached is missing, never 0; the trial is not counted.
    assert pd_isna(failed["evaluation_s"]) and failed["failed_phase"] == "measured_window" and not failed["counted"]
    excluded = by_id[by_id["excluded"]]
    assert excluded.index.tolist() == ["trial-20261203T062426Z-350bf11cbb48"]  # the demo's exclusion
    assert not excluded["counted"].any() and excluded["exclusion_rule"].notna().all()
    assert trials.groupby("campaign")["kind_of_work"].first().to_dict() == {DEMO: "classify", "camp": "classify",
                                                                          GENERATION: "generate"}
    demo = trials[trials["campaign"] == DEMO]
    assert demo["counted"].sum() == 19 and demo.loc[demo["reference"], "variant"].unique().tolist() == ["fp32-b1"]
    # The durations the site's CSV writes as text, as float seconds.
    assert demo["measured_window_s"].tolist() == [float(row["measured_window_s"]) for row in written]
    assert demo["record_id"].tolist() == [row["record_id"] for row in written]


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_money_is_decimal_never_a_float(opened):
    rentals = opened.rentals
    assert sorted(rentals["total"].tolist()) == [Decimal("47.14"), Decimal("220.00")]
    assert all(isinstance(value, Decimal) for value in (*rentals["total"], *rentals["price_per_lot"]))
    for name in TABLES[1:]:
        frame = getattr(opened, name)
        for column in frame.columns:
            if any(word in column for word in ("price", "total", "spend", "cost", "money")) and column != "total_parameters":
                assert frame[column].dtype == object and all(isinstance(v, Decimal) for v in frame[column].dropna()), column


def test_campaigns_and_manifests_have_a_row_per_item(opened, runs):
    campaigns = opened.campaigns.set_index("campaign")
    assert campaigns.loc[DEMO, ["trials", "counted_trials", "excluded_trials", "rentals"]].tolist() == [20, 19, 1, 1]
    assert campaigns.loc["camp", ["ok_trials", "failed_trials"]].tolist() == [3, 1]
    manifests = opened.manifests
    assert sorted(manifests["campaign"]) == sorted([DEMO, "camp", GENERATION])
    assert manifests.set_index("campaign").loc[GENERATION, "gpu_names"] == "NVIDIA GeForce RTX 4090"


@pytest.mark.parametrize("campaign", [DEMO, "camp", GENERATION])
@pytest.mark.parametrize("lang", ["en", "id"])
def test_decide_gives_what_decide_json_prints_field_by_field(opened, runs, cli, campaign, lang):
    code, out, err = cli("decide", campaign, "--runs", runs, "--json", "--lang", lang)
    assert code in (0, None), err
    printed = json.loads(out)
    given = opened.decide(campaign, lang=lang)
    assert sorted(given) == sorted(printed)
    for field in printed:
        assert given[field] == printed[field], field


def test_an_odd_record_is_a_listed_problem_never_an_exception(runs, tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    records_file = next((copy / DEMO / "records").glob("run-vm-*.jsonl"))
    with open(records_file, "a", encoding="utf-8") as handle:
        handle.write('{"kind": "trial", "campaign": "demo-rot')  # a write cut off
    broken = iteralab.open_runs(copy)
    assert any("incomplete last line" in problem and records_file.name in problem for problem in broken.problems)
    assert len(broken.trials) == len(iteralab.open_runs(runs).trials)
    assert iteralab.open_runs(runs).problems == [p for p in broken.problems if "incomplete last line" not in p]


def test_a_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match="is not a folder"):
        iteralab.open_runs(tmp_path / "nowhere")


def test_chart_is_the_sites_chart_and_a_wrong_name_lists_the_valid_ones(opened, site):
    page = BeautifulSoup((site / "campaigns" / DEMO / "index.html").read_text(encoding="utf-8"), "html.parser")
    drawn = json.loads(page.select_one("script#spec-durations").string)
    chart = opened.chart(DEMO, "durations")
    assert type(chart).__module__.startswith("altair")
    spec = chart.to_dict(validate=False)
    assert spec["datasets"] == drawn["datasets"] and spec["layer"] == drawn["layer"]
    decision = BeautifulSoup((site / "campaigns" / DEMO / "decision.html").read_text(encoding="utf-8"), "html.parser")
    hours = json.loads(decision.select_one("script#spec-projected-hours").string)
    assert opened.chart(DEMO, "projected-hours").to_dict(validate=False)["datasets"] == hours["datasets"]
    with pytest.raises(Exception, match="durations, memory, quality, projected-hours"):
        opened.chart(DEMO, "throughput")


def test_the_phase_clock_times_any_code_as_the_runner_records_a_phase():
    clock = iteralab.PhaseClock("cpu")
    with clock.phase("forward"):
        sum(range(10_000))
    with pytest.raises(ZeroDivisionError), clock.phase("backward"):
        1 / 0  # noqa: B018
    forward, backward = clock.phases["forward"], clock.phases["backward"]
    assert forward["completed"] and forward["duration_ns"] > 0 and forward["host_peak_rss_bytes"] > 0
    assert "gpu_peak_allocated_bytes" not in forward  # no GPU: no GPU counter, never a 0
    assert not backward["completed"] and clock.current == "backward"
