"""The columnar record cache (issue #22): never trusted blindly, and the site is the same with it or without it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iteralab.site import stored
from iteralab.site.build import build_site
from iteralab.store import columns, folded, reading, records

FIXTURE = Path(__file__).parent / "fixtures" / "demo-runs"
TRIALS_FILE = "demo-rotten-tomatoes/records/run-vm-20261203T062412Z-7432b5c24c0c.jsonl"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")
    copy = tmp_path / "runs"
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.fixture
def checked(monkeypatch):
    """Count the records checked against the schemas (each line read from the records rather than the cache)."""
    seen = []
    original = records.validate
    monkeypatch.setattr(records, "validate", lambda record: seen.append(record["record_id"]) or original(record))
    return seen


def everything(runs: Path) -> tuple:
    loaded = reading.load(runs)
    return loaded.records, loaded.sources, loaded.problems


def tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_warm_read_checks_nothing_again_and_gives_what_a_cold_one_gave(runs, checked):
    cold = everything(runs)
    assert len(checked) == 25 and len(cold[0]) == 25
    checked.clear()
    table = reading.load_table(runs)
    assert checked == [] and len(table.frame) == 25  # every row came from the cache
    assert everything(runs) == cold and checked == []
    trials = table.frame[table.frame["kind"] == "trial"]
    assert trials["measured_window_ns"].notna().sum() == (trials["status"] == "ok").sum()  # a failed trial's figure is empty


def _truncate(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def _flip(blob: bytes) -> bytes:
    middle = len(blob) - 200  # inside the Arrow payload, past the header line
    return blob[:middle] + bytes([blob[middle] ^ 0x01]) + blob[middle + 1:]


def _other_version(blob: bytes) -> bytes:
    end = blob.index(b"\n", len(columns.MAGIC))
    header = json.loads(blob[len(columns.MAGIC):end])
    return columns.MAGIC + json.dumps({**header, "format": columns.FORMAT + 1}).encode() + blob[end:]


def _not_an_object(blob: bytes) -> bytes:
    end = blob.index(b"\n", len(columns.MAGIC))
    return columns.MAGIC + b"[1, 2]" + blob[end:]


@pytest.mark.parametrize("damage", [_truncate, _flip, _other_version, _not_an_object, lambda blob: b""],
                         ids=["truncated", "bit-flip", "other-version", "header-not-an-object", "emptied"])
def test_a_damaged_cache_file_is_detected_and_rebuilt_from_the_records(runs, checked, damage):
    cold = everything(runs)
    caches = sorted((runs.parent / "cache" / "columns").glob("*.arrow"))
    assert len(caches) == 5  # one per records file
    for cache in caches:
        cache.write_bytes(damage(cache.read_bytes()))
    for whole in (runs.parent / "cache" / "folders").glob("*.arrow"):
        whole.unlink()  # the folder's cache, read before them, damaged too (its own test below)
    checked.clear()
    assert everything(runs) == cold
    assert len(checked) == 25  # every line parsed and checked again
    assert all(columns.read_cache(path) is not None for path in reading.record_files(runs))  # and the cache made anew
    checked.clear()
    assert everything(runs) == cold and checked == []


def _other_folded_version(blob: bytes) -> bytes:
    end = blob.index(b"\n", len(folded.MAGIC))
    header = json.loads(blob[len(folded.MAGIC):end])
    return folded.MAGIC + json.dumps({**header, "format": folded.FORMAT + 1}).encode() + blob[end:]


@pytest.mark.parametrize("damage", [_truncate, _flip, _other_folded_version, lambda blob: b""],
                         ids=["truncated", "bit-flip", "other-version", "emptied"])
def test_a_damaged_folder_cache_is_detected_and_written_anew(runs, checked, damage):
    """The whole folder's rows in one file (#45): damaged, each file's own cache is read instead, never a wrong row."""
    cold = everything(runs)
    (whole,) = (runs.parent / "cache" / "folders").glob("*.arrow")
    whole.write_bytes(damage(whole.read_bytes()))
    assert folded.read(runs) is None
    checked.clear()
    assert everything(runs) == cold and checked == []  # from the files' own caches, whose bytes are checked
    assert folded.read(runs) is not None  # and written anew


def test_a_folder_cache_holds_each_file_as_it_was_read_and_the_files_appended_since_are_read_beside_it(runs, checked):
    """A new or appended file is read through its own cache; the folder's one is written again once a sixteenth is new."""
    from tests import factory

    everything(runs)
    (whole,) = (runs.parent / "cache" / "folders").glob("*.arrow")
    written = whole.stat().st_mtime_ns
    manifest = factory.manifest("other", "run-1")
    records.append(runs, manifest)
    checked.clear()
    assert len(reading.load_table(runs).frame) == 26 and len(checked) == 1  # the new line alone
    assert whole.stat().st_mtime_ns == written  # one row of 26 is less than a sixteenth: not written again
    for variant in ("b1", "b2"):
        records.append(runs, factory.trial(manifest, variant))
    checked.clear()
    again = reading.load_table(runs)
    assert len(again.frame) == 28 and len(checked) == 2  # the manifest's line from its file's cache
    assert whole.stat().st_mtime_ns != written  # three rows of 28: written again, with them
    checked.clear()
    assert reading.load_table(runs).frame.equals(again.frame) and checked == []
    for cache in (runs.parent / "cache").rglob("*.arrow"):
        cache.unlink()
    cold = reading.load_table(runs)
    assert cold.frame.equals(again.frame) and cold.problems == again.problems and cold.digests == again.digests


def test_a_records_file_rewritten_under_its_cache_is_read_again(runs, checked):
    everything(runs)
    path = runs / TRIALS_FILE
    data = path.read_bytes()
    line = data.split(b"\n")[1]
    trial = json.loads(line)
    edited = {**trial, "throughput_entries_per_s": trial["throughput_entries_per_s"] + 1}
    replacement = json.dumps(edited, sort_keys=True).encode()
    path.write_bytes(data.replace(line, replacement, 1))
    checked.clear()
    loaded = reading.load(runs)
    assert len(checked) == 21  # the whole file checked again, not only what follows the old prefix
    assert next(r for r in loaded.records if r["record_id"] == trial["record_id"]) == edited


def test_lines_appended_after_the_cache_are_the_only_ones_checked(runs, checked):
    everything(runs)
    path = runs / TRIALS_FILE
    trial = json.loads(path.read_bytes().split(b"\n")[1])
    records.append(runs, {**trial, "record_id": records.new_id("trial"), "sequence": 999})
    checked.clear()
    assert len(reading.load(runs).records) == 26 and len(checked) == 1


def test_the_site_is_byte_identical_with_a_warm_cache_a_cold_one_and_a_damaged_one(runs, tmp_path):
    build_site(runs=runs, out=tmp_path / "cold" / "site")
    assert list((tmp_path / "cache" / "columns").glob("*.arrow"))
    build_site(runs=runs, out=tmp_path / "warm" / "site")
    for cache in (tmp_path / "cache" / "columns").glob("*.arrow"):
        cache.write_bytes(_flip(cache.read_bytes()))
    build_site(runs=runs, out=tmp_path / "damaged" / "site")
    cold = tree(tmp_path / "cold" / "site")
    assert len(cold) > 20
    assert tree(tmp_path / "warm" / "site") == cold == tree(tmp_path / "damaged" / "site")


def test_two_builds_at_once_leave_a_sound_cache_and_the_same_site(runs, tmp_path, monkeypatch):
    """Both start cold and write every cache file at the same time; neither sees a half-written one."""
    monkeypatch.setenv(stored.LIMIT_SETTING, str(stored.DEFAULT_LIMIT_MB))  # the campaign store too (#22)
    command = [sys.executable, "-m", "iteralab", "build", "--runs", str(runs), "--out"]
    both = [subprocess.Popen([*command, str(tmp_path / name / "site")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in ("first", "second")]
    for process in both:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0 and "Traceback" not in err, out + err
    assert all(columns.read_cache(path) is not None for path in reading.record_files(runs))
    # Both stored each rendered campaign under the same name at the same time: each entry is whole (#22).
    store = sorted((tmp_path / "cache" / "campaigns").glob("*/*.bin"))
    assert store and all(stored.load(entry.stem) is not None for entry in store)
    build_site(runs=runs, out=tmp_path / "after" / "site")
    after = tree(tmp_path / "after" / "site")
    assert tree(tmp_path / "first" / "site") == after == tree(tmp_path / "second" / "site")


def test_a_template_cache_that_cannot_be_written_only_costs_compiling_again(tmp_path):
    """Compiled templates are cached per machine (#22); a full disk or a vanished folder there never stops a build."""
    from iteralab.pages.render import QuietBytecodeCache, jinja_environment

    gone = QuietBytecodeCache(str(tmp_path / "not-there"))
    environment = jinja_environment().overlay(bytecode_cache=gone)
    assert environment.get_template("404.html").render(root="/", stamp="s", catalog=type("C", (), {"version": "v"})())
    assert not (tmp_path / "not-there").exists()


def _more_campaigns(runs: Path) -> None:
    """Add three campaigns, each in a records file of its own, one with a line that is not a record."""
    from tests import factory

    for index in range(3):
        manifest = factory.manifest(f"many{index}", f"run-{index}")
        records.append(runs, manifest)
        records.append(runs, factory.trial(manifest, "b1"))
    with records.records_file(runs, "many0", "run-0").open("a", encoding="utf-8") as handle:
        handle.write("{not a record\n")


def test_a_first_read_of_many_files_on_every_core_gives_what_one_core_gives(runs, tmp_path, monkeypatch):
    """A first read parses files without a cache on every core; the table, problems and caches are those of one core."""
    from iteralab.core import processes

    _more_campaigns(runs)
    one = reading.load_table(runs)  # one core: every file is below the threshold
    for cache in (tmp_path / "cache").rglob("*.arrow"):
        cache.unlink()
    monkeypatch.setattr(reading, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(processes, "available_cores", lambda: 2)
    started = []
    spawn = processes.spawned_pool
    monkeypatch.setattr(processes, "spawned_pool", lambda count, **options: started.append(count) or spawn(count, **options))
    every = reading.load_table(runs)
    assert started == [2]  # the files were parsed in two spawned processes
    assert every.frame.equals(one.frame) and every.problems == one.problems and every.digests == one.digests
    assert any("many0" in problem for problem in every.problems)
    # The folder's cache holds every file: the next read parses nothing. The workers wrote no file's own cache (4,000
    # files made and renamed took 3 s of a first read of 1,000 campaigns); a file appended later is parsed whole once.
    assert not any(columns.cache_exists(path) for path in every.paths)
    started.clear()
    again = reading.load_table(runs)
    assert started == [] and again.frame.equals(one.frame)
    appended = every.paths[0]
    with appended.open("a", encoding="utf-8") as handle:
        handle.write("{not a record\n")
    later = reading.load_table(runs)
    assert started == [] and columns.cache_exists(appended)  # read here, whole, and its own cache written
    assert later.frame.equals(one.frame) and len(later.problems) == len(one.problems) + 1


def test_a_first_read_where_no_process_can_be_started_reads_every_file_itself(runs, tmp_path, monkeypatch):
    """A sandbox that refuses new processes costs the first read its speed, not the read."""
    from iteralab.core import processes

    _more_campaigns(runs)
    one = reading.load_table(runs)
    for cache in (tmp_path / "cache").rglob("*.arrow"):
        cache.unlink()
    monkeypatch.setattr(reading, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(processes, "available_cores", lambda: 2)
    refusals = []

    def refused(count, **options):
        refusals.append(count)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(processes, "spawned_pool", refused)
    table = reading.load_table(runs)
    assert refusals == [2] and table.frame.equals(one.frame) and table.problems == one.problems


def test_a_merged_copy_of_a_records_file_is_parsed_once_and_read_as_its_own_file(runs, checked, monkeypatch, tmp_path):
    """Regression for #33: a folder merged with its copy parsed and compared every record twice, one at a time."""
    original = runs / TRIALS_FILE
    with open(original, "ab") as handle:  # a bad line and a torn one: the copy must name them at its own place
        handle.write(b'{"kind": "trial"}\n{"torn')
    copy = original.with_name("run-vm-copy.jsonl")
    shutil.copyfile(original, copy)
    cold = everything(runs)
    assert len(checked) == 21 + 4  # the copy's lines were not checked again: its columns are the original's
    assert len(cold[0]) == 25
    names = {problem.split(":")[0] for problem in cold[2]}
    assert names == {TRIALS_FILE, TRIALS_FILE.replace(original.name, copy.name)}
    assert [p.split(":", 1)[1] for p in cold[2] if p.startswith(TRIALS_FILE + ":")] == \
        [p.split(":", 1)[1] for p in cold[2] if not p.startswith(TRIALS_FILE + ":")]
    checked.clear()
    assert everything(runs) == cold and checked == []  # the copy has a cache of its own now
    # The same folder read with no cache at all, one file at a time, gives the same records and problems.
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "other-cache"))
    monkeypatch.setattr(reading, "_identical", lambda paths, cold: {})
    assert everything(runs) == cold


def test_a_merged_copy_with_one_record_changed_checks_each_distinct_line_once_per_read(runs, checked):
    """Regression for #33: ids reused with other content made a merged folder's first read parse every line twice."""
    original = runs / TRIALS_FILE
    lines = original.read_bytes().split(b"\n")[:-1]
    changed = json.loads(lines[5])
    changed["created_at"] = "2000-01-01T00:00:00.000000Z"
    lines[5] = json.dumps(changed).encode()
    original.with_name("run-vm-copy.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    loaded = reading.load(runs)
    assert len(checked) == 25 + 1  # the changed line is the only one of the copy checked
    (problem,) = loaded.problems
    assert problem.startswith("demo-rotten-tomatoes/records/run-vm-copy.jsonl:6: record_id ") and "other content" in problem
    assert len(loaded.records) == 25
