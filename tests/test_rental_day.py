"""The rental day, end to end: a killed run resumes without paying twice, runs are tied to their rental as they start,
and check names every rental problem. Regression for #20."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time

import pytest
from bs4 import BeautifulSoup

from iteralab.core.errors import UserError
from iteralab.pages.render import moment
from iteralab.store import reading, records
from tests import factory

RTX_4090 = factory.machine("NVIDIA GeForce RTX 4090", cuda="12.8", driver="570.86", torch="2.13.0+cu128")


def kinds(runs, kind):
    return reading.load(runs).of_kind(kind)


def lines(runs, kind):
    """Count the complete records of KIND, read as the runner's next --resume will read them."""
    return len(kinds(runs, kind)) if runs.exists() else 0


def _starts_and_trials(runs) -> tuple[list[str], set[str]]:
    """Return the trial ids of the start records and of the trial records written so far, complete lines only.

    A cheap look while the run goes on: reading.load validates every record, and polling with it every 20 ms took a
    core from the run it watched on a two-core machine.
    """
    starts, trials = [], set()
    for path in sorted(runs.glob("*/records/*.jsonl")):
        for line in path.read_bytes().split(b"\n")[:-1]:
            record = json.loads(line)
            if record["kind"] == "start":
                starts.append(record["trial_id"])
            elif record["kind"] == "trial":
                trials.add(record["record_id"])
    return starts, trials


def start_and_kill(start, args, runs, *, starts_before: int) -> list[dict]:
    """Run iteralab with ARGS (START: the warm_iteralab fixture), SIGKILL it while a trial is in flight (a start beyond
    STARTS_BEFORE without its trial)."""
    process = start(args)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        starts, written = _starts_and_trials(runs)
        if len(starts) > starts_before and set(starts) - written:
            break
        time.sleep(0.02)
    if process.poll() is not None:
        pytest.fail(f"the run ended before it could be killed in flight: {process.communicate()[1]}")
    process.send_signal(signal.SIGKILL)
    process.communicate()
    loaded = reading.load(runs)
    written = {t["record_id"] for t in loaded.of_kind("trial")}
    return [s for s in loaded.of_kind("start") if s["trial_id"] not in written]


@pytest.mark.slow
def test_a_run_killed_at_several_points_resumes_with_every_planned_trial_exactly_once(tiny_model, tmp_path, cli,
                                                                                       warm_iteralab):
    from tests.tiny import corpus_rows, write_campaign, write_corpus

    corpus = write_corpus(tmp_path / "long.jsonl", corpus_rows(300))  # trials long enough to be killed in flight
    campaign = write_campaign(tmp_path, tiny_model, corpus, repetitions=3, batch_sizes=(1, 4))
    runs = tmp_path / "runs"
    in_flight = []
    # Killed in the second trial, then early after the first resumption, then a third time further on.
    in_flight += start_and_kill(warm_iteralab, ["run", campaign, "--runs", runs, "--quiet"], runs, starts_before=1)
    finished_before = {t["record_id"]: t for t in kinds(runs, "trial")}
    in_flight += start_and_kill(warm_iteralab, ["run", campaign, "--runs", runs, "--quiet", "--resume"], runs,
                                starts_before=lines(runs, "start"))
    in_flight += start_and_kill(warm_iteralab, ["run", campaign, "--runs", runs, "--quiet", "--resume"], runs,
                                starts_before=lines(runs, "start") + 1)
    assert len(in_flight) == 3
    code, out, err = cli("run", campaign, "--runs", runs, "--quiet", "--resume")
    assert code == 0, err
    assert "Resumed run" in out and "recorded as interrupted" in out
    # #45: the summary table shows the whole run, every repetition of both variants, not only the resumed part.
    # #60: the columns after the figures count as the decision does: a trial the machine disturbed is no figure.
    columns = ("attempts", "counted", "disturbed", "fail", "interrupted", "retries", "accepted")
    rows = {line.split()[0]: dict(zip(columns, (int(n) for n in line.split()[-7:]), strict=True))
            for line in out.split("\n") if line.split() and line.split()[0] in ("b1", "b4")}
    assert {name: row["counted"] + row["disturbed"] for name, row in rows.items()} == {"b1": 3, "b4": 3}
    # The 6 ok trials and the 3 interrupted (each an attempt, an interruption, and run again by a retry), over both variants.
    assert {column: sum(row[column] for row in rows.values()) for column in ("attempts", "fail", "interrupted", "retries")} \
        == {"attempts": 9, "fail": 0, "interrupted": 3, "retries": 3}
    loaded = reading.load(runs)
    (manifest,) = loaded.of_kind("manifest")
    trials = loaded.of_kind("trial")
    planned = [(step["sequence"], step["variant"], step["repetition"]) for step in manifest["plan"]]
    # Regression for #33: every planned repetition ends with exactly one ok trial, the interrupted ones run again.
    ok = [t for t in trials if t["status"] == "ok"]
    assert sorted((t["sequence"], t["variant"], t["repetition"]) for t in ok) == planned
    assert len({t["record_id"] for t in trials}) == len(trials) == 6 + 3
    assert all(finished_before[t["record_id"]] == t for t in trials if t["record_id"] in finished_before)
    interrupted = [t for t in trials if t["status"] == "interrupted"]
    assert sorted(t["record_id"] for t in interrupted) == sorted(s["trial_id"] for s in in_flight)
    for row in interrupted:
        start = next(s for s in in_flight if s["trial_id"] == row["record_id"])
        assert (row["started_at"], row["entries_completed"], row["corpus_accepted"]) == (start["created_at"], None, False)
        assert row["entries_completed_reason"].startswith("unknown: the process ended")
        # Each interruption is run again once, by a trial of the same repetition that names it, later in the records.
        (retry,) = [t for t in trials if t.get("retry_of") == row["record_id"]]
        assert (retry["sequence"], retry["variant"], retry["repetition"]) == (row["sequence"], row["variant"], row["repetition"])
        assert retry["created_at"] > row["created_at"]
    assert all(t["status"] == "ok" for t in trials if t not in interrupted)
    resumptions = loaded.of_kind("resumption")
    assert [len(r["interrupted"]) for r in resumptions] == [1, 1, 1]
    assert [len(r["retried"]) for r in resumptions] == [1, 1, 1]
    assert {t["run_id"] for t in trials} == {manifest["run_id"]}  # one run, one records file
    assert [p for p in loaded.problems if "incomplete last line" not in p] == []
    assert "attempts" in out and "retries" in out  # the summary counts attempts and successes apart
    # Nothing left: a further --resume is refused, and writes nothing.
    code, _, err = cli("run", campaign, "--runs", runs, "--resume")
    assert code == 1 and f"nothing to resume: run {manifest['run_id']} of campaign tiny is complete (6 of 6" in err
    assert len(reading.load(runs).records) == len(loaded.records)
    code, out, _ = cli("trials", "tiny", "--runs", runs)
    assert out.count("runs again interrupted") == 3
    # The campaign page lists the resumptions with their times; the interrupted trial's page says what happened.
    code, out, err = cli("build", "--runs", runs, "--out", tmp_path / "site")
    assert code == 0, out + err
    site = tmp_path / "site" / "campaigns" / "tiny"
    page = BeautifulSoup((site / "index.html").read_text(encoding="utf-8"), "html.parser")
    rows = page.select("#resumptions tbody tr")
    assert [row.find_all("td")[1].get_text() for row in rows] == [moment(r["created_at"]) for r in resumptions]
    assert "applied again" in page.select_one("#resumptions").get_text()
    trials_page = BeautifulSoup((site / "trials.html").read_text(encoding="utf-8"), "html.parser")
    in_flight = trials_page.select_one(f"#{interrupted[0]['record_id']} .in-flight")
    assert f"started {moment(interrupted[0]['started_at'])}" in in_flight.get_text()
    later = max(trials, key=lambda t: t["created_at"])
    assert "the warm-up rule was applied again" in trials_page.select_one(f"#{later['record_id']} .after-resumption").get_text()
    for row in interrupted:
        retry = next(t for t in trials if t.get("retry_of") == row["record_id"])
        link = trials_page.select_one(f"#{retry['record_id']}-retry a")
        assert link["href"] == f"#{row['record_id']}"


def _unfinished_copy(runs, manifest, **changes) -> dict:
    """Append a copy of MANIFEST as a new run with no trial yet (a run whose process died before its first)."""
    copy = records.make_record("manifest", campaign=manifest["campaign"], run_id=records.new_run_id(),
                               **{k: v for k, v in manifest.items() if k not in ("record_id", "run_id", "created_at",
                                                                                   "schema_version", "kind", "campaign")})
    copy.update(changes)
    records.append(runs, copy)
    return copy


@pytest.mark.slow
def test_resume_is_refused_on_another_configuration_a_changed_protocol_or_variant_and_continues_an_empty_run(
        tiny_campaign, tmp_path, cli):
    runs = tmp_path / "runs"
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1, 4))
    assert cli("run", campaign, "--runs", runs, "--quiet")[0] == 0
    (real,) = kinds(runs, "manifest")  # this machine's run: every copy below is made from it, whatever the file order
    code, _, err = cli("run", campaign, "--runs", runs, "--resume")
    assert code == 1 and "nothing to resume" in err
    # A run from an RTX 4090 machine, merged here, died before its first trial: not resumable on this CPU.
    gpu_run = _unfinished_copy(runs, real, environment=RTX_4090)
    before = len(reading.load(runs).records)
    code, _, err = cli("run", campaign, "--runs", runs, "--resume")
    assert code == 1 and f"cannot resume run {gpu_run['run_id']} on this machine: " in err
    assert "transformers was 5.0, is " in err and "That is another configuration, so a new run" in err
    code, _, err = cli("run", campaign, "--runs", runs, "--resume", "--dry-run")
    assert code == 1 and "cannot resume" in err
    assert len(reading.load(runs).records) == before
    # The same machine's unfinished run continues; with a changed protocol it is refused first.
    same = _unfinished_copy(runs, real)
    changed = tiny_campaign(repetitions=2, batch_sizes=(1, 4))  # the same file, rewritten with another protocol
    code, _, err = cli("run", changed, "--runs", runs, "--resume")
    assert code == 1 and f"cannot resume run {same['run_id']}: it ran under protocol {same['protocol_fingerprint'][:12]}" in err
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1, 4))  # restored as it was
    code, out, err = cli("run", campaign, "--runs", runs, "--resume", "--dry-run")
    assert code == 0 and f"--resume would continue run {same['run_id']}: 0 finished (kept), 0 in flight" in out, err
    code, out, err = cli("run", campaign, "--runs", runs, "--resume", "--quiet", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["run_id"] == same["run_id"] and result["resumed"]["remaining"] == 2
    ran = [t for t in kinds(runs, "trial") if t["run_id"] == same["run_id"]]
    assert sorted(t["sequence"] for t in ran) == [1, 2] and all(t["status"] == "ok" for t in ran)
    # A variant whose settings changed under the same protocol fingerprint is refused too.
    _unfinished_copy(runs, real, variants={**same["variants"], "b4": {**same["variants"]["b4"], "batch_size": 5}})
    code, _, err = cli("run", campaign, "--runs", runs, "--resume")
    assert code == 1 and "variant(s) b4 differ from the run's manifest" in err


@pytest.mark.slow
def test_run_tied_to_a_rental_is_refused_before_any_model_loads_on_a_machine_without_its_card(tiny_campaign, tmp_path, cli):
    runs = tmp_path / "runs"
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1,))
    code, out, _ = cli("rental", "add", "--campaign", "tiny", "--new-campaign", "--gpu", "rtx-4090", "--lots", "1",
                       "--days", "3", "--start", "2026-09-28T09:00+07:00", "--runs", runs, "--json")
    rental_id = json.loads(out)["record_id"]
    before = sorted(path.relative_to(runs) for path in runs.rglob("*"))
    for extra in ((), ("--dry-run",)):
        code, _, err = cli("run", campaign, "--runs", runs, "--rental", rental_id, *extra)
        assert code == 1 and f"rental {rental_id} (1 lot(s) of rtx-4090, 1 card(s)): this machine shows torch no GPU" in err
    assert sorted(path.relative_to(runs) for path in runs.rglob("*")) == before  # no manifest, no corpus copy
    code, _, err = cli("run", campaign, "--runs", runs, "--rental", "rental-20990101T000000Z-000000000000")
    assert code == 1 and f"is not a rental of campaign tiny in {runs} (its rentals: {rental_id})" in err
    assert cli("void", rental_id, "--reason", "wrong card", "--runs", runs)[0] == 0
    code, _, err = cli("run", campaign, "--runs", runs, "--rental", rental_id)
    assert code == 1 and "was voided by" in err


def test_check_names_every_rental_problem_decide_names(tmp_path, cli):
    """Hardware mismatch, card count, a run outside the period, an unknown run, and a run tied to an unknown rental."""
    runs = tmp_path / "runs"
    inside = factory.manifest("camp", "run-inside", environment=RTX_4090)
    records.append(runs, inside)
    rental = factory.rental("camp", runs=["run-inside"])
    rental.update(start=inside["created_at"].replace("Z", "+00:00"))
    records.append(runs, rental)
    code, out, _ = cli("check", runs)
    assert code == 0, out
    two = factory.manifest("camp", "run-two", environment=factory.machine("NVIDIA GeForce RTX 4090", count=2))
    cpu = factory.manifest("camp", "run-cpu", environment=factory.machine(None))
    tied = factory.manifest("camp", "run-tied", environment=RTX_4090)
    tied["rental"] = {"rental_id": "rental-20990101T000000Z-000000000000", "within_period": True}
    for record in (two, cpu, tied):
        records.append(runs, record)
    late = factory.rental("camp", runs=["run-two", "run-cpu", "run-gone"])
    late.update(start="2020-01-01T09:00:00+07:00")
    records.append(runs, late)
    early = factory.rental("camp", runs=["run-inside"])
    early.update(start="2020-01-01T09:00:00+07:00")
    records.append(runs, early)
    code, out, _ = cli("check", runs)
    assert code == 1
    problems = out.splitlines()[:-1]
    assert len(problems) == 5, out
    assert "covers 1 card(s) but run run-two observed 2" in out
    assert "names run run-cpu, whose manifest observed no GPU (CPU Test CPU): the hardware does not match" in out
    assert "names run run-gone, which has no manifest in campaign camp" in out
    assert f"rental {early['record_id']} (1 lot(s) rtx-4090) paid for run run-inside, which ran from" in out
    assert "outside the rental's period (2020-01-01T09:00:00+07:00 to 2020-01-04T09:00:00+07:00)" in out
    assert "run run-tied was started with --rental rental-20990101T000000Z-000000000000, which is not a counted rental" in out
    assert all(problem.startswith("campaign camp: ") for problem in problems)
    # decide names the same problems.
    code, out, _ = cli("decide", "camp", "--runs", runs, "--json")
    named = json.loads(out)["problems"]
    assert all(any(problem.removeprefix("campaign camp: ") in item for item in named) for problem in problems), named


def test_the_rental_period_and_the_clock_inside_or_outside_it():
    """By hand: a 3-day rental from 2026-09-28 09:00 Jakarta ends 2026-10-01 09:00 unless its recorded end says earlier."""
    from iteralab.machine.rental import check_machine, rental_link

    rental = factory.rental("camp")
    rental.update(start="2026-09-28T09:00:00+07:00")
    inside, warning = rental_link(rental, dt.datetime(2026, 10, 1, 1, 59, tzinfo=dt.UTC))  # 08:59 in Jakarta
    assert inside == {"rental_id": rental["record_id"], "within_period": True, "period_start": "2026-09-28T09:00:00+07:00",
                      "period_end": "2026-10-01T09:00:00+07:00"} and warning is None
    outside, warning = rental_link(rental, dt.datetime(2026, 10, 1, 2, 1, tzinfo=dt.UTC))
    assert outside["within_period"] is False
    assert warning == (f"warning: the clock (2026-10-01T02:01:00+00:00) is outside rental {rental['record_id']}'s period "
                       "(2026-09-28T09:00:00+07:00 to 2026-10-01T09:00:00+07:00); the run is recorded as outside its rental")
    rental.update(end="2026-09-29T09:00:00+07:00")
    assert rental_link(rental, dt.datetime(2026, 9, 30, tzinfo=dt.UTC))[0]["within_period"] is False
    # The machine check: the rented card, at most the cards its lots hold.
    check_machine(rental, RTX_4090)
    with pytest.raises(UserError, match="this machine shows 2 GPUs, more than the rental's lots hold"):
        check_machine(rental, factory.machine("NVIDIA GeForce RTX 4090", count=2))
    with pytest.raises(UserError, match="this machine's GPUs are NVIDIA H100, not the rented card"):
        check_machine(rental, factory.machine("NVIDIA H100"))


def test_the_campaign_page_shows_a_run_outside_its_rental(tmp_path, cli):
    runs = tmp_path / "runs"
    manifest = factory.manifest("camp", "run-late", environment=RTX_4090)
    rental = factory.rental("camp")
    rental.update(start="2026-09-28T09:00:00+07:00")
    manifest["rental"] = {"rental_id": rental["record_id"], "within_period": False,
                          "period_start": "2026-09-28T09:00:00+07:00", "period_end": "2026-10-01T09:00:00+07:00"}
    for record in (rental, manifest, factory.trial(manifest, "b1", gpu=True)):
        records.append(runs, record)
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "camp" / "index.html").read_text(encoding="utf-8"), "html.parser")
    evidence = next(li for li in page.find_all("li") if "run-late" in li.get_text() or manifest["record_id"] in li.get_text())
    assert f"tied to rental {rental['record_id']} as it started, outside its rental's period" in evidence.get_text()
    code, out, _ = cli("check", runs)
    assert code == 1 and "outside the rental's period (2026-09-28T09:00:00+07:00 to 2026-10-01T09:00:00+07:00)" in out


def test_an_interrupted_repetition_is_left_to_run_again_unless_no_retry_and_a_failure_never_is(tmp_path):
    """Regression for #33: a resumed run ended one repetition short; an error or an out-of-memory stays the measurement."""
    from iteralab.run.resume import _state, interrupted_row, start_record

    manifest = factory.manifest("tiny", "run-1")
    manifest["plan"] = [{"sequence": n, "variant": v, "repetition": r}
                        for n, (v, r) in enumerate((("b1", 1), ("b4", 1), ("b1", 2), ("b4", 2), ("b1", 3)), start=1)]
    ok = factory.trial(manifest, "b1", sequence=1)
    manifest["variants"] = {name: factory.trial(manifest, name)["variant_config"] for name in ("b1", "b4")}
    stopped = factory.trial(manifest, "b4", sequence=2, status="interrupted", failed_phase="warmup")  # SIGTERM
    oom = factory.trial(manifest, "b1", repetition=2, sequence=3, status="oom", failed_phase="warmup")
    killed = start_record(manifest, "trial-20261204T000000Z-00000000000a", "b4", 2, 4)  # SIGKILL: no trial record
    existing = [manifest, ok, stopped, oom, killed]
    state = _state(manifest, existing, retry=True)
    assert state.finished == {1, 3}
    assert state.remaining == [(2, "b4", 1, stopped["record_id"]), (4, "b4", 2, killed["trial_id"]), (5, "b1", 3, None)]
    assert _state(manifest, existing, retry=False).remaining == [(5, "b1", 3, None)]
    # The retry of sequence 4 was killed in turn: its interrupted row names what it retried, and the next retry names it.
    row = interrupted_row(manifest, killed, records.utc_now())  # written by the resume, before the retry starts
    retry_start = start_record(manifest, "trial-20261204T000001Z-00000000000b", "b4", 2, 4, killed["trial_id"])
    assert "retry_of" not in row
    records.append(tmp_path, row)  # valid, or refused with the field named
    existing += [row, retry_start]
    state = _state(manifest, existing, retry=True)
    assert (4, "b4", 2, retry_start["trial_id"]) in state.remaining
    again = interrupted_row(manifest, retry_start, records.utc_now())
    assert again["retry_of"] == killed["trial_id"]
    records.append(tmp_path, retry_start)
    records.append(tmp_path, again)
