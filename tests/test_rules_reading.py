"""The record store's reader at its edges: a file rewritten under it, an unreadable file, twins, the workers' state.

Regression for #62: these lines of store/reading.py were run by no test of the mutation selection, so their mutants
survived whatever they changed.
"""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from iteralab.core import processes
from iteralab.core.errors import UserError
from iteralab.store import columns, folded, reading, records
from tests import factory
from tests.test_cache import FIXTURE, TRIALS_FILE

APPENDED_ONLY = ("changed while it was being read ({why}); records are only ever appended: if another program "
                 "rewrote it, restore it, then run the command again")


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "runs"
    shutil.copytree(FIXTURE, copy)
    return copy


def _rewrite(path: Path, change) -> None:
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(change(lines)))


def test_a_records_file_shifted_under_a_reader_is_named_with_what_to_do(runs):
    table = reading.load_table(runs)
    _rewrite(runs / TRIALS_FILE, lambda lines: [b"", *lines])  # every line a byte later: offsets fall mid-line
    with pytest.raises(UserError) as error:
        table.records(table.frame)
    assert str(error.value) == f"{TRIALS_FILE} " + APPENDED_ONLY.format(why="its lines moved")


def test_a_line_that_now_holds_another_record_is_named_like_a_shifted_one(runs):
    table = reading.load_table(runs)
    ids = table.frame[table.frame["file"] == table.shown.index(TRIALS_FILE)]["record_id"].tolist()
    first = ids[0]
    other = first[:-1] + ("0" if first[-1] != "0" else "1")  # same length: the line still parses where it lay
    _rewrite(runs / TRIALS_FILE, lambda lines: [line.replace(first.encode(), other.encode()) for line in lines])
    rows = table.frame[table.frame["record_id"] == ids[1]]
    assert table.records(rows)[0]["record_id"] == ids[1]  # a line that did not change is still read
    with pytest.raises(UserError, match="its lines moved"):
        table.records(table.frame[table.frame["record_id"] == first])


def test_records_of_rows_from_several_files_come_back_in_the_rows_order(runs):
    table = reading.load_table(runs)
    rows = table.frame.iloc[::-1]
    assert [record["record_id"] for record in table.records(rows)] == rows["record_id"].tolist()
    assert table.records(table.frame.iloc[:0]) == []


def test_an_unreadable_records_file_is_a_problem_and_the_others_are_read(runs):
    before = reading.load_table(runs)
    (runs / "demo-rotten-tomatoes" / "records" / "run-broken.jsonl").mkdir()  # a folder where a file should be
    table = reading.load_table(runs)
    broken = table.shown.index("demo-rotten-tomatoes/records/run-broken.jsonl")
    assert table.digests[broken] == "unreadable"
    assert [d for i, d in enumerate(table.digests) if i != broken] == before.digests
    assert table.problems == [*before.problems, "demo-rotten-tomatoes/records/run-broken.jsonl: cannot read: Is a directory"]
    assert table.frame["record_id"].tolist() == before.frame["record_id"].tolist()


def test_a_file_read_in_a_worker_sends_its_error_back_and_uses_the_workers_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    missing = reading._file_columns(tmp_path / "gone.jsonl")
    assert isinstance(missing, FileNotFoundError) and missing.filename == str(tmp_path / "gone.jsonl")
    path = tmp_path / "records" / "run.jsonl"
    path.parent.mkdir()
    shutil.copyfile(FIXTURE / TRIALS_FILE, path)
    reading._WORKER_SEEN.clear()
    own: dict = {}
    read = reading._file_columns(path, own)
    assert read.table.num_rows == 21 and len(own) == 21 and reading._WORKER_SEEN == {}
    assert columns.cache_exists(path)
    again = tmp_path / "records" / "run-2.jsonl"
    shutil.copyfile(path, again)
    in_worker = reading._file_columns(again, keep=False)  # a worker: its share's lines, no cache of its own
    assert in_worker.table.num_rows == 21 and len(reading._WORKER_SEEN) == 21
    assert not columns.cache_exists(again)
    reading._WORKER_SEEN.clear()


def test_a_reader_process_starts_with_the_collector_off_and_no_lines_seen():
    reading._WORKER_SEEN[b"line"] = ("row",)
    try:
        reading._start_reader()
        assert reading._WORKER_SEEN == {} and not gc.isenabled()
    finally:
        gc.enable()
        reading._WORKER_SEEN.clear()


def test_the_size_of_a_file_that_cannot_be_read_is_zero(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"{}\n")
    assert reading._size(path) == 3 and reading._size(str(path)) == 3
    assert reading._size(tmp_path / "gone.jsonl") == 0


def test_only_files_with_the_same_bytes_are_twins_of_the_first_of_them(tmp_path, monkeypatch):
    record = json.dumps({"record_id": "x" * 10000}).encode() + b"\n"  # longer than both ends compared before hashing
    middle = record[:5000] + b"z" + record[5001:]  # the same size and ends: only a hash tells it apart
    contents = [record, record, record.replace(b"x", b"y", 1), middle, record, b"", b"", b"{}\n", b"{}\n"]
    paths = []
    for index, content in enumerate(contents):
        paths.append(tmp_path / f"run-{index}.jsonl")
        paths[-1].write_bytes(content)
    hashed = []
    digest = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda handle, *how: hashed.append(Path(handle.name).name) or digest(handle, *how))
    assert reading._identical(paths, list(range(len(paths)))) == {1: 0, 4: 0, 8: 7}  # empty files are no twins
    # Only files of one size whose ends are alike are hashed whole: not the one whose first bytes differ, nor an empty one.
    assert sorted(hashed) == ["run-0.jsonl", "run-1.jsonl", "run-3.jsonl", "run-4.jsonl", "run-7.jsonl", "run-8.jsonl"]
    assert reading._identical(paths, [1, 2, 3, 4, 7]) == {4: 1}  # among the cold ones only
    assert reading._identical(paths, [0]) == {}


def test_twins_that_cannot_be_opened_are_left_to_the_read_that_reports_them(tmp_path):
    folders = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for folder in folders:
        folder.mkdir()
    assert reading._size(folders[0]) == reading._size(folders[1]) > 0
    assert reading._identical(folders, [0, 1]) == {}


def _distinct_files(folder: Path, count: int) -> list[Path]:
    """Write COUNT records files of the same size, none a twin of another (each would be parsed)."""
    (folder / "records").mkdir()
    paths = [folder / "records" / f"run-{index}.jsonl" for index in range(count)]
    for index, path in enumerate(paths):
        path.write_bytes((FIXTURE / TRIALS_FILE).read_bytes().replace(b"demo", f"dem{index}".encode()))
    return paths


def test_files_are_parsed_on_every_core_only_above_the_threshold_and_with_two_cold_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    paths = _distinct_files(tmp_path, 3)
    started = []

    def pool(count, **options):
        started.append(count)
        raise PermissionError(1, "Operation not permitted")  # then this process reads them: the result is the same

    monkeypatch.setattr(processes, "spawned_pool", pool)
    monkeypatch.setattr(processes, "available_cores", lambda: 2)
    two = sum(path.stat().st_size for path in paths[:2])
    monkeypatch.setattr(reading, "PARALLEL_BYTES", two + 1)
    assert [read.table.num_rows for read in reading._each_file(paths[:2])] == [21, 21] and started == []
    for path in paths[:2]:
        Path(columns._cache_file(path)).unlink()
    monkeypatch.setattr(reading, "PARALLEL_BYTES", two)
    assert [read.table.num_rows for read in reading._each_file(paths[:2])] == [21, 21] and started == [2]
    monkeypatch.setattr(reading, "PARALLEL_BYTES", 0)
    reading._each_file(paths[2:])  # one cold file: nothing to share
    for path in paths[:2]:
        Path(columns._cache_file(path)).unlink()
    monkeypatch.setattr(processes, "available_cores", lambda: 1)
    reading._each_file(paths[:2])  # one core
    assert started == [2]


def test_every_core_reads_the_files_given_with_as_many_processes_as_are_useful(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    paths = _distinct_files(tmp_path, 2)
    started = []
    spawn = processes.spawned_pool
    monkeypatch.setattr(processes, "spawned_pool", lambda count, **options: started.append(count) or spawn(count, **options))
    reads = reading._on_every_core([*paths, tmp_path / "gone.jsonl"], 8, keep=False)
    assert started == [3]
    assert [read.table.num_rows for read in reads[:2]] == [21, 21] and isinstance(reads[2], FileNotFoundError)
    assert not any(columns.cache_exists(path) for path in paths)  # keep=False: the folder's cache will hold them
    reads = reading._on_every_core(paths[:1], 8)
    assert started == [3, 1] and columns.cache_exists(paths[0])


def test_the_records_of_some_campaigns_come_with_the_whole_folders_problems(runs):
    records.append(runs, factory.manifest("other", "run-other"))
    with (runs / "demo-rotten-tomatoes" / "records" / "run-bad.jsonl").open("w", encoding="utf-8") as handle:
        handle.write("{not a record\n")
    table = reading.load_table(runs)
    some = table.loaded(["other"])
    assert [record["campaign"] for record in some.records] == ["other"] and some.sources == [
        f"{records.records_file(runs, 'other', 'run-other').relative_to(runs).as_posix()}:1"]
    assert some.problems == table.all_problems() and len(some.problems) == 1
    every = table.loaded()
    assert {record["campaign"] for record in every.records} == {"other", "demo-rotten-tomatoes"}
    assert len(every.records) == len(table.frame)


def test_only_withdrawals_that_void_name_voided_records():
    void = {"kind": "withdrawal", "voided_id": "rental-1", "voided_kind": "rental"}
    undo = {"kind": "withdrawal", "exclusion_id": "exclusion-1"}  # withdraws an exclusion: it voids nothing
    other = {"kind": "rental", "voided_id": "rental-2"}  # not a withdrawal, whatever fields it holds
    assert reading.voided_ids([void, undo, other]) == {"rental-1"}


def test_many_files_are_shared_among_the_processes_in_whole_chunks(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    paths = _distinct_files(tmp_path, 17)  # more than 8 per process: a chunk of 17 // 16 files each
    reads = reading._on_every_core(paths, 2, keep=False)
    assert [read.table.num_rows for read in reads] == [21] * 17


def test_a_withdrawal_of_an_exclusion_the_folder_holds_is_no_problem(runs):
    """Regression for #62: the exclusions that withdrawals name are looked up with the trials and voided records."""
    exclusion = "exclusion-20261203T101256Z-cfdf9780d3b9"  # the fixture's
    undo = records.make_record("withdrawal", campaign="demo-rotten-tomatoes", run_id="run-hand", exclusion_id=exclusion,
                               reason="the ticket was for another host")
    records.append(runs, undo)
    assert reading.load_table(runs).all_problems() == []


def test_a_second_withdrawal_or_void_of_one_record_is_named_and_a_missing_one_by_its_kind(runs):
    """Regression for #62: a withdrawal withdraws an exclusion and a void voids a record; the second of either names
    the first, and one that names nothing of its kind says which kind, with its article."""
    exclusion, rental = "exclusion-20261203T101256Z-cfdf9780d3b9", "rental-20261203T085833Z-8f6a0a6bf228"  # the fixture's

    def withdrawal(**names):
        record = records.make_record("withdrawal", campaign="demo-rotten-tomatoes", run_id="run-hand", reason="r",
                                     **names)
        records.append(runs, record)
        return record["record_id"]

    undo = [withdrawal(exclusion_id=exclusion) for _ in range(2)]
    void = [withdrawal(voided_id=rental, voided_kind="rental") for _ in range(2)]
    gone = withdrawal(voided_id="rental-gone", voided_kind="rental")
    where = "demo-rotten-tomatoes/records/run-hand.jsonl"
    assert reading.load_table(runs).all_problems() == [
        f"{where}:2: withdrawal {undo[1]} withdraws exclusion {exclusion} again (first by {undo[0]}); the first one stands",
        f"{where}:4: withdrawal {void[1]} voids rental {rental} again (first by {void[0]}); the first one stands",
        f"{where}:5: withdrawal {gone} names rental rental-gone, which is not a rental of campaign demo-rotten-tomatoes"]


def test_a_voided_deliverable_is_no_first_delivery_and_later_repeats_are_still_named(runs):
    """Regression for #62: a voided deliverable is passed over, and the deliverables read after it are still checked."""
    campaign, first = "demo-rotten-tomatoes", "deliverable-20261203T085834Z-8f321ffcd1c9"  # the fixture's
    records.append(runs, records.make_record("withdrawal", campaign=campaign, run_id="run-hand", reason="r",
                                             voided_id=first, voided_kind="deliverable"))
    trial = {"record_id": "trial-20261203T062412Z-43106eb4c6b5"}
    # The same corpus delivered before them (its file read first) and voided: no first delivery either.
    voided = records.make_record("deliverable", campaign=campaign, run_id="run-a-voided", trial_id=trial["record_id"],
                                 name="final corpus", corpus_fingerprint="sha256:" + "e" * 64, predictions_sha256=factory.SHA)
    records.append(runs, voided)
    records.append(runs, records.make_record("withdrawal", campaign=campaign, run_id="run-hand", reason="r",
                                             voided_id=voided["record_id"], voided_kind="deliverable"))
    # Each in a run file of its own: read in the order of the files' names, whatever their ids' random ends.
    again = sorted((factory.deliverable(campaign, trial, corpus="e") for _ in range(2)), key=lambda r: f"{r['run_id']}.jsonl")
    for record in again:
        records.append(runs, record)
    records.append(runs, factory.deliverable(campaign, trial, corpus="d"))  # another corpus: its own deliverable
    where = [f"{records.records_file(runs, campaign, r['run_id']).relative_to(runs).as_posix()}:1" for r in again]
    assert reading.load_table(runs).all_problems() == [
        f"{where[1]}: deliverable {again[1]['record_id']} (trial {trial['record_id']}) repeats the corpus "
        f"sha256:eeeeeeeeeeee… of deliverable {again[0]['record_id']} (trial {trial['record_id']}) at {where[0]}; "
        "one corpus is one deliverable, counted once"]


def test_a_callers_listing_is_read_as_given_its_files_by_its_names(runs):
    """Regression for #62: the build passes the records files it listed, with their names and stats; exactly those files
    are read, and their rows and problems carry the names given (not worked out again from the paths)."""
    records.append(runs, factory.manifest("other", "run-other"))
    other = records.records_file(runs, "other", "run-other")
    with other.open("a", encoding="utf-8") as handle:
        handle.write("{not a record\n")
    table = reading.load_table(runs, [other], shown=["as-listed/records/other.jsonl"], stats=[other.stat()])
    assert table.shown == ["as-listed/records/other.jsonl"] and table.paths == [other]
    assert set(table.frame["campaign"]) == {"other"}
    assert table.frame["file"].dtype == "int32"  # each row's file by its index: 4 bytes a row, at 100,000 rows too
    assert table.loaded().sources == ["as-listed/records/other.jsonl:1"]
    assert [problem.split(": ")[0] for problem in table.problems] == ["as-listed/records/other.jsonl:2"]


def test_a_records_file_is_a_jsonl_file_in_a_records_folder():
    """Regression for #62: corpus copies under inputs/ are JSON Lines too, and a records folder holds other files."""
    assert reading.is_records_file("records/run-1.jsonl") and reading.is_records_file("camp/records/run-1.jsonl")
    assert not reading.is_records_file("camp/records/notes.txt") and not reading.is_records_file("records/run-1.json")
    assert not reading.is_records_file("camp/inputs/c.jsonl") and not reading.is_records_file("run-1.jsonl")
    assert not reading.is_records_file("camp/myrecords/run-1.jsonl") and not reading.is_records_file("records.jsonl")


def test_a_folder_read_again_unchanged_parses_no_file_and_an_appended_file_alone(runs, monkeypatch):
    """Regression for #62: the folder's cache holds every file by its stamp, whether the reader stats the files or the
    caller's listing gives their stats; a file appended since is the only one read."""
    first = reading.load_table(runs)
    read = []
    real = columns.read_file
    monkeypatch.setattr(columns, "read_file", lambda path, *args, **options: read.append(path) or real(path, *args, **options))
    assert reading.load_table(runs).frame["record_id"].tolist() == first.frame["record_id"].tolist() and read == []
    files = reading.record_files(runs)
    listed = reading.load_table(runs, files, shown=[path.relative_to(runs).as_posix() for path in files],
                                stats=[path.stat() for path in files])
    assert len(listed.frame) == len(first.frame) and read == []
    written = []
    monkeypatch.setattr(folded, "write", lambda *args: written.append(args))
    records.append(runs, factory.manifest("other", "run-other"))
    assert len(reading.load_table(runs).frame) == len(first.frame) + 1 > folded.REWRITE_SHARE
    assert read == [records.records_file(runs, "other", "run-other")]
    assert written == []  # one row read beside the folder's cache: not worth writing it again


def test_a_twin_gets_the_first_ones_columns_and_a_cache_of_its_own(tmp_path, monkeypatch):
    """Regression for #62: a merged copy is parsed once; the copy's read is the first one's columns, problems and hash,
    with facts of its own, and its own cache file, so that the next read of either is from its cache."""
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "records").mkdir()
    first, twin = tmp_path / "records" / "run-1.jsonl", tmp_path / "records" / "run-2.jsonl"
    first.write_bytes((FIXTURE / TRIALS_FILE).read_bytes() + b"{not a record\n")
    twin.write_bytes(first.read_bytes())
    one, copy = reading._each_file([first, twin])
    assert copy is not one and copy.table.equals(one.table) and copy.table.num_rows == 21
    assert copy.problems == one.problems and len(one.problems) == 1 and copy.sha256 == one.sha256
    assert copy.facts["complete"] == one.facts["complete"] == first.stat().st_size
    assert columns.cache_exists(first) and columns.cache_exists(twin)


def test_a_parallel_first_read_leaves_every_file_to_the_folders_cache_and_no_lines_in_this_process(tmp_path, monkeypatch):
    """Regression for #62: parsed on every core for a folder whose cache will hold them, the files get no cache file of
    their own (4,000 made and renamed: 7 s of CPU); read without the folder's cache, each gets one. The lines this
    process parsed are dropped with the read: nothing is kept for the next one."""
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    paths = _distinct_files(tmp_path, 2)
    monkeypatch.setattr(reading, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(processes, "available_cores", lambda: 2)
    reading._WORKER_SEEN.clear()  # what another test may have left: this read's own lines are the question
    table = reading.load_table(tmp_path)
    # Both files hold the same record ids (only their campaign's name differs): the second's are named as other copies.
    assert len(table.frame) == 21 and len(table.problems) == 21 and table.digests[0] != table.digests[1]
    assert set(table.frame["campaign"]) == {"dem0-rotten-tomatoes"}  # the first read of each id is the one kept
    first_id = table.frame["record_id"].iloc[0]
    assert table.problems[0] == (f"records/run-1.jsonl:1: record_id {first_id} already read with other content at "
                                 "records/run-0.jsonl:1; this copy is skipped")
    assert not any(columns.cache_exists(path) for path in paths)
    assert reading._WORKER_SEEN == {}
    reads = reading._each_file(paths)  # no folder's cache to hold them: each file its own
    assert [read.table.num_rows for read in reads] == [21, 21] and all(columns.cache_exists(path) for path in paths)
    monkeypatch.setattr(processes, "available_cores", lambda: 1)
    (tmp_path / "records" / "run-9.jsonl").write_bytes((FIXTURE / TRIALS_FILE).read_bytes().replace(b"demo", b"dem9"))
    assert len(reading.load_table(tmp_path).problems) == 42 and reading._WORKER_SEEN == {}


def test_a_runs_folder_that_is_not_one_is_named_and_an_empty_one_holds_no_record(tmp_path):
    """Regression for #62."""
    with pytest.raises(UserError) as raised:
        reading.load_table(tmp_path / "gone")
    assert str(raised.value) == f"{tmp_path / 'gone'} is not a folder: pass the runs folder that holds the records"
    (tmp_path / "camp" / "records").mkdir(parents=True)
    (tmp_path / "camp" / "records" / "notes.txt").write_text("not a records file", encoding="utf-8")
    table = reading.load_table(tmp_path)
    assert table.frame.empty and "record_id" in table.frame.columns and table.problems == [] and table.shown == []
    assert reading.load(tmp_path).records == [] and table.all_problems() == []
