"""Every reader agrees on a records line a kill tore and run --resume closed and named (#62), as check says it: no problem,
a torn write a resume saw. decide, the site's pages and the API problem list called it "not valid JSON" for ever, because
only check set it apart; the store sets it apart now, for all of them. A line whose bytes are not the ones the resumption
named stays a problem everywhere. And trials.csv of a campaign whose trials were all interrupted has its kind's columns,
the kind being the manifest's (#61).
"""

from __future__ import annotations

import hashlib
import json

import pytest

import iteralab
from iteralab.store import reading, records
from iteralab.store.trials import ADAPTATION_COLUMNS, GENERATION_COLUMNS, trial_table, trials_csv
from iteralab.store.views import campaign_views
from tests import factory, test_leftovers
from tests.test_generation_pages import generation_manifest
from tests.test_leftovers import copy_of

killed = test_leftovers.killed  # the killed classify campaign, a module fixture shared with the leftovers tests

SAID = "a write cut off when its process ended ({bytes} bytes, no record), closed and named by run --resume in resumption {id}"


def torn_and_resumed(killed, tmp_path, cli):
    """Copy KILLED, leave its records file a torn last line as a kill does, resume the run; return the runs folder, the
    records file, the torn line's place (file:line) and the resumption record."""
    campaign, runs = copy_of(killed, tmp_path)
    (path,) = (runs / "tiny" / "records").glob("*.jsonl")
    (start,) = reading.load(runs).of_kind("start")
    whole = path.read_bytes()
    number = whole.count(b"\n") + 1  # the torn line's
    fragment = json.dumps({"campaign": "tiny", "kind": "trial", "record_id": start["trial_id"]})[:57].encode()
    path.write_bytes(whole + fragment)
    code, _, err = cli("run", campaign, "--runs", runs, "--quiet", "--resume")
    assert code == 0, err
    (resumed,) = reading.load(runs).of_kind("resumption")
    assert resumed["torn"] == [{"file": f"tiny/records/{path.name}", "line": number, "bytes": 57,
                                "sha256": hashlib.sha256(fragment).hexdigest()}]
    return runs, path, f"tiny/records/{path.name}:{number}", resumed


def readers(runs, out, cli) -> dict[str, str]:
    """Return what each reader lists of RUNS' problems: check (text and JSON), decide (text and JSON), the API's problem
    list and the site's pages that list problems (the index and the campaign's page), built into OUT."""
    said = {}
    for name, args in (("check", ("check", runs)), ("check --json", ("check", runs, "--json")),
                       ("decide", ("decide", "tiny", "--runs", runs)), ("decide --json", ("decide", "tiny", "--runs", runs, "--json"))):
        code, text, err = cli(*args)
        assert code in (0, 1), err
        said[name] = text
    said["api"] = "\n".join(iteralab.open_runs(runs).problems)
    code, _, err = cli("build", "--runs", runs, "--out", out)
    assert code == 0, err
    said["site"] = "\n".join((out / page).read_text(encoding="utf-8") for page in ("index.html", "campaigns/tiny/index.html"))
    return said


@pytest.mark.slow
def test_every_reader_agrees_with_check_on_a_torn_line_a_resume_closed(killed, tmp_path, cli):
    """Regression for #62: decide, the pages and the API still called a torn line that a resume closed "not valid JSON"."""
    runs, path, where, resumed = torn_and_resumed(killed, tmp_path, cli)
    said = readers(runs, tmp_path / "site", cli)
    assert [name for name, text in said.items() if "not valid JSON" in text or (f"{where}:" in text and name != "check")] == []
    loaded = reading.load(runs)
    assert loaded.problems == [] and [(t["file"], t["line"], t["resumption"]) for t in loaded.torn] == [
        (f"tiny/records/{path.name}", int(where.rpartition(":")[2]), resumed["record_id"])]
    assert iteralab.open_runs(runs).problems == []
    # check names it as the torn write a resume saw, as before: now from the store's reading, which every reader shares.
    assert f"{where}: {SAID.format(bytes=57, id=resumed['record_id'])}" in said["check"] and "; 0 problems" in said["check"]
    data = json.loads(said["check --json"])
    assert data["problems"] == [] and [(t["file"], t["line"]) for t in data["torn_writes"]] == [(t["file"], t["line"]) for t in loaded.torn]
    assert json.loads(said["decide --json"])["problems"] == []


@pytest.mark.slow
def test_a_line_whose_bytes_differ_from_the_ones_named_stays_a_problem_for_every_reader(killed, tmp_path, cli):
    """Regression for #62: only the bytes the resumption named are set apart; any other line at that place is damage."""
    runs, path, where, _ = torn_and_resumed(killed, tmp_path, cli)
    assert reading.load(runs).problems == []  # named and unchanged: set apart by the store itself
    data = path.read_bytes()
    line = data.split(b"\n")[int(where.rpartition(":")[2]) - 1]
    path.write_bytes(data.replace(line, line[:-1] + b"X", 1))  # same length, other bytes
    said = readers(runs, tmp_path / "site", cli)
    damaged = f"{where}: not valid JSON"
    # decide lists no problem of the records' lines, before #62 or after: only its campaign's own (rentals, deliverables).
    assert {name for name, text in said.items() if damaged in text} == {"check", "check --json", "api", "site"}
    loaded = reading.load(runs)
    assert [problem for problem in loaded.problems if problem.startswith(damaged)] and loaded.torn == []
    assert SAID.split(" (")[0] not in said["check"]


def hand_torn(runs, *, sha256=None) -> tuple[str, dict]:
    """Write a campaign's records, tear its last line, then append a resumption naming it as run --resume does (SHA256:
    another digest, for a resumption that names other bytes); return the torn line's place and the resumption."""
    manifest = factory.manifest("camp", "run-1")
    for record in (manifest, factory.trial(manifest, "b1"), factory.trial(manifest, "b4", sequence=2, batch_size=4)):
        records.append(runs, record)
    path = runs / "camp" / "records" / "run-1.jsonl"
    fragment = b'{"campaign": "camp", "kind": "trial", "record_id": "trial-20'
    lines = path.read_bytes().count(b"\n")
    with open(path, "ab") as handle:
        handle.write(fragment)
    resumed = records.make_record("resumption", campaign="camp", run_id="run-1", manifest_id=manifest["record_id"],
                                  interrupted=[], finished=2, remaining=0, hostname="h", warmup="applied again",
                                  torn=[{"file": "camp/records/run-1.jsonl", "line": lines + 1, "bytes": len(fragment),
                                         "sha256": sha256 or hashlib.sha256(fragment).hexdigest()}])
    records.append(runs, resumed)  # the write that closes the torn line names it
    return f"camp/records/run-1.jsonl:{lines + 1}", resumed


def test_the_store_sets_a_closed_torn_line_apart_for_the_api_and_the_site(tmp_path, cli):
    """Regression for #62: the record table's problems, the API's and the site's index left it "not valid JSON"."""
    runs = tmp_path / "runs"
    where, resumed = hand_torn(runs)
    table = reading.load_table(runs)
    size = resumed["torn"][0]["bytes"]
    assert table.all_problems() == [] and [(t["file"], t["line"], t["bytes"], t["resumption"]) for t in table.torn] == [
        ("camp/records/run-1.jsonl", int(where.rpartition(":")[2]), size, resumed["record_id"])]
    assert table.torn[0]["said"].startswith(f"{where}: {SAID.format(bytes=size, id=resumed['record_id'])} (")
    assert reading.load(runs).torn == table.torn and iteralab.open_runs(runs).problems == []
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    assert where not in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_a_resumption_naming_other_bytes_leaves_the_line_a_problem_for_every_reader(tmp_path, cli):
    """Regression for #62: a resumption whose digest is not the line's sets nothing apart (the store, check, the API)."""
    runs = tmp_path / "runs"
    where, _ = hand_torn(runs, sha256="0" * 64)
    assert [p.partition(": ")[0] for p in reading.load(runs).problems] == [where] and reading.load(runs).torn == []
    assert [p.partition(": ")[0] for p in iteralab.open_runs(runs).problems] == [where]
    code, out, _ = cli("check", runs)
    assert code == 1 and f"{where}: not valid JSON" in out
    # and the same line named with its true digest is set apart (the store compares the bytes, not only the place)
    assert hand_torn(tmp_path / "other")[0] == where and reading.load(tmp_path / "other").problems == []


@pytest.mark.parametrize(("kind", "columns"), [("generate", GENERATION_COLUMNS), ("adapt", ADAPTATION_COLUMNS)])
def test_trials_csv_of_a_campaign_whose_trials_were_all_interrupted_has_its_kinds_columns(kind, columns):
    """Regression for #61: the kind was read from the trials' phases, which an interrupted trial may not have reached."""
    manifest = generation_manifest("gen", "run-1") if kind == "generate" else {**factory.manifest("gen", "run-1"),
                                                                                 "workload": {"kind": kind}}
    stopped = factory.trial(manifest, "b1", status="interrupted", failed_phase="warmup")
    assert not ({"prefill", "decode", "first_forward"} & set(stopped["phases"]) or {"generation", "adaptation"} & set(stopped))
    (view,) = campaign_views(reading.Loaded([manifest, stopped], ["gen/records/run-1.jsonl:1", "gen/records/run-1.jsonl:2"]))
    header = trials_csv(trial_table(view)).split("\n")[0].split(",")
    assert header[-len(columns):] == columns
    (classify,) = campaign_views(reading.Loaded([factory.manifest("c", "run-1"), {**stopped, "campaign": "c"}], ["a:1", "a:2"]))
    assert trials_csv(trial_table(classify)).split("\n")[0].split(",") == header[:-len(columns)]  # a classification's: as before
