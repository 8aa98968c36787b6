"""The decision's answer in words (decision/answer.py) asserted whole: every sentence, the lot count of the next step,
and every key and value of `decide --json` for a plan on three lots (#48)."""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from types import SimpleNamespace

import pytest

from iteralab.decision import answer
from iteralab.decision.plan import SECOND_PERIOD_RISK
from iteralab.decision.question import Question
from iteralab.money.catalog import load_catalog
from iteralab.money.schedule import package_plans
from tests.test_decision import CPU, QUESTION, RTX_4090, RTX_6000_ADA, report_of, write_machine

A1, A8 = (f"{v} · 1× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128" for v in ("b1", "b8"))
ADA8 = "b8 · 1× NVIDIA RTX 6000 Ada Generation · torch 2.13.0+cu128"
CPU1 = "b1 · CPU Test CPU, 2 threads · torch 2.13.0"
TEN = "10 independent corpora like the campaign's"
OPEN = {**QUESTION, "budget": None}  # 72 h, ten corpora, no budget
WIDE = {**OPEN, "window_hours": "96"}  # no single RTX 4090 package is cheapest for 96 h: two 3-day periods are
PRICE_NOTE = "a price says nothing about a card's throughput."
B200 = "B200 (2,071.00 USD for one lot in one 7-day package)"
ADA = "RTX 6000 Ada (55.71 USD for one lot in one 3-day package)"
ADA_TWICE = "RTX 6000 Ada (111.42 USD for one lot in 2 consecutive 3-day periods, bought explicitly; no automatic extension)"
TWICE = "2 consecutive 3-day periods, bought explicitly; no automatic extension"


def merged(folder, *machines, question=OPEN):
    """Write each (run id, environment, durations) machine in a folder of its own, then merge them by copying."""
    for run_id, environment, durations in machines:
        write_machine(folder.parent / f"{folder.name}-{run_id}", run_id, environment, durations, question=question)
        shutil.copytree(folder.parent / f"{folder.name}-{run_id}", folder, dirs_exist_ok=True)
    return folder


def found(report) -> dict:
    """Everything the answer gives the report: its sentences, and the rows it names by their labels."""
    def label(row):
        return None if row is None else row.label

    return {"answer": report.answer, "next_step": report.next_step, "points": report.points,
            "summary_line": report.summary_line, "cheapest": label(report.cheapest), "runner_up": label(report.runner_up),
            "gap_money": report.gap_money, "gap_hours": None if report.gap_hours is None else f"{report.gap_hours:.4f}",
            "tie": report.tie, "fastest": label(report.fastest), "owned": label(report.owned)}


def whole(next_step, points, *, summary_line, measure=(B200, ADA), assumed=None, **named) -> dict:
    """The answer expected: the next step, then the points, then the cards to measure (apart from the points)."""
    to_measure = f"To measure: {', '.join(measure)}; {PRICE_NOTE}" if measure else None
    sentences = [next_step, *points, *([to_measure] if to_measure else []), *([assumed] if assumed else [])]
    names = {"cheapest": None, "runner_up": None, "gap_money": None, "gap_hours": None, "tie": None, "fastest": None,
             "owned": None}
    return {"answer": " ".join(sentences), "next_step": next_step, "points": (*points, *([assumed] if assumed else [])),
            "summary_line": summary_line, **names, **named}


def test_decide_json_of_a_three_lot_plan_says_three_lots_in_every_figure(tmp_path, cli):
    """Regression for #48: the next step of a plan on three lots says "Rent 3 lots", never "Rent 1 lot"; every key of
    `decide --json` is compared whole."""
    # 1,000 corpora, b1 at 100-108 s a corpus, 12 h deadline: 2 lots take 500 × 108 s = 15 h, 3 lots 334 × 108 s = 10.02 h.
    question = {**OPEN, "corpora": 1000, "deadline_hours": "12"}
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [100, 102, 104, 106, 108]}), question=question)
    code, out, err = cli("decide", "merged", "--runs", runs, "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    key = data["cheapest"]
    assert key.startswith("b1-nvidia-geforce-rtx-4090-")
    rent = "Rent 3 lots of RTX 4090, one 3-day package, for 141.42 USD, and run b1 there."
    cheapest = (f"Cheapest feasible configuration: {A1}. Planned 141.42 USD for 3 lots × 3-day RTX 4090 at 47.14 USD per "
                "lot, catalog 2026-09-24, 61.98 h of the package spare after the work; projected 9.28 h to 10.02 h for 1000 "
                "independent corpora like the campaign's within the 72 h access window.")
    row = {
        "configuration": key, "label": A1, "variant": "b1",
        "settings": {"attention": "sdpa", "batch_size": 1, "compile": False, "device": "cuda", "length_sorted": False,
                     "precision": "fp32", "quantization": "none", "series": "batch"},
        "hardware": "1× NVIDIA GeForce RTX 4090", "software": "torch 2.13.0+cu128 · CUDA 12.8 · driver 570.86",
        "trials": {"ok": 5}, "excluded_trials": [], "accepted_trials": 5, "ids_match": True,
        "verdicts": [{"metric": "accuracy", "threshold": 0.7, "median": 0.8, "passed": 5, "judged": 5}],
        "measured_window_s": [100.0, 102.0, 104.0, 106.0, 108.0], "median_s": 104.0, "min_s": 100.0, "max_s": 108.0,
        "gpu_peak_reserved_bytes": 3 * 2**30, "gpu_peak_reserved_reason": None,
        "card_capacity_bytes": 24 * 10**9, "card_capacity_reason": None, "lots": 3,
        # 334 corpora a lot: 334 × 100 s, 334 × 104 s and 334 × 108 s, with 4 ms of one-time phases (2 ms at the median).
        "projected_hours": {"min": "9.2778", "median": "9.6489", "max": "10.0200"}, "projection_reason": None,
        "planned": {"gpu": "rtx-4090", "days": 3, "periods": 1, "package": "one 3-day package", "lots": 3,
                    "price_per_lot": "47.14", "total": "141.42", "currency": "USD", "catalog_version": "2026-09-24",
                    "package_hours": 72, "spare_hours": "61.98", "choice": None, "single_package": None},
        "planned_reason": None,
        "observed": {"spend": None, "currency": None, "rentals": [], "reason": "no rental linked to its runs",
                     "shared_with_configurations": 0, "deliverables": 0, "cost_per_validated_corpus": None,
                     "cost_reason": "undefined: no rental linked to its runs", "cost_includes": "no observed package spend"},
        "other_costs": {"total": None, "currency": None, "reason": "no other cost recorded", "expenses": []},
        "planned_total": {"total": "141.42", "includes": "package spend 141.42 USD only (no other cost recorded)"},
        "observed_total": {"total": None, "includes": "no observed package spend"},
        "feasible": True, "conditions_failed": []}
    card = {"periods": 1, "currency": "USD", "single_package": None, "reason": None, "time": None, "quality": None}
    assert data == {
        "campaign": "merged", "title": "Test campaign", "catalog_version": "2026-09-24",
        "kinds": ["classify"], "kind_of_work": "classify — label every text of a corpus with a fine-tuned classifier",
        "question": {"declared": True, "corpora": 1000, "entries": None,
                     "workload": "1000 independent corpora like the campaign's",
                     "window_start": "2026-09-28T09:00:00+07:00", "window_end": "2026-10-01T09:00:00+07:00",
                     "time_zone": "Asia/Jakarta", "window_hours": "72", "deadline": None, "deadline_hours": "12",
                     "budget": None, "missing": ["a budget ceiling (optional)"]},
        "answer": f"{rent} {cheapest} To measure: {B200}, {ADA}; {PRICE_NOTE}",
        "summary": f"{A1}: planned 141.42 USD, projected up to 10.02 h",
        "cheapest": key, "runner_up": None, "gap_money": None, "gap_hours": None, "tie": None, "fastest": None,
        "owned": None, "ranked": [row], "infeasible": [],
        "to_measure": [{"gpu": "b200", "gpu_name": "B200", "days": 7, "package": "one 7-day package",
                        "price_for_window": "2071.00", **card},
                       {"gpu": "rtx-6000-ada", "gpu_name": "RTX 6000 Ada", "days": 3, "package": "one 3-day package",
                        "price_for_window": "55.71", **card}],
        "exclusions": [], "unequal_items": [], "unequal_note": None, "rentals_paid_for": {},
        "rentals_linked_to_no_configuration": [], "problems": []}
    code, text, _ = cli("decide", "merged", "--runs", runs)
    assert code == 0 and text.startswith(f"Decision report for merged (catalog 2026-09-24)\n\n{rent} {cheapest} To measure")


def test_an_unpriced_runner_up_is_named_with_its_reason_and_can_be_the_fastest(tmp_path):
    runs = merged(tmp_path / "runs", ("run-4090", RTX_4090, {"b1": [30, 31, 32, 33, 34]}),
                  ("run-cpu", CPU, {"b1": [1, 1, 1, 1, 1]}), question=WIDE)
    # #45: the CPU meets the question without a rental, so it is said first; the rental only compares.
    first = (f"{CPU1} meets the question without a rental: it meets the quality thresholds and is projected at 10.0 s to "
             f"10.0 s for {TEN} within the 96 h access window. Renting adds nothing the question asks for; the cheapest "
             f"feasible rental, {A1}, plans 94.28 USD and is projected at up to 5.7 min.")
    points = (f"Cheapest feasible configuration: {A1}. Planned 94.28 USD for 1 lot × 2 consecutive 3-day periods of RTX "
              "4090, bought explicitly (no automatic extension), at 47.14 USD per lot and period, catalog 2026-09-24, "
              f"143.91 h of the periods spare after the work; projected 5.0 min to 5.7 min for {TEN} within the 96 h access "
              "window.",
              f"The ranking uses the 2 consecutive 3-day periods (94.28 USD): {SECOND_PERIOD_RISK}; one 7-day package would "
              "cost 110.00 USD without that risk.",
              f"Runner-up: {CPU1}, not in the catalog: CPU.",
              f"Fastest feasible: {CPU1}, projected 10.0 s (median), not in the catalog: CPU.")
    # Median projections: 10 × 1 s + 2 ms on the CPU, 10 × 32 s + 2 ms on the RTX 4090: 310 s = 0.0861 h faster.
    assert found(report_of(runs)[0]) == whole(
        first, points, measure=(B200, ADA_TWICE), summary_line=f"no rental needed: {CPU1} meets the question",
        cheapest=A1, runner_up=CPU1, gap_hours="-0.0861", fastest=CPU1, owned=CPU1)


def test_a_runner_up_the_repetitions_separate_gives_both_medians_ungrouped(tmp_path):
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [1000, 1001, 1002, 1003, 1004],
                                                          "b8": [1100, 1101, 1102, 1103, 1104]}))
    points = (f"Cheapest feasible configuration: {A1}. Planned 47.14 USD for 1 lot × 3-day RTX 4090 at 47.14 USD per lot, "
              f"catalog 2026-09-24, 69.21 h of the package spare after the work; projected 2.78 h to 2.79 h for {TEN} "
              "within the 72 h access window.",
              f"Runner-up: {A8} plans the same spend, but the repetitions separate them: median 1002.000 s against "
              "1102.000 s per corpus, the ranges do not overlap.")
    assert found(report_of(runs)[0]) == whole(
        "Rent 1 lot of RTX 4090, one 3-day package, for 47.14 USD, and run b1 there.", points,
        summary_line=f"{A1}: planned 47.14 USD, projected up to 2.79 h", cheapest=A1, runner_up=A8,
        gap_money=Decimal("0.00"), gap_hours="0.2778")


def test_with_nothing_priced_the_next_step_is_the_cheapest_card_to_measure_and_its_measuring_package(tmp_path):
    runs = merged(tmp_path / "runs", ("run-cpu", CPU, {"b1": [5, 5, 5, 5, 5]}), question=WIDE)
    # #45: the CPU meets the question without a rental, so it is said first; measuring a card then only compares.
    step = (f"{CPU1} meets the question without a rental: it meets the quality thresholds and is projected at 50.0 s to "
            f"50.0 s for {TEN} within the 96 h access window. Renting adds nothing the question asks for; a card is worth "
            "measuring only to compare.")
    points = ("Measure next on RTX 4090, the cheapest card not measured for this window: measuring takes one 3-day package, "
              "47.14 USD for one lot (94.28 USD would hold the whole 96 h window); then copy that machine's runs/ folder here "
              "and build again.",)
    rtx = f"RTX 4090 (94.28 USD for one lot in {TWICE} (one 7-day package: 110.00 USD, no second setup))"
    assert found(report_of(runs)[0]) == whole(
        step, points, measure=(B200, rtx, ADA_TWICE), summary_line=f"no rental needed: {CPU1} meets the question",
        owned=CPU1)


def test_with_nothing_feasible_every_condition_failed_is_said_and_the_cheapest_card_is_next(tmp_path):
    late = {**OPEN, "deadline_hours": "0.01"}  # 36 s: not even one corpus a lot finishes by then
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [40, 41, 42, 43, 44], "b8": [37, 38, 39, 40, 41]}),
                  question=late)
    step = ("Nothing to rent yet: no configuration measured so far meets every condition. Measure next on RTX 6000 Ada, the "
            "cheapest card not measured for this window: measuring takes one 3-day package, 55.71 USD for one lot (55.71 "
            "USD would hold the whole 72 h window); then copy that machine's runs/ folder here and build again.")
    assert found(report_of(runs)[0]) == whole(
        step, ("All 2 configuration(s) measured fail a condition listed below.",),
        summary_line="no feasible configuration among 2")


def test_without_a_window_the_cheapest_card_to_measure_is_priced_for_one_lot():
    card = SimpleNamespace(name="RTX 4090", slug="rtx-4090")
    plans = package_plans(load_catalog(), "rtx-4090", None)
    question = Question(True, 1, None, None, None, None, None, None, None, None)
    dear = {"card": SimpleNamespace(name="B200", slug="b200"), "plan": package_plans(load_catalog(), "b200", None)[0],
            "measuring": None}
    cards = [dear, {"card": card, "plan": plans[0], "measuring": None}]
    assert answer._next_step(None, [], cards, question) == (
        "Nothing to rent yet: no configuration measured so far meets every condition. Measure next on RTX 4090, the "
        "cheapest card not measured for this window (47.14 USD for one lot), then copy that machine's runs/ folder here "
        "and build again.")
    unpriced = [{"card": card, "plan": None, "measuring": None}]
    assert answer._next_step(None, [object()], unpriced, question) == (
        "Nothing to rent yet: no feasible configuration runs on a card the catalog prices.")
    assert answer._next_step(None, [], [], question) == (
        "Nothing to rent yet: no configuration measured so far meets every condition.")


@pytest.mark.parametrize(("lots", "words"), [(1, "1 lot"), (2, "2 lots"), (3, "3 lots")])
def test_the_next_step_counts_the_lots_of_the_cheapest_plan(lots, words):
    """Regression for #48: the lot count of the sentence is the plan's, whatever it is."""
    plan = SimpleNamespace(lots=lots, card=SimpleNamespace(name="RTX 4090"), package="one 7-day package",
                           total=Decimal("110.00") * lots, currency="USD")
    cheapest = SimpleNamespace(plan=plan, summary=SimpleNamespace(name="b8"))
    assert answer._next_step(cheapest, [cheapest], [], None) == (
        f"Rent {words} of RTX 4090, one 7-day package, for {Decimal('110.00') * lots} USD, and run b8 there.")


def test_a_card_to_measure_is_priced_or_says_why_not():
    plans = package_plans(load_catalog(), "rtx-4090", Decimal(96))
    single = next(plan for plan in plans if not plan.explicit)
    assert answer.measure_price({"plan": None, "single": None, "reason": "catalog v9 lists no package for X"}) == (
        "catalog v9 lists no package for X")
    assert answer.measure_price({"plan": plans[0], "single": None, "reason": None}) == (
        f"94.28 USD for one lot in {TWICE}")
    assert answer.measure_price({"plan": plans[0], "single": single, "reason": None}) == (
        f"94.28 USD for one lot in {TWICE} (one 7-day package: 110.00 USD, no second setup)")


def test_a_priced_configuration_alone_has_no_runner_up_and_an_empty_campaign_says_nothing_was_measured(tmp_path):
    runs = merged(tmp_path / "runs", ("run-ada", RTX_6000_ADA, {"b8": [25, 26, 27, 28, 29]}), question=WIDE)
    rent = f"Rent 1 lot of RTX 6000 Ada, {TWICE}, for 111.42 USD, and run b8 there."
    points = (f"Cheapest feasible configuration: {ADA8}. Planned 111.42 USD for 1 lot × 2 consecutive 3-day periods of RTX "
              "6000 Ada, bought explicitly (no automatic extension), at 55.71 USD per lot and period, catalog 2026-09-24, "
              f"143.92 h of the periods spare after the work; projected 4.2 min to 4.8 min for {TEN} within the 96 h access "
              "window.",
              f"The ranking uses the 2 consecutive 3-day periods (111.42 USD): {SECOND_PERIOD_RISK}; no single listed "
              "package is long enough.")
    rtx = f"RTX 4090 (94.28 USD for one lot in {TWICE} (one 7-day package: 110.00 USD, no second setup))"
    assert found(report_of(runs)[0]) == whole(
        rent, points, measure=(B200, rtx), summary_line=f"{ADA8}: planned 111.42 USD, projected up to 4.8 min", cheapest=ADA8)


def test_the_answer_gives_every_key_even_those_it_leaves_empty(tmp_path):
    """Regression for #48: answer() itself returns every key, None where it names no row (a key left out fell back to
    the report's default and no test saw it)."""
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [30, 31, 32, 33, 34]}))
    report = report_of(runs)[0]
    given = answer.answer(report.question, report.ranked, report.infeasible, report.rows, report.to_measure,
                          report.corpus_entries)
    (row,) = report.ranked
    assert given == {"answer": report.answer, "cheapest": row, "runner_up": None, "gap_money": None, "gap_hours": None,
                     "tie": None, "fastest": None, "summary_line": f"{A1}: planned 47.14 USD, projected up to 5.7 min",
                     "next_step": "Rent 1 lot of RTX 4090, one 3-day package, for 47.14 USD, and run b1 there.",
                     "points": report.points, "owned": None}
    assert list(given) == ["answer", "cheapest", "runner_up", "gap_money", "gap_hours", "tie", "fastest", "summary_line",
                           "next_step", "points", "owned"]
