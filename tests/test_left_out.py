"""Each reason a trial does not count is said by its name (#60): excluded by a rule, disturbed, failed or interrupted.

A campaign measured on a busy machine, every trial marked disturbed, was told as something else: "quality: no successful
trial left (5 excluded)" in decide and on the decision page, "(excluded)" beside each duration, "Exclusions caused it" on
the campaign page, `excluded_trials 0` in the Python API, "Measure next on RTX 4090" as the answer, a run summary that
said nothing of it and took its medians over windows the decision sets aside, and "interrupted" after a rerun of
disturbed repetitions. Then the Python API and the notebook on a user's own records: the documented example that pooled
campaigns, one configuration key for two kinds of work, and a chart that raised on a folder with nothing counted.
"""

from __future__ import annotations

import json
import shutil
import statistics

import pytest
from bs4 import BeautifulSoup

import iteralab
from iteralab.core import language
from iteralab.run.summary import _retried, format_summary, summarize
from iteralab.site.build import build_site
from iteralab.store import names, reading, records
from iteralab.store.views import campaign_views
from tests import factory
from tests.conftest import ROOT
from tests.test_cache import FIXTURE
from tests.test_disturbed_records import interference, write
from tests.test_generation_pages import generation_manifest, generation_trial

DURATIONS = {"b1": [1.0, 1.02, 4.6, 1.01], "b8": [0.5, 0.51, 0.5, 0.52]}
EVERY = {(variant, repetition) for variant, seconds in DURATIONS.items() for repetition in range(1, len(seconds) + 1)}
# The words each language gives the two reasons that were confused.
WORDS = {"en": ("disturbed", "excluded"), "id": ("terganggu", "dikecualikan")}
DEMO = "demo-rotten-tomatoes"


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """A campaign measured on a busy machine: every trial of both configurations marked disturbed."""
    folder = tmp_path_factory.mktemp("busy") / "runs"
    write(folder, DURATIONS, disturbed=EVERY)
    return folder


@pytest.fixture(scope="module")
def busy_site(busy, tmp_path_factory):
    out = tmp_path_factory.mktemp("busy-site") / "site"
    build_site(runs=busy, out=out, quiet=True, languages=("en", "id"))
    return out


def _text(path) -> str:
    """A page's words, without its records' JSON (a record holds the key "disturbed" whatever the page says)."""
    page = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    for shown in page.select("pre, script"):
        shown.decompose()
    return page.get_text(" ", strip=True)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_decide_says_disturbed_first_and_the_command_that_measures_again(busy, cli, lang):
    said, wrong = WORDS[lang]
    code, out, err = cli("decide", "camp", "--runs", busy, "--lang", lang)
    assert code == 0, err
    answer = out.split("\n")[2]
    assert said in answer and "iteralab run CAMPAIGN_FILE --resume --rerun-disturbed" in answer
    assert "RTX 4090" not in answer.split(". ")[0] and "Measure next" not in out
    infeasible = [line for line in out.splitlines() if line.startswith(("  - b1", "  - b8")) and f": {said}: " in line]
    assert wrong not in out and len(infeasible) == 2 and all(f"4 {said}" in line for line in infeasible)
    data = json.loads(cli("decide", "camp", "--runs", busy, "--json", "--lang", lang)[1])
    for row in data["infeasible"]:
        assert row["excluded_trials"] == [] and len(row["disturbed_trials"]) == 4
        assert row["conditions_failed"] == ["disturbed: no successful trial left to count (4 disturbed)"]
    assert said in data.get("answer_said", data["answer"]) and "disturbed" in data["summary"]


@pytest.mark.parametrize(("lang", "folder"), [("en", ""), ("id", "id")])
def test_the_decision_campaign_and_trials_pages_say_disturbed_never_excluded(busy_site, lang, folder):
    said, wrong = WORDS[lang]
    pages = busy_site / folder / "campaigns" / "camp"
    for name in ("decision.html", "index.html", "trials.html"):
        text = _text(pages / name)
        assert said in text and wrong not in text and "Exclusion" not in text, (lang, name)
    decision = BeautifulSoup((pages / "decision.html").read_text(encoding="utf-8"), "html.parser")
    assert "--rerun-disturbed" in decision.select_one("#answer").get_text()
    for reasons in decision.select("ul.reasons"):
        assert said in reasons.get_text()
    campaign = BeautifulSoup((pages / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert _text(pages / "index.html").count(f"({said})") == 8  # beside each struck-out duration, as its reason
    (pair,) = [li.get_text(" ", strip=True) for li in campaign.select("#separation li")]  # what left b1 and b8 too few
    assert said in pair.split(". ", 1)[1] and "--rerun-disturbed" in pair and wrong not in pair


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_run_summary_counts_as_the_decision_does_and_says_what_it_left_out(busy, lang):
    said, wrong = WORDS[lang]
    trials = [record for record in reading.load(busy).records if record["kind"] == "trial"]
    rows = summarize(trials)
    assert [(row["counted"], row["left_out"], row["median_s"]) for row in rows] == [(0, {"disturbed": 4}, None)] * 2
    with language.speaking(lang):
        shown = format_summary(rows)
    assert shown.count(said) >= 2 and wrong not in shown and "--rerun-disturbed" in shown
    assert "(no trial counted)" in shown


def test_the_run_summary_median_is_the_decisions_median_over_counted_trials(tmp_path, cli):
    """The run summary's median for b1 mixed all its windows, the disturbed one the decision sets aside too."""
    trials = write(tmp_path, DURATIONS, disturbed={("b1", 3)})
    rows = {row["variant"]: row for row in summarize(list(trials.values()))}
    decided = {row["variant"]: row for row in json.loads(cli("decide", "camp", "--runs", tmp_path, "--json")[1])["ranked"]}
    assert rows["b1"]["median_s"] == decided["b1"]["median_s"] == statistics.median([1.0, 1.02, 1.01])
    assert rows["b1"]["durations_s"] == [1.0, 1.02, 1.01] and rows["b1"]["left_out"] == {"disturbed": 1}
    assert rows["b8"]["median_s"] == decided["b8"]["median_s"] and rows["b8"]["left_out"] == {}
    line = format_summary(list(rows.values())).split("\n")[2]
    assert line.strip().startswith("left out of every figure: 1 disturbed.") and "4.600" in line
    # The protocol may use disturbed trials: then the summary counts them, as the decision does.
    used = summarize(list(trials.values()), {"disturbance": {"use_disturbed": True}})
    assert used[0]["counted"] == 4 and used[0]["left_out"] == {}
    # Without the protocol (the demo's summary), the rule each trial recorded says so.
    busy = trials[("b1", 3)]
    recorded = {**busy, "interference": {**busy["interference"], "rule": {**busy["interference"]["rule"], "use_disturbed": True}}}
    assert summarize([recorded])[0]["counted"] == 1 and summarize([busy])[0]["counted"] == 0


def test_the_python_api_counts_disturbed_trials_apart_from_excluded_ones(busy):
    runs = iteralab.open_runs(busy)
    row = runs.campaigns.set_index("campaign").loc["camp"]
    assert (row["excluded_trials"], row["disturbed_trials"], row["counted_trials"]) == (0, 8, 0)
    assert runs.trials["left_out"].tolist() == ["disturbed"] * 8 and not runs.trials["excluded"].any()
    assert "terganggu" in runs.decide("camp", lang="id")["answer_said"]
    # A chart with nothing to draw says why, in the language asked for, instead of raising.
    for lang, said in (("en", "8 disturbed"), ("id", "8 terganggu")):
        for name in ("durations", "projected-hours"):
            (why,) = runs.chart("camp", name, lang=lang).to_dict()["data"]["values"]
            assert said in why["why"], (lang, name)
    with pytest.raises(Exception, match="durations, memory, phase-memory, quality, planned-spend, projected-hours"):
        runs.chart("camp", "throughput")


def test_a_rerun_of_disturbed_repetitions_says_disturbed_and_a_failed_window_failed(tmp_path, cli):
    """After --resume --rerun-disturbed, run and trials said "an interrupted repetition run again"; trials said "window
    interrupted" of a trial that raised."""
    runs = tmp_path / "runs"
    manifest = factory.manifest("camp", "run-1")
    records.append(runs, manifest)
    disturbed = factory.trial(manifest, "b1", seconds=4.6, sequence=1)
    disturbed["interference"] = interference(True)
    stopped = factory.trial(manifest, "b1", status="interrupted", repetition=2, sequence=2, failed_phase="measured_window")
    raised = factory.trial(manifest, "b1", seconds=0.4, status="error", repetition=3, sequence=3, failed_phase="measured_window",
                           error="RuntimeError: boom")
    raised["phases"]["measured_window"]["completed"] = False
    again = factory.trial(manifest, "b1", seconds=1.0, sequence=1)
    again["retry_of"] = disturbed["record_id"]
    retried = factory.trial(manifest, "b1", seconds=1.1, repetition=2, sequence=2)
    retried["retry_of"] = stopped["record_id"]
    for record in (disturbed, stopped, raised, again, retried):
        records.append(runs, record)
    _, text, _ = cli("trials", "camp", "--runs", runs)
    lines = {line.split()[0]: line for line in text.splitlines()}
    assert f"runs again disturbed {disturbed['record_id']}" in lines[again["record_id"]]
    assert f"runs again interrupted {stopped['record_id']}" in lines[retried["record_id"]]
    assert lines[raised["record_id"]].endswith("window failed after 0.400 s (part of the corpus)")
    rows = {row["trial_id"]: row for row in json.loads(cli("trials", "camp", "--runs", runs, "--json")[1])["trials"]}
    assert [rows[t["record_id"]]["left_out"] for t in (disturbed, stopped, raised, again)] == [
        "disturbed", "interrupted", "failed", None]
    assert (rows[again["record_id"]]["retry_of_was"], rows[retried["record_id"]]["retry_of_was"]) == ("disturbed", "interrupted")
    said = _retried([disturbed["record_id"], stopped["record_id"]], [disturbed, stopped, raised])
    assert f"1 of them a disturbed repetition run again (replacing {disturbed['record_id']})" in said
    assert f"1 of them a interrupted repetition run again (replacing {stopped['record_id']})" not in said
    assert f"1 of them an interrupted repetition run again (replacing {stopped['record_id']})" in said
    build_site(runs=runs, out=tmp_path / "site", quiet=True)
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "camp" / "trials.html").read_text(encoding="utf-8"), "html.parser")
    index = {li.a.get_text(): li.get_text(" ", strip=True) for li in page.select("ol.trial-index li")}
    assert "runs a disturbed repetition again" in index[again["record_id"]]
    assert "runs an interrupted repetition again" in index[retried["record_id"]]
    retry = page.find(id=f"{again['record_id']}-retry").get_text(" ", strip=True)
    assert "was measured as disturbed" in retry and "interrupted" not in retry


def _with_generation(tmp_path):
    """The demo's records and a generation campaign that ran the demo's fp32-b8 on the same machine and software."""
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    loaded = reading.load(runs)
    demo = next(r for r in loaded.records if r["kind"] == "manifest")
    config = next(r for r in loaded.records if r["kind"] == "trial" and r["variant"] == "fp32-b8")["variant_config"]
    manifest = generation_manifest("demo-generate", "run-generate", environment=demo["environment"])
    records.append(runs, manifest)
    for repetition, seconds in enumerate((0.14, 0.15, 0.16), start=1):
        trial = generation_trial(manifest, "fp32-b8", seconds=seconds, repetition=repetition, sequence=repetition)
        trial["variant_config"] = dict(config)
        records.append(runs, trial)
    return runs


def test_the_documented_example_gives_the_decisions_medians_and_keys_differ_by_kind(tmp_path):
    """docs/python.md's example grouped by configuration alone: the demo's fp32-b8 pooled two campaigns' trials."""
    runs = iteralab.open_runs(_with_generation(tmp_path))
    documented = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    example = 't[t.counted].groupby(["campaign", "configuration"])["measured_window_s"].median()'
    assert example in documented
    t = runs.trials
    medians = eval(example, {"t": t}).to_dict()  # the documented line itself, run as written
    decided = {(campaign, row["label"]): row["median_s"] for campaign in runs.names
               for row in (lambda d: d["ranked"] + d["infeasible"])(runs.decide(campaign))}
    assert medians.keys() == decided.keys() and {campaign for campaign, _ in decided} == {DEMO, "demo-generate"}
    assert all(medians[key] == pytest.approx(decided[key], abs=1e-6) for key in decided)  # trials.csv: 6 decimals
    label = next(label for campaign, label in decided if campaign == "demo-generate")
    pooled = t[t.counted].groupby("configuration")["measured_window_s"].median()[label]
    assert pooled != pytest.approx(decided[(DEMO, label)]), "the campaigns share the label: grouping by it alone pools them"
    # One configuration key per kind of work: the generation campaign's names its kind.
    keys = t[t["configuration"] == label].groupby("campaign")["configuration_key"].first().to_dict()
    assert keys[DEMO] == "fp32-b8-cpu-86f6ac95" and keys["demo-generate"].startswith("generate-fp32-b8-cpu-")
    assert keys[DEMO] != keys["demo-generate"]


def test_a_key_written_before_keys_named_the_kind_still_finds_its_configuration(tmp_path, cli):
    runs = _with_generation(tmp_path)
    view = next(view for view in campaign_views(reading.load(runs)) if view.name == "demo-generate")
    (summary,) = view.variants
    old = summary.configuration.aliases[0]
    assert old == "fp32-b8-cpu-86f6ac95" and names.by_name(view.variants)[old] is summary
    # An expense recorded with the old key still applies to it; a qualification sheet naming it is told the new key.
    records.append(runs, records.make_record(
        "expense", campaign="demo-generate", run_id=records.new_id("run-expense"), amount="10.00", currency="USD",
        justification="an engineer's day", applies_to=[old], configuration_labels=[summary.label], incurred_on="2026-12-01",
        receipt=None))
    data = json.loads(cli("decide", "demo-generate", "--runs", runs, "--json")[1])
    (row,) = data["ranked"] + data["infeasible"]
    assert row["configuration"] == summary.key and row["other_costs"]["total"] == "10.00"
    assert not any("names configuration" in problem for problem in data["problems"])
    sheets = tmp_path / "qualification"
    sheets.mkdir()
    (sheets / "sheet.toml").write_text(f'campaign = "demo-generate"\nconfiguration = "{old}"\n', encoding="utf-8")
    _, out, err = cli("check", runs)
    assert f"configuration '{old}' is the key it had before a configuration's key named its kind of work" in out + err


def test_the_python_section_documents_names_the_languages_and_every_chart():
    documented = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    assert "runs.names" in documented and "answer_said" in documented and '`answer` stays English' in documented
    doc = iteralab.Runs.chart.__doc__
    for name in ("durations", "memory", "phase-memory", "quality", "planned-spend", "projected-hours"):
        assert f"``{name}``" in doc and f"`{name}`" in documented, name


@pytest.mark.slow
def test_the_notebook_runs_on_a_runs_folder_whose_trials_are_all_disturbed(busy, tmp_path, monkeypatch):
    """nbconvert --execute exited 1 on such a folder: chart raised "campaign feedback has no chart 'durations'"."""
    from tests.test_notebook import _execute, _read
    from tests.test_notebook import _text as shown

    notebook = _read()
    notebook.cells = [cell for cell in notebook.cells if cell.id in {"setup", "records-md", "open", "ranking", "chart"}]
    shutil.copytree(busy, tmp_path / "runs")
    cells = {cell.id: cell for cell in _execute(notebook, tmp_path, monkeypatch).cells if cell.cell_type == "code"}
    assert all(output.get("output_type") != "error" for cell in cells.values() for output in cell.outputs)
    assert "disturbed" in shown(cells["ranking"]) and "Not feasible: b1" in shown(cells["ranking"])
    assert "8 disturbed" in json.dumps(cells["chart"].outputs[0]["data"])
