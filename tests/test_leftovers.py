"""Leftovers of a killed trial (#62): check lists the files no record refers to and says they are safe to remove;
run --resume moves its run's own aside into a folder it names, and names the records line a kill cut off, which check
then tells from damage; a SIGTERM during an export leaves no .partial folder.

The kills are real: a run is started in a process of its own that SIGKILLs itself at the exact moment (right after a
trial's predictions file is written, inside an export), as no outside kill could time it. A torn records line is the
one state written by hand, as a kill leaves it: a record is one write() call, which a kill cuts only between the pages
of a large record, at a moment no test can aim for.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from iteralab.run import runner
from iteralab.store import reading, records
from iteralab.workloads import adapted
from tests import factory
from tests.conftest import ROOT
from tests.tiny import corpus_rows, write_adaptation_campaign, write_campaign, write_corpus

# `iteralab ARGS` in a process that SIGKILLs itself at WHERE: right after a trial's predictions file is written (before
# its trial record), or inside an export (its .partial folder written, before the rename).
KILLED_AT = r"""
import os, signal, sys
from iteralab.cli import main
from iteralab.workloads import WORKLOADS, adapted

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

where = sys.argv[1]
if where == "after-predictions":
    for module in WORKLOADS.values():
        module.write_outputs = (lambda real: lambda *a, **k: (real(*a, **k), die()))(module.write_outputs)
elif where == "in-export":
    adapted._sha256 = die
sys.exit(main(sys.argv[2:]))
"""


def run_killed(where: str, *args) -> subprocess.CompletedProcess:
    """Run iteralab ARGS in its own process, SIGKILLed at WHERE; fail unless the kill ended it."""
    done = subprocess.run([sys.executable, "-c", KILLED_AT, where, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    return done


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(folder) -> dict[str, str]:
    """Return each file under FOLDER (posix, relative) with its sha256."""
    return {path.relative_to(folder).as_posix(): sha256(path) for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def killed(tiny_model, tmp_path_factory):
    """A classify campaign (2 variants, 1 repetition) whose run was SIGKILLed after its first predictions file."""
    folder = tmp_path_factory.mktemp("killed")
    corpus = write_corpus(folder / "corpus.jsonl", corpus_rows())
    campaign = write_campaign(folder, tiny_model, corpus, repetitions=1, batch_sizes=(1, 4))
    run_killed("after-predictions", "run", campaign, "--runs", folder / "runs", "--quiet", "--no-stages")
    return folder


def copy_of(killed, tmp_path):
    shutil.copytree(killed, tmp_path / "copy")
    return tmp_path / "copy" / "tiny.toml", tmp_path / "copy" / "runs"


@pytest.mark.slow
def test_a_kill_after_the_predictions_leaves_a_file_check_names_and_resume_sets_aside(killed, tmp_path, cli):
    campaign, runs = copy_of(killed, tmp_path)
    (start,) = reading.load(runs).of_kind("start")
    left = runs / "tiny" / "predictions" / f"{start['trial_id']}.csv"
    before, size = sha256(left), left.stat().st_size
    assert left.read_text().count("\n") == 25  # whole: the header and the 24 entries, for a trial with no record
    code, out, err = cli("check", runs)
    assert code == 0, out + err
    assert (f"tiny/predictions/{start['trial_id']}.csv: trial {start['trial_id']} has a start record and no trial "
            "record: its process ended before writing it (or is running it now); nothing reads it: safe to remove") in out
    assert "1 file(s) and folder(s) (" in out and "that no record refers to, listed above: safe to remove" in out
    code, out, _ = cli("check", runs, "--json")
    assert [(found["path"], found["trial_id"], found["safe"]) for found in json.loads(out)["unreferenced"]] == [
        (f"tiny/predictions/{start['trial_id']}.csv", start["trial_id"], True)]

    code, out, err = cli("run", campaign, "--runs", runs, "--quiet", "--resume")
    assert code == 0, err
    loaded = reading.load(runs)
    (resumed,) = loaded.of_kind("resumption")
    folder = f"tiny/set-aside/{resumed['record_id']}"
    assert resumed["set_aside"] == {"folder": folder, "entries": [
        {"path": f"tiny/predictions/{start['trial_id']}.csv", "trial_id": start["trial_id"], "bytes": size}]}
    assert f"set aside 1 file(s) and folder(s) ({size:,} bytes)" in err and f"they are in {folder}/ under the runs folder" in err
    assert not left.exists() and sha256(runs / folder / "predictions" / left.name) == before  # moved, not changed
    interrupted = next(t for t in loaded.of_kind("trial") if t["record_id"] == start["trial_id"])
    assert interrupted["status"] == "interrupted" and interrupted["predictions"] is None
    code, out, err = cli("check", runs)
    assert code == 0 and "no record refers to" not in out and "safe to remove" not in out, out + err
    assert loaded.problems == []


@pytest.mark.slow
def test_a_torn_line_a_resume_closed_is_named_as_such_and_check_passes(killed, tmp_path, cli):
    """After --resume appends behind it, the torn line is no longer last: check named it "not valid JSON" for ever."""
    campaign, runs = copy_of(killed, tmp_path)
    (path,) = (runs / "tiny" / "records").glob("*.jsonl")
    (start,) = reading.load(runs).of_kind("start")
    whole = path.read_bytes()
    lines = whole.count(b"\n")
    # What a write cut off by the end of its process leaves: the first bytes of a trial record, and no newline.
    fragment = json.dumps({"campaign": "tiny", "kind": "trial", "record_id": start["trial_id"]})[:57].encode()
    path.write_bytes(whole + fragment)
    code, out, _ = cli("check", runs)
    assert code == 1 and f"{path.relative_to(runs).as_posix()}:{lines + 1}: incomplete last line" in out

    code, _, err = cli("run", campaign, "--runs", runs, "--quiet", "--resume")
    assert code == 0, err
    data = path.read_bytes()
    assert data.startswith(whole + fragment + b"\n")  # left as it was, closed with a newline: records are append-only
    (resumed,) = reading.load(runs).of_kind("resumption")
    named = {"file": f"tiny/records/{path.name}", "line": lines + 1, "bytes": 57,
             "sha256": hashlib.sha256(fragment).hexdigest()}
    assert resumed["torn"] == [named]
    # The write that closed it is the one that names it: no reader ever meets it closed and unnamed.
    assert json.loads(data.split(b"\n")[lines + 1])["record_id"] == resumed["record_id"]

    code, out, err = cli("check", runs)
    assert code == 0, out + err
    assert (f"tiny/records/{path.name}:{lines + 1}: a write cut off when its process ended (57 bytes, no record), closed "
            f"and named by run --resume in resumption {resumed['record_id']}") in out
    assert "not valid JSON" not in out and "; 0 problems" in out
    code, out, _ = cli("check", runs, "--json")
    assert [(found["file"], found["line"], found["resumption"]) for found in json.loads(out)["torn_writes"]] == [
        (named["file"], named["line"], resumed["record_id"])] and json.loads(out)["problems"] == []

    # A line whose bytes are not the ones the resumption named is damage again.
    path.write_bytes(data.replace(fragment, fragment[:-1] + b"X", 1))
    code, out, _ = cli("check", runs)
    assert code == 1 and f"tiny/records/{path.name}:{lines + 1}: not valid JSON" in out


@pytest.mark.slow
def test_resume_moves_only_its_own_runs_files_and_check_names_the_others(killed, tmp_path, cli):
    """A file of a trial no record names, or that a damaged line names, is not the resumed run's: it stays, named; one a
    damaged line names, or a copy of a recorded file, is not called safe to remove."""
    campaign, runs = copy_of(killed, tmp_path)
    (path,) = (runs / "tiny" / "records").glob("*.jsonl")
    manifest = factory.manifest("tiny", "run-other")
    stray = factory.trial(manifest, "b1")
    damaged = dict(stray, record_id="trial-20261204T000000Z-00000000000d", sequence="two")  # invalid: skipped
    with open(path.with_name("run-other.jsonl"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(damaged) + "\n")
    for trial_id in (stray["record_id"], damaged["record_id"]):
        (runs / "tiny" / "predictions" / f"{trial_id}.csv").write_text("id,label,score\n", encoding="utf-8")
    code, out, _ = cli("check", runs)
    assert code == 1  # the damaged line
    assert f"tiny/predictions/{stray['record_id']}.csv: no record names trial {stray['record_id']}; nothing reads it: " \
           "safe to remove" in out
    assert (f"tiny/predictions/{damaged['record_id']}.csv: no valid record refers to it, but tiny/records/run-other.jsonl:1, "
            f"which is damaged, names trial {damaged['record_id']}; not known to be safe to remove") in out
    code, _, err = cli("run", campaign, "--runs", runs, "--quiet", "--resume")
    assert code == 0, err
    assert (runs / "tiny" / "predictions" / f"{stray['record_id']}.csv").is_file()
    assert (runs / "tiny" / "predictions" / f"{damaged['record_id']}.csv").is_file()
    (resumed,) = reading.load(runs).of_kind("resumption")
    assert [entry["trial_id"] for entry in resumed["set_aside"]["entries"]] == resumed["interrupted"]
    # A copy of a recorded file under another folder (a campaign folder copied or renamed) is not called safe either.
    ok = next(t for t in reading.load(runs).of_kind("trial") if t["status"] == "ok")
    (runs / "tiny-copy" / "predictions").mkdir(parents=True)
    shutil.copy(runs / ok["predictions"]["path"], runs / "tiny-copy" / "predictions")
    code, out, _ = cli("check", runs)
    assert (f"tiny-copy/predictions/{ok['record_id']}.csv: trial {ok['record_id']}'s record names "
            f"tiny/predictions/{ok['record_id']}.csv, not this copy of it; not known to be safe to remove") in out


@pytest.mark.slow
def test_kills_inside_an_export_and_after_it_leave_folders_check_names_and_resume_sets_aside(tiny_model, tmp_path, cli):
    """Killed inside the first export (its .partial folder with the weights), then, resumed, killed after the retry's
    predictions (a whole export folder and a predictions file for a trial with no record): each resume sets its aside."""
    campaign = write_adaptation_campaign(tmp_path, tiny_model, repetitions=1, updates=2)
    runs = tmp_path / "runs"
    run_killed("in-export", "run", campaign, "--runs", runs, "--quiet", "--no-stages")
    (first,) = reading.load(runs).of_kind("start")
    partial = runs / "tiny-adapt" / "models" / f"{first['trial_id']}.partial"
    weights = tree(partial)
    assert any(name.endswith(".safetensors") for name in weights)
    code, out, _ = cli("check", runs)
    assert code == 0 and (f"tiny-adapt/models/{first['trial_id']}.partial: the export of trial {first['trial_id']} "
                          "stopped before it was whole; nothing reads it: safe to remove") in out

    run_killed("after-predictions", "run", campaign, "--runs", runs, "--quiet", "--resume")
    loaded = reading.load(runs)
    (resumed,) = loaded.of_kind("resumption")
    assert resumed["set_aside"]["entries"] == [{"path": f"tiny-adapt/models/{first['trial_id']}.partial",
                                                "trial_id": first["trial_id"], "bytes": resumed["set_aside"]["entries"][0]["bytes"]}]
    assert tree(runs / resumed["set_aside"]["folder"] / "models" / partial.name) == weights and not partial.exists()
    (retry,) = [s for s in loaded.of_kind("start") if s.get("retry_of") == first["trial_id"]]
    export = runs / "tiny-adapt" / "models" / retry["trial_id"]
    assert (export / "adapter_model.safetensors").is_file() or (export / "model.safetensors").is_file()
    code, out, _ = cli("check", runs)
    assert code == 0
    assert f"tiny-adapt/models/{retry['trial_id']}: trial {retry['trial_id']} has a start record" in out
    assert f"tiny-adapt/predictions/{retry['trial_id']}.csv: trial {retry['trial_id']} has a start record" in out

    code, out, err = cli("run", campaign, "--runs", runs, "--quiet", "--resume")
    assert code == 0, err
    loaded = reading.load(runs)
    second = max(loaded.of_kind("resumption"), key=lambda r: r["created_at"])
    assert sorted(entry["path"] for entry in second["set_aside"]["entries"]) == [
        f"tiny-adapt/models/{retry['trial_id']}", f"tiny-adapt/predictions/{retry['trial_id']}.csv"]
    assert not export.exists() and (runs / second["set_aside"]["folder"] / "models" / retry["trial_id"]).is_dir()
    ok = [t for t in loaded.of_kind("trial") if t["status"] == "ok"]
    assert len(ok) == 3 and {p.name for p in (runs / "tiny-adapt" / "models").iterdir()} == {t["record_id"] for t in ok}
    code, out, err = cli("check", runs)
    assert code == 0 and "safe to remove" not in out, out + err


@pytest.mark.slow
def test_a_sigterm_during_an_export_records_it_interrupted_and_leaves_no_partial_folder(tiny_model, tmp_path, monkeypatch):
    """An orderly stop: the runner records the trial as interrupted in export; the .partial folder and its weights go."""
    real = adapted._sha256
    sent = []

    def hashed_then_stopped(path):  # a real SIGTERM, delivered once the first file is on disk and hashed
        digest = real(path)
        if not sent:
            sent.append(path)
            os.kill(os.getpid(), signal.SIGTERM)
        return digest

    monkeypatch.setattr(adapted, "_sha256", hashed_then_stopped)
    campaign = write_adaptation_campaign(tmp_path, tiny_model, repetitions=1, updates=2)
    result = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    (trial,) = result.trials
    assert result.interrupted and (trial["status"], trial["failed_phase"]) == ("interrupted", "export")
    assert "SIGTERM" in trial["error"] and sent
    assert not (tmp_path / "runs" / "tiny-adapt" / "models").exists()  # neither the .partial folder nor the folder made


def test_a_resumption_names_a_torn_line_and_set_aside_files_only_with_typed_fields():
    """The fields check reads from a resumption record have types: a hostile value is a named problem, never read."""
    manifest = factory.manifest("camp", "run-1")
    good = records.make_record("resumption", campaign="camp", run_id="run-1", manifest_id=manifest["record_id"],
                               interrupted=[], finished=0, remaining=1, hostname="h", warmup="applied again",
                               torn=[{"file": "camp/records/run-1.jsonl", "line": 3, "bytes": 57, "sha256": "0" * 64}],
                               set_aside={"folder": "camp/set-aside/x", "entries": [
                                   {"path": "camp/predictions/t.csv", "trial_id": "t", "bytes": 10}]})
    assert records.validate(good) == []
    for field, value in (("torn", [{"file": "x", "line": 0, "bytes": 1, "sha256": "0" * 64}]), ("torn", "x"),
                         ("torn", [{"file": "x", "line": 1, "bytes": 1}]), ("set_aside", {"folder": 1, "entries": []}),
                         ("set_aside", {"folder": "x", "entries": [{"path": "p", "trial_id": "../x", "bytes": 1}]})):
        assert records.validate({**good, field: value}), (field, value)
