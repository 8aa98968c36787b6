"""Rental window arithmetic: real elapsed hours against the 3, 7 and 30 day packages."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from iteralab.core.errors import UserError
from iteralab.money.catalog import PACKAGE_DAYS, Catalog, money


@dataclass(frozen=True)
class PackageFit:
    """How one package length relates to the window."""

    days: int
    hours: int
    covers: bool
    periods_needed: int
    price_per_period: Decimal | None
    price_note: str | None

    @property
    def total_for_periods(self) -> Decimal | None:
        """Return the spend for the periods needed when the catalog lists the package."""
        if self.price_per_period is None:
            return None
        return money(self.price_per_period * self.periods_needed)


@dataclass(frozen=True)
class Window:
    """A rental window with its real elapsed duration."""

    start: dt.datetime
    end: dt.datetime
    zone: str
    hours: Decimal
    fits: list[PackageFit]


def parse_time(text: str, zone: ZoneInfo | None, what: str) -> dt.datetime:
    """Parse an ISO date-time; naive times are read in ZONE (UTC when none)."""
    try:
        moment = dt.datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise UserError(f"--{what} {text!r} is not a date-time; write e.g. 2026-09-28T09:00 or '2026-09-28 09:00'") from None
    if moment.tzinfo is not None:
        return moment
    if zone is None:
        return moment.replace(tzinfo=dt.UTC)
    early, late = moment.replace(tzinfo=zone, fold=0), moment.replace(tzinfo=zone, fold=1)
    if early.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None) != moment:
        raise UserError(f"--{what} {text} does not exist in {zone.key} (clocks go forward); pick another time")
    if early.utcoffset() != late.utcoffset():
        # Clocks turn back: this wall time happens twice; guessing would shift the bill by an hour.
        raise UserError(
            f"--{what} {text} happens twice in {zone.key} (clocks go back); "
            f"add the offset, e.g. {early.isoformat()} or {late.isoformat()}"
        )
    return early


def elapsed_hours(begin: dt.datetime, finish: dt.datetime) -> Decimal:
    """Return real elapsed hours between two aware times, whole seconds."""
    # Aware datetimes sharing one tzinfo subtract as wall clocks; UTC gives real elapsed time.
    seconds = (finish.astimezone(dt.UTC) - begin.astimezone(dt.UTC)).total_seconds()
    return Decimal(round(seconds)) / Decimal(3600)


def plan_window(*, start: str, end: str, tz: str | None = None, catalog: Catalog | None = None,
                gpu: str | None = None, lots: int = 1) -> Window:
    """Measure START..END in real hours and say which packages cover it."""
    zone = None
    if tz:
        try:
            zone = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise UserError(f"--tz {tz!r} is not a known time zone; use an IANA name such as Europe/Berlin or Asia/Jakarta") from None
    begin, finish = parse_time(start, zone, "start"), parse_time(end, zone, "end")
    # Aware datetimes sharing one tzinfo subtract as wall clocks; UTC gives real elapsed time.
    utc = dt.UTC
    seconds = (finish.astimezone(utc) - begin.astimezone(utc)).total_seconds()
    if seconds <= 0:
        raise UserError(f"--end {end} is not after --start {start}")
    hours = Decimal(round(seconds)) / Decimal(3600)
    fits = []
    for days in PACKAGE_DAYS:
        package_hours = days * 24
        periods = max(1, math.ceil(hours / package_hours))
        price, note = None, None
        if gpu is not None and catalog is not None:
            listed = catalog.gpu(gpu)
            row = catalog.prices.get((listed.slug, days))
            if row is None:
                note = f"not listed in catalog {catalog.version}"
            else:
                price = money(row.price_per_lot * lots)
        fits.append(PackageFit(days, package_hours, hours <= package_hours, periods, price, note))
    return Window(begin, finish, zone.key if zone else "UTC", hours, fits)


def format_hours(hours: Decimal) -> str:
    """Write hours without trailing zeros: 96, 95.5."""
    # The integer part always keeps a digit before the point ("0.00" -> "0."), so nothing is ever stripped to "".
    return f"{hours.quantize(Decimal('0.01')):f}".rstrip("0").rstrip(".")
