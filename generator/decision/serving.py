"""A serving campaign's answer (#64): each configuration's capacity at the latency objective, and what a million accepted
output tokens and a thousand accepted requests cost there, from the package the question's window needs.

A configuration's capacity is the lowest its counted repetitions reached: the level every repetition served within the
objective. Its rate at that level pools the repetitions (accepted output tokens over the seconds of those levels). Cost
per million accepted output tokens = the package's price per hour ÷ (accepted output tokens per second × 3,600) × 10⁶;
the package is the cheapest listed one that covers the access window (one hour's share of it when no window is given),
so the price assumes the engine serves at that level for all the package's hours. Undefined, with the reason, where no
level meets the objective, no output was accepted there, or the hardware has no price.
"""

from __future__ import annotations

import math
from decimal import Decimal

from iteralab.core.language import Figure, Text
from iteralab.money.rates import rate
from iteralab.money.schedule import package_plans
from iteralab.store.configuration import catalog_card

SECONDS_PER_HOUR = Decimal(3600)


def _trial_levels(trial: dict) -> tuple[object, dict]:
    """Return a counted trial's capacity level and its levels' figures by level (nothing for a damaged block)."""
    block = trial.get("serving") if isinstance(trial.get("serving"), dict) else {}
    capacity = block.get("capacity") if isinstance(block.get("capacity"), dict) else {}
    levels = {entry.get("level"): entry for entry in block.get("levels") or () if isinstance(entry, dict)}
    return capacity.get("level"), levels


def measured(summary) -> dict | None:
    """Return one configuration's capacity and its accepted rates there, pooled over its counted repetitions."""
    trials = [trial for trial in summary.counted if trial.get("status") == "ok" and isinstance(trial.get("serving"), dict)]
    if not trials:
        return None
    found = [_trial_levels(trial) for trial in trials]
    capacities = [level for level, _ in found]
    quality = all(trial.get("corpus_accepted") for trial in trials)
    failed = sum(trial.get("status") not in ("ok", "interrupted") for trial in summary.counted)
    result = {"trials": len(trials), "failed_trials": failed, "capacities": capacities, "quality_passed": quality,
              "level": None, "reason": None,
              "accepted_output_tokens": None, "accepted_requests": None, "duration_s": None, "offline": _offline(trials)}
    if any(level is None for level in capacities):
        result["reason"] = Text("{missed} of {count} repetition(s) met the objective at no declared level",
                                missed=sum(level is None for level in capacities), count=len(capacities))
        return result
    level = min(capacities)
    at = [levels.get(level) or {} for _, levels in found]
    tokens = [entry.get("accepted_output_tokens") for entry in at]
    requests = [entry.get("accepted_requests") for entry in at]
    seconds = [entry.get("duration_s") for entry in at]
    result["level"] = level
    if any(not isinstance(value, int | float) or isinstance(value, bool) for value in (*tokens, *requests, *seconds)):
        result["reason"] = Text("a repetition lacks its accepted counts at level {level}", level=level)
        return result
    result.update(accepted_output_tokens=sum(tokens), accepted_requests=sum(requests), duration_s=sum(seconds))
    return result


def _offline(trials: list[dict]) -> dict | None:
    """Sum the served outputs set against an offline generation's of the same question, over the trials that found one."""
    found = [block for block in (trial["serving"].get("offline") for trial in trials)
             if isinstance(block, dict) and isinstance(block.get("compared"), int) and block["compared"] > 0
             and isinstance(block.get("agreeing"), int)]
    if not found:
        return None
    return {"campaign": found[0].get("campaign"), "compared": sum(block["compared"] for block in found),
            "agreeing": sum(block["agreeing"] for block in found)}


def _price(summary, catalog, question) -> dict:
    """Return the package a configuration's hardware needs for the window and its price per hour, or why there is none."""
    configuration = summary.configuration
    card = catalog_card(catalog, configuration) if configuration is not None else None
    if card is None:
        hardware = getattr(configuration, "device", None)
        return {"reason": Text("not in the catalog: CPU") if hardware == "cpu" else
                Text("not in the catalog: {hardware}", hardware=getattr(configuration, "hardware", None) or "unknown")}
    lots = math.ceil((configuration.cards or 1) / card.cards_per_lot)
    plans = package_plans(catalog, card.slug, question.window_hours or Decimal(1), lots)
    if not plans:
        return {"reason": Text("catalog {catalog} lists no package for {card}", catalog=catalog.version, card=card.name)}
    best = plans[0]
    return {"reason": None, "total": best.total, "currency": best.price.currency, "hours": best.hours, "lots": lots,
            "card": card.name, "days": best.price.days, "periods": best.periods,
            "per_hour": best.total / Decimal(best.hours)}


def _costs(found: dict, price: dict) -> dict:
    """Return the cost per million accepted output tokens and per thousand accepted requests, or why each is undefined."""
    costs = {"per_million_accepted_output_tokens": None, "per_thousand_accepted_requests": None, "cost_reason": None}
    if found["level"] is None:
        costs["cost_reason"] = found["reason"] or Text("no level meets the objective")
    elif found["accepted_output_tokens"] is None:
        costs["cost_reason"] = found["reason"]
    elif price["reason"] is not None:
        costs["cost_reason"] = price["reason"]
    elif not found["accepted_output_tokens"]:
        costs["cost_reason"] = Text("no accepted output token at the objective")
    else:
        per_second = price["per_hour"] * Decimal(str(found["duration_s"])) / SECONDS_PER_HOUR
        costs["per_million_accepted_output_tokens"] = rate(per_second * 10**6 / Decimal(found["accepted_output_tokens"]))
        if found["accepted_requests"]:
            costs["per_thousand_accepted_requests"] = rate(per_second * 1000 / Decimal(found["accepted_requests"]))
    return costs


def serving_answer(view, catalog, question) -> dict | None:
    """Return every configuration's serving figures, ranked by cost per million accepted output tokens; None when the
    campaign has no serving trial."""
    load = _load(view)
    rows = []
    for summary in view.variants:
        found = measured(summary)
        if found is None:
            continue
        price = _price(summary, catalog, question)
        row = {"key": summary.key, "label": summary.label, **found, **_costs(found, price), "price": price}
        row["feasible"], row["why_not"] = _feasible(row, load)
        rows.append(row)
    if not rows:
        return None
    ranked = sorted((row for row in rows if row["feasible"]),
                    key=lambda row: (row["per_million_accepted_output_tokens"] is None,
                                     row["per_million_accepted_output_tokens"] or 0, -(row["level"] or 0),
                                     -(row["accepted_output_tokens"] or 0) / (row["duration_s"] or 1), row["label"]))
    return {"load": load, "objective": _objective(view), "window_hours": question.window_hours, "rows": rows,
            "ranked": ranked, "infeasible": [row for row in rows if not row["feasible"]], "answer": _answer(ranked, rows, load)}


def _objective(view) -> dict:
    """Return the objective the campaign's last manifest declared (empty for a damaged one)."""
    protocol = (view.manifests[-1].get("protocol") if view.manifests else None) or {}
    objective = ((protocol.get("serving") or {}).get("objective") or {}) if isinstance(protocol, dict) else {}
    return objective if isinstance(objective, dict) else {}


def _load(view) -> float | None:
    load = _objective(view).get("load")
    return load if isinstance(load, int | float) and not isinstance(load, bool) else None


def _feasible(row: dict, load) -> tuple[bool, object]:
    if not row["quality_passed"]:
        return False, Text("its outputs did not pass the quality check against the reference in every repetition")
    if row["level"] is None:
        return False, row["reason"] or Text("no level meets the objective")
    if load is not None and row["level"] < load:
        return False, Text("its capacity at the objective, level {level}, is below the load the question asks, {load}",
                           level=Figure(row["level"]), load=Figure(load))
    return True, None


def _answer(ranked: list[dict], rows: list[dict], load) -> object:
    if not ranked:
        return Text("No configuration serves {load} within the objective: {reasons}.",
                    load=Text("the declared load ({load})", load=Figure(load)) if load is not None else
                    Text("any declared level"), reasons="; ".join(f"{row['label']}: {row['why_not']}" for row in rows))
    best = ranked[0]
    if best["per_million_accepted_output_tokens"] is None:
        return Text("{label} serves up to level {level} within the objective; its cost per million accepted output tokens "
                    "is undefined: {reason}.", label=best["label"], level=Figure(best["level"]), reason=best["cost_reason"])
    return Text("{label} serves up to level {level} within the objective at the lowest cost: {cost} {currency} per million "
                "accepted output tokens ({thousand} {currency} per 1,000 accepted requests), from a {days}-day package of "
                "{card} at {total} {currency}.", label=best["label"], level=Figure(best["level"]),
                cost=best["per_million_accepted_output_tokens"], currency=best["price"]["currency"],
                thousand=best["per_thousand_accepted_requests"], days=best["price"]["days"], card=best["price"]["card"],
                total=best["price"]["total"])


def question_line(serving: dict) -> object:
    """Say the serving question: the load to serve, within which objective, in which window."""
    objective = serving["objective"]
    load = (Text("the declared load ({load})", load=Figure(serving["load"])) if serving["load"] is not None else
            Text("the highest declared level it can (no load stated: objective.load)"))
    return Text("Question: serve {load} with time to first token ≤ {ttft} ms and time per output token ≤ {tpot} ms for "
                "{share} of requests; window {window}", load=load, ttft=_stated(objective.get("ttft_ms")),
                tpot=_stated(objective.get("tpot_ms")),
                share=Text("{percent} %", percent=Figure(objective["share"] * 100, 1)) if isinstance(
                    objective.get("share"), int | float) else Text("the declared share"),
                window=Text("{hours} h", hours=serving["window_hours"]) if serving["window_hours"] is not None else
                Text("not stated (the price of one hour of the cheapest package)"))


def _stated(value) -> object:
    """Return a figure of the objective, or says it is not stated (a manifest check refused is read as empty)."""
    return Figure(value) if isinstance(value, int | float) and not isinstance(value, bool) else Text("(not stated)")


def serving_lines(serving: dict, say) -> list[str]:
    """Write the serving section of the decision report as text lines, SAY putting each message in the reader's language."""
    lines = [say(question_line(serving)), "",
             say(Text("Serving at the objective, cheapest per million accepted output tokens first (capacity: the lowest "
                      "level every counted repetition served within the objective):"))]
    for rank, row in enumerate(serving["ranked"], start=1):
        lines += [f"{rank:>3}. {row['label']}", "     " + say(_row_text(row))]
    if not serving["ranked"]:
        lines.append("  " + say(Text("none")))
    if serving["infeasible"]:
        lines += ["", say(Text("Not serving the question:"))]
        lines += [f"  - {row['label']}: {say(row['why_not'])}" for row in serving["infeasible"]]
    return lines


def _row_text(row: dict) -> object:
    cost = (Text("{cost} {currency} per million accepted output tokens, {thousand} {currency} per 1,000 accepted requests "
                 "({days}-day package of {card}, {total} {currency})", cost=row["per_million_accepted_output_tokens"],
                 currency=row["price"]["currency"], thousand=row["per_thousand_accepted_requests"] or "—",
                 days=row["price"]["days"], card=row["price"]["card"], total=row["price"]["total"])
            if row["per_million_accepted_output_tokens"] is not None else
            Text("cost per million accepted output tokens undefined: {reason}", reason=row["cost_reason"]))
    said = Text("capacity level {level} ({trials} repetition(s)); {tokens} accepted output tokens in {seconds} s there; "
                "{cost}", level=Figure(row["level"]), trials=row["trials"], tokens=Figure(row["accepted_output_tokens"] or 0),
                seconds=Figure(row["duration_s"] or 0, 2), cost=cost)
    if row["failed_trials"]:  # an engine that failed a trial is said beside the level the others reached
        said = Text("{said}; {failed} other trial(s) failed", said=said, failed=row["failed_trials"])
    if row["offline"] is None:
        return said
    return Text("{said}; its outputs equal the offline generation {campaign}'s on {agreeing} of {compared} requests",
                said=said, campaign=str(row["offline"]["campaign"]), agreeing=Figure(row["offline"]["agreeing"]),
                compared=Figure(row["offline"]["compared"]))


def serving_dict(serving: dict | None) -> dict:
    """Return {"serving": the serving figures as plain data (money as decimal strings, reasons as text)}, or nothing."""
    if serving is None:
        return {}

    def row_dict(row: dict) -> dict:
        price = row["price"]
        return {"configuration": row["key"], "label": row["label"], "capacity_level": row["level"],
                "capacities": row["capacities"], "trials": row["trials"], "failed_trials": row["failed_trials"],
                "quality_passed": row["quality_passed"],
                "accepted_output_tokens": row["accepted_output_tokens"], "accepted_requests": row["accepted_requests"],
                "duration_s": row["duration_s"], "offline": row["offline"],
                "per_million_accepted_output_tokens": _plain(row["per_million_accepted_output_tokens"]),
                "per_thousand_accepted_requests": _plain(row["per_thousand_accepted_requests"]),
                "cost_reason": _plain(row["cost_reason"]), "feasible": row["feasible"], "why_not": _plain(row["why_not"]),
                "package": None if price["reason"] else {"card": price["card"], "days": price["days"], "lots": price["lots"],
                                                         "periods": price["periods"], "total": str(price["total"]),
                                                         "currency": price["currency"], "hours": price["hours"]},
                "package_reason": _plain(price["reason"])}

    return {"serving": {"load": serving["load"], "answer": str(serving["answer"]),
                        "objective": {k: v for k, v in serving["objective"].items() if k != "definition"},
                        "ranked": [row_dict(r) for r in serving["ranked"]],
                        "infeasible": [row_dict(r) for r in serving["infeasible"]]}}


def _plain(value):
    return None if value is None else str(value)


def serving_side(serving: dict | None, key: str) -> dict:
    """Return one configuration's serving figures for compare: its capacity and cost per million accepted output tokens
    (nothing for a campaign that does not serve)."""
    row = next((row for row in (serving or {}).get("rows", ()) if row["key"] == key), None)
    if row is None:
        return {}
    return {"serving": {"level": row["level"], "reason": row["reason"], "cost": row["per_million_accepted_output_tokens"],
                        "currency": row["price"].get("currency"), "cost_reason": row["cost_reason"]}}


def serving_answers(earlier: dict | None, later: dict | None) -> tuple[bool, object] | None:
    """Say whether two serving campaigns' answers differ: the configuration that serves first; None unless both serve."""
    if earlier is None or later is None:
        return None
    old, new = (ranked[0] if ranked else None for ranked in (earlier["ranked"], later["ranked"]))
    if old is None and new is None:
        return None, Text("Neither revision serves the question within the objective: there is no answer to compare.")
    if old is not None and new is not None and old["key"] == new["key"] and old["level"] == new["level"]:
        return False, Text("The answer is unchanged: {answer}", answer=later["answer"])
    return True, Text("The answer changed: {old} → {new}", old=earlier["answer"], new=later["answer"])
