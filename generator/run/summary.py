"""What a run shows its user: the plan before it starts, a progress bar while it runs, a summary table at the end."""

from __future__ import annotations

import sys

from iteralab.core.language import Joined, Text, say
from iteralab.machine import placement
from iteralab.store.disturbance import is_disturbed, rule_of
from iteralab.store.trials import LEFT_OUT, left_out_words, window_figures

# How a generation's outputs ended, as the run's summary counts them per trial: the records' names and the table's words.
STOPS = {"stopped_at_eos": "stopped at the end-of-sequence token", "cut_by_max_new_tokens": "cut at max_new_tokens"}


def plan_data(prepared) -> dict:
    """Return a prepared campaign's plan as plain data: trials in order, buckets, truncation."""
    plan = [{"sequence": index, "variant": name, "repetition": repetition}
            for index, (name, repetition) in enumerate(prepared.plan, start=1)]
    return {"campaign": prepared.campaign.name, "protocol_fingerprint": prepared.fingerprint, "plan": plan,
            "bucket_counts": prepared.bucket_counts, "truncated_entries": prepared.truncated}


def describe_plan(prepared) -> str:
    """Say what a dry run found: entries per bucket, truncation, the fingerprint, the trials in order, rental and resume."""
    campaign, protocol = prepared.campaign, prepared.campaign.protocol
    lines = [f"Campaign {campaign.name}: {len(prepared.corpus.entries)} entries "
             f"({', '.join(f'{n} {k}' for k, n in prepared.bucket_counts.items())}), "
             f"{prepared.truncated} longer than max_length {protocol['max_length']} "
             f"({'truncated' if protocol['truncation'] == 'truncate' else 'refused'})",
             f"Protocol fingerprint {prepared.fingerprint}", *prepared.workload.plan_lines(prepared),
             *placement.describe(protocol),
             "Plan (trials in order):"]
    lines += [f"  {step['sequence']:>3}. {step['variant']} (repetition {step['repetition']})" for step in plan_data(prepared)["plan"]]
    if prepared.rental is not None:
        rental = prepared.rental
        lines.append(f"Rental {rental['record_id']}: this machine's GPUs match {rental['lots']} lot(s) of {rental['gpu']}")
    if prepared.resumption is not None:
        state = prepared.resumption
        lines.append(f"--resume would continue run {state.manifest['run_id']}: {len(state.finished)} finished (kept), "
                     f"{len(state.in_flight)} in flight (recorded as interrupted), then "
                     + (", ".join(f"{n}. {name} (repetition {rep}{f', again after {retry_of}' if retry_of else ''})"
                                  for n, name, rep, retry_of in state.remaining) or "nothing left"))
    return "\n".join(lines)


def run_data(result) -> dict:
    """Return what a run wrote as plain data: run id, records file, the summary per variant, interrupted or not."""
    return {"run_id": result.run_id, "records_file": str(result.records_file),
            "summary": summarize(result.earlier + result.trials, _protocol(result)),
            "interrupted": result.interrupted, "resumed": result.resumed, "warnings": result.warnings,
            "rental": (result.manifest or {}).get("rental")}


def _protocol(result) -> dict | None:
    return (result.manifest or {}).get("protocol")


def _trial_ids_for(result) -> str:
    """Say what a run's trial ids are for: an adaptation delivers no corpus, so deliver does not take them (#61)."""
    kind = ((result.manifest or {}).get("workload") or {}).get("kind")
    return "for exclude" if kind == "adapt" else "for deliver and exclude"


def describe_run(result) -> str:
    """Return the summary table, where the records are, and whether the run was interrupted."""
    campaign = (result.manifest or {}).get("campaign", "CAMPAIGN")
    # After --resume, the whole run: the trials earlier invocations recorded with those of this one (#45).
    text = (format_summary(summarize(result.earlier + result.trials, _protocol(result)))
            + f"\nRun id: {result.run_id} (for rental add --run)"
            f"\nTrial ids: iteralab trials {campaign} --run {result.run_id} ({_trial_ids_for(result)})"
            f"\nRecords: {result.records_file}")
    if result.resumed:
        resumed = result.resumed
        text = (f"Resumed run {result.run_id}: {resumed['finished']} finished trial(s) kept, "
                f"{len(resumed['interrupted'])} in flight when the process ended recorded as interrupted"
                f"{' (' + ', '.join(resumed['interrupted']) + ')' if resumed['interrupted'] else ''}, "
                f"{resumed['remaining']} run now in the planned order"
                f"{_retried(resumed.get('retried') or [], result.earlier)}; warm-up {resumed['warmup']}\n" + text)
    rental = (result.manifest or {}).get("rental")
    if rental:
        text += (f"\nRental: {rental['rental_id']}, "
                 f"{'inside' if rental['within_period'] else 'OUTSIDE'} its period ({rental['period_start']} to {rental['period_end']})")
    if result.interrupted:
        text += "\nInterrupted: the trial in progress was recorded as interrupted; earlier records are intact."
    return text


def _retried(retried: list[str], earlier: list[dict]) -> str:
    """Say which repetitions run again, each by why the trial it replaces does not count: disturbed (--rerun-disturbed)
    or interrupted (the process ended, or a signal stopped it)."""
    if not retried:
        return ""
    disturbed = {t["record_id"] for t in earlier if is_disturbed(t)}
    said = [f"{len(ids)} of them {why} repetition run again (replacing {', '.join(ids)})"
            for why, ids in (("a disturbed", [i for i in retried if i in disturbed]),
                             ("an interrupted", [i for i in retried if i not in disturbed])) if ids]
    return ", " + "; ".join(said)


def left_out(trial: dict, protocol: dict | None) -> str | None:
    """Name why a trial of this run counts in no figure of the decision (store.trials.LEFT_OUT): disturbed (unless the
    protocol, or without it the rule the trial records, uses such trials), interrupted, failed; None where it counts.
    An exclusion is recorded later, by a person."""
    rule = rule_of(protocol) if protocol is not None else {**rule_of(None), **(trial.get("interference") or {}).get("rule", {})}
    if is_disturbed(trial) and not rule["use_disturbed"]:
        return "disturbed"
    return None if trial["status"] == "ok" else "interrupted" if trial["status"] == "interrupted" else "failed"


def summarize(trials: list[dict], protocol: dict | None = None) -> list[dict]:
    """Per variant, the figures the decision uses: measured-window seconds of the trials it counts in run order, their
    median, min and max; attempts, counted, and those it leaves out by their reason (LEFT_OUT: disturbed, failed,
    interrupted), retries, accepted; failures. PROTOCOL: the run's, whose [protocol.disturbance] may use disturbed trials."""
    rows = {}
    for trial in sorted(trials, key=lambda t: (t["created_at"], t["sequence"])):
        row = rows.setdefault(trial["variant"], {"variant": trial["variant"], "durations_s": [], "attempts": 0, "ok": 0,
                                                 "counted": 0, "left_out": {}, "left_out_s": [], "failed": 0,
                                                 "retries": 0, "accepted": 0, "failures": []})
        row["attempts"] += 1
        row["retries"] += bool(trial.get("retry_of"))
        row["ok"] += trial["status"] == "ok"
        reason = left_out(trial, protocol)
        if reason:
            row["left_out"][reason] = row["left_out"].get(reason, 0) + 1
        if trial["status"] == "ok" and reason:
            row["left_out_s"].append(trial["phases"]["measured_window"]["duration_ns"] / 1e9)
        elif trial["status"] == "ok":
            row["counted"] += 1
            row["durations_s"].append(trial["phases"]["measured_window"]["duration_ns"] / 1e9)
            row["accepted"] += trial["corpus_accepted"]
            if trial.get("generation"):  # a generation trial: its output tokens per second beside the window
                row.setdefault("tokens_per_s", []).append(trial["generation"]["output_tokens_per_s"])
                for stop in STOPS:  # how its outputs ended, per trial in run order (#61)
                    row.setdefault(stop, []).append(trial["generation"].get(stop))
        else:
            row["failed"] += 1
            row["failures"].append(trial["status"] + (f" in {trial['failed_phase']}" if trial["failed_phase"] else ""))
    for row in rows.values():
        row["min_s"], row["median_s"], row["max_s"] = window_figures(row["durations_s"])
        row["left_out"] = {reason: row["left_out"][reason] for reason in LEFT_OUT if reason in row["left_out"]}
    return list(rows.values())


def format_summary(rows: list[dict]) -> str:
    """Render the summary as a plain-text table: the figures over the trials the decision counts, and under each variant
    how many it leaves out and why (that line in the current language)."""
    def seconds(value):
        return "—" if value is None else f"{value:.3f}"

    # Attempts and counted trials apart: a repetition run again after an interruption or a disturbance is one more
    # attempt, never hidden; a disturbed window is no figure of the decision's, so none of the table's (#60).
    lines = [f"{'variant':<16} {'measured window, s (counted, run order)':<44} {'median':>8} {'min':>8} {'max':>8} "
             f"{'attempts':>8} {'counted':>7} {'disturbed':>9} {'fail':>4} {'interrupted':>11} {'retries':>7} {'accepted':>8}"]
    for row in rows:
        runs = " ".join(f"{value:.3f}" for value in row["durations_s"]) or "(no trial counted)"
        found = row["left_out"]
        lines.append(f"{row['variant']:<16} {runs:<44} {seconds(row['median_s']):>8} {seconds(row['min_s']):>8} "
                     f"{seconds(row['max_s']):>8} {row['attempts']:>8} {row['counted']:>7} {found.get('disturbed', 0):>9} "
                     f"{found.get('failed', 0):>4} {found.get('interrupted', 0):>11} {row['retries']:>7} {row['accepted']:>8}")
        if row.get("tokens_per_s"):
            low, middle, high = window_figures(row["tokens_per_s"])
            lines.append(f"{'':<16} output tokens per second: median {middle:.1f}, min {low:.1f}, max {high:.1f}")
        if row.get("stopped_at_eos") or row.get("cut_by_max_new_tokens"):
            lines.append(f"{'':<16} outputs per counted trial (run order): "
                         + "; ".join(f"{words} {' '.join('—' if n is None else str(n) for n in row[stop])}"
                                     for stop, words in STOPS.items()))
        if found:
            lines.append(f"{'':<16} {_left_out_line(row)}")
        lines.extend(f"{'':<16} failed: {failure}" for failure in row["failures"])
    return "\n".join(lines)


def _left_out_line(row: dict) -> str:
    """Say how many of a variant's trials the decision leaves out and why, and the disturbed windows it does not use."""
    said = Text("left out of every figure: {left_out}.", left_out=left_out_words(row["left_out"]))
    if row["left_out"].get("disturbed"):
        said = Joined(" ", [said, Text("Disturbed windows, set aside: {seconds} s. iteralab run CAMPAIGN_FILE --resume "
                                       "--rerun-disturbed measures them again, on a quiet machine.",
                                       seconds=" ".join(f"{value:.3f}" for value in row["left_out_s"]))])
    return say(said)


class Progress:
    """A progress bar with ETA per trial on stderr (tqdm), silent when not a terminal or with --quiet."""

    def __init__(self, *, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.label, self.bar = "", None

    def start(self, label: str, total: int):
        """Begin a trial's bar: TOTAL entries, shown under LABEL."""
        self.label = label
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, file=self.stream, unit="entries", leave=False, mininterval=0.2,
                            dynamic_ncols=True)

    def attach(self, inference):
        """Follow INFERENCE's measured window: the bar counts its completed entries, its ETA starts from here."""
        bar = self.bar
        if bar is None:
            return  # nothing wraps the inference when nothing is shown: the measured window runs as it is
        inference_step = inference.step  # one batch of the measured window, whatever the kind of work

        def step(encoded):
            result = inference_step(encoded)
            bar.update(inference.completed - bar.n)
            return result

        inference.step = step
        bar.unit = inference.progress_unit
        bar.reset(total=inference.progress_total or bar.total)

    def done(self, status: str):
        """End the trial's bar with its STATUS, on a line of its own."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.enabled:
            self.stream.write(f"{self.label:<32} {status}\n")
            self.stream.flush()
