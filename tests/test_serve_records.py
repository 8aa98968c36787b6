"""A serving campaign's records (#64) are checked as every kind's are (#62): each field of a trial's serving object and
of a manifest's protocol.serving has a type, so check names a damaged one by file, line and field and every reader
skips that record; a path a serving record names stays inside the runs folder; a hostile requests file (the trial's
predictions.path, read by the pages) never stops a reader. tests/blocks.py fuzzes every field; these pin the
messages."""

from __future__ import annotations

import json
import shutil

import pytest

from tests import blocks

BASE, CAMPAIGN = blocks.BASES["serve"]
REMOVED = blocks.REMOVED


def _runs(tmp_path):
    """Copy the serving campaign alone into a runs folder of its own (the fixtures' folder may hold others)."""
    runs = tmp_path / "runs"
    shutil.copytree(BASE / CAMPAIGN, runs / CAMPAIGN)
    return runs


def _damage(runs, record_kind: str, path: tuple, value, nth: int = 0) -> tuple[str, int, str]:
    """Change one field of the copied campaign's NTH record of RECORD_KIND; return its file as check names it, its line
    and its record id."""
    source, number, record = blocks.changed(blocks.Copy("serve", record_kind, path, value, nth=nth))
    shown = source.relative_to(BASE).as_posix()
    lines = (runs / shown).read_text(encoding="utf-8").splitlines()
    lines[number - 1] = json.dumps(record, ensure_ascii=False)
    (runs / shown).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return shown, number, record["record_id"]


@pytest.mark.parametrize(("record_kind", "path", "value", "field"), [
    ("trial", ("serving", "levels", 1, "duration_s"), 0, "serving.levels.1.duration_s"),
    ("trial", ("serving", "levels", 0, "level"), [1], "serving.levels.0.level"),
    ("trial", ("serving", "capacity", "figures", "ttft_ms", "p90", "value"), "fast",
     "serving.capacity.figures.ttft_ms.p90.value"),
    ("trial", ("serving", "capacity", "level"), -2, "serving.capacity.level"),
    ("trial", ("serving", "engine", "stopped", "exit_code"), 2**70, "serving.engine.stopped.exit_code"),
    ("trial", ("serving", "levels", 0, "meets_share"), REMOVED, "serving.levels.0"),
    ("trial", ("serving", "objective", "share"), 1.5, "serving.objective.share"),
    ("trial", ("variant_config", "engine_args"), ["--continuous-batching"], "variant_config.engine_args"),
    ("manifest", ("protocol", "serving", "levels"), [2, 2], "protocol.serving.levels"),
    ("manifest", ("protocol", "serving", "engine"), "tgi", "protocol.serving.engine"),
    ("manifest", ("protocol", "serving", "port"), 70000, "protocol.serving.port"),
    ("manifest", ("protocol", "serving", "objective", "ttft_ms"), 0, "protocol.serving.objective.ttft_ms"),
    ("manifest", ("protocol", "serving"), REMOVED, "protocol"),
])
def test_check_names_a_damaged_serving_field_by_file_line_and_field_and_the_readers_skip_its_record(
        tmp_path, cli, record_kind, path, value, field):
    """Regression for #62 over #64's records: the serving object and protocol.serving were not typed at all."""
    from iteralab.api import open_runs

    runs = _runs(tmp_path)
    shown, line, record_id = _damage(runs, record_kind, path, value)
    code, out, err = cli("check", runs, "--json")
    assert code == 1, err
    problems = json.loads(out)["problems"]
    assert any(problem.startswith(f"{shown}:{line}: {field}: ") for problem in problems), problems
    opened = open_runs(runs)
    assert any(problem.startswith(f"{shown}:{line}: {field}: ") for problem in opened.problems)
    assert record_id not in set(opened.trials["record_id"])
    if record_kind == "trial":  # the other trial is read as it was
        assert len(opened.trials) == 1
    opened.decide(CAMPAIGN)


def test_a_serving_campaign_whose_manifest_check_refused_is_read_by_every_reader(tmp_path):
    """A refused manifest is skipped: its campaign's trials are read without it (no objective, no levels declared), by
    the decision report's text and the pages as by the rest."""
    runs = _runs(tmp_path)
    _damage(runs, "manifest", ("protocol", "serving", "objective"), REMOVED)
    outcome = blocks.read_all(runs, [CAMPAIGN], tmp_path / "site")
    assert any(": protocol.serving: 'objective' is a required property" in problem for problem in outcome.problems)
    assert outcome.raised == {}


@pytest.mark.parametrize("field", [("serving", "files", "engine_log", "path"), ("serving", "files", "folder"),
                                   ("serving", "files", "load_generator", 0, "path")])
@pytest.mark.parametrize("value", ["../../../../etc", "/etc/passwd", f"{CAMPAIGN}/../../etc/passwd", f"{CAMPAIGN}/..",
                                   f"{CAMPAIGN}/" + "x" * 256, "C:/Windows", "tiny\\..\\..\\etc", "", "x" * 5000,
                                   f"{CAMPAIGN}/engine.log\n"])
def test_a_serving_file_path_out_of_the_runs_folder_is_refused_by_its_field(field, value):
    """The serving object's paths are checked by the schema itself (records.py's path check reads the fields of its
    own list), as strictly: relative, no '..' part, no part over 255 characters, nothing but the characters the runner
    writes in them."""
    problem = blocks.problem_of(blocks.changed(blocks.Copy("serve", "trial", field, value))[2])
    dotted = ".".join(map(str, field))
    assert problem is not None and problem.startswith(f"{dotted}: ") and len(problem) < 400, problem


def test_the_paths_the_runner_writes_are_accepted():
    """The check is not vacuous: the fixture's trials pass check as they are (tests/fixtures), and so do names that
    start with dots."""
    for path in ("a/.b", "a/..b/c", "a/./b", "level-1-profile_export.jsonl"):
        copy = blocks.Copy("serve", "trial", ("serving", "files", "folder"), path)
        assert blocks.problem_of(blocks.changed(copy)[2]) is None, path


HOSTILE_ROWS = (None, 0, -1, 1e308, -1e308, 2**70, "", "x" * 5000, [], [1, 2], {}, {"a": {"b": [1, None]}}, True,
                "../../../../etc", "NaN", "=cmd|' /C calc'!A0", "\u202e")


def _hostile_requests(runs) -> int:
    """Rewrite each trial's requests file: every row the fixture holds, then the first with each column replaced by
    each hostile value or removed, and lines that are no JSON object. Return the rows written to each file."""
    written = 0
    for path in sorted((runs / CAMPAIGN / "predictions").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        hostile = [{**rows[0], column: value} for column in rows[0] for value in HOSTILE_ROWS]
        hostile += [{key: held for key, held in rows[0].items() if key != column} for column in rows[0]]
        lines = [json.dumps(row, ensure_ascii=False) for row in rows + hostile]
        lines += ["[]", "null", "7", '"text"', '{"level": 1', "\ufeff{}", ""]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        written = len(lines)
    return written


def test_a_hostile_requests_file_is_read_by_every_reader_without_a_raise(tmp_path):
    """The requests file is no record: no schema checks it. The pages read it (the latency distributions, requests.csv):
    a row of any shape is left out or shown as it is, never a raise."""
    runs = _runs(tmp_path)
    assert _hostile_requests(runs) > 300
    outcome = blocks.read_all(runs, [CAMPAIGN], tmp_path / "site")
    assert outcome.raised == {}
    assert (tmp_path / "site" / "campaigns" / CAMPAIGN / "requests.csv").is_file()
