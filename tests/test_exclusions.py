"""Exclusions (#19): a trial disturbed by a documented outside cause is set aside by a record, never deleted."""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest
from bs4 import BeautifulSoup

from iteralab.store import reading, records
from tests.test_decision import CPU, RTX_4090, write_machine

A1 = "b1 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"
A8 = "b8 · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"
CPU1 = "b1 · CPU Test CPU, 2 threads · torch 2.13.0"
RULE = "the provider's log shows thermal throttling during the trial"


@pytest.fixture
def machines(tmp_path):
    """Two machines' runs merged by copying; returns the runs folder and the trials per machine and variant."""
    target = tmp_path / "runs"
    written = {}
    for name, environment, durations in (("run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108], "b8": [30, 31, 32, 33, 34]}),
                                         ("run-cpu", CPU, {"b1": [500, 510, 520, 530, 540]})):
        written[name] = write_machine(tmp_path / name, name, environment, durations)[1]
        shutil.copytree(tmp_path / name, target, dirs_exist_ok=True)
    return target, written


def _decide(cli, runs) -> dict:
    code, out, _ = cli("decide", "merged", "--runs", runs, "--json")
    assert code == 0
    data = json.loads(out)
    return {"data": data, "rows": {row["label"]: row for row in data["ranked"] + data["infeasible"]}}


def test_an_excluded_trial_stays_and_counts_in_no_figure(machines, cli, tmp_path):
    runs, written = machines
    fastest = written["run-4090"]["b8"][0]  # the 30 s trial, the one a throttled neighbour would never explain away
    code, out, err = cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", fastest["record_id"],
                         "--document", "provider ticket 4711: GPU 0 throttled 09:10-09:25", "--runs", runs)
    assert code == 0 and err == "" and "1 trial excluded" in out
    found = _decide(cli, runs)
    a8 = found["rows"][A8]
    # Four left: 31, 32, 33, 34 s. Ten corpora on one lot: 10 × window + four one-time phases of 1 ms.
    assert a8["measured_window_s"] == [31, 32, 33, 34]
    assert (a8["median_s"], a8["min_s"], a8["max_s"]) == (32.5, 31, 34)
    assert a8["trials"] == {"ok": 4} and a8["excluded_trials"] == [fastest["record_id"]]
    assert a8["projected_hours"] == {"min": f"{(310 + 0.004) / 3600:.4f}", "median": f"{(325 + 0.004) / 3600:.4f}",
                                     "max": f"{(340 + 0.004) / 3600:.4f}"}
    (exclusion,) = found["data"]["exclusions"]
    assert exclusion["rule"] == RULE and exclusion["withdrawal"] is None and exclusion["unchecked"] == []
    # The rule is listed for every configuration, with the trials it set aside: none in two of them.
    assert {row["label"]: row["trials"] for row in exclusion["configurations"]} == {A1: [], A8: [fastest["record_id"]], CPU1: []}
    assert found["rows"][A1]["measured_window_s"] == [100, 102, 104, 106, 108]
    # The records keep every trial; the site's raw table too, marked.
    assert len(reading.load(runs).of_kind("trial")) == 15
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    campaign = tmp_path / "site" / "campaigns" / "merged"
    rows = (campaign / "trials.csv").read_text().split("\n")
    marked = [row for row in rows if fastest["record_id"] in row]
    assert len(rows) == 17 and marked and marked[0].endswith(f",{exclusion['record_id']},{RULE},,,")  # then retry_of, disturbed, disturbance: empty
    page = BeautifulSoup((campaign / "index.html").read_text(), "html.parser")
    table = page.select_one("#exclusions table")
    assert RULE in table.caption.get_text()
    cells = {tr.th.get_text(): [td.get_text(" ", strip=True) for td in tr.find_all("td")] for tr in table.tbody.find_all("tr")}
    assert cells == {A1: ["yes", "none"], A8: ["yes", fastest["record_id"]], CPU1: ["yes", "none"]}
    variant_row = page.find("tr", id=f"variant-{a8['configuration']}")
    assert "32.500 s" in variant_row.get_text() and "1 excluded" in variant_row.get_text()
    # The raw durations keep the excluded one, struck through and said in words, in run order.
    runs_cell = variant_row.select_one("td.runs")
    assert runs_cell.get_text(" ", strip=True) == "30.000 s (excluded) 31.000 s 32.000 s 33.000 s 34.000 s"
    assert [s.get_text() for s in runs_cell.find_all("s")] == ["30.000 s"]
    assert "separated" not in variant_row.get_text()
    decision_page = BeautifulSoup((campaign / "decision.html").read_text(), "html.parser")
    assert RULE in decision_page.select_one("#exclusions").get_text()
    trials_page = BeautifulSoup((campaign / "trials.html").read_text(), "html.parser")
    assert f"Excluded by {exclusion['record_id']}" in trials_page.find(id=fastest["record_id"]).get_text()


def test_too_few_trials_left_cannot_be_compared_and_says_exclusions_caused_it(machines, cli):
    runs, written = machines
    slow = [t["record_id"] for t in written["run-4090"]["b1"][1:]]  # 102 to 108 s; 100 s is left alone
    args = [arg for trial_id in slow for arg in ("--trial", trial_id)]
    assert cli("exclude", "--campaign", "merged", "--rule", "the host was swapping (vmstat log)", *args,
               "--document", "vmstat shows swap-in during each of these trials", "--runs", runs)[0] == 0
    a1 = _decide(cli, runs)["rows"][A1]
    assert a1["feasible"] is False and a1["measured_window_s"] == [100]
    assert a1["conditions_failed"] == ["comparison: cannot be compared, 1 successful trial left after 4 excluded"]
    from iteralab.store.views import campaign_views

    (view,) = campaign_views(reading.load(runs))
    statement = next(s for s in view.separation() if set(s["pair"]) == {A1, A8})
    assert statement["separated"] is None
    assert statement["text"] == (f"{A1} and {A8}: cannot be compared, fewer than two successful trials for at least one of "
                                 f"them. Exclusions caused it: {A1} has 1 left, 4 excluded.")


def test_a_withdrawn_exclusion_counts_its_trials_again_and_stays_listed(machines, cli):
    runs, written = machines
    fastest = written["run-4090"]["b8"][0]["record_id"]
    _, out, _ = cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", fastest, "--document", "ticket 4711",
                    "--runs", runs, "--json")
    exclusion_id = json.loads(out)["record_id"]
    code, out, _ = cli("withdraw", "--campaign", "merged", "--exclusion", exclusion_id, "--reason", "the ticket was for another host",
                       "--runs", runs)
    assert code == 0 and "its trials count again" in out
    found = _decide(cli, runs)
    assert found["rows"][A8]["measured_window_s"] == [30, 31, 32, 33, 34] and found["rows"][A8]["excluded_trials"] == []
    (entry,) = found["data"]["exclusions"]
    assert entry["withdrawal"]["reason"] == "the ticket was for another host"
    assert {row["label"]: row["trials"] for row in entry["configurations"]}[A8] == [fastest]  # what it named, still shown
    code, _, err = cli("withdraw", "--campaign", "merged", "--exclusion", exclusion_id, "--reason", "again", "--runs", runs)
    assert code == 1 and "was already withdrawn by withdrawal-" in err


def test_configurations_not_checked_against_the_rule_are_named(machines, cli, tmp_path):
    runs, written = machines
    fastest = written["run-4090"]["b8"][0]["record_id"]
    assert cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", fastest, "--document", "ticket 4711",
               "--checked", A8, "--runs", runs)[0] == 0
    (entry,) = _decide(cli, runs)["data"]["exclusions"]
    assert entry["unchecked"] == [A1, CPU1]
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "merged" / "index.html").read_text(), "html.parser")
    warning = page.select_one("#exclusions p.warning").get_text()
    assert warning.startswith(f"Not checked against this rule: {A1}; {CPU1}.")


def test_a_document_file_is_kept_with_its_hash_and_travels_in_the_bundle(machines, cli, tmp_path):
    runs, written = machines
    log = tmp_path / "throttle.log"
    log.write_bytes(b"09:10 GPU0 thermal slowdown\n")
    trial_id = written["run-4090"]["b1"][2]["record_id"]
    _, out, _ = cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", trial_id, "--document", log, "--runs", runs,
                    "--json")
    document = json.loads(out)["document"]
    assert (runs / document["path"]).read_bytes() == log.read_bytes() and document["original_name"] == "throttle.log"
    assert cli("bundle", "merged", "--runs", runs, "-o", tmp_path / "e.zip")[0] == 0
    with zipfile.ZipFile(tmp_path / "e.zip") as bundle:
        names = bundle.namelist()
        assert f"merged-evidence/data/documents/{document['sha256'][:16]}/throttle.log" in names
        verdicts = json.loads(bundle.read("merged-evidence/data/verdicts.json"))
    assert verdicts[trial_id]["excluded_by"] == json.loads(out)["record_id"]


@pytest.mark.parametrize(("args", "message"), [
    (("--trial", "trial-nope"), "--trial trial-nope is not a trial of campaign merged"),
    (("--trial", "{b8}", "--document", "logs/throttle.txt"), "--document logs/throttle.txt: no such file"),
    (("--trial", "{b8}", "--checked", "b8 on a TPU"), "--checked 'b8 on a TPU' is not a configuration of campaign merged"),
    (("--trial", "{b8}", "--rule", "   "), "--rule is empty: state it so that anyone can apply it"),
])
def test_a_wrong_exclusion_is_refused_and_nothing_is_written(machines, cli, args, message):
    runs, written = machines
    before = {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()}
    args = [arg.format(b8=written["run-4090"]["b8"][0]["record_id"]) for arg in args]
    defaults = {"--rule": RULE, "--document": "ticket 4711"}
    for option, value in defaults.items():
        if option not in args:
            args += [option, value]
    code, out, err = cli("exclude", "--campaign", "merged", *args, "--runs", runs)
    assert code == 1 and out == "" and message in err and err.count("\n") == 1
    assert {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()} == before


def test_an_exclusion_twice_and_unknown_references_are_named(machines, cli):
    runs, written = machines
    trial_id = written["run-4090"]["b8"][0]["record_id"]
    assert cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", trial_id, "--document", "t", "--runs", runs)[0] == 0
    code, _, err = cli("exclude", "--campaign", "merged", "--rule", "another", "--trial", trial_id, "--document", "t", "--runs", runs)
    assert code == 1 and f"trial {trial_id} is already excluded by exclusion-" in err
    # Hand-written records naming nothing that exists: check names them; the figures ignore them.
    stray = records.make_record("exclusion", campaign="merged", run_id="run-hand", rule="r", trials=["trial-gone"],
                                document={"text": "t"}, checked_configurations=[])
    undo = records.make_record("withdrawal", campaign="merged", run_id="run-hand", exclusion_id="exclusion-gone", reason="r")
    records.append(runs, stray)
    records.append(runs, undo)
    problems = reading.load(runs).problems
    assert problems == [
        f"merged/records/run-hand.jsonl:1: exclusion {stray['record_id']} names trial trial-gone, which is not a trial of "
        "campaign merged; it excludes nothing there",
        f"merged/records/run-hand.jsonl:2: withdrawal {undo['record_id']} names exclusion exclusion-gone, which is not an "
        "exclusion of campaign merged"]
    assert cli("check", runs)[0] == 1


def test_an_exclusion_copied_into_two_folders_counts_once(machines, cli, tmp_path):
    runs, written = machines
    trial_id = written["run-4090"]["b8"][0]["record_id"]
    assert cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", trial_id, "--document", "t", "--runs", runs)[0] == 0
    for exclusion_file in runs.glob("merged/records/run-exclusion-*.jsonl"):
        shutil.copy(exclusion_file, exclusion_file.with_name("run-copied-" + exclusion_file.name.removeprefix("run-")))
    loaded = reading.load(runs)
    assert loaded.problems == [] and len(loaded.of_kind("exclusion")) == 1
    assert _decide(cli, runs)["rows"][A8]["measured_window_s"] == [31, 32, 33, 34]


def test_exclusion_records_are_validated():
    good = records.make_record("exclusion", campaign="camp", run_id="run-x", rule="r", trials=["trial-1"],
                               document={"text": "t"}, checked_configurations=["k"])
    assert records.validate(good) == []
    assert records.validate({**good, "trials": []}) == ["trials: [] should be non-empty"]
    assert records.validate({**good, "document": {"text": "t", "path": "camp/documents/x"}})[0].startswith("document: ")
    assert records.validate({**good, "document": {"path": "../etc/passwd", "sha256": "a" * 64, "size_bytes": 1,
                                                  "original_name": "p"}}) == [
        "document.path: '../etc/passwd' must be a path relative to the runs folder, without '..'"]


def test_a_rebuild_renders_the_campaign_again_after_an_exclusion_a_withdrawal_or_an_expense(machines, cli, tmp_path):
    """Regression for #19: the build's campaign key missed the new kinds, so an exclusion alone left the pages stale."""
    runs, written = machines
    site = tmp_path / "site"
    assert cli("build", "--runs", runs, "--out", site)[0] == 0
    trial_id = written["run-4090"]["b8"][0]["record_id"]
    _, out, _ = cli("exclude", "--campaign", "merged", "--rule", RULE, "--trial", trial_id, "--document", "t", "--runs", runs, "--json")
    steps = [("withdraw", "--campaign", "merged", "--exclusion", json.loads(out)["record_id"], "--reason", "r"),
             ("expense", "add", "--campaign", "merged", "--amount", "1", "--currency", "USD", "--justification", "j",
              "--all-configurations")]
    for step in [None, *steps]:
        if step:
            assert cli(*step, "--runs", runs)[0] == 0
        code, out, _ = cli("build", "--runs", runs, "--out", site, "--json")
        assert code == 0 and json.loads(out)["rendered"] == ["merged"], step
    page = (site / "campaigns" / "merged" / "index.html").read_text()
    assert "Withdrawn" in page and 'id="expenses"' in page
