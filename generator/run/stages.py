"""Validate each variant in stages before any timing: short inputs first, then typical ones, then the longest it must hold.

The second source document: "start with short inputs and a small batch to find setup errors, then typical inputs, then
the limit you really need". A variant that fails a stage is not timed; its planned trials are failure rows naming the
stage, and the other variants go on.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from iteralab.core.language import Text
from iteralab.machine.phases import InBatch, PhaseClock, describe, failed_at, out_of_memory_errors, release, said_at
from iteralab.store.trials import POINTS_TO

STAGES = ("shortest", "typical", "longest")
STAGE_PHASE = "validation_stages"  # the failed_phase of a trial whose variant failed a stage: it never started
SKIPPED = Text("run --no-stages: the variants were timed without validation stages")


def pick(entries: list, token_counts: dict[str, int], batch_size: int) -> dict[str, tuple[int, list]]:
    """Return each stage's batch size and entries: the shortest at batch 1, typical ones and the longest at BATCH_SIZE."""
    ordered = sorted(entries, key=lambda entry: (token_counts[entry.id], entry.id))
    size = min(batch_size, len(ordered))
    middle = max(0, min(len(ordered) - size, len(ordered) // 2 - size // 2))
    return {"shortest": (1, ordered[:1]), "typical": (size, ordered[middle:middle + size]),
            "longest": (size, ordered[len(ordered) - size:])}


def _failure(exc: BaseException, phase: str | None) -> dict:
    return {"outcome": "oom" if isinstance(exc, out_of_memory_errors()) else "error", "failed_phase": phase,
            "error": describe(exc), "points_to": POINTS_TO.get(phase) if phase else None, "failed_at": failed_at(exc)}


def _stage(work, variant, name: str, batch_size: int, chosen: list) -> dict:
    clock = PhaseClock(variant.device)
    record = {"stage": name, "batch_size": batch_size, "entries": len(chosen), "ids": [entry.id for entry in chosen],
              "tokens_executed": None, "outcome": "ok", "failed_phase": None, "error": None, "points_to": None}
    try:
        for start in range(0, len(chosen), batch_size):
            with InBatch(chosen[start:start + batch_size]) as where:  # a failure names this batch's ids and tokens (#61)
                with clock.phase("tokenize"):
                    encoded = where.encoded(work.encode([entry.text for entry in chosen[start:start + batch_size]]))
                lengths = encoded["attention_mask"].sum(dim=1).tolist()
                executed = record["tokens_executed"] or {"min": min(lengths), "max": max(lengths), "padded_to": 0}
                record["tokens_executed"] = {"min": min(executed["min"], *lengths), "max": max(executed["max"], *lengths),
                                             "padded_to": max(executed["padded_to"], int(encoded["input_ids"].shape[1]))}
                new_tokens = work.stage(clock, encoded)  # a generation's stage says the new tokens every row generated
            if new_tokens is not None:
                record["new_tokens"] = new_tokens
    except Exception as exc:
        record.update(_failure(exc, clock.current))
    record["peak_memory"] = {phase: {key: value for key, value in measured.items() if key.endswith("_bytes")}
                             for phase, measured in clock.phases.items()}
    return record


def validate(*, model_path: Path, variant, protocol: dict, entries: list, token_counts: dict[str, int], workload) -> dict:
    """Load VARIANT's model for WORKLOAD and run its three stages untimed; stop at the first that fails."""
    clock = PhaseClock(variant.device)
    result = {"passed": True, "model_load": None, "stages": []}
    inference = None
    try:
        with clock.phase("model_load"):
            tokenizer, model = workload.load_model(model_path, variant, protocol)
        inference = workload.Work(tokenizer, model, variant, protocol)
    except Exception as exc:
        result.update(passed=False, failed_stage="shortest", **_failure(exc, "model_load"))
    result["model_load"] = {key: value for key, value in clock.phases["model_load"].items() if key != "completed"}
    if inference is not None:
        for name, (batch_size, chosen) in pick(entries, token_counts, variant.batch_size).items():
            stage = _stage(inference, variant, name, batch_size, chosen)
            result["stages"].append(stage)
            if stage["outcome"] != "ok":
                result.update(passed=False, failed_stage=name,
                              **{key: stage[key] for key in ("outcome", "failed_phase", "error", "points_to", "failed_at")})
                break
    del inference
    release(variant.device)
    return result


def validate_all(*, campaign, entries: list, token_counts: dict[str, int], workload) -> dict:
    """Run every variant's validation stages, untimed, before the first trial."""
    return {"ran": True, "reason": None, "variants": {
        variant.name: validate(model_path=campaign.model_path, variant=variant, protocol=campaign.protocol,
                               entries=entries, token_counts=token_counts, workload=workload)
        for variant in campaign.variants}}


class StageFailed(Exception):
    """The variant failed a validation stage before any timing: its trial is a failure row naming the stage."""

    def __init__(self, found: dict):
        super().__init__(found["failed_stage"])
        self.found = found


def failure_message(variant: str, found: dict) -> str:
    """Say why VARIANT was not timed, in the words a failure row keeps: the stage, its phase, the failing batch's ids and
    token counts (#61), the error and where to look."""
    advice = f"; look at {found['points_to']}" if found.get("points_to") else ""
    where = found.get("failed_at") or {}
    error = found["error"] if not where or said_at(where) in found["error"] else f"{found['error']}; {said_at(where)}"
    return (f"variant {variant} failed its {found['failed_stage']} validation stage in {found['failed_phase']} before "
            f"any timing ({error}){advice}; it was not timed")


@contextlib.contextmanager
def kept_if_failed(prepared, runs_dir: Path, trial_id: str, got):
    """Write the rows a window that failed part-way had recorded (a serving trial's requests up to an engine that died,
    #64) as the trial's outputs file, then fail as the window did: a failed request is a row with its error, never a gap."""
    try:
        yield
    except Exception:
        partial = getattr(got.work, "partial", None)
        if partial:
            got.output_file = prepared.workload.write_outputs(runs_dir, prepared.campaign.name, trial_id, partial)
        raise
