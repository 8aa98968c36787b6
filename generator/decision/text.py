"""The decision report written out: every figure as JSON, and as text for the terminal and the evidence bundle."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

from iteralab.core.language import Figure, Joined, Text, said, say
from iteralab.decision import together
from iteralab.decision.answer import measure_price
from iteralab.decision.kinds import MODEL, kind_line, kind_of_work
from iteralab.decision.plan import span_range
from iteralab.decision.report import Report, Row
from iteralab.decision.serving import serving_dict, serving_lines
from iteralab.money.catalog import money
from iteralab.money.schedule import format_hours
from iteralab.store import adaptation, generation
from iteralab.store.records import shown_time
from iteralab.store.trials import CUDA_INITIALISATION
from iteralab.store.views import KindConfiguration


def _text(value) -> str | None:
    return None if value is None else str(value)


def _delivered(row: Row) -> dict:
    """Return what a row delivers and its cost per unit: deliverables and the cost per validated corpus, or (a model's
    row) its validated models, one at most, the model (trial, sha256) and the cost per validated model."""
    if row.unit != MODEL:
        return {"deliverables": row.deliverables, "cost_per_validated_corpus": _text(row.cost_per_corpus)}
    model = None if row.model is None else {key: row.model[key] for key in ("trial_id", "path", "sha256", "bytes")}
    return {"validated_models": row.deliverables, "validated_model": model,
            "cost_per_validated_model": _text(row.cost_per_corpus)}


def _observed_and_other(row: Row) -> dict:
    """Return a row's observed package spend, its other costs and the two totals, each apart."""
    return {
        "observed": {"spend": _text(row.observed_spend), "currency": row.observed_currency,
                     "rentals": [r["record_id"] for r in row.observed_rentals], "reason": row.observed_reason,
                     "shared_with_configurations": row.shared_with, **_delivered(row), "cost_reason": row.cost_reason,
                     "cost_includes": row.cost_includes},
        "other_costs": {"total": _text(row.other_costs), "currency": row.other_currency, "reason": row.other_reason,
                        "expenses": [e["record_id"] for e in row.other_items]},
        "planned_total": {"total": _text(row.planned_total), "includes": row.planned_total_reason},
        "observed_total": {"total": _text(row.observed_total), "includes": row.observed_total_reason},
    }


def _on_lots(row: Row) -> Text:
    """Say where the projection runs: on the CPU (no lot is rented), on one lot, or on several."""
    if row.summary.configuration.device == "cpu":
        return _("on this CPU")
    return _("on 1 lot") if row.lots == 1 else _("on {count} lots", count=row.lots)


def figures_digest(report: Report) -> str:
    """Return 16 hex digits of the sha256 of every figure of REPORT, said in English: what a decision note is signed
    against, so a note whose figures an exclusion, a void or a new run changed is named as stale."""
    # The kind of work is the campaign's, not a figure: notes signed before the report named it stay current.
    figures = {key: value for key, value in report_dict(report).items() if key not in ("kinds", "kind_of_work")}
    data = json.dumps(said(figures, "en"), sort_keys=True, ensure_ascii=False, default=str)
    for row in report.rows:  # a key that names its kind of work (#60) signs as the key it had: no note goes stale for it
        if isinstance(row.summary.configuration, KindConfiguration):
            data = data.replace(json.dumps(row.key), json.dumps(row.summary.configuration.aliases[0]))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def report_dict(report: Report, *, said_in: str = "en") -> dict:
    """Return every figure of the report as plain data; money and hours as decimal strings.

    The answer and the summary are also given in the language SAID_IN (``answer_said``), when it is not English.
    """
    question = report.question

    def row_dict(row: Row) -> dict:
        configuration = row.summary.configuration
        hours = None if row.hours is None else {k: f"{v:.4f}" for k, v in zip(("min", "median", "max"), row.hours, strict=True)}
        reserved, reserved_reason = row.summary.peak("gpu_peak_reserved_bytes")
        return {
            "configuration": row.key, "label": row.label, "variant": row.summary.name, "settings": row.summary.config,
            "hardware": configuration.hardware, "software": configuration.software,
            "trials": row.statuses, "excluded_trials": sorted(row.summary.excluded),  # by an exclusion's rule only
            **({"disturbed_trials": sorted(row.summary.disturbed)} if row.summary.disturbed else {}),  # set aside (#60)
            "accepted_trials": row.summary.accepted, "ids_match": row.summary.ids_match,
            "verdicts": [{k: v[k] for k in ("metric", "threshold", "median", "passed", "judged")} for v in row.summary.verdicts()],
            "measured_window_s": [round(s, 6) for s in row.summary.seconds],
            "median_s": row.summary.median, "min_s": row.summary.minimum, "max_s": row.summary.maximum,
            "gpu_peak_reserved_bytes": reserved, "gpu_peak_reserved_reason": reserved_reason,
            "card_capacity_bytes": row.capacity_bytes, "card_capacity_reason": row.capacity_reason,
            "lots": row.lots, "projected_hours": hours, "projection_reason": None if hours else "no successful trial to project from",
            "planned": plan_dict(row.plan), "planned_reason": row.plan_reason, **_observed_and_other(row),
            "feasible": row.feasible, "conditions_failed": list(row.conditions), **_tokens(row), **_adapted(row),
            **_initialisation(row), **_together(row)}

    return {
        "campaign": report.campaign, "title": report.title, "catalog_version": report.catalog_version,
        "kinds": list(report.kinds), "kind_of_work": kind_of_work(report.kinds), **_unit(report),
        "question": {"declared": question.declared, "corpora": question.corpora, "entries": question.entries,
                     "workload": question.workload(report.corpus_entries),
                     "window_start": question.window_start, "window_end": question.window_end, "time_zone": question.time_zone,
                     "window_hours": _text(question.window_hours and format_hours(question.window_hours)),
                     "deadline": question.deadline,
                     "deadline_hours": _text(question.deadline_hours and format_hours(question.deadline_hours)),
                     "budget": _text(question.budget), "missing": question.missing},
        "answer": report.answer, "summary": report.summary_line,
        **({} if said_in == "en" else {"language": said_in, "answer_said": say(report.answer, said_in),
                                        "summary_said": say(report.summary_line, said_in)}),
        "cheapest": report.cheapest.key if report.cheapest else None, "owned": report.owned.key if report.owned else None,
        "runner_up": report.runner_up.key if report.runner_up else None,
        "gap_money": _text(report.gap_money), "gap_hours": None if report.gap_hours is None else f"{report.gap_hours:.4f}",
        "tie": report.tie, "fastest": report.fastest.key if report.fastest else None,
        "ranked": [row_dict(row) for row in report.ranked],
        "infeasible": [row_dict(row) for row in report.infeasible],
        "to_measure": [{"gpu": c["card"].slug, "gpu_name": c["card"].name, **_package_dict(c["plan"]),
                        "single_package": _package_dict(c["single"]) if c["single"] else None,
                        "reason": c["reason"], "time": None, "quality": None} for c in report.to_measure],
        "exclusions": [{**{k: v for k, v in entry.items() if k != "withdrawal"},
                        "withdrawal": None if entry["withdrawal"] is None else {
                            k: entry["withdrawal"][k] for k in ("record_id", "created_at", "reason")}}
                       for entry in report.exclusions],
        "unequal_items": list(report.unequal), "unequal_note": report.unequal_note,
        "rentals_paid_for": {rental_id: labels for rental_id, labels in sorted(report.paid_for.items())},
        "rentals_linked_to_no_configuration": [
            {k: r[k] for k in ("record_id", "gpu", "lots", "days", "start", "total", "currency")} |
            {"receipt_sha256": r["receipt"]["sha256"] if r["receipt"] else None} for r in report.unlinked],
        "problems": report.problems, **({"unstable": list(report.unstable)} if report.unstable else {}),  # #49
        **serving_dict(report.serving)}  # #64


def _unit(report: Report) -> dict:
    """Return the report's useful unit where it is a validated model (a report of corpora, as it always was: nothing)."""
    return {"unit": MODEL} if report.question.unit == MODEL else {}


def _tokens(row: Row) -> dict:
    """Return a row's output tokens per second (min, median, max over its repetitions) where its trials carry the
    generation object; nothing otherwise, so a classification campaign's figures (and the notes signed on them) hold."""
    figures = generation.of_summary(row.summary)
    if figures is None:
        return {}
    rate = figures["output_tokens_per_s"]
    return {"output_tokens_per_s": {key: rate[key] for key in ("min", "median", "max")}, "output_tokens_per_s_reason":
            rate["reason"]}


def _initialisation(row: Row) -> dict:
    """Return the one-time seconds of a row whose runs timed CUDA's initialisation, and each run's, counted once per run
    in each of its trials (nothing for a row of runs that never timed it, so older figures and notes hold)."""
    if not row.initialisation:
        return {}
    low, high = row.one_time_seconds
    return {"device_initialisation": {
        "what": CUDA_INITIALISATION, "one_time_s": {"min": _rounded(low), "max": _rounded(high)},
        "runs": [{key: entry[key] for key in ("run_id", "manifest_id", "seconds", "reason", "devices")}
                 for entry in row.initialisation]}}


def _rounded(seconds):
    return None if seconds is None else round(seconds, 6)


def initialisation_line(row: Row) -> str | None:
    """Say a row's one-time seconds and CUDA's initialisation of each of its runs within them, or None where no run of
    the row timed it."""
    if not row.initialisation:
        return None
    runs = [Text("{run} {seconds} s", run=entry["run_id"], seconds=Figure(entry["seconds"], 3, grouped=False))
            if entry["seconds"] is not None else Text("{run}: {reason}", run=entry["run_id"], reason=entry["reason"])
            for entry in row.initialisation]
    low, high = row.one_time_seconds
    if low is None:
        return _("{what}: {runs}", what=CUDA_INITIALISATION, runs=Joined("; ", runs))
    return _("one-time seconds {low} to {high}, each counting its run's {what} once: {runs}", low=Figure(low, 3, grouped=False),
             high=Figure(high, 3, grouped=False), what=CUDA_INITIALISATION, runs=Joined("; ", runs))


def tokens_line(row: Row) -> str | None:
    """Say a row's output tokens per second beside its corpus time, or None where its trials carry no generation object."""
    figures = generation.of_summary(row.summary)
    if figures is None:
        return None
    rate = figures["output_tokens_per_s"]
    if rate["median"] is None:
        return _("output tokens per second: {reason}", reason=rate["reason"])
    return _("output tokens per second: median {median}, min {low}, max {high} (over the measured window)",
             median=Figure(rate["median"], 1), low=Figure(rate["min"], 1), high=Figure(rate["max"], 1))


def _adapted(row: Row) -> dict:
    """Return a model row's adaptation figures (min, median, max over its repetitions, each with its reason when empty):
    the time to the validated model, updates, examples and tokens per second, validation accuracy, macro F1 and loss;
    the method, the effective batch and the parameters; the memory estimate beside the measured peaks; nothing for a row
    whose trials carry no adaptation object."""
    figures = adaptation.of_summary(row.summary)
    if figures is None:
        return {}
    spreads = ("time_to_validated_model_s", "updates_per_s", "train_examples_per_s", "train_tokens_per_s", "accuracy",
               "macro_f1", "validation_loss")
    memory = figures["memory"]
    return {"adaptation": {
        **{name: {key: figures[name][key] for key in ("min", "median", "max", "reason")} for name in spreads},
        "time_to_validated_model": figures["definition"], "method": figures["method"],
        "effective_batch": figures["effective_batch"], "parameters": figures["parameters"],
        "memory": {"estimate": memory["estimate"], "estimate_reason": memory["estimate_reason"],
                   "measured": {key: memory["measured"][key] for key in adaptation.PEAKS}}}}


def adaptation_line(row: Row) -> str | None:
    """Say a model row's figures beside its time to the validated model, or None where its trials carry no adaptation
    object: updates and training examples per second over the window, validation accuracy, the memory estimate beside
    the highest measured peak (each labelled)."""
    figures = adaptation.of_summary(row.summary)
    if figures is None:
        return None
    estimate = (figures["memory"]["estimate"] or {}).get("total_bytes")
    measured = figures["memory"]["measured"]
    peak = next(((key, measured[key]["value"]) for key in ("gpu_peak_reserved_bytes", "host_peak_rss_bytes")
                 if measured[key]["value"] is not None), None)
    return _("{method}: updates per second {updates}; training examples per second {examples}; validation accuracy "
             "{accuracy}; memory estimate {estimate} beside the measured peak {peak}", method=figures["method"],
             updates=_median(figures["updates_per_s"], 2), examples=_median(figures["train_examples_per_s"], 1),
             accuracy=_median(figures["accuracy"], 3), estimate=_bytes(estimate, figures["memory"]["estimate_reason"]),
             peak=_("{value} ({counter})", value=_bytes(peak[1], None), counter=peak[0]) if peak
             else say(measured["host_peak_rss_bytes"]["reason"]))


def _together(row: Row) -> dict:
    """Return a row measured one trial per card at the same time: its cards, its sets, each set's throughput (entries
    per second over its slowest card's window) and how it was counted; nothing for any other row."""
    found = row.together
    if not found:
        return {}
    rate = found["throughput"]
    return {"per_card": {"cards": found["cards"], "sets": found["sets"], "complete_sets": found["complete_sets"],
                         "set_throughput_entries_per_s": None if rate is None else
                         {key: round(value, 6) for key, value in zip(("min", "median", "max"), rate, strict=True)},
                         "how": found["how"]}}


def _median(spread: dict, digits: int) -> str:
    return say(Figure(spread["median"], digits, grouped=False)) if spread["median"] is not None else say(spread["reason"])


def _bytes(value, reason) -> str:
    return _("{value} bytes", value=Figure(value)) if value is not None else say(reason or Text("not recorded"))


def plan_dict(plan) -> dict | None:
    """Return a planned package as plain data; with explicit periods, the single package it was preferred to."""
    if plan is None:
        return None
    return {"gpu": plan.card.slug, "days": plan.days, "periods": plan.periods, "package": plan.package, "lots": plan.lots,
            "price_per_lot": str(plan.price_per_lot), "total": str(plan.total), "currency": plan.currency,
            "catalog_version": plan.catalog_version, "package_hours": plan.package_hours,
            "spare_hours": format_hours(plan.spare_hours), "choice": plan.choice(), "single_package": plan_dict(plan.single),
            **({"cards_used": plan.cards_used, "machine_cards": plan.machine_cards} if plan.cards_used is not None else {})}


def _package_dict(plan) -> dict:
    """Return one lot's package for the window of a card to measure (money.schedule.PackagePlan)."""
    if plan is None:
        return {"days": None, "periods": None, "package": None, "price_for_window": None, "currency": None}
    return {"days": plan.price.days, "periods": plan.periods, "package": plan.label(), "price_for_window": str(plan.total),
            "currency": plan.price.currency}


def _(message: str, **values) -> str:
    """Say MESSAGE in the current language (iteralab decide --lang), its values too."""
    return Text(message, **values).say()


def planned_text(row: Row) -> str:
    """Return the planned package in a few words, or its reason."""
    if not row.plan:
        return say(row.plan_reason)
    if row.plan.periods > 1:
        return _("{total} {currency} ({lots}×{periods} consecutive × {days} d)", total=row.plan.total,
                 currency=row.plan.currency, lots=row.plan.lots, periods=row.plan.periods, days=row.plan.days)
    return _("{total} {currency} ({lots}×{days} d)", total=row.plan.total, currency=row.plan.currency, lots=row.plan.lots,
             days=row.plan.days)


def _question(report: Report) -> str:
    question = report.question
    window = (_("window {hours} h", hours=Decimal(format_hours(question.window_hours))) if question.window_hours is not None
              else _("window not stated"))
    text = _("Question: {workload}; {window}", workload=question.workload(report.corpus_entries), window=window)
    if question.window_start:
        text += " (" + _("{first} to {last}", first=question.window_start, last=question.window_end) + ")"
    if question.deadline_hours is not None:
        text += "; " + _("deadline {hours} h after the start", hours=Decimal(format_hours(question.deadline_hours)))
    if question.budget is not None:
        text += "; " + _("budget {budget}", budget=money(question.budget))
    return text


def describe_report(report: Report) -> str:
    """Write the report as text: the answer, the question, ranked and infeasible configurations, cards to measure.

    Said in the current language (English unless inside ``language.speaking``).
    """
    question = report.question
    lines = [_("Decision report for {campaign} (catalog {catalog})", campaign=report.campaign, catalog=report.catalog_version),
             "", say(report.answer), "", say(kind_line(report.kinds))]
    if report.serving is not None:  # requests served within the objective, not corpora (#64)
        return "\n".join([*lines, *serving_lines(report.serving, say), *problems_text(report)])
    lines.append(_question(report))
    if question.declared and question.missing:
        lines.append(_("Not stated: {missing}", missing=Joined("; ", question.missing)))
    lines += ["", _("Feasible, cheapest planned spend first (projection for the workload; planned and observed money apart):")]
    for rank, row in enumerate(report.ranked, start=1):
        observed = (_("{amount} {currency}", amount=row.observed_spend, currency=row.observed_currency)
                    if row.observed_spend is not None else say(row.observed_reason))
        lines.append(f"{rank:>3}. {row.label}")
        lines.append("     " + _per_unit(row, observed))
        lines += ["     " + say(line) for line in (tokens_line(row), adaptation_line(row), initialisation_line(row),
                                                     together.describe(row.together)) if line is not None]
        if row.other_items:
            other = (_("{amount} {currency}", amount=row.other_costs, currency=row.other_currency)
                     if row.other_costs is not None else say(row.other_reason))
            planned_total = (_("{amount} {currency}", amount=row.planned_total, currency=row.plan.currency)
                             if row.planned_total is not None else say(row.planned_total_reason))
            lines.append("     " + _("other costs {other}; planned package and other costs {total}", other=other,
                                     total=planned_total))
    if not report.ranked:
        lines.append("  " + _("none"))
    lines += ["", _("Infeasible:")]
    for row in report.infeasible:
        lines.append(f"  - {row.label}: {say(Joined('; ', row.conditions))}")
    if not report.infeasible:
        lines.append("  " + _("none"))
    if report.to_measure:
        lines += ["", _("To measure (price only: no time, no quality):")]
        lines += [f"  - {card['card'].name}: {say(measure_price(card))}" for card in report.to_measure]
    if report.unlinked:
        lines += ["", _("Rentals linked to no configuration (the campaign's spend, in no configuration's figures):")]
        lines += ["  - " + _("{record}: {lots} lot(s) {gpu} x {days} days from {start}, {total} {currency}", record=r["record_id"],
                             lots=r["lots"], gpu=r["gpu"], days=r["days"], start=r["start"], total=Decimal(r["total"]),
                             currency=r["currency"]) for r in report.unlinked]
    if report.unequal:
        lines += ["", _("Unequal items (other costs that only some configurations carry):")]
        lines += ["  - " + _("{justification} ({amount} {currency}, {record}): not carried by {labels}",
                             justification=item["justification"], amount=Decimal(item["amount"]), currency=item["currency"],
                             record=item["record_id"], labels="; ".join(item["without"])) for item in report.unequal]
        lines.append(f"  {say(report.unequal_note)}")
    lines += exclusions_text(report.exclusions)
    if report.unstable:  # #49
        lines += ["", _("Unstable spread:"), *(f"  - {say(statement)}" for statement in report.unstable)]
    return "\n".join(lines + problems_text(report))


def problems_text(report: Report) -> list[str]:
    """Return the report's problems as text lines (none when it has none)."""
    return ["", _("Problems:"), *(f"  - {say(problem)}" for problem in report.problems)] if report.problems else []


def _per_unit(row: Row, observed: str) -> str:
    """Say a ranked row's time per unit, projection, planned and observed money and what it delivered."""
    if row.unit == MODEL:
        model = (_("validated model {sha256} (trial {trial})", sha256=row.model["sha256"][:16], trial=row.model["trial_id"])
                 if row.model else say(adaptation.NO_MODEL))
        cost = (_("{amount} {currency}", amount=row.cost_per_corpus, currency=row.observed_currency)
                if row.cost_per_corpus is not None else say(row.cost_reason))
        return _("median {median} s per validated model (time to the validated model); projected {span} {where}; planned "
                 "{planned}; observed {observed}; validated models {models} ({model}; repetitions are not extra models); "
                 "cost per validated model {cost}", median=Figure(row.window_seconds[1], 3, grouped=False),
                 span=span_range(row.hours), where=_on_lots(row), planned=planned_text(row), observed=observed,
                 models=row.deliverables, model=model, cost=cost)
    if row.together and row.window_seconds[1] is not None:  # one per card at once: a set's corpora in its slowest window
        return _("median {median} s per set of {cards} corpora (its slowest card's window); projected {span} {where}; "
                 "planned {planned}; observed {observed}; deliverables {deliverables}",
                 median=Figure(row.window_seconds[1], 3, grouped=False), cards=row.together["cards"],
                 span=span_range(row.hours), where=_on_lots(row), planned=planned_text(row), observed=observed,
                 deliverables=row.deliverables)
    return _("median {median} s per corpus; projected {span} {where}; planned {planned}; observed {observed}; deliverables "
             "{deliverables}", median=Figure(row.summary.median, 3, grouped=False), span=span_range(row.hours),
             where=_on_lots(row), planned=planned_text(row), observed=observed, deliverables=row.deliverables)


def exclusions_text(exclusions) -> list[str]:
    """List each exclusion with what it set aside in every configuration, checked or not, and any withdrawal."""
    lines = []
    for entry in exclusions:
        withdrawal = entry["withdrawal"]
        state = (_("withdrawn {at} ({reason}): its trials count again", at=shown_time(withdrawal["created_at"]), reason=withdrawal["reason"])
                 if withdrawal else _("applies"))
        heading = (_("Exclusion {record}, recorded {at} after the results, {state}:", record=entry["record_id"],
                     at=shown_time(entry["recorded_at"]), state=state) if entry["after_results"] else
                   _("Exclusion {record}, recorded {at}, {state}:", record=entry["record_id"], at=shown_time(entry["recorded_at"]),
                     state=state))
        lines += ["", heading, "  " + _("rule: {rule}", rule=entry["rule"])]
        for row in entry["configurations"]:
            trials = ", ".join(row["trials"]) or _("none")
            lines.append(f"  - {row['label']}: {trials}" + ("" if row["checked"] else " " + _("(not checked against this rule)")))
    return lines
