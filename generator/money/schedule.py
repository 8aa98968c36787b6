"""Rental window arithmetic: real elapsed hours against the 3, 7 and 30 day packages."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.money.catalog import CENT, PACKAGE_DAYS, ROUNDING, Catalog, Price, lots_price, money


@dataclass(frozen=True)
class PackageFit:
    """How one package length relates to the window."""

    days: int
    hours: int
    covers: bool
    periods_needed: int
    price_per_period: Decimal | None
    price_note: str | None
    currency: str | None = None

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
    fits: tuple[PackageFit, ...]
    gpu: str | None = None
    lots: int = 1
    catalog_version: str | None = None


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
    hours = elapsed_hours(begin, finish)
    if hours <= 0:
        raise UserError(f"--end {end} is not after --start {start}")
    priced = gpu is not None and catalog is not None
    fits = []
    for days in PACKAGE_DAYS:
        package_hours = days * 24
        periods = periods_needed(hours, days)
        price, note, currency = None, None, None
        if priced:
            row = catalog.prices.get((catalog.gpu(gpu).slug, days))
            if row is None:
                note = f"not listed in catalog {catalog.version}"
            else:
                price, currency = lots_price(row.price_per_lot, lots), row.currency
        fits.append(PackageFit(days, package_hours, hours <= package_hours, periods, price, note, currency))
    return Window(begin, finish, zone.key if zone else "UTC", hours, tuple(fits), gpu if priced else None, lots,
                  catalog.version if priced else None)


def rental_period(rental: dict) -> tuple[dt.datetime, dt.datetime]:
    """Return the rental's start and end: its recorded end, else start + the package's days (never extended)."""
    start = dt.datetime.fromisoformat(rental["start"])
    if start.tzinfo is None:  # records from before offsets were required were stored as UTC
        start = start.replace(tzinfo=dt.UTC)
    if rental.get("end"):
        end = dt.datetime.fromisoformat(rental["end"])
        return start, end if end.tzinfo else end.replace(tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=rental["days"])


def periods_needed(hours: Decimal, days: int) -> int:
    """Return how many consecutive DAYS-day periods, bought explicitly, cover HOURS (at least one)."""
    return max(1, math.ceil(hours / (days * 24)))


@dataclass(frozen=True)
class PackagePlan:
    """One way to cover some hours with one listed package length: a single package, or consecutive periods of it."""

    price: Price
    periods: int
    lots: int

    @property
    def total(self) -> Decimal:
        """Return lot price × lots × periods: each period is a package bought again, cards never multiply it."""
        return lots_price(self.price.price_per_lot, self.lots * self.periods)

    @property
    def hours(self) -> int:
        return self.price.days * 24 * self.periods

    @property
    def explicit(self) -> bool:
        """Tell whether the plan needs more than one period (each bought explicitly; packages never extend)."""
        return self.periods > 1

    def label(self) -> str:
        """Name the package: 'one 7-day package' or '2 consecutive 3-day periods, bought explicitly; ...'."""
        if not self.explicit:
            return Text("one {days}-day package", days=self.price.days)
        return Text("{periods} consecutive {days}-day periods, bought explicitly; no automatic extension",
                    periods=self.periods, days=self.price.days)


def package_plans(catalog: Catalog, slug: str, hours: Decimal | None, lots: int = 1) -> list[PackagePlan]:
    """Price every listed package length of one GPU for HOURS, cheapest first; on equal price, fewer periods first.

    A length shorter than HOURS is counted as the consecutive periods that cover them (periods_needed), never as an
    extension; without HOURS every length is one package.
    """
    plans = [PackagePlan(price, 1 if hours is None else periods_needed(hours, price.days), lots) for price in catalog.listed(slug)]
    return sorted(plans, key=lambda plan: (plan.total, plan.periods, plan.price.days))


def single_package(plans: list[PackagePlan]) -> PackagePlan | None:
    """Return the cheapest plan of one package (no second period), if any covers."""
    return next((plan for plan in plans if not plan.explicit), None)


def describe_window(window: Window) -> str:
    """Say in words which packages cover the window, with their prices when a GPU was given."""
    lots = f"{window.lots} lot{'s' * (window.lots != 1)}"
    lines = [f"Window {window.start.isoformat()} to {window.end.isoformat()} ({window.zone}): "
             f"{format_hours(window.hours)} h elapsed"]
    for fit in window.fits:
        if fit.covers:
            line = f"  {fit.days}-day package ({fit.hours} h): covers the window ({format_hours(fit.hours - window.hours)} h to spare)"
        else:
            line = (f"  {fit.days}-day package ({fit.hours} h): does not cover it; it would take "
                    f"{fit.periods_needed} consecutive periods bought explicitly (no automatic extension)")
        if window.gpu:
            if fit.price_per_period is None:
                line += f"; price {fit.price_note}"
            elif fit.covers:
                line += f"; {fit.price_per_period} {fit.currency} for {lots}"
            else:
                line += f"; {fit.periods_needed} x {fit.price_per_period} = {fit.total_for_periods} {fit.currency} for {lots}"
        lines.append(line)
    lines.append("Covering a window does not prove the work finishes in it: measure the processing time.")
    return "\n".join(lines)


def window_data(window: Window) -> dict:
    """Return the window and its packages as plain data, amounts as decimal strings."""
    rows = [{"days": fit.days, "hours": fit.hours, "covers": fit.covers, "periods_needed": fit.periods_needed,
             "price_per_period": _text(fit.price_per_period), "total_for_periods": _text(fit.total_for_periods),
             "price_note": fit.price_note} for fit in window.fits]
    return {"start": window.start.isoformat(), "end": window.end.isoformat(), "time_zone": window.zone,
            "elapsed_hours": format_hours(window.hours), "packages": rows, "catalog_version": window.catalog_version,
            "gpu": window.gpu, "lots": window.lots if window.gpu else None}


def _text(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount)


def format_hours(hours: Decimal) -> str:
    """Write hours without trailing zeros: 96, 95.5."""
    # The integer part always keeps a digit before the point ("0.00" -> "0."), so nothing is ever stripped to "".
    return f"{hours.quantize(CENT, rounding=ROUNDING):f}".rstrip("0").rstrip(".")
