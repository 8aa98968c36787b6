"""The planner (decision/plan.py) asserted whole: the plan of consecutive periods beside its single package in
`decide --json`, every word of a plan, the projection and the lots tried (#48)."""

from __future__ import annotations

import json
from decimal import Decimal
from types import SimpleNamespace

import pytest

from iteralab.decision import plan as planning
from tests.test_answer_whole import TWICE, WIDE, merged
from tests.test_decision import RTX_4090
from tests.test_decision_rules import CATALOG, _configuration, _plan_row, _question

RISK = planning.SECOND_PERIOD_RISK


def _package(**changed) -> dict:
    """A planned package as `decide --json` gives it: one lot of the 3-day RTX 4090 package, with CHANGED keys."""
    return {"gpu": "rtx-4090", "days": 3, "periods": 1, "package": "one 3-day package", "lots": 1, "price_per_lot": "47.14",
            "total": "47.14", "currency": "USD", "catalog_version": "2026-09-24", "package_hours": 72, "spare_hours": "71.7",
            "choice": None, "single_package": None, **changed}


def test_decide_json_of_consecutive_periods_gives_the_plan_and_the_single_package_whole(tmp_path, cli):
    """Regression for #48: a plan of consecutive periods kept its single package for `decide --json` (and the bundle and
    the site, which write the same data); a mutant crashed there with an AttributeError that only slow tests saw."""
    runs = merged(tmp_path / "runs", ("run-a", RTX_4090, {"b1": [100, 102, 104, 106, 108]}), question=WIDE)
    code, out, err = cli("decide", "merged", "--runs", runs, "--json")
    assert (code, err) == (0, "")
    (row,) = json.loads(out)["ranked"]
    choice = (f"The ranking uses the 2 consecutive 3-day periods (94.28 USD): {RISK}; one 7-day package would cost 110.00 "
              "USD without that risk.")
    # 96 h: two 3-day periods (2 × 47.14 = 94.28, 144 h) beat the 7-day package (110.00, 168 h); 10 × 108 s of work.
    assert row["planned"] == _package(periods=2, package=TWICE, total="94.28", package_hours=144, spare_hours="143.7",
                                      choice=choice, single_package=_package(days=7, package="one 7-day package",
                                                                             price_per_lot="110.00", total="110.00",
                                                                             package_hours=168, spare_hours="167.7"))
    assert (row["lots"], row["planned_reason"], row["projected_hours"]) == (
        1, None, {"min": "0.2778", "median": "0.2889", "max": "0.3000"})


def _plan(**changed) -> planning.Plan:
    stated = {"card": CATALOG.gpus["rtx-4090"], "days": 3, "lots": 1, "price_per_lot": Decimal("47.14"),
              "total": Decimal("47.14"), "currency": "USD", "catalog_version": "v9", "package_hours": 72,
              "spare_hours": Decimal("12.5")}
    return planning.Plan(**{**stated, **changed})


def test_a_plan_in_words_on_several_lots_one_package_or_periods():
    one = _plan(lots=3, total=Decimal("141.42"))
    assert (one.package, one.choice(), one.periods, one.single) == ("one 3-day package", None, 1, None)
    assert one.describe() == ("3 lots × 3-day RTX 4090 at 47.14 USD per lot, catalog v9, 12.5 h of the package spare "
                              "after the work")
    alone = _plan(lots=2, periods=3, total=Decimal("282.84"), package_hours=216, spare_hours=Decimal("16.0"))
    assert alone.package == "3 consecutive 3-day periods, bought explicitly; no automatic extension"
    assert alone.describe() == ("2 lots × 3 consecutive 3-day periods of RTX 4090, bought explicitly (no automatic "
                                "extension), at 47.14 USD per lot and period, catalog v9, 16 h of the periods spare after "
                                "the work")
    assert alone.choice() == (f"The ranking uses the 3 consecutive 3-day periods (282.84 USD): {RISK}; no single listed "
                              "package is long enough.")
    single = _plan(days=30, total=Decimal("900.00"), package_hours=720)
    paired = _plan(periods=2, total=Decimal("94.28"), single=single)
    assert paired.choice() == (f"The ranking uses the 2 consecutive 3-day periods (94.28 USD): {RISK}; one 30-day package "
                               "would cost 900.00 USD without that risk.")
    assert RISK == ("a second period may come on another machine, so the setup (environment check, model load, warm-up) "
                    "counts again and the work must stop and resume between periods")


def _projected(question, corpus_entries=100, window=(3600.0, 7200.0, 10800.0), one_time=(36.0, 72.0), lots=1):
    row = SimpleNamespace(window_seconds=window, one_time_seconds=one_time, together=None)
    return planning.project(row, question, corpus_entries, lots)


def test_the_projection_of_corpora_on_lots_and_of_a_stream():
    assert _projected(_question(corpora=4), lots=1) == ((3600 * 4 + 36) / 3600, (7200 * 4 + 54) / 3600,
                                                        (10800 * 4 + 72) / 3600)
    assert _projected(_question(corpora=4), lots=3) == ((3600 * 2 + 36) / 3600, (7200 * 2 + 54) / 3600,
                                                        (10800 * 2 + 72) / 3600)
    assert _projected(_question(corpora=None), lots=2) == ((3600 + 36) / 3600, (7200 + 54) / 3600, (10800 + 72) / 3600)
    stream = _question(corpora=None, entries=250)
    assert _projected(stream, lots=5) == ((3600 * 2.5 + 36) / 3600, (7200 * 2.5 + 54) / 3600, (10800 * 2.5 + 72) / 3600)
    assert _projected(stream, corpus_entries=0) is None and _projected(stream, corpus_entries=None) is None
    assert _projected(_question(), window=(None, None, None), one_time=(None, None)) is None


def test_projected_hours_are_kept_to_four_places_and_spans_pick_their_unit():
    assert planning.decimal_hours(1.23456) == Decimal("1.2346") and planning.decimal_hours(2) == Decimal("2")
    assert (planning.span(59.94 / 3600), planning.span(0.5), planning.span(2.005)) == ("59.9 s", "30.0 min", "2.00 h")
    assert planning.span(1234.5) == "1234.50 h"  # figures are never grouped in a span


@pytest.mark.parametrize(("corpora", "limit", "lots"), [
    (128, "2", 64),  # 2 corpora a lot: 64 lots, the most the planner tries
    (130, "2", 1),  # 65 lots would be needed: past the most tried, so the fewest, and the deadline will say so
    (200, "4", 50),  # 4 corpora a lot: 50 lots
    (3, "1", 3), (3, "1.5", 3), (3, "2", 2),
])
def test_lots_are_tried_up_to_sixty_four_for_independent_corpora(corpora, limit, lots):
    row = _plan_row(_configuration(), window=(3600.0, 3600.0, 3600.0))
    row = planning.plan_row(row, _question(corpora=corpora, deadline_hours=Decimal(limit)), 100, CATALOG)
    assert row.lots == lots and row.plan.lots == lots
    assert planning.MAX_LOTS == 64


def test_a_card_whose_memory_the_catalog_does_not_state_says_so_and_is_still_planned():
    from iteralab.money.catalog import parse_catalog
    from tests import factory

    bare = parse_catalog(factory.CATALOG_HEADER + "v9,rtx-4090,RTX 4090,1,,3,47.14,USD\n", "bare.csv")
    row = planning.plan_row(_plan_row(_configuration()), _question(window_hours=Decimal("144")), 100, bare)
    assert (row.capacity_bytes, row.capacity_reason) == (None, "the catalog does not state RTX 4090's memory")
    assert (row.plan.periods, row.plan.total, row.plan.spare_hours, row.plan_reason, row.lots) == (
        2, Decimal("94.28"), Decimal("143.0"), None, 1)
    assert row.hours == (1.0, 1.0, 1.0)
