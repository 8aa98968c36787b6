"""Rules of store/records.py that the mutation run (#62) found no selected test holding in its own process: the
full-disk test of test_records.py writes from a subprocess, which imports the package, not the mutated copy."""

import errno
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
    with pytest.raises(UserError, match="the disk is full"):
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
