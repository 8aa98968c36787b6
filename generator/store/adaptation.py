"""The figures a trial record's ``adaptation`` object carries (#43), over a configuration's repetitions.

Updates, training examples and tokens per second over the measured window, the time to the validated model, the
losses, the trainable and total parameters, the memory estimate beside the measured peaks (each labelled), the export
with its file hashes, and the configuration's validated model: the useful unit of an adaptation campaign. A page,
``decide``, ``compare``, the trial table and the bundle ask these functions and show the block when they return one:
none of them asks for the kind of work, and a trial without the object is shown as it always was.
"""

from __future__ import annotations

from iteralab.core.language import Text
from iteralab.store.generation import NO_SUCCESS, NOT_RECORDED, spread

BLOCK = "adaptation"  # the record's object these figures are read from
BEFORE_WINDOW = ("first_forward", "first_backward", "first_update")  # its own phases before the measured window
AFTER_WINDOW = ("validation", "export")  # and after it
# The one-time phases of an adaptation trial that its time to the validated model does not hold (it holds the load).
OUTSIDE_MODEL = ("environment_check", "compilation")
# (figure, what a page formats it as): per trial in the adaptation object, a spread over the repetitions here
FIGURES = (("updates_per_s", "rate"), ("train_examples_per_s", "rate"), ("train_tokens_per_s", "rate"),
           ("time_to_validated_model_s", "s"), ("updates", "int"), ("train_examples", "int"), ("train_tokens", "int"),
           ("data_s", "s"), ("forward_s", "s"), ("backward_s", "s"), ("optimizer_step_s", "s"))  # parts summed (#61)
PEAKS = ("gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes", "host_peak_rss_bytes")  # never summed with each other
NO_MODEL = Text("no validated model: no successful trial was accepted by the validation thresholds with its export hashed")


def has_block(trials) -> bool:
    """Tell whether any of TRIALS carries the adaptation object."""
    return any(trial.get(BLOCK) for trial in trials)


def _successes(trials) -> list[dict]:
    return [trial for trial in trials if trial["status"] == "ok" and trial.get(BLOCK)]


def _figure(ok: list[dict], pick) -> dict:
    values = [value for trial in ok if (value := pick(trial)) is not None]
    return spread(values, NO_SUCCESS if not ok else NOT_RECORDED, len(ok))


def figures(trials, every=None) -> dict:
    """Return each figure of the adaptation object as a spread (median, min, max, reason, count, of) over the successful
    TRIALS (a configuration's counted trials): FIGURES, the losses, validation accuracy and macro F1; the method, effective
    batch, parameters and memory estimate, read from EVERY trial of the configuration (set-aside ones too: its settings,
    not its outcomes); the measured memory, the validated model and how its time is defined. Empty spreads with a reason."""
    ok = _successes(trials)
    found = {name: _figure(ok, lambda t, name=name: t[BLOCK].get(name)) for name, _ in FIGURES}
    found["validation_loss"] = _figure(ok, lambda t: (t[BLOCK].get("losses") or {}).get("validation"))
    found["first_update_loss"] = _figure(ok, lambda t: (t[BLOCK].get("losses") or {}).get("first_update"))
    for metric in ("accuracy", "macro_f1"):
        found[metric] = _figure(ok, lambda t, metric=metric: ((t.get("quality") or {}).get("overall") or {}).get(metric))
    first = (ok or [t for t in every or trials if t.get(BLOCK)] or [{BLOCK: {}}])[0][BLOCK]
    config = next((t.get("variant_config") or {} for t in every or trials), {})
    size, times = config.get("batch_size"), config.get("accumulation")
    batch = {"microbatch": size, "accumulation": times, "devices": 1, "examples": size * times} if isinstance(size, int) and isinstance(times, int) else None
    found.update(method=first.get("method") or config.get("method"), effective_batch=first.get("effective_batch") or batch,
                 parameters=first.get("parameters"), definition=first.get("time_to_validated_model"),
                 memory=memory(trials, every), validated_model=validated_model(trials), exports=exports(trials))
    return found


def of_summary(summary) -> dict | None:
    """Return a configuration's adaptation figures (``figures``), or None when none of its trials has the object."""
    return figures(summary.counted, summary.trials) if has_block(summary.trials) else None


def memory(trials, every=None) -> dict:
    """Return the estimate (weights + gradients + optimizer state, from the counts and the precision) beside the highest
    measured peaks over the successful TRIALS, each labelled; a peak no trial measured is None with its reason."""
    blocks = [trial[BLOCK].get("memory") or {} for trial in _successes(trials)]
    estimate = next((found for t in every or trials if (found := ((t.get(BLOCK) or {}).get("memory") or {}).get("estimate"))), None)
    measured = [block.get("measured") or {} for block in blocks]
    peaks = {}
    for key in (*PEAKS, "host_above_baseline_bytes", "host_baseline_bytes"):
        values = [block[key] for block in measured if block.get(key) is not None]
        reason = next((block["gpu_reason"] for block in measured if key.startswith("gpu_") and block.get("gpu_reason")),
                      NOT_RECORDED if blocks else NO_SUCCESS)
        peaks[key] = {"value": max(values) if values else None, "reason": None if values else reason, "label": "measured"}
    return {"estimate": estimate, "estimate_reason": None if estimate else NO_SUCCESS, "measured": peaks,
            "baseline": next((block.get("host_baseline") for block in measured if block.get("host_baseline")), None)}


def phase_peaks(trials) -> dict:
    """Return, per phase of the successful TRIALS, the highest of each memory counter (PEAKS), None where no trial
    measured it: the chart of peak memory per phase and per variant (``store.trials.phases_of`` orders the phases)."""
    found: dict[str, dict] = {}
    for trial in _successes(trials):
        for name, phase in trial["phases"].items():
            peaks = found.setdefault(name, dict.fromkeys(PEAKS))
            for key in PEAKS:
                if phase.get(key) is not None:
                    peaks[key] = phase[key] if peaks[key] is None else max(peaks[key], phase[key])
    return found


def exports(trials) -> list[dict]:
    """Return every successful trial's export: trial id, runs-relative folder, method, what was saved, its files with
    bytes and sha256, the sha256 over them and how it is made; in run order."""
    return [{"trial_id": trial["record_id"], "variant": trial["variant"], "accepted": bool(trial["corpus_accepted"]),
             **trial[BLOCK]["export"]} for trial in _successes(trials) if trial[BLOCK].get("export")]


def validated_model(trials) -> dict | None:
    """Return the configuration's validated model: the first successful TRIAL accepted by the validation thresholds whose
    export is hashed (its export, with the trial id). Repetitions of one training are not extra models: a configuration
    yields one at most, whatever its repetitions. None when there is none (``NO_MODEL`` says why)."""
    return next(({"trial_id": trial["record_id"], **trial[BLOCK]["export"]} for trial in _successes(trials)
                 if trial["corpus_accepted"] and (trial[BLOCK].get("export") or {}).get("sha256")), None)


def models(summaries) -> int:
    """Count the validated models of a campaign's configurations (SUMMARIES): one per configuration that has one."""
    return sum(1 for summary in summaries if validated_model(summary.counted) is not None)


def model_seconds(trial: dict) -> float | None:
    """Return the time of one model of a successful adaptation TRIAL (its time to the validated model), else None."""
    return (trial.get(BLOCK) or {}).get("time_to_validated_model_s") if trial["status"] == "ok" else None
