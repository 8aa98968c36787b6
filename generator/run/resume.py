"""Resume a run whose process ended: finished trials stay, the one in flight becomes an interrupted row run again, the rest run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.machine.numerics import RESULT_FLAGS
from iteralab.machine.placement import PER_CARD, cards_of, devices_used, placement_of
from iteralab.run import leftovers
from iteralab.store import records
from iteralab.store.configuration import configuration_of
from iteralab.store.disturbance import rerun_targets

WARMUP_AGAIN = Text("applied again: every trial loads the model and runs the protocol's warm-up before its measured window, "
                    "so the first trial after the resumption is warmed up as the first trial of the run was")


@dataclass
class Resumption:
    """The run to continue and where it stands."""

    manifest: dict
    plan: list[tuple[int, str, int]]  # (sequence, variant, repetition) from the manifest, as planned before any timing
    finished: set[int] = field(default_factory=set)  # sequences with a trial that ended on its own, never run again
    in_flight: list[dict] = field(default_factory=list)  # start records with no trial record: the process ended in them
    interrupted: dict[int, str] = field(default_factory=dict)  # sequence -> its latest interrupted trial, nothing else
    retry: bool = True  # run an interrupted repetition again (--no-retry: only what never started)

    @property
    def remaining(self) -> list[tuple[int, str, int, str | None]]:
        """Return the steps still to run, in the planned order, each with the interrupted trial it runs again (or None)."""
        # A start in flight is the latest interruption of its sequence (a chain found by _state wins where it has one).
        interrupted = {**{start["sequence"]: start["trial_id"] for start in self.in_flight}, **self.interrupted}
        started = self.finished | set(interrupted)
        steps = []
        for sequence, variant, repetition in self.plan:
            if sequence not in started:
                steps.append((sequence, variant, repetition, None))
            elif self.retry and sequence not in self.finished:
                steps.append((sequence, variant, repetition, interrupted[sequence]))
        return steps


def _state(manifest: dict, existing: list[dict], retry: bool, rerun_disturbed: bool = False) -> Resumption:
    plan = [(step["sequence"], step["variant"], step["repetition"]) for step in manifest["plan"]]
    mine = [r for r in existing if r["run_id"] == manifest["run_id"]]
    trials = {r["record_id"]: r for r in mine if r["kind"] == "trial" and r["manifest_id"] == manifest["record_id"]}
    starts = [r for r in mine if r["kind"] == "start" and r["manifest_id"] == manifest["record_id"]]
    in_flight = [s for s in starts if s["trial_id"] not in trials]
    # An interruption is a machine's fault, never a measurement: its repetition runs again, naming the trial it replaces.
    # An error or an out-of-memory ended the trial on its own: that failure is the measurement, never retried.
    # The latest interruption of a sequence is the one no later attempt names in retry_of (a chain, clock-proof).
    superseded = {record["retry_of"] for record in [*trials.values(), *in_flight] if record.get("retry_of")}
    interrupted: dict[int, str] = {}
    for record in sorted([*trials.values(), *in_flight], key=lambda r: r["created_at"]):
        trial_id = record.get("trial_id", record["record_id"])
        if (record["kind"] == "start" or record["status"] == "interrupted") and trial_id not in superseded:
            interrupted[record["sequence"]] = trial_id
    finished = {t["sequence"] for t in trials.values() if t["status"] != "interrupted"}
    if placement_of(manifest["protocol"])["mode"] == PER_CARD:
        _whole_sets(manifest, trials, starts, finished, interrupted)
    if rerun_disturbed:  # the latest attempt of a repetition was disturbed: measured again, naming it (#49)
        again = rerun_targets(manifest, trials.values(), superseded)
        finished -= set(again)
        interrupted.update(again)
    return Resumption(manifest, plan, finished, in_flight,
                      {sequence: trial for sequence, trial in interrupted.items() if sequence not in finished}, retry)


def _whole_sets(manifest: dict, trials: dict, starts: list[dict], finished: set, interrupted: dict) -> None:
    """Under per_card, a step is finished only when its latest set ended on every card; else the set runs again whole."""
    cards = len(manifest["protocol"]["placement"]["devices"])
    latest: dict[int, tuple] = {}  # sequence -> (when the set started, its id)
    for start in starts:
        found = start.get("per_card") or {}
        if found.get("set") and (start["sequence"] not in latest or start["created_at"] > latest[start["sequence"]][0]):
            latest[start["sequence"]] = (start["created_at"], found["set"])
    for sequence, (_, group) in latest.items():
        ended = [t for t in trials.values() if (t.get("per_card") or {}).get("set") == group]
        if len(ended) == cards and all(trial["status"] != "interrupted" for trial in ended):
            finished.add(sequence)
            interrupted.pop(sequence, None)
        else:  # a card left without its record, or interrupted: none of the set's windows overlapped a whole set's
            finished.discard(sequence)
            interrupted[sequence] = group


def find_resumable(campaign, existing: list[dict], fingerprint: str, environment: dict, *, retry: bool = True,
                   rerun_disturbed: bool = False) -> Resumption:
    """Return the latest unfinished run of CAMPAIGN, or refuse naming why it cannot be continued here.

    RETRY: an interrupted repetition is left to run again (False: only trials that never started are left).
    """
    manifests = sorted((r for r in existing if r["kind"] == "manifest"), key=lambda m: (m["created_at"], m["record_id"]))
    if not manifests:
        raise UserError(f"campaign {campaign.name} has no run to resume: start it without --resume")
    states = [_state(m, existing, retry, rerun_disturbed) for m in manifests]
    unfinished = [state for state in states if state.remaining or state.in_flight]
    if not unfinished:
        latest = states[-1]
        left = (f"; {len(latest.interrupted)} interrupted repetition(s) are left as they are with --no-retry: run "
                "--resume without it to run them again") if latest.interrupted else ""
        if rerun_disturbed:
            left = f"; no repetition's latest trial was measured as disturbed{left}"
        raise UserError(f"nothing to resume: run {latest.manifest['run_id']} of campaign {campaign.name} is complete "
                        f"({len(latest.finished)} of {len(latest.plan)} planned trials recorded{left}), and so is every "
                        "earlier run; run it again without --resume to start a new run")
    state = unfinished[-1]
    run_id = state.manifest["run_id"]
    if state.manifest["protocol_fingerprint"] != fingerprint:
        raise UserError(f"cannot resume run {run_id}: it ran under protocol {state.manifest['protocol_fingerprint'][:12]}, "
                        f"and {campaign.source} now gives protocol {fingerprint[:12]}; restore the campaign file and corpus "
                        "as they were, or start a new campaign revision")
    changed = [name for name in state.manifest["variants"]
               if name not in {v.name for v in campaign.variants} or campaign.variant(name).config() != state.manifest["variants"][name]]
    if changed:
        raise UserError(f"cannot resume run {run_id}: variant(s) {', '.join(changed)} differ from the run's manifest or are "
                        f"gone from {campaign.source}; restore them, or start a new run without --resume")
    differences = environment_differences(state.manifest, environment)
    if differences:
        raise UserError(f"cannot resume run {run_id} on this machine: {'; '.join(differences)}. That is another "
                        "configuration, so a new run: start it without --resume")
    return state


def environment_differences(manifest: dict, environment: dict) -> list[str]:
    """Name what differs between the run's machine and software and this one's, per variant's configuration."""
    here = {"environment": environment}
    found = []
    for name, config in manifest["variants"].items():
        trial = {"variant": name, "variant_config": config}
        before, now = configuration_of(trial, manifest), configuration_of(trial, here)
        for what, old, new in (("hardware", before.hardware, now.hardware), ("software", before.software, now.software)):
            line = f"{what} was {old}, is {new}"
            if old != new and line not in found:
                found.append(line)
    old, new = ((m.get("libraries") or {}).get("transformers") for m in (manifest["environment"], environment))
    if old != new:
        found.append(f"transformers was {old}, is {new}")
    return found


def start_record(manifest: dict, trial_id: str, variant: str, repetition: int, sequence: int,
                 retry_of: str | None = None) -> dict:
    """Return the record written before a trial runs: without a trial record after it, the trial was in flight.

    RETRY_OF: the interrupted trial whose repetition this one runs again.
    """
    retried = {"retry_of": retry_of} if retry_of else {}
    return records.make_record("start", campaign=manifest["campaign"], run_id=manifest["run_id"],
                               manifest_id=manifest["record_id"], trial_id=trial_id, variant=variant,
                               repetition=repetition, sequence=sequence, **retried)


def interrupted_row(manifest: dict, start: dict, now: str) -> dict:
    """Return the failure row of a trial the process died in: never dropped, never silently replaced."""
    variant_config = manifest["variants"][start["variant"]]
    device = str(variant_config.get("device", "cpu"))
    # The cards it was using, as a trial that ended would have said: its row stays in the same configuration (#44).
    used = {"devices_used": devices_used(cards_of(device, manifest["protocol"]))} if device.startswith("cuda") else {}
    record = records.make_record(
        "trial", campaign=manifest["campaign"], run_id=manifest["run_id"], protocol_fingerprint=manifest["protocol_fingerprint"],
        manifest_id=manifest["record_id"], variant=start["variant"], variant_config=variant_config,
        series=variant_config.get("series", "main"), repetition=start["repetition"], sequence=start["sequence"],
        status="interrupted", failed_phase=None,
        error=(f"the process ended during this trial (started {start['created_at']}) without writing its record; "
               f"found by iteralab run --resume at {now}"),
        entries_expected=manifest["corpus"]["entries"], entries_completed=None,
        entries_completed_reason=Text("unknown: the process ended before the trial could record its progress"),
        started_at=start["created_at"], truncated_entries=manifest["corpus"].get("truncated_entries"), phases={},
        gpu_event_durations=None, gpu_event_durations_reason=Text("not recorded: the process ended during the trial"),
        memory={"device": device, **used}, predictions=None, id_check=None, quality=None,
        corpus_accepted=False, throughput_entries_per_s=None)
    if start.get("retry_of"):
        record["retry_of"] = start["retry_of"]
    if start.get("per_card"):  # one card of a set: its own card, the set's cards as the configuration (run.per_card)
        record["per_card"] = start["per_card"]
        record["memory"] = {"device": start["per_card"]["card"], "devices_used": list(start["per_card"]["cards"])}
    record["record_id"] = start["trial_id"]
    return record


def resumption_record(state: Resumption, environment: dict) -> dict:
    """Return the record saying when the run was continued, what was in flight and what is left."""
    return records.make_record(
        "resumption", campaign=state.manifest["campaign"], run_id=state.manifest["run_id"],
        manifest_id=state.manifest["record_id"], interrupted=[s["trial_id"] for s in state.in_flight],
        finished=len(state.finished), remaining=len(state.remaining), hostname=environment.get("hostname"),
        retried=[step[3] for step in state.remaining if step[3]],
        warmup=WARMUP_AGAIN)


def continue_run(state: Resumption, runs_dir: Path, existing: list[dict], environment: dict, signals, result,
                 warn=None) -> None:
    """Record that the run goes on, with a failure row for each trial in flight, and set aside the files its interrupted
    trials left, which no record refers to; fill RESULT (the runner's RunResult) as it goes and WARN of what moved.
    SIGNALS holds SIGINT and SIGTERM until all of it is done.

    The resumption record is appended first: a records line the kill cut off is closed by that same write, which names
    it (file, line, bytes, sha256), so no reader ever meets the fragment closed and unnamed. The rows are made first, so
    that their times come before the resumption's, as the moment the process ended did.
    """
    manifest = state.manifest
    now = records.utc_now()
    rows = [interrupted_row(manifest, start, now) for start in state.in_flight]
    result.resumed = resumption_record(state, environment)
    with signals.held():
        torn = leftovers.torn_tail(runs_dir, records.records_file(runs_dir, manifest["campaign"], manifest["run_id"]))
        if torn:
            result.resumed["torn"] = [torn]
        moved, failed = leftovers.set_aside(runs_dir, manifest["campaign"], result.resumed["record_id"],
                                            leftovers.own(runs_dir, manifest["campaign"], existing, manifest["run_id"]))
        if moved:
            result.resumed["set_aside"] = moved
        for record in (result.resumed, *rows):
            result.records_file = signals.append(runs_dir, record)
        result.trials += rows
        for line in ([leftovers.said(moved)] if moved else []) + failed:
            result.warnings.append(line)
            if warn:
                warn(line)


def refuse_changed_numerics(manifest: dict, now: dict) -> None:
    """Refuse to resume a run whose numerics flags (TF32, cuDNN, reduced-precision reductions, attention backends)
    differ from this process's: they change results, so its trials would not be one measurement (#63)."""
    recorded = manifest.get("determinism") or {}
    if not recorded.get("numerics_fingerprint") or recorded["numerics_fingerprint"] == now.get("numerics_fingerprint"):
        return
    changed = [f"{flag} {recorded.get(flag)!r} in the run, {now.get(flag)!r} here" for flag in RESULT_FLAGS
               if recorded.get(flag) != now.get(flag)]
    raise UserError(f"cannot resume run {manifest.get('run_id')}: the numerics flags that change results differ "
                    f"({'; '.join(changed) or 'their fingerprint differs'}). Set them back as the run had them (an "
                    "environment variable such as NVIDIA_TF32_OVERRIDE, or code that set them before the run), or start a "
                    "new run without --resume")
