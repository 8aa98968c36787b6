"""Other project costs (expenses), appended to the record store with their justification and receipt."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.ledger.exclusions import campaign_view
from iteralab.ledger.rentals import campaign_records, kept_copy, receipt_holder
from iteralab.money.catalog import money
from iteralab.store import names, records

AMOUNT = re.compile(r"^\d{1,15}(\.\d{1,2})?$")
CURRENCY = re.compile(r"^[A-Z]{3}$")


def _amount(text: str) -> str:
    text = str(text).strip()
    if not AMOUNT.match(text):
        raise UserError(f"--amount {text!r} is not an amount such as 12.50: digits, at most two decimals, no sign or separator")
    return str(money(Decimal(text)))  # 12.5 is kept as 12.50, as every amount is shown


def _day(text: str | None) -> str:
    if text is None:
        return dt.datetime.now(dt.UTC).date().isoformat()
    try:
        return dt.date.fromisoformat(str(text).strip()).isoformat()
    except ValueError:
        raise UserError(f"--date {text!r} is not a day such as 2026-09-28") from None


def _refuse_repeated_receipt(view, receipt: Path | None, campaign: str) -> None:
    """Refuse a receipt a counted rental or expense of the campaign already holds: one paid amount, counted once."""
    if receipt is None or not Path(receipt).is_file():
        return  # kept_copy says what is wrong with a missing file
    digest, earlier = receipt_holder((*view.rentals, *view.expenses), Path(receipt))
    if earlier is not None:
        raise UserError(f"receipt {receipt} (sha256 {digest[:12]}…) is already recorded for {campaign} by {earlier['kind']} "
                        f"{earlier['record_id']}; one receipt is one cost. If that record is wrong, iteralab void "
                        f"{earlier['record_id']} --reason '...' first; nothing was recorded")


def add_expense(*, runs_dir: Path | str, campaign: str, amount: str, currency: str, justification: str,
                configurations: tuple | list = (), all_configurations: bool = False, receipt: Path | None = None,
                date: str | None = None) -> dict:
    """Append an expense of AMOUNT CURRENCY, justified, for the named CONFIGURATIONS or for ALL_CONFIGURATIONS."""
    runs_dir = Path(runs_dir)
    view = campaign_view(runs_dir, campaign)
    if bool(configurations) == bool(all_configurations):
        raise UserError("name the configurations the expense applies to (--configuration, repeat it) or give "
                        "--all-configurations, one of the two")
    by_name = names.by_name(view.variants)
    unknown = [name for name in configurations if name not in by_name]
    if unknown:
        known = "; ".join(summary.label for summary in view.variants)
        raise UserError(f"--configuration {unknown[0]!r} is not a configuration of campaign {campaign} (its configurations: {known})")
    keys = list(dict.fromkeys(by_name[name].key for name in configurations))
    chosen = [summary for summary in view.variants if summary.key in keys] if keys else list(view.variants)
    currency = str(currency).strip()
    if not CURRENCY.match(currency):
        raise UserError(f"--currency {currency!r} is not an ISO 4217 code such as USD or IDR")
    justification = " ".join(str(justification).split())
    if not justification or len(justification) > 2000:
        raise UserError("--justification must say why this cost really applies, in under 2,000 characters")
    _refuse_repeated_receipt(view, receipt, campaign)
    with kept_copy(runs_dir, campaign, receipt) as copied:
        record = records.make_record(
            "expense", campaign=campaign, run_id=records.new_id("run-expense"), amount=_amount(amount), currency=currency,
            justification=justification, applies_to="all" if all_configurations else [s.key for s in chosen],
            configuration_labels=[s.label for s in chosen], incurred_on=_day(date), receipt=copied)
        records.append(runs_dir, record)
    return record


def list_expenses(*, runs_dir: Path | str, campaign: str) -> list[dict]:
    """Return the campaign's expense records in reading order (none when the runs folder does not exist yet)."""
    records.check_name(campaign, "campaign")
    return campaign_records(runs_dir=runs_dir, campaign=campaign, kind="expense")


def _applies_to(record: dict) -> str:
    return "every configuration" if record["applies_to"] == "all" else "; ".join(record["configuration_labels"])


def describe_expense(record: dict) -> str:
    """Say what an expense just recorded adds, and to which configurations."""
    receipt = f"; receipt {record['receipt']['path']}" if record["receipt"] else "; no receipt"
    return (f"Recorded {record['record_id']}: {record['amount']} {record['currency']} on {record['incurred_on']} for "
            f"{_applies_to(record)} ({record['justification']}){receipt}")


def describe_expenses(expenses: list[dict], campaign: str) -> str:
    """List expenses one a line: amount, day, configurations and justification."""
    return "\n".join(f"{e['record_id']}: {e['amount']} {e['currency']} on {e['incurred_on']} for {_applies_to(e)}: "
                     f"{e['justification']}" for e in expenses) or f"no expense recorded for {campaign}"
