"""What a run shows its user: the plan before it starts, a progress bar while it runs, a summary table at the end."""

from __future__ import annotations

import sys

from iteralab.machine import placement
from iteralab.store.views import window_figures


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
    return {"run_id": result.run_id, "records_file": str(result.records_file), "summary": summarize(result.earlier + result.trials),
            "interrupted": result.interrupted, "resumed": result.resumed, "warnings": result.warnings,
            "rental": (result.manifest or {}).get("rental")}


def describe_run(result) -> str:
    """Return the summary table, where the records are, and whether the run was interrupted."""
    campaign = (result.manifest or {}).get("campaign", "CAMPAIGN")
    # After --resume, the whole run: the trials earlier invocations recorded with those of this one (#45).
    text = (format_summary(summarize(result.earlier + result.trials)) + f"\nRun id: {result.run_id} (for rental add --run)"
            f"\nTrial ids: iteralab trials {campaign} --run {result.run_id} (for deliver and exclude)"
            f"\nRecords: {result.records_file}")
    if result.resumed:
        resumed = result.resumed
        text = (f"Resumed run {result.run_id}: {resumed['finished']} finished trial(s) kept, "
                f"{len(resumed['interrupted'])} in flight when the process ended recorded as interrupted"
                f"{' (' + ', '.join(resumed['interrupted']) + ')' if resumed['interrupted'] else ''}, "
                f"{resumed['remaining']} run now in the planned order"
                f"{_retried(resumed.get('retried') or [])}; warm-up {resumed['warmup']}\n" + text)
    rental = (result.manifest or {}).get("rental")
    if rental:
        text += (f"\nRental: {rental['rental_id']}, "
                 f"{'inside' if rental['within_period'] else 'OUTSIDE'} its period ({rental['period_start']} to {rental['period_end']})")
    if result.interrupted:
        text += "\nInterrupted: the trial in progress was recorded as interrupted; earlier records are intact."
    return text


def _retried(retried: list[str]) -> str:
    if not retried:
        return ""
    return f", {len(retried)} of them an interrupted repetition run again (replacing {', '.join(retried)})"


def summarize(trials: list[dict]) -> list[dict]:
    """Per variant: measured-window seconds in run order, median, min, max, attempts, ok/failed, retries, verdicts."""
    rows = {}
    for trial in sorted(trials, key=lambda t: (t["created_at"], t["sequence"])):
        row = rows.setdefault(trial["variant"], {"variant": trial["variant"], "durations_s": [], "attempts": 0, "ok": 0,
                                                 "failed": 0, "retries": 0, "accepted": 0, "failures": []})
        row["attempts"] += 1
        row["retries"] += bool(trial.get("retry_of"))
        if trial["status"] == "ok":
            row["ok"] += 1
            row["durations_s"].append(trial["phases"]["measured_window"]["duration_ns"] / 1e9)
            row["accepted"] += trial["corpus_accepted"]
            if trial.get("generation"):  # a generation trial: its output tokens per second beside the window
                row.setdefault("tokens_per_s", []).append(trial["generation"]["output_tokens_per_s"])
        else:
            row["failed"] += 1
            row["failures"].append(trial["status"] + (f" in {trial['failed_phase']}" if trial["failed_phase"] else ""))
    for row in rows.values():
        row["min_s"], row["median_s"], row["max_s"] = window_figures(row["durations_s"])
    return list(rows.values())


def format_summary(rows: list[dict]) -> str:
    """Render the summary as a plain-text table."""
    def seconds(value):
        return "—" if value is None else f"{value:.3f}"

    # Attempts and successes apart: a repetition run again after an interruption is one more attempt, never hidden.
    lines = [f"{'variant':<16} {'measured window, s (run order)':<44} {'median':>8} {'min':>8} {'max':>8} "
             f"{'attempts':>8} {'ok':>3} {'fail':>4} {'retries':>7} {'accepted':>8}"]
    for row in rows:
        runs = " ".join(f"{value:.3f}" for value in row["durations_s"]) or "(no successful trial)"
        lines.append(f"{row['variant']:<16} {runs:<44} {seconds(row['median_s']):>8} {seconds(row['min_s']):>8} "
                     f"{seconds(row['max_s']):>8} {row['attempts']:>8} {row['ok']:>3} {row['failed']:>4} "
                     f"{row['retries']:>7} {row['accepted']:>8}")
        if row.get("tokens_per_s"):
            low, middle, high = window_figures(row["tokens_per_s"])
            lines.append(f"{'':<16} output tokens per second: median {middle:.1f}, min {low:.1f}, max {high:.1f}")
        lines.extend(f"{'':<16} failed: {failure}" for failure in row["failures"])
    return "\n".join(lines)


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
