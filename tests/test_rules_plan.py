"""Rules of decision/plan.py that the mutation run (#62) found no selected test holding."""

from decimal import Decimal

from iteralab.decision.plan import Plan
from iteralab.money.catalog import Gpu

CARD = Gpu("rtx-4090", "RTX 4090", 1, Decimal("24"))


def test_a_plan_for_fewer_cards_than_the_machine_had_says_the_plan_first():
    """Regression for #62: the sentence for a measurement that used fewer cards starts with the plan itself."""
    plan = Plan(CARD, 3, 2, Decimal("47.14"), Decimal("94.28"), "USD", "2026-09-24", 72, Decimal("70.5"),
                cards_used=2, machine_cards=4)
    alone = Plan(CARD, 3, 2, Decimal("47.14"), Decimal("94.28"), "USD", "2026-09-24", 72, Decimal("70.5"))
    assert str(alone.describe()) == ("2 lots × 3-day RTX 4090 at 47.14 USD per lot, catalog 2026-09-24, 70.5 h of the "
                                     "package spare after the work")
    assert str(plan.describe()) == (f"{alone.describe()}; planned for the 2 card(s) the trials used, not the measured "
                                    "machine's 4: a card that was not used is never counted as adding throughput")
