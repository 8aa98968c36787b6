"""Two revisions of a question as text and as JSON (iteralab compare), in the current language."""

from __future__ import annotations

from iteralab.core.language import Figure, Text, said, say
from iteralab.decision.kinds import kind_line
from iteralab.decision.revisions import Comparison
from iteralab.store.questions import shown_value


def _money(amount, currency, reason, *, undefined: bool = True) -> str:
    if amount is None:  # UNDEFINED False: the reason says 'undefined' itself (the cost per validated corpus's does)
        return (say(Text("undefined: {reason}", reason=reason)) if undefined else say(reason)) if reason else "—"
    return f"{say(amount)} {currency}" if currency else say(amount)


def _window(side: dict) -> str:
    if side["median"] is None:
        return say(Text("no successful trial"))
    return say(Text("median {median} s ({low} to {high} s)", median=Figure(side["median"], 3, grouped=False),
                    low=Figure(side["minimum"], 3, grouped=False), high=Figure(side["maximum"], 3, grouped=False)))


def _accepted(side: dict) -> str:
    return say(Text("{accepted} of {ok} successful trials accepted", accepted=side["accepted"], ok=side["ok"]))


def _feasible(side: dict) -> str:
    return say(Text("yes")) if side["feasible"] else say(Text("no: {conditions}", conditions="; ".join(side["conditions"])))


def _figure(side: dict, name: str, digits: int) -> str:
    found = (side.get("adaptation") or {}).get(name) or {"median": None, "reason": Text("not recorded")}
    if found["median"] is None:
        return say(found["reason"] or Text("not recorded"))
    return say(Text("median {median}", median=Figure(found["median"], digits, grouped=False)))


def _memory(side: dict) -> str:
    """Say the memory estimate beside the highest measured peak (GPU reserved, else host RSS), each labelled."""
    figures = side.get("adaptation") or {}
    measured = figures.get("measured") or {}
    estimate = (Text("estimate {value} bytes", value=Figure(figures["estimate_bytes"])) if figures.get("estimate_bytes")
                is not None else Text("estimate: {reason}", reason=figures.get("estimate_reason") or Text("not recorded")))
    peak = next(((key, measured[key]["value"]) for key in ("gpu_peak_reserved_bytes", "host_peak_rss_bytes")
                 if (measured.get(key) or {}).get("value") is not None), None)
    said_peak = (Text("measured {value} bytes ({counter})", value=Figure(peak[1]), counter=peak[0]) if peak
                 else Text("measured: not recorded"))
    return say(Text("{estimate}; {measured}", estimate=estimate, measured=said_peak))


def _adaptation_rows(old: dict, new: dict) -> list[tuple[Text, str, str]]:
    """Return the rows of two model configurations: the time to the validated model, updates per second, validation
    accuracy and memory; none where neither side's trials carry the adaptation object."""
    if not old.get("adaptation") and not new.get("adaptation"):
        return []
    return [(Text("time to the validated model (s)"), _figure(old, "time_to_validated_model_s", 3),
             _figure(new, "time_to_validated_model_s", 3)),
            (Text("updates per second"), _figure(old, "updates_per_s", 2), _figure(new, "updates_per_s", 2)),
            (Text("validation accuracy"), _figure(old, "accuracy", 3), _figure(new, "accuracy", 3)),
            (Text("memory: estimate and measured peak"), _memory(old), _memory(new))]


def _serving(side: dict) -> tuple[str, str]:
    serving = side.get("serving")
    if serving is None:
        return "—", "—"
    level = say(Text("level {level}", level=serving["level"])) if serving["level"] is not None else say(serving["reason"])
    return level, _money(serving["cost"], serving["currency"], serving["cost_reason"])


def _serving_rows(old: dict, new: dict) -> list[tuple[Text, str, str]]:
    """Return a serving configuration's rows: its capacity at the objective and its cost per million accepted output
    tokens; none where neither side serves."""
    if not old.get("serving") and not new.get("serving"):
        return []
    (old_level, old_cost), (new_level, new_cost) = _serving(old), _serving(new)
    return [(Text("capacity at the objective"), old_level, new_level),
            (Text("cost per million accepted output tokens"), old_cost, new_cost)]


def side_by_side(pair: dict) -> list[tuple[Text, str, str]]:
    """Return a configuration's rows: what, earlier, later (each already written in the current language)."""
    old, new = pair["earlier"], pair["later"]
    models = old.get("unit") == "model" or new.get("unit") == "model"
    return [
        (Text("measured window"), _window(old), _window(new)),
        *_serving_rows(old, new),
        *_adaptation_rows(old, new),
        (Text("quality"), _accepted(old), _accepted(new)),
        (Text("feasible"), _feasible(old), _feasible(new)),
        (Text("planned package spend"), _money(old["planned"], old["planned_currency"], old["planned_reason"]),
         _money(new["planned"], new["planned_currency"], new["planned_reason"])),
        (Text("observed spend"), _money(old["observed"], old["observed_currency"], old["observed_reason"]),
         _money(new["observed"], new["observed_currency"], new["observed_reason"])),
        (Text("cost per validated model") if models else Text("cost per validated corpus"),
         _money(old["cost_per_corpus"], None, old["cost_reason"], undefined=False),
         _money(new["cost_per_corpus"], None, new["cost_reason"], undefined=False)),
    ]


def describe_comparison(comparison: Comparison) -> str:
    """Write a comparison as text: the link, the question, what changed, each configuration side by side, the answer."""
    earlier, later = comparison.earlier.campaign, comparison.later.campaign
    lines = [say(Text("Compared: {earlier} (earlier) and {later} (later)", earlier=earlier, later=later))]
    lines.append(say(Text("{later} asks the question of {earlier} again ([decision] asks_again).", later=later, earlier=earlier)
                     if comparison.linked else
                     Text("{later} does not name {earlier} in [decision] asks_again: compared all the same.", later=later,
                          earlier=earlier)))
    lines += [f"{name}: {say(kind_line(report.kinds))}" for name, report in ((earlier, comparison.earlier), (later, comparison.later))]
    if comparison.not_comparable:
        lines.append(say(comparison.not_comparable))
    if comparison.question:
        lines.append(say(Text("The question differs, so these are not revisions of one question: {differences}",
                              differences="; ".join(comparison.question))))
    else:
        lines.append(say(Text("The question is the same: workload, window, deadline, budget, thresholds, tolerance, corpus "
                              "and split.")))
    lines.append(say(Text("What changed ({count}):", count=len(comparison.changes))))
    lines += [f"  {change['key']}: {shown_value(change['earlier'])} → {shown_value(change['later'])}" for change in comparison.changes]
    if not comparison.changes:
        lines.append("  " + say(Text("nothing besides the runs themselves")))
    for pair in comparison.pairs:
        lines.append(pair["configuration"])
        lines += [f"  {say(what)}: {old} → {new}" for what, old, new in side_by_side(pair)]
        lines.append(f"  {say(pair['separation'])}")
    for campaign, labels in ((earlier, comparison.only_earlier), (later, comparison.only_later)):
        if labels:
            lines.append(say(Text("Only in {campaign}: {labels}", campaign=campaign, labels="; ".join(labels))))
    lines.append(say(comparison.answer))
    return "\n".join(lines)


def comparison_dict(comparison: Comparison) -> dict:
    """Return a comparison as plain data (iteralab compare --json); money as decimal strings."""
    def side(values: dict) -> dict:
        return {key: str(value) if key in ("planned", "observed", "cost_per_corpus") and value is not None else value
                for key, value in values.items()}

    return said({"earlier": comparison.earlier.campaign, "later": comparison.later.campaign, "linked": comparison.linked,
                 "kinds": {"earlier": list(comparison.earlier.kinds), "later": list(comparison.later.kinds)},
                 "comparable": comparison.not_comparable is None, "not_comparable": comparison.not_comparable,
                 "question_differences": comparison.question, "changes": comparison.changes,
                 "configurations": [{"configuration": pair["configuration"], "earlier": side(pair["earlier"]),
                                     "later": side(pair["later"]), "separation": pair["separation"]}
                                    for pair in comparison.pairs],
                 "only_earlier": comparison.only_earlier, "only_later": comparison.only_later,
                 "answer_changed": comparison.answer_changed, "answer": comparison.answer})
