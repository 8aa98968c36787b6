"""Append-only record store: durability, concurrency, validation, merging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from iteralab.core.errors import UserError
from iteralab.store import columns, reading, records
from tests import factory

SHA = "0" * 64


def rental(campaign="demo", run_id="run-a", **overrides):
    fields = dict(gpu="rtx-4090", lots=1, days=3, start="2026-09-28T09:00", end=None,
                  catalog_version="2026-09-24", price_per_lot="47.14", total="47.14", currency="USD",
                  cards_per_lot=1, gpus=1, receipt=None)
    fields.update(overrides)
    return records.make_record("rental", campaign=campaign, run_id=run_id, **fields)


def test_append_then_load_round_trips_with_sources(tmp_path):
    first, second = rental(), rental(lots=2, total="94.28", gpus=2)
    path = records.append(tmp_path, first)
    records.append(tmp_path, second)
    assert path == tmp_path / "demo" / "records" / "run-a.jsonl"
    assert path.read_bytes().count(b"\n") == 2
    loaded = reading.load(tmp_path)
    assert loaded.problems == []
    assert [r["record_id"] for r in loaded.of_kind("rental")] == [first["record_id"], second["record_id"]]
    assert loaded.sources == ["demo/records/run-a.jsonl:1", "demo/records/run-a.jsonl:2"]
    assert loaded.of_kind("trial") == []


def test_loading_pauses_the_garbage_collector_and_gives_it_back_as_it_was(tmp_path):
    import gc

    records.append(tmp_path, rental())
    assert gc.isenabled()
    reading.load(tmp_path)
    assert gc.isenabled()
    gc.disable()
    try:
        reading.load(tmp_path)
        assert not gc.isenabled()  # a caller that had paused it keeps it paused
    finally:
        gc.enable()


def test_torn_last_line_is_reported_and_the_next_append_starts_a_new_line(tmp_path, cli):
    path = records.append(tmp_path, rental())
    intact = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(b'{"schema_version": 1, "kind": "ren')  # a crash mid-write
    torn = path.read_bytes()
    code, out, _ = cli("check", tmp_path)
    assert code == 1 and "demo/records/run-a.jsonl:2: incomplete last line" in out
    later = rental()
    records.append(tmp_path, later)
    data = path.read_bytes()
    assert data.startswith(torn)  # the old bytes are never touched
    assert data.startswith(intact)
    loaded = reading.load(tmp_path)
    assert [r["record_id"] for r in loaded.records][-1] == later["record_id"]
    assert len(loaded.problems) == 1
    assert loaded.problems[0].startswith("demo/records/run-a.jsonl:2: not valid JSON (Unterminated string")


WRITER = textwrap.dedent("""
    import sys
    from iteralab.store import records
    runs, run_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for index in range(count):
        record = records.make_record("rental", campaign="demo", run_id=run_id, gpu="rtx-4090", lots=1, days=3,
            start="2026-09-28T09:00", catalog_version="2026-09-24", price_per_lot="47.14", total="47.14",
            currency="USD", cards_per_lot=1, gpus=1, receipt=None, note="x" * 20000 + str(index))
        records.append(runs, record)
        print(record["record_id"], flush=True)
""")


@pytest.mark.slow
def test_writer_killed_with_sigkill_loses_no_acknowledged_record(tmp_path, cli):
    """Every record the writer reported as written survives a SIGKILL; check reports at most a torn tail."""
    for attempt in range(3):
        process = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"run-{attempt}", "100000"],
                                   stdout=subprocess.PIPE, text=True)
        acknowledged = [process.stdout.readline().strip() for _ in range(20 + attempt * 7)]
        process.send_signal(signal.SIGKILL)
        process.wait()
        acknowledged += [line.strip() for line in process.stdout if line.strip()]
        process.stdout.close()
        loaded = reading.load(tmp_path)
        ids = {record["record_id"] for record in loaded.records}
        assert set(acknowledged) <= ids
        assert all("incomplete last line" in problem for problem in loaded.problems), loaded.problems
    code, out, _ = cli("check", tmp_path)
    assert code in (0, 1) and "Traceback" not in out


@pytest.mark.slow
def test_concurrent_writers_produce_every_record_exactly_once(tmp_path):
    # Half the writers share one run file (the lock keeps lines whole), half have their own.
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"run-{index % 2 if index < 4 else index}", "40"],
                         stdout=subprocess.PIPE, text=True)
        for index in range(6)
    ]
    written = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        written += out.split()
    loaded = reading.load(tmp_path)
    assert loaded.problems == []
    assert sorted(record["record_id"] for record in loaded.records) == sorted(written)
    assert len(written) == 240


def test_copied_folders_merge_each_record_once(tmp_path):
    machine_a, machine_b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    shared = rental(run_id="run-shared")
    records.append(machine_a, shared)
    records.append(machine_b, shared)  # the same record copied to both machines
    records.append(machine_b, rental(run_id="run-b"))
    for source in (machine_a, machine_b):
        for path in source.rglob("*.jsonl"):
            target = merged / "copies" / source.name / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    loaded = reading.load(merged)
    assert loaded.problems == []
    assert len(loaded.records) == 2


def test_same_record_id_with_other_content_is_reported(tmp_path):
    original = rental()
    records.append(tmp_path, original)
    forged = dict(original, run_id="run-b", total="1.00")
    records.append(tmp_path, forged)
    loaded = reading.load(tmp_path)
    assert len(loaded.records) == 1
    assert "already read with other content" in loaded.problems[0]


@pytest.mark.parametrize("bad_path", ["/etc/passwd", "../outside.pdf", "demo/../../x", "C:/receipt.pdf", "a\\b"])
def test_paths_that_leave_the_runs_folder_are_refused(tmp_path, bad_path):
    record = rental(receipt={"path": bad_path, "sha256": SHA, "size_bytes": 1})
    with pytest.raises(UserError, match="relative to the runs folder"):
        records.append(tmp_path, record)
    assert not list(tmp_path.rglob("*.jsonl"))


def test_invalid_records_are_refused_on_write_and_listed_on_read(tmp_path, cli):
    with pytest.raises(UserError, match="lots"):
        records.append(tmp_path, rental(lots=0))
    folder = tmp_path / "demo" / "records"
    folder.mkdir(parents=True)
    good = rental()
    lines = [
        json.dumps(good),
        "[1, 2]",
        json.dumps({**rental(), "kind": "invoice"}),
        json.dumps({**rental(), "total": 220.0}),
        json.dumps({**rental(), "schema_version": 99}),
        json.dumps({**rental(), "schema_version": "one"}),
        "\udcff".encode("utf-8", "surrogateescape").decode("latin-1"),
    ]
    (folder / "hand.jsonl").write_bytes("\n".join(lines[:-1]).encode() + b"\n\xff\xfe\n")
    code, out, _ = cli("check", tmp_path)
    assert code == 1
    problems = out.splitlines()[:-1]
    assert problems == [
        "demo/records/hand.jsonl:2: a record must be a JSON object, not list",
        "demo/records/hand.jsonl:3: kind: 'invoice' is not one of ['manifest', 'trial', 'rental', 'deliverable', 'exclusion', 'withdrawal', 'expense', 'start', 'resumption']",
        "demo/records/hand.jsonl:4: total: 220.0 is not of type 'string'",
        "demo/records/hand.jsonl:5: schema_version 99 is newer than this iteralab understands (1): upgrade iteralab to read it",
        "demo/records/hand.jsonl:6: schema_version 'one' is not a positive integer",
        "demo/records/hand.jsonl:7: not valid UTF-8",
    ]
    assert out.splitlines()[-1].startswith("1 records")


def test_check_on_a_clean_folder_exits_zero_and_counts(tmp_path, cli):
    records.append(tmp_path, rental())
    code, out, _ = cli("check", tmp_path, "--json")
    assert code == 0 and json.loads(out)["by_kind"]["rental"] == 1


def test_check_on_a_missing_folder_is_a_user_error(tmp_path, cli):
    code, _, err = cli("check", tmp_path / "nowhere")
    assert code == 1 and "is not a folder" in err


def test_campaign_names_that_are_not_folder_names_are_refused(tmp_path):
    with pytest.raises(UserError, match="not a valid name"):
        records.append(tmp_path, rental(campaign="../evil"))


def test_migrations_run_in_order_up_to_the_current_version(monkeypatch):
    monkeypatch.setattr(records, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(records, "MIGRATIONS", {
        2: lambda record: {**record, "schema_version": 2, "steps": ["2"]},
        3: lambda record: {**record, "schema_version": 3, "steps": [*record["steps"], "3"]},
    })
    assert records.upgrade({"schema_version": 1})["steps"] == ["2", "3"]


def test_records_are_written_in_one_line_each(tmp_path):
    record = rental(note="line one\nline two <script>")
    path = records.append(tmp_path, record)
    assert path.read_text(encoding="utf-8").count("\n") == 1
    assert reading.load(tmp_path).records[0]["note"] == "line one\nline two <script>"


def test_writing_into_a_full_disk_gives_a_clear_error_and_keeps_earlier_records(tmp_path):
    import resource

    path = records.append(tmp_path, rental())
    before = path.read_bytes()
    code = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 100}, {len(before) + 100}))
        from iteralab.store import records
        from iteralab.core.errors import UserError
        record = records.make_record("rental", campaign="demo", run_id="run-a", gpu="rtx-4090", lots=1, days=3,
            start="s", catalog_version="v", price_per_lot="1.00", total="1.00", currency="USD",
            cards_per_lot=1, gpus=1, receipt=None, note="x" * 5000)
        try:
            records.append(sys.argv[1], record)
        except UserError as error:
            print(error)
            sys.exit(1)
    """)
    del resource
    result = subprocess.run([sys.executable, "-B", "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "untouched" in result.stdout
    assert path.read_bytes().startswith(before)
    loaded = reading.load(tmp_path)
    assert len(loaded.records) == 1


def test_append_is_flushed_to_disk(tmp_path, monkeypatch):
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    records.append(tmp_path, rental())
    assert calls, "append must fsync"
    time.sleep(0)


def test_a_validated_prefix_is_not_checked_twice_but_any_change_is(tmp_path, monkeypatch):
    calls = []
    real_validate = records.validate
    monkeypatch.setattr(records, "validate", lambda record: (calls.append(record["record_id"]), real_validate(record))[1])
    first, second = rental(), rental()
    path = records.append(tmp_path, first)
    records.append(tmp_path, second)
    calls.clear()
    assert len(reading.load(tmp_path).records) == 2 and len(calls) == 2
    calls.clear()
    assert len(reading.load(tmp_path).records) == 2 and calls == []  # nothing new: the prefix is trusted
    third = rental()
    records.append(tmp_path, third)
    calls.clear()
    assert len(reading.load(tmp_path).records) == 3 and calls == [third["record_id"]]  # only the appended line
    # An edit inside the checked prefix changes its hash: every line is checked again and the bad one reported.
    data = path.read_bytes().replace(b'"lots": 1', b'"lots": 0', 1)
    path.write_bytes(data)
    calls.clear()
    loaded = reading.load(tmp_path)
    assert len(calls) == 3 and len(loaded.records) == 2
    assert loaded.problems[0].startswith("demo/records/run-a.jsonl:1: lots:")


def test_schema_problems_name_the_nested_field_and_keep_messages_short():
    manifest = factory.manifest()
    trial = factory.trial(manifest)
    trial["phases"]["measured_window"]["duration_ns"] = "x"
    # One message per field: a successful trial's window must be a whole number; a stopped trial's may be null.
    assert records.validate(trial) == ["phases.measured_window.duration_ns: 'x' is not of type 'integer'"]
    stopped = factory.trial(manifest, status="error", failed_phase="model_load")
    stopped["phases"]["warmup"]["duration_ns"] = "x"
    assert records.validate(stopped) == ["phases.warmup.duration_ns: 'x' is not of type 'integer', 'null'"]
    missing = rental()
    del missing["total"]
    assert records.validate(missing) == ["record: 'total' is a required property"]
    # A message of 199 characters is kept whole; from 200 on it is cut to 197 and '...'.
    kept, cut = rental(), rental()
    kept["total"], cut["total"] = ["a" * 171], ["a" * 172]
    assert records.validate(kept) == ["total: ['" + "a" * 171 + "'] is not of type 'string'"]
    assert records.validate(cut) == ["total: ['" + "a" * 172 + "'] is not of type 'stri..."]


def test_a_record_changed_after_it_was_read_is_validated_again(tmp_path, monkeypatch):
    """The validated-prefix cache trusts a prefix only while its bytes are unchanged."""
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "fresh" / "cache"))  # not there yet: made on first read
    path = records.append(tmp_path / "runs", rental(total="47.14"))
    records.append(tmp_path / "runs", rental(total="94.28", lots=2, gpus=2))
    assert reading.load(tmp_path / "runs").problems == []
    assert list((tmp_path / "fresh" / "cache" / "columns").glob("*.arrow"))
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"total": "47.14"', b'"total": 47.1400', 1))  # same size, now invalid
    assert len(path.read_bytes()) == len(data)
    problems = reading.load(tmp_path / "runs").problems
    assert problems == ["demo/records/run-a.jsonl:1: total: 47.14 is not of type 'string'"]


def test_a_runs_folder_whose_name_is_not_utf8_loads(tmp_path):
    import os

    folder = tmp_path / os.fsdecode(b"runs-\xff")
    records.append(folder, rental())
    loaded = reading.load(folder)
    assert loaded.problems == [] and len(loaded.records) == 1


@pytest.mark.parametrize(("value", "safe"), [
    ("demo/inputs/c.jsonl", True), ("", False), (None, False), (5, False), ("a\x00b", False), ("a\\b", False),
    ("/etc/passwd", False), ("demo/../x", False), ("C:/x", False)])
def test_only_relative_paths_inside_the_runs_folder_are_safe(value, safe):
    assert records.safe_relative_path(value) is safe


def test_new_schemas_validate_every_line_again(tmp_path, monkeypatch):
    records.append(tmp_path, rental())
    records.append(tmp_path, rental(total="94.28", lots=2, gpus=2))
    records.append(tmp_path, rental(run_id="run-b"))  # each file has its own cache entry
    reading.load(tmp_path)
    checked = []
    original = records.validate
    monkeypatch.setattr(records, "validate", lambda record: checked.append(record) or original(record))
    reading.load(tmp_path)
    assert checked == []  # unchanged bytes under unchanged schemas: read from the cache
    monkeypatch.setattr(columns, "_schemas_digest", lambda: "schemas of a newer iteralab")
    reading.load(tmp_path)
    assert len(checked) == 3


def test_append_writes_one_sorted_utf8_line_and_refuses_what_json_cannot_hold(tmp_path):
    record = rental(campaign="demo", receipt=None)
    record["currency"] = "USD"
    path = records.append(tmp_path, {**record, "catalog_version": "2026-09-24 · reçu"})
    line = path.read_bytes()
    assert "reçu".encode() in line and b"\\u00e7" not in line  # text stays readable UTF-8
    keys = list(json.loads(line))
    assert keys == sorted(keys)
    manifest = factory.manifest()
    trial = factory.trial(manifest)
    trial["throughput_entries_per_s"] = float("nan")
    with pytest.raises(UserError, match=r"^refusing to write trial: Out of range float values are not JSON compliant"):
        records.append(tmp_path, trial)
    bad = rental()
    bad["total"], bad["lots"] = 1, "two"
    with pytest.raises(UserError) as error:
        records.append(tmp_path, bad)
    assert str(error.value) == "refusing to write rental: lots: 'two' is not of type 'integer'; total: 1 is not of type 'string'"
    kindless = rental()
    del kindless["kind"]
    with pytest.raises(UserError, match=r"^refusing to write record: record: 'kind' is a required property"):
        records.append(tmp_path, kindless)
    with pytest.raises(UserError, match=r"^campaign 'a/b' is not a valid name"):
        records.append(tmp_path, rental(campaign="a/b"))
    with pytest.raises(UserError, match=r"^run id '\.\.' is not a valid name"):
        records.append(tmp_path, rental(run_id=".."))
    with pytest.raises(UserError, match=r"schema_version 0 is not a positive integer"):
        records.upgrade({**rental(), "schema_version": 0})


def test_reading_goes_on_after_a_bad_line_and_the_cache_keeps_every_problem(tmp_path):
    folder = tmp_path / "demo" / "records"
    folder.mkdir(parents=True)
    good = [json.dumps(rental(total=f"{n}.00")) for n in (1, 2, 3)]
    (folder / "hand.jsonl").write_text("\n".join([good[0], "[1]", good[1], "{broken", good[2]]) + "\n" + '{"torn', encoding="utf-8")
    expected = ["demo/records/hand.jsonl:2: a record must be a JSON object, not list",
                "demo/records/hand.jsonl:4: not valid JSON (Expecting property name enclosed in double quotes, column 2)",
                "demo/records/hand.jsonl:6: incomplete last line (a write was cut off); it is skipped"]
    for _ in range(2):  # the second read comes from the validated-prefix cache
        loaded = reading.load(tmp_path)
        assert [r["total"] for r in loaded.records] == ["1.00", "2.00", "3.00"]
        assert loaded.problems == expected


def test_deliverables_of_different_corpora_are_not_repeats(tmp_path):
    manifest = factory.manifest()
    trial = factory.trial(manifest)
    for record in (manifest, trial, factory.deliverable("camp", trial, "c"), factory.deliverable("camp", trial, "d")):
        records.append(tmp_path, record)
    assert reading.load(tmp_path).problems == []
    other = factory.manifest("other", "run-9")
    other_trial = factory.trial(other)
    for record in (other, other_trial, factory.deliverable("other", other_trial, "c")):
        records.append(tmp_path, record)
    assert reading.load(tmp_path).problems == []  # the same corpus in another campaign is that campaign's deliverable


def test_ids_name_their_kind_and_the_utc_second_even_where_local_time_is_not_utc(monkeypatch):
    import datetime as dt
    import re

    monkeypatch.setenv("TZ", "Asia/Jakarta")  # UTC+7 all year: a local clock would be seven hours off
    time.tzset()
    try:
        before = dt.datetime.now(dt.UTC).replace(microsecond=0)
        record_id, created_at = records.new_id("trial"), records.utc_now()
        record = records.make_record("rental", campaign="demo", run_id="run-a")
        after = dt.datetime.now(dt.UTC)
    finally:
        monkeypatch.undo()
        time.tzset()
    match = re.fullmatch(r"trial-(\d{8}T\d{6}Z)-[0-9a-f]{12}", record_id)
    assert match, record_id
    stamp = dt.datetime.strptime(match[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    assert before <= stamp <= after
    created = dt.datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert before <= created <= after
    assert re.fullmatch(r"rental-\d{8}T\d{6}Z-[0-9a-f]{12}", record["record_id"])
    assert len({records.new_id("trial") for _ in range(1000)}) == 1000


def test_a_new_records_file_is_readable_by_all_and_writable_by_its_owner_only(tmp_path):
    previous = os.umask(0)  # so the mode passed to open() is the mode the file gets
    try:
        path = records.append(tmp_path, rental())
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_line_with_several_schema_problems_names_each_on_every_read(tmp_path):
    """Regression for #13: problem lines kept by the cache must stay problems, never become trusted."""
    folder = tmp_path / "demo" / "records"
    folder.mkdir(parents=True)
    bad = {**rental(), "lots": "two", "total": 1}
    (folder / "hand.jsonl").write_text(json.dumps(bad) + "\n" + json.dumps(rental()) + "\n", encoding="utf-8")
    for _ in range(2):  # the second read comes from the validated-prefix cache
        loaded = reading.load(tmp_path)
        assert loaded.problems == ["demo/records/hand.jsonl:1: lots: 'two' is not of type 'integer'; total: 1 is not of type 'string'"]
        assert len(loaded.records) == 1


def test_the_cache_remembers_complete_lines_only_and_every_byte_of_them(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    path = records.append(tmp_path, rental(total="1.00"))
    records.append(tmp_path, rental(total="2.00"))
    with path.open("ab") as handle:
        handle.write(b'{"torn')
    data = path.read_bytes()
    table, problems, _ = columns.file_columns(path)
    assert table.num_rows == 2 and problems == [(3, "incomplete last line (a write was cut off); it is skipped")]
    cached = columns.read_cache(path)
    complete = data[: data.rindex(b"\n") + 1]
    assert (cached.size, cached.lines, cached.problems) == (len(complete), 2, [])  # the torn tail is not cached
    assert complete.endswith(b'"total": "2.00"}\n')
    edited = complete[:-3] + b"1" + complete[-2:] + b'{"torn'  # the last digit of the last complete line
    path.write_bytes(edited)
    checked = []
    original = records.validate
    monkeypatch.setattr(records, "validate", lambda record: checked.append(record) or original(record))
    table, problems, _ = columns.file_columns(path)
    assert len(checked) == 1 and table.num_rows == 1  # the first line checked again, the cut second one refused
    assert [line for line, _ in problems] == [2, 3] and problems[0][1].startswith("not valid JSON")


def test_a_repeated_deliverable_names_both_records_and_where_they_are(tmp_path):
    manifest = factory.manifest()
    trial = factory.trial(manifest)
    first, second = factory.deliverable("camp", trial, "c"), factory.deliverable("camp", trial, "c")
    for record in (manifest, trial, first, second):
        records.append(tmp_path, record)
    where = {record["record_id"]: f"camp/records/{record['run_id']}.jsonl:1" for record in (first, second)}
    earlier, later = sorted((first, second), key=lambda record: where[record["record_id"]])
    assert reading.load(tmp_path).problems == [
        f"{where[later['record_id']]}: deliverable {later['record_id']} (trial {trial['record_id']}) repeats the corpus "
        f"sha256:{'c' * 12}… of deliverable {earlier['record_id']} (trial {trial['record_id']}) "
        f"at {where[earlier['record_id']]}; one corpus is one deliverable, counted once"]


def test_a_successful_trial_without_a_measured_window_is_refused_and_listed_not_a_traceback(tmp_path):
    """Regression for #13 (found by its mutants): an 'ok' trial whose window was missing or null crashed every view."""
    from iteralab.store.views import campaign_views

    manifest = factory.manifest()
    missing, null = factory.trial(manifest, "b1"), factory.trial(manifest, "b1", repetition=2, sequence=2)
    del missing["phases"]["measured_window"]
    null["phases"]["measured_window"]["duration_ns"] = None
    with pytest.raises(UserError, match=r"^refusing to write trial: phases: 'measured_window' is a required property$"):
        records.append(tmp_path, missing)
    records.append(tmp_path, manifest)
    path = records.records_file(tmp_path, "camp", manifest["run_id"])
    with path.open("a", encoding="utf-8") as handle:  # written by hand, past append's check
        handle.write(json.dumps(missing) + "\n" + json.dumps(null) + "\n")
    loaded = reading.load(tmp_path)
    assert loaded.problems == [f"camp/records/{path.name}:2: phases: 'measured_window' is a required property",
                               f"camp/records/{path.name}:3: phases.measured_window.duration_ns: None is not of type 'integer'"]
    (view,) = campaign_views(loaded)
    assert view.variants == [] or all(not summary.trials for summary in view.variants)
    stopped = factory.trial(manifest, "b1", status="error", failed_phase="model_load", repetition=3, sequence=3)
    assert stopped["phases"]["measured_window"]["duration_ns"] is None and records.validate(stopped) == []


def test_a_manifest_states_a_corpus_of_at_least_one_entry():
    """The runner refuses an empty corpus; a hand-written manifest of one has no projection to give, so it is refused too."""
    manifest = factory.manifest()
    manifest["corpus"]["entries"] = 0
    assert records.validate(manifest) == ["corpus.entries: 0 is less than the minimum of 1"]
