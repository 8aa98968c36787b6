"""Rules of decision/plan.py that the mutation run (#62) found no selected test holding."""

from decimal import Decimal
from types import SimpleNamespace

import pytest

from iteralab.decision.plan import Plan, plan_row
from iteralab.decision.question import Question
from iteralab.decision.report import Row
from iteralab.money.catalog import Catalog, Gpu, parse_catalog
from iteralab.store.configuration import Configuration
from tests.factory import CATALOG_HEADER

CARD = Gpu("rtx-4090", "RTX 4090", 1, Decimal("24"))
CATALOG = parse_catalog(CATALOG_HEADER + "v9,rtx-4090,RTX 4090,1,24,3,47.14,USD\n", "plan.csv")


def test_a_plan_for_fewer_cards_than_the_machine_had_says_the_plan_first():
    """Regression for #62: the sentence for a measurement that used fewer cards starts with the plan itself."""
    plan = Plan(CARD, 3, 2, Decimal("47.14"), Decimal("94.28"), "USD", "2026-09-24", 72, Decimal("70.5"),
                cards_used=2, machine_cards=4)
    alone = Plan(CARD, 3, 2, Decimal("47.14"), Decimal("94.28"), "USD", "2026-09-24", 72, Decimal("70.5"))
    assert str(alone.describe()) == ("2 lots × 3-day RTX 4090 at 47.14 USD per lot, catalog 2026-09-24, 70.5 h of the "
                                     "package spare after the work")
    assert str(plan.describe()) == (f"{alone.describe()}; planned for the 2 card(s) the trials used, not the measured "
                                    "machine's 4: a card that was not used is never counted as adding throughput")


def _row(configuration, together=None):
    return Row(SimpleNamespace(configuration=configuration, label="b1", key="b1"), {"ok": 5}, (1800.0, 3600.0, 7200.0),
               (36.0, 72.0), together=together)


def _two_cards(across=False) -> Configuration:
    return Configuration("b1", (), "gpu", "NVIDIA GeForce RTX 4090", 2, "Test CPU", 2, "2.13.0", None, None,
                         across=across)


CORPORA = Question(True, 4, None, None, None, None, None, None, None, None)
STREAM = Question(True, None, 1000, None, None, None, None, None, None, None)  # 1,000 entries, corpora of 100
PER_CARD = ("no plan: one trial per card ran on 2 cards of one machine at the same time, and a lot of RTX 4090 in "
            "catalog v9 has 1 card(s): lots rented apart were never measured together")

ACROSS = "no plan: the model was placed across 2 cards of one machine, and a lot of RTX 4090 in catalog v9 has 1 card(s)"


@pytest.mark.parametrize(("configuration", "together", "question", "per_lot", "reason"), [
    (_two_cards(), {"cards": 2}, CORPORA, 2, PER_CARD),
    (_two_cards(), {"cards": 2}, STREAM, 10, PER_CARD),
    (_two_cards(across=True), None, CORPORA, 4, ACROSS),
    (_two_cards(across=True), None, STREAM, 10, ACROSS)])
def test_cards_measured_together_that_a_lot_cannot_hold_are_projected_on_one_machine(configuration, together, question,
                                                                                    per_lot, reason):
    """Regression for #62: two cards measured together (one trial per card at once, or one model across them), and a
    lot of one card: no plan, one machine, its 4 corpora in ceil(4 / 2) windows at once per card, or 4 one after another
    for a model across both, a stream of 1,000 entries in 10 windows of its corpus of 100; each plus the one-time
    seconds once."""
    row = plan_row(_row(configuration, together), question, 100, CATALOG)
    assert (row.plan, str(row.plan_reason), row.lots) == (None, reason, 1)
    assert row.hours == pytest.approx(((1800 * per_lot + 36) / 3600, (3600 * per_lot + 54) / 3600,
                                       (7200 * per_lot + 72) / 3600))


def test_a_card_with_no_package_in_a_catalog_built_by_hand_has_no_plan_and_says_why():
    """Regression for #62: a Catalog made in code (the Python API) may list a card without any package: its row keeps
    the projection and lots, with the reason, never a plan."""
    bare = Catalog("by-hand", "code", {"rtx-4090": CARD}, {})
    row = plan_row(_row(Configuration("b1", (), "gpu", "NVIDIA GeForce RTX 4090", 1, "Test CPU", 2, "2.13.0", None,
                                      None)), CORPORA, 100, bare)
    assert (row.plan, str(row.plan_reason), row.lots) == (None, "catalog by-hand lists no package for RTX 4090", 1)
    assert row.hours == pytest.approx(((1800 * 4 + 36) / 3600, (3600 * 4 + 54) / 3600, (7200 * 4 + 72) / 3600))
    assert row.capacity_bytes == 24 * 10**9


def test_a_set_using_every_card_of_the_machine_is_planned_without_the_fewer_cards_sentence():
    """Regression for #62: one trial per card on both cards of a 2-card machine ("2 of 2×"), a lot of 2 cards: the
    plan is for the machine's cards, and never says it was planned for fewer cards than the machine had."""
    lot_of_two = parse_catalog(CATALOG_HEADER + "v9,b200,B200,2,,7,2071.00,USD\n", "plan.csv")
    both = Configuration("b1", (), "gpu", "NVIDIA B200", 2, "Test CPU", 2, "2.13.0", None, None, cards_used=2)
    row = plan_row(_row(both, {"cards": 2}), CORPORA, 100, lot_of_two)
    assert (row.plan.lots, row.plan.cards_used, row.plan.machine_cards) == (1, None, None)
    assert "planned for" not in str(row.plan.describe())
