"""Rules of store/records.py that the mutation run (#62) found no selected test holding in its own process: the
full-disk test of test_records.py writes from a subprocess, which imports the package, not the mutated copy."""

import errno
import json
import os

import pytest

from iteralab.core.errors import UserError
from iteralab.store import reading, records
from tests.factory import rental


@pytest.mark.parametrize(("value", "kind"), [(["kind", "rental"], "list"), ("rental", "str"), (None, "NoneType")])
def test_a_record_that_is_not_a_json_object_is_named_by_its_type(value, kind):
    """Regression for #62: validate() says what a record that is not a JSON object is, and nothing else."""
    assert records.validate(value) == [f"a record must be a JSON object, not {kind}"]


def _failing_fsync(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", fsync)


def test_a_write_that_fails_cuts_the_file_back_to_its_earlier_records(tmp_path, monkeypatch):
    """Regression for #62: a failed append takes back only its own bytes; the earlier record stays whole and readable."""
    first = rental()
    path = records.append(tmp_path, first)
    before = path.read_bytes()
    _failing_fsync(monkeypatch)
    with pytest.raises(UserError, match=r"^could not write a rental record to .*the disk is full"):
        assert records.append(tmp_path, {**rental(total="94.28", lots=2), "run_id": first["run_id"]}) == path
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert len(reading.load(tmp_path).records) == 1


def test_a_first_write_that_fails_leaves_no_empty_file(tmp_path, monkeypatch):
    """Regression for #62: a new records file whose first write fails is removed, so no reader meets an empty file."""
    _failing_fsync(monkeypatch)
    with pytest.raises(UserError, match="the disk is full"):
        records.append(tmp_path, rental())
    monkeypatch.undo()
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []


@pytest.mark.parametrize(("host", "named"), [("GPU_box.lab-2.example", "GPUboxlab-2example"),
                                             ("a" * 30, "a" * 24), ("___", "host"), ("", "host")])
def test_a_run_id_names_the_host_by_its_letters_digits_and_dashes(monkeypatch, host, named):
    """Regression for #62: the run id keeps the host name's letters, digits and dashes (a folder-safe name, at most 24
    of them), or says "host"; no selected test read it."""
    monkeypatch.setattr(records.socket, "gethostname", lambda: host)
    run_id = records.new_run_id()
    assert run_id.startswith(f"run-{named}-") and len(run_id) == len(f"run-{named}-20261207T000000Z-") + 12


def test_a_failed_write_to_an_empty_records_file_that_was_there_keeps_it(tmp_path, monkeypatch):
    """Regression for #62: only a records file this write made is removed when the write fails; one that was there,
    empty, stays (it may be another writer's, just made)."""
    path = records.append(tmp_path, rental())
    path.write_bytes(b"")
    _failing_fsync(monkeypatch)
    with pytest.raises(UserError, match="the disk is full"):
        records.append(tmp_path, {**rental(total="94.28", lots=2), "run_id": path.stem})
    monkeypatch.undo()
    assert path.is_file() and path.read_bytes() == b""


def test_a_record_that_the_kernel_takes_in_parts_is_written_whole(tmp_path, monkeypatch):
    """Regression for #62: a write may take fewer bytes than asked (a pipe, a signal, a nearly full quota); the rest is
    written after it, never dropped."""
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    record = rental()
    path = records.append(tmp_path, record)
    monkeypatch.undo()
    assert [loaded["run_id"] for loaded in reading.load(tmp_path).records] == [record["run_id"]]
    assert path.read_bytes().endswith(b"\n") and reading.load(tmp_path).problems == []


def test_a_failed_write_keeps_what_a_writer_appended_while_it_waited_for_the_lock(tmp_path, monkeypatch):
    """Regression for #62: the file did not exist when this write began, another writer made it and appended first
    (this one waiting for the lock), then this write failed: the other writer's record stays."""
    other = rental()
    path = records.records_file(tmp_path, other["campaign"], other["run_id"])
    real_flock = records.fcntl.flock

    def other_writer_first(fd, operation):
        if not path.stat().st_size:
            with open(path, "ab") as handle:
                handle.write(json.dumps(other, sort_keys=True).encode() + b"\n")
        return real_flock(fd, operation)

    monkeypatch.setattr(records.fcntl, "flock", other_writer_first)
    _failing_fsync(monkeypatch)
    with pytest.raises(UserError, match="the disk is full"):
        records.append(tmp_path, {**rental(total="94.28", lots=2), "run_id": other["run_id"]})
    monkeypatch.undo()
    assert [loaded["total"] for loaded in reading.load(tmp_path).records] == [other["total"]]


@pytest.mark.parametrize(("stamp", "shown"), [("2026-12-07T05:00:00.123456Z", "2026-12-07 05:00:00 UTC"),
                                              ("2026-12-07T12:00:00+07:00", "2026-12-07T12:00:00+07:00"),
                                              (None, None), (17, 17)])
def test_a_time_is_shown_to_the_second_only_when_it_is_utc(stamp, shown):
    """Regression for #62: a record's UTC time is shown to the second; any other value as it is."""
    assert records.shown_time(stamp) == shown


def test_a_name_that_cannot_be_a_folder_is_refused_with_the_rule():
    """Regression for #62: the refusal says the whole rule, its end included."""
    with pytest.raises(UserError) as refused:
        records.check_name("../up", "campaign")
    assert str(refused.value) == ("campaign '../up' is not a valid name: use letters, digits, '.', '_' or '-' "
                                  "(at most 128, starting with a letter or digit)")


@pytest.mark.parametrize(("path", "safe"), [("a" * 255, True), ("a" * 256, False), ("d/" + "é" * 127 + "a", True),
                                            ("d/" + "é" * 128, False)])
def test_a_path_part_may_hold_255_bytes_the_longest_file_name(path, safe):
    """Regression for #62: a part of 255 bytes (UTF-8) is a file name; one of 256 is refused, not "File name too long"."""
    assert records.safe_relative_path(path) is safe


@pytest.mark.parametrize("length", [60, 61])
def test_a_refused_path_is_quoted_to_its_first_60_characters(length):
    """Regression for #62: a refused path is quoted whole up to 60 characters, its first 60 and "..." beyond."""
    path = ("../" + "r" * 80)[:length]
    problems = records.validate({**rental(), "receipt": {"path": path, "sha256": "0" * 64, "size_bytes": 1}})
    assert problems == [f"receipt.path: {path[:60]!r}{'...' if length > 60 else ''} must be a path relative to the runs "
                        "folder, without '..'"]


def test_a_valid_record_never_reaches_the_pure_python_validator(monkeypatch):
    """Regression for #62: a valid record is checked by the compiled validator alone; the pure-Python one, which names
    the field of a problem, is for invalid records (the reading's speed: tests/benchmarks/README.md, "jsonschema-rs")."""
    def slow(*_):
        raise AssertionError("the pure-Python validator ran for a valid record")
    records._fast_validators()  # built once from the schemas the pure-Python validators hold
    monkeypatch.setattr(records, "_validators", slow)
    assert records.validate(rental()) == []
