"""Quality rules with figures worked out by hand: id coverage, accuracy, macro-F1, agreement and verdicts."""

from __future__ import annotations

import math

import pytest

from iteralab.workloads.metrics import accuracy, check_format, check_ids, evaluate, macro_f1

PROTOCOL = {"thresholds": {"accuracy": 0.5, "macro_f1": 0.5}, "min_agreement": 0.75}


def test_ids_that_match_exactly():
    assert check_ids(["a", "b", "c"], ["c", "a", "b"]) == {
        "expected": 3, "observed": 3, "ids_match": True,
        "duplicates": {"count": 0, "first": []}, "missing": {"count": 0, "first": []},
        "unexpected": {"count": 0, "first": []}}


def test_ids_duplicated_missing_and_unexpected_are_counted_and_named():
    check = check_ids(["a", "b", "c", "d"], ["a", "a", "x", "b"])
    assert check["ids_match"] is False
    assert (check["expected"], check["observed"]) == (4, 4)
    assert check["duplicates"] == {"count": 1, "first": ["a"]}
    assert check["missing"] == {"count": 2, "first": ["c", "d"]}
    assert check["unexpected"] == {"count": 1, "first": ["x"]}


def test_only_the_first_five_of_many_are_named_in_corpus_order():
    expected = [f"id{n}" for n in range(8)]
    check = check_ids(expected, [])
    assert check["missing"] == {"count": 8, "first": ["id0", "id1", "id2", "id3", "id4"]}
    assert check["ids_match"] is False


@pytest.mark.parametrize("observed", [["a"], ["a", "b", "b"], ["a", "b", "c"]])
def test_any_single_difference_breaks_the_match(observed):
    assert check_ids(["a", "b"], observed)["ids_match"] is False


def test_accuracy_is_the_share_that_agrees_and_none_without_pairs():
    assert accuracy([("x", "x"), ("x", "y"), ("y", "y"), ("y", "x")]) == 0.5
    assert accuracy([("x", "x"), ("y", "y"), ("y", "x")]) == pytest.approx(2 / 3)
    assert accuracy([]) is None


def test_macro_f1_worked_by_hand():
    # gold: pos pos pos neg; predicted: pos neg pos pos.
    # pos: tp 2, predicted 3, actual 3 -> P 2/3, R 2/3, F1 2/3. neg: tp 0 -> F1 0. Mean 1/3.
    pairs = [("pos", "pos"), ("neg", "pos"), ("pos", "pos"), ("pos", "neg")]
    assert macro_f1(pairs) == pytest.approx(1 / 3)
    # Unequal precision and recall: gold a a b b; predicted a b b b.
    # a: P 1/1, R 1/2 -> F1 2/3. b: P 2/3, R 2/2 -> F1 4/5. Mean (2/3 + 4/5) / 2 = 11/15.
    assert macro_f1([("a", "a"), ("b", "a"), ("b", "b"), ("b", "b")]) == pytest.approx(11 / 15)
    assert macro_f1([("a", "a"), ("b", "b")]) == 1.0
    assert macro_f1([]) is None


def test_macro_f1_counts_a_class_seen_only_in_predictions():
    # gold all "a"; predicted one "c": a: P 1, R 1/2 -> 2/3; c: P 0, R 0 -> 0. Mean 1/3.
    assert macro_f1([("a", "a"), ("c", "a")]) == pytest.approx(1 / 3)


def test_format_names_foreign_labels_and_scores_that_are_not_probabilities():
    problems = check_format([("e1", "pos", 0.9), ("e2", "maybe", 0.5), ("e3", "neg", 1.5), ("e4", "neg", math.nan),
                             ("e5", "pos", 1), ("e6", "neg", 0.0), ("e7", "neg", 1.0), ("e8", "neg", -0.1)],
                            ["pos", "neg"])
    assert problems == ["e2: label 'maybe' is not one of ['pos', 'neg']", "e3: score 1.5 is not a probability",
                        "e4: score nan is not a probability", "e5: score 1 is not a probability",
                        "e8: score -0.1 is not a probability"]


def test_format_stops_after_the_first_five_problems():
    problems = check_format([(f"e{n}", "bad", 0.5) for n in range(9)], ["pos"])
    assert len(problems) == 5 and problems[-1].startswith("e4:")
    two_each = check_format([(f"e{n}", "bad", 2.0) for n in range(9)], ["pos"])
    assert len(two_each) == 6 and two_each[-1] == "e2: score 2.0 is not a probability"


def _predictions(labels: dict[str, str]) -> list[tuple[str, str, float]]:
    return [(entry_id, label, 0.9) for entry_id, label in labels.items()]


def test_evaluate_overall_per_bucket_and_against_the_reference():
    gold = {"s1": "pos", "s2": "neg", "l1": "pos", "l2": "neg"}
    predicted = {"s1": "pos", "s2": "neg", "l1": "neg", "l2": "neg"}
    reference = {"variant": "fp32-b1", "trial_id": "trial-ref",
                 "predictions": {"s1": "pos", "s2": "pos", "l1": "neg", "l2": "neg"}}
    result = evaluate(predictions=_predictions(predicted), gold=gold, bucket_of={"s1": "short", "s2": "short", "l1": "long",
                      "l2": "long"}, bucket_names=["short", "long", "empty"], reference=reference, protocol=PROTOCOL)
    # overall accuracy 3/4; macro-F1: pos P 1 R 1/2 -> 2/3, neg P 2/3 R 1 -> 4/5, mean 11/15; agreement 3/4.
    assert result["overall"] == {"entries": 4, "accuracy": 0.75, "macro_f1": pytest.approx(11 / 15), "agreement": 0.75}
    assert result["buckets"]["short"] == {"entries": 2, "accuracy": 1.0, "macro_f1": 1.0, "agreement": 0.5}
    assert result["buckets"]["long"] == {"entries": 2, "accuracy": 0.5, "macro_f1": pytest.approx(1 / 3), "agreement": 1.0}
    assert result["buckets"]["empty"] == {"entries": 0, "accuracy": None, "macro_f1": None, "agreement": None}
    assert result["reference"] == {"variant": "fp32-b1", "trial_id": "trial-ref"}
    assert result["missing_reasons"] == {}
    assert result["verdicts"] == [
        {"metric": "accuracy", "threshold": 0.5, "comparison": ">=", "value": 0.75, "passed": True, "reason": None},
        {"metric": "agreement", "threshold": 0.75, "comparison": ">=", "value": 0.75, "passed": True, "reason": None},
        {"metric": "macro_f1", "threshold": 0.5, "comparison": ">=", "value": pytest.approx(11 / 15), "passed": True,
         "reason": None}]
    assert result["passed"] is True


def test_one_threshold_missed_fails_the_trial_and_equality_passes():
    gold = {"a": "pos", "b": "neg"}
    exactly = evaluate(predictions=_predictions({"a": "pos", "b": "pos"}), gold=gold, bucket_of={}, bucket_names=[],
                       reference=None, protocol={"thresholds": {"accuracy": 0.5}})
    assert exactly["verdicts"][0]["passed"] is True and exactly["passed"] is True
    missed = evaluate(predictions=_predictions({"a": "pos", "b": "pos"}), gold=gold, bucket_of={}, bucket_names=[],
                      reference=None, protocol={"thresholds": {"accuracy": 0.5, "macro_f1": 0.5}})
    # macro-F1: pos P 1/2 R 1 -> 2/3, neg 0 -> mean 1/3 < 0.5.
    assert [v["passed"] for v in missed["verdicts"]] == [True, False] and missed["passed"] is False


def test_without_gold_labels_or_reference_the_values_are_empty_with_their_reasons():
    result = evaluate(predictions=_predictions({"a": "pos", "b": "neg"}), gold={"a": None, "b": "neg"},
                      bucket_of={"a": "short"}, bucket_names=["short"], reference=None, protocol=PROTOCOL)
    assert result["overall"] == {"entries": 2, "accuracy": None, "macro_f1": None, "agreement": None}
    assert result["missing_reasons"] == {"accuracy": "the corpus has no gold labels",
                                         "macro_f1": "the corpus has no gold labels",
                                         "agreement": "the reference variant has no successful trial to compare with"}
    assert result["reference"] is None
    assert [(v["metric"], v["value"], v["passed"], v["reason"]) for v in result["verdicts"]] == [
        ("accuracy", None, False, "the corpus has no gold labels"),
        ("agreement", None, False, "the reference variant has no successful trial to compare with"),
        ("macro_f1", None, False, "the corpus has no gold labels")]
    assert result["passed"] is False


def test_agreement_reads_only_entries_the_reference_predicted():
    reference = {"variant": "ref", "trial_id": "t", "predictions": {"a": "pos"}}
    result = evaluate(predictions=_predictions({"a": "pos", "b": "neg"}), gold={"a": "pos", "b": "neg"}, bucket_of={},
                      bucket_names=[], reference=reference, protocol={"thresholds": {}})
    assert result["overall"]["agreement"] == 1.0
    assert result["verdicts"] == [] and result["passed"] is True
    empty = evaluate(predictions=_predictions({"a": "pos"}), gold={"a": "pos"}, bucket_of={}, bucket_names=[],
                     reference={"variant": "ref", "trial_id": "t", "predictions": {}},
                     protocol={"thresholds": {}, "min_agreement": 0.9})
    assert empty["overall"]["agreement"] is None
    assert empty["verdicts"][0] == {"metric": "agreement", "threshold": 0.9, "comparison": ">=", "value": None,
                                    "passed": False, "reason": "not measured"}
