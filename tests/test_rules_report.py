"""Rules of decision/report.py that the mutation run (#62) found no selected test holding."""

import dataclasses
import json
import shutil
from decimal import Decimal
from types import SimpleNamespace

from iteralab.decision.kinds import CORPUS, MODEL
from iteralab.decision.question import Question
from iteralab.decision.report import _conditions, _delivered, _observed, _sum, decide, decide_guarded
from iteralab.money.catalog import Catalog, Gpu, load_catalog
from iteralab.store import reading, records
from iteralab.store.adaptation import NO_MODEL
from iteralab.store.trials import trial_table
from iteralab.store.views import campaign_views
from tests import blocks, factory
from tests.test_decision import RTX_4090, report_of, write_machine


def test_rentals_are_summed_per_currency_every_one_counted():
    """Regression for #62: each currency's total adds every rental in it, never across currencies."""
    rentals = [factory.rental(total="47.14"), factory.rental(total="94.28"),
               {**factory.rental(total="150000"), "currency": "IDR"}]
    assert _sum(rentals) == {"IDR": Decimal("150000.00"), "USD": Decimal("141.42")}
    assert _sum([]) == {}


def test_a_configuration_rented_for_but_not_yet_delivered_is_in_the_story_of_the_money(tmp_path):
    """Regression for #62: the story's configurations are those with a rental observed or a deliverable, either."""
    write_machine(tmp_path, "run-4090", RTX_4090, {"b1": [40, 41, 42, 43, 44]}, campaign="camp")
    rental = factory.rental("camp", runs=["run-4090"])
    records.append(tmp_path, rental)
    report, _, view = report_of(tmp_path)
    (row,) = report.rows
    assert row.observed_rentals and not row.deliverables
    story = report.rental_story(view.rentals)
    assert story["per_configuration"] == [row] and story["all"] == {"USD": Decimal("47.14")}


def test_a_guarded_decision_is_made_from_the_trial_table_it_is_given(tmp_path):
    """Regression for #62: decide_guarded passes the build's table on (a table that lacks a configuration's trials
    decides without it), as decide does."""
    write_machine(tmp_path, "run-4090", RTX_4090, {"b1": [40, 41, 42, 43, 44], "b8": [30, 31, 32, 33, 34]})
    _, _, view = report_of(tmp_path)
    table = trial_table(view)
    only_b1 = table[table["variant"] == "b1"]
    guarded = decide_guarded(view, load_catalog(), only_b1)
    assert [row.label for row in guarded.ranked] == [row.label for row in decide(view, load_catalog(), only_b1).ranked]
    assert len(guarded.ranked) == 1 and len(decide_guarded(view, load_catalog()).ranked) == 2


def test_a_configuration_of_a_campaign_of_models_delivers_its_validated_model_or_none():
    """Regression for #62: where the unit is a model, a configuration delivers 1 (its validated model) or 0."""
    export = {"path": "camp/models/t-1", "sha256": "b" * 64}
    trained = {"record_id": "t-1", "status": "ok", "corpus_accepted": True, "adaptation": {"export": export}}
    rejected = {**trained, "record_id": "t-2", "corpus_accepted": False}
    model = _question(MODEL)
    assert _delivered(SimpleNamespace(counted=[rejected, trained]), model, ()) == {
        "unit": MODEL, "model": {"trial_id": "t-1", **export}, "deliverables": 1}
    assert _delivered(SimpleNamespace(counted=[rejected]), model, ()) == {"unit": MODEL, "model": None,
                                                                         "deliverables": 0}
    assert _delivered(SimpleNamespace(counted=[trained]), _question(CORPUS), ("c1", "c2")) == {"deliverables": 2}


def _question(unit: str) -> Question:
    return Question(False, 1, None, None, None, None, None, None, None, None, unit)


def test_an_observed_cost_that_cannot_be_divided_says_why_for_other_costs_and_for_a_model(tmp_path):
    """Regression for #62: with the rentals' spend known, a cost per delivered unit is undefined because other costs
    are in another currency (said with that reason), or because no model was validated (a model's reason, not a
    corpus's)."""
    write_machine(tmp_path, "run-4090", RTX_4090, {"b1": [40, 41, 42, 43, 44]}, campaign="camp")
    report, _, _ = report_of(tmp_path)
    (row,) = report.rows
    links = {"run-4090": [factory.rental("camp", runs=["run-4090"])]}
    expense = {"record_id": "e-1", "amount": "100000", "currency": "IDR", "applies_to": "all"}
    found = _observed(row, links, {}, (expense,))
    assert (found.observed_spend, found.observed_total) == (Decimal("47.14"), None)
    assert found.cost_reason == "undefined: package spend in USD and other costs in IDR are never summed"
    found = _observed(dataclasses.replace(row, deliverables=0, unit=MODEL), links, {})
    assert (found.cost_reason, found.cost_per_corpus) == (f"undefined: {NO_MODEL}", None)
    assert _observed(dataclasses.replace(row, deliverables=0), links, {}).cost_reason == (
        "undefined: no accepted deliverable")


def _row(successes: int, aside: dict) -> SimpleNamespace:
    trials = [{"status": "ok", "corpus_accepted": True, "id_check": {"ids_match": True}}] * successes
    return SimpleNamespace(summary=SimpleNamespace(counted=trials, left_out_counts=lambda successes: aside),
                           together=None, hours=None, plan=None, owned=False)


def test_trials_set_aside_leave_a_configuration_uncompared_below_two_successes_and_say_why():
    """Regression for #62: with every success excluded, the quality condition counts them; with one success left by
    disturbance, the comparison condition names it; two successes left are compared."""
    question = _question(CORPUS)
    assert [str(said) for said in _conditions(_row(0, {"excluded": 3}), question)] == [
        "quality: no successful trial left (3 excluded)"]
    assert [str(said) for said in _conditions(_row(1, {"disturbed": 2}), question)] == [
        "comparison: cannot be compared, 1 successful trial left (2 disturbed)"]
    assert [str(said) for said in _conditions(_row(1, {"excluded": 2}), question)] == [
        "comparison: cannot be compared, 1 successful trial left after 2 excluded"]
    assert _conditions(_row(2, {"disturbed": 1}), question) == []
    assert _conditions(_row(2, {"excluded": 1}), question) == []


def _rejected(value: float) -> dict:
    verdict = {"metric": "accuracy", "value": value, "threshold": 0.9, "passed": False}
    return {"status": "ok", "corpus_accepted": False, "id_check": {"ids_match": True}, "quality": {"verdicts": [verdict]}}


def test_each_condition_a_row_fails_is_said_once_whole_with_its_figures():
    """Regression for #62: quality misses equal to three places are one miss; a set of cards none of which ended ok
    is named with its count of sets; a projection past the window and the deadline is said in hours, never grouped."""
    row = _row(0, {})
    row.summary.counted = [_rejected(0.81234), _rejected(0.81236), _rejected(0.5)]
    assert [str(said) for said in _conditions(row, _question(CORPUS))] == [
        "quality: 3 of 3 successful trials not accepted (accuracy 0.500 < 0.9; accuracy 0.812 < 0.9)"]
    row = _row(2, {})
    row.together = {"sets": 3, "complete_sets": 0}
    assert [str(said) for said in _conditions(row, _question(CORPUS))] == [
        "cards: no set where every card ended ok (3 recorded): nothing is projected from one card of a set"]
    row.together = {"sets": 3, "complete_sets": 1}
    assert _conditions(row, _question(CORPUS)) == []
    row.hours = (1000.0, 1200.0, 1234.56789)
    question = dataclasses.replace(_question(CORPUS), window_hours=Decimal(720), deadline_hours=Decimal("999.5"))
    assert [str(said) for said in _conditions(row, question)] == [
        "window: projected up to 1234.57 h, longer than the 720 h access window",
        "deadline: projected up to 1234.57 h, later than the 999.5 h until the deadline"]
    assert _conditions(row, dataclasses.replace(question, window_hours=Decimal("1234.5679"),
                                                deadline_hours=Decimal("1234.5679"))) == []


def test_a_card_to_measure_that_the_catalog_lists_no_package_for_says_so(tmp_path):
    """Regression for #62: a card no configuration ran on, in a catalog made in code without packages, is listed to
    measure with no plan, no price to measure it and the reason; the measured card is not listed."""
    write_machine(tmp_path, "run-4090", RTX_4090, {"b1": [40, 41, 42, 43, 44]})
    _, _, view = report_of(tmp_path)
    bare = Catalog("by-hand", "code", {"rtx-4090": Gpu("rtx-4090", "RTX 4090", 1, Decimal("24")),
                                       "a100-80gb": Gpu("a100-80gb", "A100 80GB", 1, Decimal("80"))}, {})
    (card,) = decide(view, bare).to_measure
    assert card["card"].slug == "a100-80gb" and (card["plan"], card["single"], card["measuring"]) == (None, None, None)
    assert str(card["reason"]) == "catalog by-hand lists no package for A100 80GB"


def test_a_serving_campaign_on_a_priced_card_is_answered_priced_in_every_line_of_the_decision(tmp_path):
    """Regression for #62: a serving campaign's answer is priced from the catalog given, and it is the summary line
    and the next step too, with no points of a corpus decision."""
    base, campaign = blocks.BASES["serve"]
    shutil.copytree(base / campaign, tmp_path / campaign)
    (path,) = (tmp_path / campaign / "records").glob("*.jsonl")
    written = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
    for record in written:  # the fixture's machine, as if it had an RTX 4090 that both variants served on
        if record["kind"] == "manifest":
            record["environment"] = RTX_4090
        elif record["kind"] == "trial":
            record["variant_config"]["device"] = "cuda:0"
    path.write_text("".join(json.dumps(record) + "\n" for record in written), encoding="utf-8")
    (view,) = campaign_views(reading.load(tmp_path))
    report = decide(view, load_catalog())
    # 47.14 USD / 72 h = 0.6547…/h; level 2 served 6 requests, 24 tokens, in 0.0763 s: 0.6547 × 0.0763 / 3600 × 1000 / 6
    # = 0.0023 per 1,000 requests (under half a cent: two significant digits, not 0.00), × 10⁶ / 24 = 0.58 per million
    assert str(report.answer).endswith(" serves up to level 2 within the objective at the lowest cost: 0.58 USD per "
                                       "million accepted output tokens (0.0023 USD per 1,000 accepted requests), from a "
                                       "3-day package of RTX 4090 at 47.14 USD.")
    assert report.summary_line is report.answer and report.next_step is report.answer and report.points == ()
