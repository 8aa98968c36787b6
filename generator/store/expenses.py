"""Other project costs: which configurations each applies to, their sums per currency, and unequal items."""

from __future__ import annotations

from decimal import Decimal

from iteralab.core.language import Text
from iteralab.money.catalog import money


def applies(expense: dict, key: str) -> bool:
    """Tell whether EXPENSE applies to the configuration KEY."""
    return expense["applies_to"] == "all" or key in expense["applies_to"]


def total(expenses: list | tuple) -> tuple[Decimal | None, str | None, str | None]:
    """Return (sum, currency, None), or (None, None, why) when there is nothing to sum or the currencies differ."""
    if not expenses:
        return None, None, Text("no other cost recorded")
    currencies = sorted({e["currency"] for e in expenses})
    if len(currencies) > 1:
        return None, None, Text("other costs mix currencies ({currencies}); never summed", currencies=", ".join(currencies))
    return money(sum((Decimal(e["amount"]) for e in expenses), Decimal(0))), currencies[0], None


def plus(amount: Decimal | None, currency: str | None, expenses: list | tuple) -> tuple[Decimal | None, str | None, str]:
    """Add the EXPENSES to AMOUNT in CURRENCY; return (total, currency, what it includes) or (None, None, why not)."""
    if amount is None:
        return None, None, Text("no package spend to add to")
    other, other_currency, reason = total(expenses)
    if other is None and expenses:
        return None, None, reason
    if other is None:
        return amount, currency, Text("package spend {amount} {currency} only (no other cost recorded)", amount=amount,
                                      currency=currency)
    if other_currency != currency:
        return None, None, Text("package spend in {currency} and other costs in {other_currency} are never summed",
                                currency=currency, other_currency=other_currency)
    items = Text("1 item") if len(expenses) == 1 else Text("{count} items", count=len(expenses))
    return (money(amount + other), currency, Text("package spend {amount} {currency} and other costs {other} {currency} ({items})",
                                                  amount=amount, currency=currency, other=other, items=items))


def unequal(expenses: list | tuple, configurations: list[tuple[str, str]]) -> list[dict]:
    """Return the expenses that apply to some configurations (KEY, LABEL) only, naming those without them."""
    found = []
    for expense in expenses:
        without = [label for key, label in configurations if not applies(expense, key)]
        if without:
            found.append({"record_id": expense["record_id"], "justification": expense["justification"],
                          "amount": expense["amount"], "currency": expense["currency"],
                          "with": [label for key, label in configurations if applies(expense, key)], "without": without})
    return found
