"""Rules of decision/answer.py that the mutation run (#62) found no selected test holding."""

import dataclasses
from types import SimpleNamespace

from iteralab.decision.answer import _runner_up
from iteralab.decision.kinds import MODEL
from iteralab.decision.report import decide
from iteralab.money.catalog import parse_catalog
from iteralab.store import reading
from iteralab.store.views import campaign_views
from tests import factory
from tests.test_answer_whole import A8, CPU1, TEN, merged
from tests.test_decision import CPU, QUESTION, RTX_4090, report_of

# The one card of this catalog is measured, too slow for the window even on ten lots: nothing is left to measure.
ONE_CARD = factory.CATALOG_HEADER + "2026-09-24,rtx-4090,RTX 4090,1,24,3,47.14,USD\n"


def test_a_cpu_that_meets_the_question_with_no_card_left_to_measure_says_renting_adds_nothing_and_stops(tmp_path):
    """Regression for #62: where a configuration needs no rental, no rental is feasible and no card is left to measure,
    the first sentence ends 'Renting adds nothing the question asks for.' and no card to measure is named."""
    runs = merged(tmp_path / "runs", ("run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}),
                  ("run-4090", RTX_4090, {"b1": [300000, 300000, 300000, 300000, 300000]}), question=QUESTION)
    (view,) = campaign_views(reading.load(runs))
    report = decide(view, parse_catalog(ONE_CARD, "one.csv"))
    assert report.to_measure == [] and report.cheapest is None and report.owned.label == CPU1
    assert report.next_step == (f"{CPU1} meets the question without a rental: it meets the quality thresholds and is "
                                f"projected at 50.0 s to 50.0 s for {TEN} within the 72 h access window. Renting adds nothing the "
                                "question asks for.")
    assert "Measure next" not in report.answer


def test_a_models_runner_up_of_the_same_spend_separated_by_the_repetitions_compares_training_windows(tmp_path):
    """Regression for #62: where the unit is a model, a runner-up of the same spend that the repetitions separate is
    compared over the measured training windows (medians ungrouped, no 'per corpus')."""
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [1000, 1001, 1002, 1003, 1004],
                                                          "b8": [1100, 1101, 1102, 1103, 1104]}))
    report = report_of(runs)[0]
    found = SimpleNamespace()
    said = _runner_up(found, dataclasses.replace(report.cheapest, unit=MODEL), report.runner_up)
    assert str(said) == (f"Runner-up: {A8} plans the same spend, but the repetitions separate their measured training "
                         "windows: median 1002.000 s against 1102.000 s, the ranges do not overlap.")
    assert found.runner_up is report.runner_up and found.gap_money == 0 and not hasattr(found, "tie")


def test_a_models_runner_up_the_repetitions_do_not_separate_is_a_tie_not_a_comparison_of_windows(tmp_path):
    """Regression for #62: only a runner-up the repetitions separate is compared over the training windows; a model's
    runner-up of the same spend whose ranges overlap is a tie."""
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [1000, 1001, 1002, 1003, 1004],
                                                          "b8": [1002, 1003, 1004, 1005, 1006]}))
    report = report_of(runs)[0]
    found = SimpleNamespace()
    said = _runner_up(found, dataclasses.replace(report.cheapest, unit=MODEL), report.runner_up)
    assert said is found.tie and str(said).startswith("Tie: ") and "training windows" not in str(said)
