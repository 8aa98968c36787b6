"""Rules of decision/answer.py that the mutation run (#62) found no selected test holding."""

import dataclasses
from decimal import Decimal
from types import SimpleNamespace

from iteralab.decision.answer import _measure_again, _misses, _runner_up, answer
from iteralab.decision.kinds import MODEL
from iteralab.decision.question import Question
from iteralab.decision.report import decide
from iteralab.money.catalog import Catalog, Gpu, parse_catalog
from iteralab.store import reading, records
from iteralab.store.views import campaign_views
from tests import factory
from tests.test_answer_whole import A8, CPU1, OPEN, TEN, merged
from tests.test_decision import CPU, QUESTION, RTX_4090, report_of, write_machine
from tests.test_disturbed_records import interference

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


# A catalog made in code (the Python API) may list a card with no package: a configuration on it is feasible, not owned
# (the catalog knows the card), and unpriced.
BARE = Catalog("by-hand", "code", {"rtx-4090": Gpu("rtx-4090", "RTX 4090", 1, Decimal("24"))}, {})
A4090 = "· 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"


def test_feasible_but_unpriced_says_why_it_has_no_plan_and_that_no_card_is_priced(tmp_path):
    """Regression for #62: with feasible configurations but none priced, the answer names the fastest-ranked one with
    its projection and why its spend cannot be planned, the index's line says so, the next step is that no feasible
    configuration runs on a priced card, and a configuration with too few undisturbed trials does not make it a
    measure-again answer (something is feasible)."""
    manifest, _ = write_machine(tmp_path, "run-a", RTX_4090, {"b1": [40, 41, 42, 43, 44], "b8": [30, 31, 32, 33, 34]},
                                question=OPEN)
    for repetition, disturbed in ((1, True), (2, True), (3, False)):
        trial = factory.trial(manifest, "b4", seconds=35, repetition=repetition, sequence=10 + repetition, gpu=True,
                              batch_size=4)
        trial["interference"] = interference(disturbed)
        records.append(tmp_path, trial)
    (view,) = campaign_views(reading.load(tmp_path))
    report = decide(view, BARE)
    assert [row.label for row in report.infeasible] == [f"b4 {A4090}"]
    assert report.cheapest is None and report.owned is None and report.to_measure == []
    assert report.next_step == "Nothing to rent yet: no feasible configuration runs on a card the catalog prices."
    assert report.summary_line == (f"no priced configuration yet; b8 {A4090} feasible (catalog by-hand lists no package "
                                   "for RTX 4090)")
    assert report.points[0] == (
        f"b8 {A4090} meets the quality thresholds and is projected at 5.0 min to 5.7 min for {TEN} within the 72 h "
        "access window, but its package spend cannot be planned (catalog by-hand lists no package for RTX 4090).")


def test_without_a_decision_table_the_answer_says_what_it_assumed_for_a_corpus_and_for_a_model(tmp_path):
    """Regression for #62: the sentence for a campaign file without [decision] names the unit it assumed."""
    write_machine(tmp_path, "run-a", RTX_4090, {"b1": [40, 41, 42, 43, 44]}, question=None)
    report = report_of(tmp_path)[0]
    corpus = "The campaign file states no [decision] table, so this answer assumes one corpus and no window."
    assert report.points[-1] == corpus
    model = answer(dataclasses.replace(report.question, unit=MODEL), report.ranked, report.infeasible, report.rows,
                   report.to_measure, report.corpus_entries)
    assert model["points"][-1] == ("The campaign file states no [decision] table, so this answer assumes one model and "
                                   "no window.")
    assert corpus not in str(model["answer"])


def _disturbed(successes: int, seconds: list[float]) -> SimpleNamespace:
    return SimpleNamespace(summary=SimpleNamespace(disturbed_successes=successes, seconds=seconds))


def test_measure_again_counts_only_configurations_that_disturbance_left_with_fewer_than_two_trials():
    """Regression for #62: a configuration counts when trials measured as disturbed left it fewer than two (not one left
    short by failures alone, not one with two left); the whole campaign so hit changes the index's line too."""
    hit, short, enough = _disturbed(2, [35.0]), _disturbed(0, [35.0]), _disturbed(1, [35.0, 36.0])
    found = SimpleNamespace(summary_line="before")
    said = _measure_again(found, [], [hit, short, enough])
    assert said == ("Nothing to rent yet: 1 of 3 configurations have fewer than two trials to compare because their "
                    "trials were measured as disturbed (something else used the machine during their measured "
                    "windows) and are set aside. Measure them again on a quiet machine with iteralab run CAMPAIGN_FILE "
                    "--resume --rerun-disturbed (CAMPAIGN_FILE: the campaign's file), then build again.")
    assert found.summary_line == "before"
    assert _measure_again(found, [], [short, enough]) is None
    assert _measure_again(found, [], [hit, _disturbed(1, [])]).startswith("Nothing to rent yet: 2 of 2 configurations")
    assert found.summary_line == "every configuration's trials measured as disturbed: measure again on a quiet machine"


def _question(*, window: str | None, deadline: str | None) -> Question:
    return Question(True, 1, None, None if window is None else Decimal(window), None, None, None, None,
                    None if deadline is None else Decimal(deadline), None)


def test_a_configuration_without_rental_missing_a_deadline_equal_to_its_window_is_said_to_miss_the_deadline():
    """Regression for #62: where the deadline and the window are the same hours and both are missed, the deadline is
    named (it is the one the work cannot move); a projection exactly at the limit misses nothing."""
    row = SimpleNamespace(label=CPU1, hours=(1.0, 2.5, 3.0), conditions=["window", "deadline"])
    said = _misses(row, _question(window="2", deadline="2"))
    assert said == (f"Without a rental, {CPU1} meets the quality thresholds but misses the deadline (projected up to "
                    "3.00 h, against 2 h until the deadline): what renting would add is finishing before it, on a card "
                    "fast enough.")
    at_limit = SimpleNamespace(label=CPU1, hours=(1.0, 1.5, 2.0), conditions=["budget"])
    assert _misses(at_limit, _question(window=None, deadline="2")) is None
    assert _misses(at_limit, _question(window="2", deadline=None)) is None
