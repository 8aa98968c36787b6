"""A campaign's decision question ([decision]): the workload, the access window, the deadline and the budget."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from iteralab.core.errors import UserError
from iteralab.declared.tables import Table
from iteralab.money.schedule import elapsed_hours, format_hours, parse_time
from iteralab.store.records import NAME_PATTERN


def decision_question(table: Table, unit: str = "corpora") -> dict:
    """Read the decision question: workload, access window (start/end in a zone, or hours), deadline, budget.

    UNIT is the key the kind of work counts its useful units by: corpora (or a stream of entries), or an adaptation's
    models (kept as `corpora`, the count of useful units).
    """
    if unit != "corpora":
        corpora = table.get(unit, int, default=None, minimum=1)
        for key in ("corpora", "entries"):
            if key in table.data:
                table.used.add(key)
                table.note(key, "an adaptation campaign's workload is a number of validated models (models = N); "
                                "corpora and entries have no meaning for it")
        entries = None
    else:
        corpora = table.get("corpora", int, default=None, minimum=1)
        entries = table.get("entries", int, default=None, minimum=1)
    if corpora is not None and entries is not None:
        table.fail("entries", "give the workload either as corpora or as entries, not both")
    zone_name = table.get("time_zone", str, default="UTC")
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
        table.fail("time_zone", f"{zone_name!r} is not an IANA time zone such as Asia/Jakarta or Europe/Berlin")
    start, end, hours = _window(table, zone)
    deadline, deadline_hours = _deadline(table, zone, start)
    budget = _budget(table)
    # The campaign whose question this one asks again (#35): part of the fingerprint, stated before any timing.
    asks_again = table.get("asks_again", str, default=None)
    if asks_again is not None and not NAME_PATTERN.match(asks_again):
        table.fail("asks_again", f"{asks_again!r} is not a campaign name (letters, digits, '.', '_' or '-')")
    table.finish()
    question = {
        "corpora": (corpora or 1) if entries is None else None,
        "entries": entries,
        "window_start": None if start is None else start.isoformat(),
        "window_end": None if end is None else end.isoformat(),
        "time_zone": zone_name,
        "window_hours": None if hours is None else format_hours(hours),
        "deadline": None if deadline is None else deadline.isoformat(),
        "deadline_hours": None if deadline_hours is None else format_hours(Decimal(str(deadline_hours))),
        "budget": budget,
    }
    if asks_again is not None:  # absent otherwise: campaigns without it keep their fingerprint
        question["asks_again"] = asks_again
    return question


def _moment(table: Table, key: str, zone):
    text = table.get(key, str, default=None)
    if text is None:
        return None
    try:
        return parse_time(text, zone, key)
    except UserError as error:
        table.fail(key, str(error).removeprefix(f"--{key} "))
    return None


def _window(table: Table, zone) -> tuple:
    """Return the access window's start, end and hours, from window_start and window_end or from window_hours."""
    start, end = _moment(table, "window_start", zone), _moment(table, "window_end", zone)
    window_hours = table.get("window_hours", float, default=None, minimum=0)
    if (start is None) != (end is None):
        table.fail("window_end" if end is None else "window_start", "give both window_start and window_end")
    if start is not None and window_hours is not None:
        table.fail("window_hours", "give the window either as window_start and window_end or as window_hours, not both")
    if start is not None and end is not None:
        hours = elapsed_hours(start, end)
        if hours <= 0:
            table.fail("window_end", "must be after window_start")
        return start, end, hours
    hours = None if window_hours is None else Decimal(str(window_hours))
    if hours is not None and hours <= 0:
        table.fail("window_hours", "must be more than 0")
    return start, end, hours


def _deadline(table: Table, zone, start) -> tuple:
    """Return the deadline as a time and as hours after the window's start (a date needs the start)."""
    deadline = _moment(table, "deadline", zone)
    deadline_hours = table.get("deadline_hours", float, default=None, minimum=0)
    if deadline is not None:
        if start is None:
            table.fail("deadline", "a deadline date needs window_start and window_end; or give deadline_hours after the start")
            return deadline, deadline_hours
        if deadline_hours is not None:
            table.fail("deadline_hours", "give either deadline or deadline_hours, not both")
        deadline_hours = elapsed_hours(start, deadline)
        if deadline_hours <= 0:
            table.fail("deadline", "must be after window_start")
    return deadline, deadline_hours


def _budget(table: Table) -> str | None:
    """Return the optional budget as written, refusing what is not an amount in cents."""
    budget = table.get("budget", str, default=None)
    if budget is not None:
        try:
            amount = Decimal(budget)
        except InvalidOperation:
            amount = None
        if amount is None or not amount.is_finite() or amount < 0 or amount.as_tuple().exponent < -2:
            table.fail("budget", f"{budget!r} is not an amount such as \"150.00\" in the catalog's currency")
    return budget
