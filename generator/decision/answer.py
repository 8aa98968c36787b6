"""The decision report's answer in plain words: what to rent, or what to measure next, and how the others compare.

It reads the report's rows (decision.report.Row) without importing them: the report imports this module.
"""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

from iteralab.core.language import Figure, Joined, Text
from iteralab.decision.kinds import MODEL
from iteralab.decision.plan import decimal_hours, span, span_range
from iteralab.decision.question import Question
from iteralab.money.schedule import format_hours
from iteralab.store.views import separate


def measure_price(card: dict) -> str:
    """Say what one lot of a card to measure costs for the window, and the single package beside explicit periods."""
    plan, single = card["plan"], card["single"]
    if plan is None:
        return card["reason"]
    if single:
        return Text("{total} {currency} for one lot in {package} (one {days}-day package: {single_total} {currency}, no second "
                    "setup)", total=plan.total, currency=plan.price.currency, package=plan.label(), days=single.price.days,
                    single_total=single.total)
    return Text("{total} {currency} for one lot in {package}", total=plan.total, currency=plan.price.currency,
                package=plan.label())


def answer(question: Question, ranked: list, infeasible: list, rows: list, to_measure: list[dict],
            corpus_entries: int | None) -> dict:
    """Return the plain-language answer, the index's one-line summary and the rows they name."""
    found = SimpleNamespace(cheapest=None, runner_up=None, gap_money=None, gap_hours=None, tie=None, fastest=None,
                             summary_line="", next_step="", points=(), owned=next((row for row in ranked if row.owned), None))
    window = (Text("within the {hours} h access window", hours=Decimal(format_hours(question.window_hours)))
              if question.window_hours is not None else Text("(no access window stated)"))
    workload = question.workload(corpus_entries)
    priced = [row for row in ranked if row.plan]
    lines = []
    if priced:
        best = found.cheapest = priced[0]
        lines.append(Text("Cheapest feasible configuration: {label}. Planned {total} {currency} for {plan}; projected {span} "
                          "for {workload} {window}.", label=best.label, total=best.plan.total, currency=best.plan.currency,
                          plan=best.plan.describe(), span=span_range(best.hours), workload=workload, window=window))
        if best.plan.choice():
            lines.append(best.plan.choice())
        found.summary_line = Text("{label}: planned {total} {currency}, projected up to {span}", label=best.label,
                                  total=best.plan.total, currency=best.plan.currency, span=span(best.hours[2]))
        others = [row for row in ranked if row is not best]
        if others:
            lines.append(_runner_up(found, best, others[0]))
    elif ranked:
        best = ranked[0]
        if best is not found.owned:  # the configuration that needs no rental is said first (_without_rental), not here
            lines.append(Text("{label} meets the quality thresholds and is projected at {span} for {workload} {window}, but "
                              "its package spend cannot be planned ({reason}).", label=best.label, span=span_range(best.hours),
                              workload=workload, window=window, reason=best.plan_reason))
        found.summary_line = Text("no priced configuration yet; {label} feasible ({reason})", label=best.label,
                                  reason=best.plan_reason)
    else:
        lines.append(Text("All {count} configuration(s) measured fail a condition listed below.", count=len(infeasible)))
        found.summary_line = (Text("no feasible configuration among {count}", count=len(rows)) if rows
                              else Text("nothing measured yet"))
    if ranked:
        # Every feasible configuration has a projection: a successful trial, and a corpus of at least one entry.
        fastest = min(ranked, key=lambda row: row.hours[1])
        if fastest is not (found.cheapest or ranked[0]):
            found.fastest = fastest
            cost = (Text("planned {total} {currency}", total=fastest.plan.total, currency=fastest.plan.currency)
                    if fastest.plan else fastest.plan_reason)
            lines.append(Text("Fastest feasible: {label}, projected {span} (median), {cost}.", label=fastest.label,
                              span=span(fastest.hours[1]), cost=cost))
    measuring = None
    if to_measure:
        names = Joined(", ", [Text("{card} ({price})", card=c["card"].name, price=measure_price(c)) for c in to_measure])
        measuring = Text("To measure: {names}; a price says nothing about a card's throughput.", names=names)
        lines.append(measuring)
    if question.missing and not question.declared:
        lines.append(Text("The campaign file states no [decision] table, so this answer assumes one model and no window.")
                     if question.unit == MODEL else
                     Text("The campaign file states no [decision] table, so this answer assumes one corpus and no window."))
    found.next_step = (_without_rental(found, question, infeasible, to_measure, workload, window, lines)
                       or _measure_again(found, ranked, rows) or _next_step(found.cheapest, ranked, to_measure, question))
    # The page lists the other sentences under the first, and the cards to measure in a list of their own.
    found.points = tuple(line for line in lines if line is not measuring)
    return {"answer": Joined(" ", [found.next_step, *lines]), **vars(found)}


def _next_step(cheapest: object | None, ranked: list, to_measure: list[dict], question: Question) -> str:
    """Say in one sentence what to rent, or what to measure next and why: the line a reader signs or acts on."""
    if cheapest is not None:
        plan = cheapest.plan
        lots = Text("1 lot") if plan.lots == 1 else Text("{count} lots", count=plan.lots)
        return Text("Rent {lots} of {card}, {package}, for {total} {currency}, and run {variant} there.", lots=lots,
                    card=plan.card.name, package=plan.package, total=plan.total, currency=plan.currency,
                    variant=cheapest.summary.name)
    why = (Text("no feasible configuration runs on a card the catalog prices") if ranked
           else Text("no configuration measured so far meets every condition"))
    step = _measure_next(to_measure, question)
    return Text("Nothing to rent yet: {why}. {step}", why=why, step=step) if step else Text("Nothing to rent yet: {why}.",
                                                                                          why=why)


def _measure_again(found: SimpleNamespace, ranked: list, rows: list) -> str | None:
    """Say first, where nothing is feasible because trials measured as disturbed left configurations fewer than two to
    compare, that they did and the command that measures them again (#60): another card would not help. Else None."""
    hit = [row for row in rows if row.summary.disturbed_successes and len(row.summary.seconds) < 2]
    if ranked or not hit:
        return None
    if len(hit) == len(rows):  # the whole campaign: the index's line says so too
        found.summary_line = Text("every configuration's trials measured as disturbed: measure again on a quiet machine")
    return Text("Nothing to rent yet: {count} of {total} configurations have fewer than two trials to compare because "
                "their trials were measured as disturbed (something else used the machine during their measured "
                "windows) and are set aside. Measure them again on a quiet machine with {command} (CAMPAIGN_FILE: "
                "the campaign's file), then build again.", count=len(hit), total=len(rows),
                command="iteralab run CAMPAIGN_FILE --resume --rerun-disturbed")


def _measure_next(to_measure: list[dict], question: Question) -> str | None:
    """Say which card to measure next and what measuring it costs; None where no card to measure is priced."""
    priced = sorted((c for c in to_measure if c["plan"] is not None), key=lambda c: (c["plan"].total, c["card"].slug))
    if not priced:
        return None
    card, plan, measuring = priced[0]["card"], priced[0]["plan"], priced[0].get("measuring")
    if measuring is None or question.window_hours is None:
        return Text("Measure next on {card}, the cheapest card not measured for this window ({total} {currency} for one lot), "
                    "then copy that machine's runs/ folder here and build again.", card=card.name, total=plan.total,
                    currency=plan.price.currency)
    # Measuring takes minutes: its rental is the cheapest package, not the production window's (#37: 94.28 USD for 2 min).
    return Text("Measure next on {card}, the cheapest card not measured for this window: measuring takes one {days}-day "
                "package, {measure} {currency} for one lot ({total} {currency} would hold the whole {hours} h window); then "
                "copy that machine's runs/ folder here and build again.", card=card.name, days=measuring.days,
                measure=measuring.price_per_lot, currency=measuring.currency, total=plan.total,
                hours=Decimal(format_hours(question.window_hours)))


def _without_rental(found: SimpleNamespace, question: Question, infeasible: list, to_measure: list[dict], workload: str,
                    window: str, lines: list) -> str | None:
    """Say first that a feasible configuration meets the question without a rental, then what renting would add (#45).

    Return None where none does: a rental, or measuring one, leads; a configuration that would need no rental but misses
    only the deadline or the window is then said among the points, with what renting would add.
    """
    owned = found.owned
    if owned is None:
        missed = next(filter(None, (_misses(row, question) for row in infeasible if row.owned)), None)
        if missed:
            lines.insert(0, missed)
        return None
    found.summary_line = Text("no rental needed: {label} meets the question", label=owned.label)
    if question.deadline_hours is None:
        first = Text("{label} meets the question without a rental: it meets the quality thresholds and is projected at {span} "
                     "for {workload} {window}.", label=owned.label, span=span_range(owned.hours), workload=workload,
                     window=window)
    else:
        first = Text("{label} meets the question without a rental: it meets the quality thresholds and is projected at {span} "
                     "for {workload} {window}, within the {deadline} h until the deadline.", label=owned.label,
                     span=span_range(owned.hours), workload=workload, window=window,
                     deadline=Decimal(format_hours(question.deadline_hours)))
    rented, step = found.cheapest, _measure_next(to_measure, question)
    if rented is not None:
        then = Text("Renting adds nothing the question asks for; the cheapest feasible rental, {label}, plans {total} "
                    "{currency} and is projected at up to {span}.", label=rented.label, total=rented.plan.total,
                    currency=rented.plan.currency, span=span(rented.hours[2]))
    elif step:  # the answer's first lines stay short (#37): which card to measure heads the points
        then = Text("Renting adds nothing the question asks for; a card is worth measuring only to compare.")
        lines.insert(0, step)
    else:
        then = Text("Renting adds nothing the question asks for.")
    return Joined(" ", [first, then])


def _misses(row, question: Question) -> str | None:
    """Say what renting would add to a configuration that needs no rental but misses only the deadline or the window."""
    if row.hours is None:
        return None
    longest = decimal_hours(row.hours[2])
    missed = sorted((limit, name) for limit, name in ((question.deadline_hours, "deadline"), (question.window_hours, "window"))
                    if limit is not None and longest > limit)
    if not missed or len(missed) != len(row.conditions):  # it fails something else too: renting would not be all it needs
        return None
    limit, name = missed[0]
    if name == "deadline":
        return Text("Without a rental, {label} meets the quality thresholds but misses the deadline (projected up to {span}, "
                    "against {hours} h until the deadline): what renting would add is finishing before it, on a card fast "
                    "enough.", label=row.label, span=span(row.hours[2]), hours=Decimal(format_hours(limit)))
    return Text("Without a rental, {label} meets the quality thresholds but does not fit the access window (projected up to "
                "{span}, against a {hours} h window): what renting would add is fitting the work in the window, on a card "
                "fast enough.", label=row.label, span=span(row.hours[2]), hours=Decimal(format_hours(limit)))


def _runner_up(found: SimpleNamespace, best, runner) -> str:
    """Compare the cheapest with the runner-up: money and pace, or a tie the repetitions do not separate."""
    found.runner_up, found.gap_hours = runner, runner.hours[1] - best.hours[1]
    if not runner.plan:
        return Text("Runner-up: {label}, {reason}.", label=runner.label, reason=runner.plan_reason)
    found.gap_money = runner.plan.total - best.plan.total
    if found.gap_money != 0:
        gap = found.gap_hours
        if gap == 0:
            pace = Text("the same median projection")
        elif gap > 0:
            pace = Text("{span} slower (median projection)", span=span(abs(gap)))
        else:
            pace = Text("{span} faster (median projection)", span=span(abs(gap)))
        return Text("Runner-up: {label}, {gap} {currency} more, {pace}.", label=runner.label, gap=found.gap_money,
                    currency=best.plan.currency, pace=pace)
    statement = separate(best.summary, runner.summary)
    if statement["separated"] and best.unit == MODEL:  # the repetitions are compared over their measured training windows
        return Text("Runner-up: {label} plans the same spend, but the repetitions separate their measured training "
                    "windows: median {best} s against {runner} s, the ranges do not overlap.", label=runner.label,
                    best=Figure(best.summary.median, 3, grouped=False), runner=Figure(runner.summary.median, 3, grouped=False))
    if statement["separated"]:
        return Text("Runner-up: {label} plans the same spend, but the repetitions separate them: median {best} s against "
                    "{runner} s per corpus, the ranges do not overlap.", label=runner.label,
                    best=Figure(best.summary.median, 3, grouped=False), runner=Figure(runner.summary.median, 3, grouped=False))
    found.tie = Text("Tie: {best} and {runner} both plan {total} {currency} and the repetitions do not separate their "
                     "durations. {statement}", best=best.label, runner=runner.label, total=best.plan.total,
                     currency=best.plan.currency, statement=statement["text"])
    found.summary_line = Text("tie at {total} {currency}: {best} and {runner}", total=best.plan.total,
                              currency=best.plan.currency, best=best.label, runner=runner.label)
    return found.tie
