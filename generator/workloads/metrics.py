"""Prediction checks: exact id coverage, accuracy, macro-F1, agreement, verdicts per threshold."""

from __future__ import annotations

import math
from collections import Counter

from iteralab.core.language import Text

FIRST_FEW = 5


def check_ids(expected: list[str], observed: list[str]) -> dict:
    """Compare the ids of the predictions with the corpus: every id exactly once, nothing else."""
    counts = Counter(observed)
    expected_set = set(expected)
    duplicates = [entry for entry, count in counts.items() if count > 1]
    missing = [entry for entry in expected if entry not in counts]
    unexpected = [entry for entry in counts if entry not in expected_set]
    return {
        "expected": len(expected),
        "observed": len(observed),
        "ids_match": not duplicates and not missing and not unexpected and len(expected) == len(observed),
        "duplicates": {"count": len(duplicates), "first": duplicates[:FIRST_FEW]},
        "missing": {"count": len(missing), "first": missing[:FIRST_FEW]},
        "unexpected": {"count": len(unexpected), "first": unexpected[:FIRST_FEW]},
    }


def accuracy(pairs: list[tuple[str, str]]) -> float | None:
    """Share of (predicted, gold) pairs that agree; None for no pairs."""
    if not pairs:
        return None
    return sum(predicted == gold for predicted, gold in pairs) / len(pairs)


def macro_f1(pairs: list[tuple[str, str]]) -> float | None:
    """Unweighted mean of per-class F1 over the classes seen in gold or predictions."""
    if not pairs:
        return None
    scores = []
    for label in sorted({label for pair in pairs for label in pair}):
        true_positive = sum(p == label and g == label for p, g in pairs)
        predicted = sum(p == label for p, _ in pairs)
        actual = sum(g == label for _, g in pairs)
        precision = true_positive / predicted if predicted else 0.0
        recall = true_positive / actual if actual else 0.0
        scores.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return sum(scores) / len(scores)


def check_format(predictions: list[tuple[str, str, float]], labels: list[str]) -> list[str]:
    """List predictions whose label is not the model's or whose score is not a probability."""
    problems = []
    for entry_id, label, score in predictions:
        if label not in labels:
            problems.append(f"{entry_id}: label {label!r} is not one of {labels}")
        if not isinstance(score, float) or math.isnan(score) or not 0.0 <= score <= 1.0:
            problems.append(f"{entry_id}: score {score!r} is not a probability")
        if len(problems) >= FIRST_FEW:
            break
    return problems


def evaluate(*, predictions: list[tuple[str, str, float]], gold: dict[str, str | None], bucket_of: dict[str, str],
             bucket_names: list[str], reference: dict | None, protocol: dict) -> dict:
    """Score predictions overall and per bucket and give a verdict for every protocol threshold."""
    predicted = {entry_id: label for entry_id, label, _ in predictions}
    labelled = all(gold.get(entry_id) is not None for entry_id in predicted)
    reference_labels = reference["predictions"] if reference else None

    def scores(ids: list[str]) -> dict:
        pairs = [(predicted[i], gold[i]) for i in ids] if labelled else []
        agreement_pairs = [(predicted[i], reference_labels[i]) for i in ids if i in reference_labels] if reference_labels else []
        return {
            "entries": len(ids),
            "accuracy": accuracy(pairs),
            "macro_f1": macro_f1(pairs),
            "agreement": accuracy(agreement_pairs),
        }

    overall = scores(list(predicted))
    buckets = {name: scores([i for i in predicted if bucket_of.get(i) == name]) for name in bucket_names}
    reasons = {}
    if not labelled:
        reasons["accuracy"] = reasons["macro_f1"] = Text("the corpus has no gold labels")
    if reference is None:
        reasons["agreement"] = Text("the reference variant has no successful trial to compare with")
    limits = dict(protocol["thresholds"])
    if protocol.get("min_agreement") is not None:
        limits["agreement"] = protocol["min_agreement"]
    found = verdicts(overall, limits, reasons)
    return {
        "overall": overall,
        "buckets": buckets,
        "missing_reasons": reasons,
        "reference": None if reference is None else {"variant": reference["variant"], "trial_id": reference["trial_id"]},
        "verdicts": found,
        "passed": all(verdict["passed"] for verdict in found),
    }


def verdicts(overall: dict, limits: dict[str, float], reasons: dict) -> list[dict]:
    """Give a verdict for every threshold of the protocol: the value must reach it; a missing value fails with its reason."""
    found = []
    for metric, threshold in sorted(limits.items()):
        value = overall.get(metric)
        found.append({
            "metric": metric, "threshold": threshold, "comparison": ">=", "value": value,
            "passed": value is not None and value >= threshold,
            "reason": None if value is not None else reasons.get(metric, Text("not measured")),
        })
    return found
