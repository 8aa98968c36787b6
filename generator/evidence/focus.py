"""A campaign's rentals and expenses as FinOps FOCUS 1.2 cost rows, for a finance team to load beside its cloud bills."""

from __future__ import annotations

import csv
import datetime as dt
import io

# FOCUS columns first, in the spec's names; what FOCUS lacks goes in x_-prefixed custom columns.
COLUMNS = ["BilledCost", "BillingCurrency", "ChargeCategory", "ChargeFrequency", "ChargePeriodStart", "ChargePeriodEnd",
           "ChargeDescription", "x_RecordId", "x_Configuration", "x_Justification"]
MOMENT = "%Y-%m-%dT%H:%M:%SZ"  # FOCUS Date/Time Format: UTC, extended ISO 8601, seconds, 'Z'


def _utc(text: str, fallback: str) -> dt.datetime:
    """Read a start time (no offset: UTC); one that cannot be read falls back to when its record was written."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        moment = dt.datetime.fromisoformat(fallback.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def _period(start: dt.datetime, days: int) -> tuple[str, str]:
    """Return the inclusive start and the exclusive end of DAYS from START, in FOCUS's format."""
    return start.strftime(MOMENT), (start + dt.timedelta(days=days)).strftime(MOMENT)


def focus_rows(view, report) -> list[dict]:
    """Return one FOCUS row per rental (a package: Purchase, One-Time) and per expense (Usage, One-Time)."""
    paid_for = report.paid_for  # the same story as the pages: the configurations each rental validly paid for
    rows = []
    for rental in view.rentals:
        start, end = _period(_utc(rental["start"], rental["created_at"]), rental["days"])
        rows.append({"BilledCost": rental["total"], "BillingCurrency": rental["currency"], "ChargeCategory": "Purchase",
                     "ChargeFrequency": "One-Time", "ChargePeriodStart": start, "ChargePeriodEnd": end,
                     "ChargeDescription": f"{rental['lots']} lot(s) {rental['gpu']} for {rental['days']} days at "
                                          f"{rental['price_per_lot']} {rental['currency']} per lot (catalog {rental['catalog_version']})"
                                          + ("" if rental["record_id"] in paid_for else
                                             "; linked to no configuration: the campaign's spend only"),
                     "x_RecordId": rental["record_id"], "x_Configuration": "; ".join(paid_for.get(rental["record_id"], [])),
                     "x_Justification": rental.get("note") or ""})
    every = "; ".join(row.label for row in report.rows)
    for expense in view.expenses:
        start, end = _period(dt.datetime.fromisoformat(expense["incurred_on"]).replace(tzinfo=dt.UTC), 1)
        rows.append({"BilledCost": expense["amount"], "BillingCurrency": expense["currency"], "ChargeCategory": "Usage",
                     "ChargeFrequency": "One-Time", "ChargePeriodStart": start, "ChargePeriodEnd": end,
                     "ChargeDescription": expense["justification"], "x_RecordId": expense["record_id"],
                     "x_Configuration": every if expense["applies_to"] == "all" else "; ".join(expense["configuration_labels"]),
                     "x_Justification": expense["justification"]})
    return rows


def focus_csv(view, report) -> str:
    """Write the FOCUS rows as CSV: a header, then one line per charge (empty cells are nulls)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(focus_rows(view, report))
    return buffer.getvalue()
