"""The figures a trial record's ``generation`` object carries (#42, part 3), over a configuration's repetitions.

Tokens in and out, output tokens per second over the measured window, prefill per batch and decode per new token, the
outputs cut by max_new_tokens or stopped at the end of sequence, the KV cache's estimate beside its measurement, and the
quality figures such a trial scores (agreement, reference match) with their definitions. A page, ``decide`` and the
trial table ask these functions for them and show the block when they return one: none of them asks for the kind of
work, and a classification trial, which has no such object, is shown as it always was.
"""

from __future__ import annotations

import statistics

from iteralab.core.language import Text

BLOCK = "generation"  # the record's object these figures are read from
NO_SUCCESS = Text("no successful trial")
NOT_RECORDED = Text("not recorded")
# (figure, what a page formats it as, the key of the generation object that says why it is empty, when there is one)
FIGURES = (("output_tokens_per_s", "tokens_per_s", None), ("prefill_s_per_batch", "ms", None),
           ("decode_s_per_new_token", "ms", "decode_reason"), ("outputs", "int", None), ("input_tokens", "int", None),
           ("output_tokens", "int", None), ("cut_by_max_new_tokens", "int", None), ("stopped_at_eos", "int", None))
QUALITY = ("agreement", "reference_match", "cut_by_max_new_tokens")  # beside accuracy, in quality.overall and per bucket


def has_block(trials) -> bool:
    """Tell whether any of TRIALS carries the generation object."""
    return any(trial.get(BLOCK) for trial in trials)


def spread(values: list, reason, of: int) -> dict:
    """Return the median, minimum and maximum of VALUES, or three Nones with REASON: never 0 for a missing figure. OF:
    the successful repetitions; where fewer have the figure, REASON says why the others do not."""
    if not values:
        return {"median": None, "min": None, "max": None, "reason": reason, "count": 0, "of": of}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "reason": reason if len(values) < of else None, "count": len(values), "of": of}


def _successes(trials) -> list[dict]:
    return [trial for trial in trials if trial["status"] == "ok" and trial.get(BLOCK)]


def figures(trials) -> dict:
    """Return each figure of the generation object as a spread over the successful TRIALS (a configuration's counted
    trials), the quality figures, their definitions and the KV cache; empty, with the reason, where none succeeded."""
    ok = _successes(trials)
    found = {}
    for name, _, why in FIGURES:
        values = [trial[BLOCK][name] for trial in ok if trial[BLOCK].get(name) is not None]
        reasons = [trial[BLOCK].get(why) for trial in ok if why and trial[BLOCK].get(why)]
        found[name] = spread(values, NO_SUCCESS if not ok else reasons[0] if reasons else NOT_RECORDED, len(ok))
    qualities = [trial.get("quality") or {} for trial in ok]
    for metric in QUALITY[:2]:
        values = [quality["overall"][metric] for quality in qualities if (quality.get("overall") or {}).get(metric) is not None]
        reasons = [quality["missing_reasons"][metric] for quality in qualities
                   if (quality.get("missing_reasons") or {}).get(metric)]
        found[metric] = spread(values, NO_SUCCESS if not ok else reasons[0] if reasons else NOT_RECORDED, len(ok))
    found["definitions"] = next((quality["definitions"] for quality in qualities if quality.get("definitions")), {})
    found["kv_cache"] = kv_cache(ok)
    return found


def of_summary(summary) -> dict | None:
    """Return a configuration's generation figures (``figures``), or None when none of its trials has the object."""
    return figures(summary.counted) if has_block(summary.trials) else None


def kv_cache(trials) -> dict:
    """Return the KV cache over successful TRIALS: the highest estimate beside the highest measurement, each with the reason
    it is empty, and how each was made (formula, tokens, sequences, bits; what the measurement counts)."""
    blocks = [trial[BLOCK]["kv_cache"] for trial in _successes(trials) if trial[BLOCK].get("kv_cache")]
    if not blocks:
        return {"estimate": None, "estimate_reason": NO_SUCCESS, "measured": None, "measured_reason": NO_SUCCESS,
                "tokens": None, "sequences": None, "bits": None, "formula": None, "measured_as": None}
    estimates = [block["estimate_bytes"] for block in blocks if block.get("estimate_bytes") is not None]
    measured = [block["measured_bytes"] for block in blocks if block.get("measured_bytes") is not None]
    first = blocks[0]
    return {"estimate": max(estimates) if estimates else None,
            "estimate_reason": None if estimates else next((b["estimate_reason"] for b in blocks if b.get("estimate_reason")),
                                                           NOT_RECORDED),
            "measured": max(measured) if measured else None,
            "measured_reason": None if measured else next((b["measured_reason"] for b in blocks if b.get("measured_reason")),
                                                          NOT_RECORDED),
            "tokens": max((b["tokens"] for b in blocks if b.get("tokens") is not None), default=None),
            "sequences": first.get("sequences"), "bits": first.get("bits"), "formula": first.get("estimate_formula"),
            "measured_as": first.get("measured_as")}
