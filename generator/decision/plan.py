"""Plan a configuration's package: the lots, the projected hours and the cheapest listed package that covers them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from decimal import Decimal

from iteralab.core.language import Figure, Text
from iteralab.decision.kinds import CORPUS
from iteralab.decision.question import Question
from iteralab.money.catalog import Catalog, Gpu
from iteralab.money.schedule import PackagePlan, format_hours, package_plans, single_package
from iteralab.store.configuration import catalog_card

MAX_LOTS = 64  # the planner tries more lots only to fit many independent corpora; beyond this it says so


SECOND_PERIOD_RISK = Text("a second period may come on another machine, so the setup (environment check, model load, "
                          "warm-up) counts again and the work must stop and resume between periods")


@dataclass(frozen=True)
class Plan:
    """The cheapest listed way to cover the window and the projected hours: one package, or consecutive periods, × lots."""

    card: Gpu
    days: int
    lots: int
    price_per_lot: Decimal
    total: Decimal
    currency: str
    catalog_version: str
    package_hours: int
    spare_hours: Decimal
    periods: int = 1
    single: Plan | None = None  # when consecutive periods are cheaper: the cheapest single package that also covers
    cards_used: int | None = None  # fewer cards than the measured machine had: the lots cover these only (#44)
    machine_cards: int | None = None

    @property
    def package(self) -> str:
        """Name what is bought: 'one 7-day package' or 'N consecutive 3-day periods, bought explicitly; ...'."""
        if self.periods == 1:
            return Text("one {days}-day package", days=self.days)
        return Text("{periods} consecutive {days}-day periods, bought explicitly; no automatic extension",
                    periods=self.periods, days=self.days)

    def describe(self) -> str:
        """Say the plan in one sentence, and which cards it covers when the measurement used fewer than the machine had."""
        if self.cards_used is None:
            return self._describe()
        return Text("{plan}; planned for the {used} card(s) the trials used, not the measured machine's {count}: a card "
                    "that was not used is never counted as adding throughput", plan=self._describe(), used=self.cards_used,
                    count=self.machine_cards)

    def _describe(self) -> str:
        lots = Text("1 lot") if self.lots == 1 else Text("{count} lots", count=self.lots)
        spare = Decimal(format_hours(self.spare_hours))
        if self.periods == 1:
            return Text("{lots} × {days}-day {card} at {price} {currency} per lot, catalog {catalog}, {spare} h of the package "
                        "spare after the work", lots=lots, days=self.days, card=self.card.name, price=self.price_per_lot,
                        currency=self.currency, catalog=self.catalog_version, spare=spare)
        return Text("{lots} × {periods} consecutive {days}-day periods of {card}, bought explicitly (no automatic extension), "
                    "at {price} {currency} per lot and period, catalog {catalog}, {spare} h of the periods spare after the work",
                    lots=lots, periods=self.periods, days=self.days, card=self.card.name, price=self.price_per_lot,
                    currency=self.currency, catalog=self.catalog_version, spare=spare)

    def choice(self) -> str | None:
        """Say which plan the ranking uses when explicit periods and a single package both cover, and the risk."""
        if self.periods == 1:
            return None
        if self.single:
            return Text("The ranking uses the {periods} consecutive {days}-day periods ({total} {currency}): {risk}; one "
                        "{single_days}-day package would cost {single_total} {currency} without that risk.",
                        periods=self.periods, days=self.days, total=self.total, currency=self.currency, risk=SECOND_PERIOD_RISK,
                        single_days=self.single.days, single_total=self.single.total)
        return Text("The ranking uses the {periods} consecutive {days}-day periods ({total} {currency}): {risk}; no single "
                    "listed package is long enough.", periods=self.periods, days=self.days, total=self.total,
                    currency=self.currency, risk=SECOND_PERIOD_RISK)


def project(row, question: Question, corpus_entries: int | None, lots: int) -> tuple | None:
    """Project processing hours (min, median, max) for the workload when LOTS machines share it: the time of one unit
    (a corpus's measured window; a model's time to the validated model) times the units per lot, plus the one-time
    seconds that unit does not hold (store.trials' window_s and one_time_s)."""
    low, middle, high = row.window_seconds
    if low is None:
        return None
    if question.entries is not None and question.unit == CORPUS:  # a stream of entries; models are counted as corpora
        if not corpus_entries:
            return None
        per_lot = question.entries / corpus_entries  # one stream: more lots do not divide it
    else:
        # Lots divide only independent corpora; a model is never split across cards. Measured one per card at the same
        # time (per_card), each lot runs as many corpora at once as the set had cards, in its slowest card's window.
        per_lot = math.ceil((question.corpora or 1) / (lots * ((row.together or {}).get("cards") or 1)))
    first, last = row.one_time_seconds
    return tuple((window * per_lot + once) / 3600 for window, once in ((low, first), (middle, (first + last) / 2), (high, last)))


def span(hours: float) -> str:
    """Write a projected duration in the unit that fits it: seconds under a minute, minutes under an hour, else hours."""
    if hours * 60 < 1:
        return Text("{value} s", value=Figure(hours * 3600, 1, grouped=False))
    if hours < 1:
        return Text("{value} min", value=Figure(hours * 60, 1, grouped=False))
    return Text("{value} h", value=Figure(hours, 2, grouped=False))


def span_range(hours: tuple | None) -> str:
    """Write a projection as 'min–max', or say there is none."""
    return Text("{first} to {last}", first=span(hours[0]), last=span(hours[2])) if hours else Text("no projection: no successful trial")


def decimal_hours(value: float) -> Decimal:
    return Decimal(str(round(value, 4)))


def plan_row(row, question: Question, corpus_entries: int | None, catalog: Catalog):
    """Return ROW with its lots, projected hours and the cheapest listed package for its hardware, or why there is none."""
    configuration = row.summary.configuration
    card = catalog_card(catalog, configuration)
    if card is None:
        if configuration.partition:
            reason = Text("no plan: {gpu} is a part of a card ({partition}), and catalog {catalog} prices whole cards",
                          gpu=configuration.gpu_name, partition=configuration.partition, catalog=catalog.version)
        elif configuration.device == "cpu":
            reason = Text("not in the catalog: CPU")
        elif configuration.device == "gpu":
            reason = Text("not in the catalog: {gpu}", gpu=configuration.gpu_name)
        else:
            reason = Text("no plan: {hardware}", hardware=configuration.hardware)
        return dataclasses.replace(row, lots=1, hours=project(row, question, corpus_entries, 1), plan_reason=reason,
                                   owned=True)
    if row.together and card.cards_per_lot < configuration.cards:
        # The cards were measured together on one machine (sharing its host): lots rented apart were never measured.
        return dataclasses.replace(row, lots=1, hours=project(row, question, corpus_entries, 1), plan_reason=Text(
            "no plan: one trial per card ran on {cards} cards of one machine at the same time, and a lot of {card} in "
            "catalog {catalog} has {lot} card(s): lots rented apart were never measured together", cards=configuration.cards,
            card=card.name, catalog=catalog.version, lot=card.cards_per_lot))
    if configuration.across and card.cards_per_lot < configuration.cards:
        # One model's parts talk over the machine's own links: lots rented apart are other machines (#44).
        return dataclasses.replace(row, lots=1, hours=project(row, question, corpus_entries, 1), plan_reason=Text(
            "no plan: the model was placed across {cards} cards of one machine, and a lot of {card} in catalog {catalog} "
            "has {lot} card(s)", cards=configuration.cards, card=card.name, catalog=catalog.version, lot=card.cards_per_lot))
    if card.memory_per_card_gb is not None:
        row = dataclasses.replace(row, capacity_bytes=int(card.memory_per_card_gb * Decimal(10**9)))
    else:
        row = dataclasses.replace(row, capacity_reason=Text("the catalog does not state {card}'s memory", card=card.name))
    # The cards the trials used, not the machine's: a card left idle measured nothing (a lot's price covers its cards).
    minimum = math.ceil(configuration.cards / card.cards_per_lot)
    # More lots help only independent corpora, at most one corpus per card of a lot (a stream's projection does not shrink with
    # lots, so the fewest that meet the limit are the minimum).
    at_once = (row.together or {}).get("cards") or 1
    candidates = range(minimum, max(minimum, min(math.ceil((question.corpora or 1) / at_once), MAX_LOTS)) + 1)
    limit = question.limit_hours
    lots = next((n for n in candidates if limit is not None and (p := project(row, question, corpus_entries, n))
                 and decimal_hours(p[2]) <= limit), minimum)
    hours = project(row, question, corpus_entries, lots)
    row = dataclasses.replace(row, lots=lots, hours=hours)
    if hours is None:
        return dataclasses.replace(row, plan_reason=Text("no successful trial to project from"))
    needed = max(question.window_hours or Decimal(0), decimal_hours(hours[2]))
    plans = package_plans(catalog, card.slug, needed, lots)
    if not plans:
        return dataclasses.replace(row, plan_reason=Text("catalog {catalog} lists no package for {card}",
                                                                      catalog=catalog.version, card=card.name))
    best, single = plans[0], single_package(plans)
    fewer = configuration.cards_used is not None and configuration.cards_used < configuration.gpu_count
    cards = (configuration.cards_used, configuration.gpu_count) if fewer else (None, None)
    return dataclasses.replace(row, plan=_plan(card, best, hours, catalog, cards,
                                               _plan(card, single, hours, catalog, cards) if best.explicit and single else None))


def _plan(card: Gpu, chosen: PackagePlan, hours: tuple, catalog: Catalog, cards: tuple, single: Plan | None = None) -> Plan:
    return Plan(card, chosen.price.days, chosen.lots, chosen.price.price_per_lot, chosen.total, chosen.price.currency,
                catalog.version, chosen.hours, Decimal(chosen.hours) - decimal_hours(hours[2]), chosen.periods, single, *cards)
