"""Round a cost per unit of work: to cents, and below half a cent to two significant digits, so it never reads as free."""

from __future__ import annotations

from decimal import Decimal

from iteralab.money.catalog import ROUNDING, money

RULE = "cents, half up, from the unrounded ratio; below half a cent, two significant digits"


def rate(value: Decimal) -> Decimal:
    """Return VALUE rounded to cents, half up; a cost under half a cent to two significant digits (0.0043), not 0.00."""
    rounded = money(value)
    if rounded or not value:
        return rounded
    # A served request on a fast card costs a fraction of a cent; 0.00 would read as free.
    return value.quantize(Decimal(10) ** (value.adjusted() - 1), rounding=ROUNDING)
