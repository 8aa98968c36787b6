"""Two revisions of one question side by side: each configuration in both, and whether the answer changed (#35).

Ranked by the decision report's own rule, never by a new one; which campaigns ask one question, and what changed
between their manifests, is store.questions'.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from iteralab.core.language import Text
from iteralab.decision.kinds import not_comparable
from iteralab.decision.report import Report, Row, decide_guarded
from iteralab.decision.serving import serving_answers, serving_side
from iteralab.money.catalog import Catalog, load_catalog
from iteralab.store import adaptation
from iteralab.store.listing import campaign_view_of
from iteralab.store.questions import asked_again, changes, newest, question_differences
from iteralab.store.separation import separate
from iteralab.store.views import CampaignView


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two revisions of a question side by side: what changed, each configuration in both, and the answer."""

    earlier: Report
    later: Report
    linked: bool  # the later campaign names the earlier one in asks_again
    changes: list[dict]
    question: list[str]  # parts of the question that differ (empty: the same question)
    pairs: list[dict]  # per configuration present in both: each side's figures and the separation between them
    only_earlier: list[str]
    only_later: list[str]
    answer_changed: bool | None  # None: neither has an answer to compare, or the two do different kinds of work
    answer: Text
    not_comparable: Text | None = None  # why the two answers cannot be set against each other: their kinds of work differ


def _key(row: Row) -> tuple:
    configuration = row.summary.configuration
    return (row.summary.name, configuration.hardware if configuration else "")


def _side(row: Row) -> dict:
    summary = row.summary
    return {"label": row.label, "ok": summary.ok, "accepted": summary.accepted, "feasible": row.feasible,
            "conditions": list(row.conditions), "median": summary.median if summary.seconds else None,
            "minimum": summary.minimum if summary.seconds else None, "maximum": summary.maximum if summary.seconds else None,
            "planned": row.plan.total if row.plan else None, "planned_currency": row.plan.currency if row.plan else None,
            "planned_reason": None if row.plan else row.plan_reason, "observed": row.observed_spend,
            "observed_currency": row.observed_currency, "observed_reason": row.observed_reason,
            "cost_per_corpus": row.cost_per_corpus, "cost_reason": row.cost_reason, **_adapted(row)}


def _adapted(row: Row) -> dict:
    """Return a model row's unit and adaptation figures (medians, each with its reason when empty): the time to the
    validated model, updates per second, validation accuracy, the memory estimate and the measured peaks; nothing for a
    row whose trials carry no adaptation object, so a comparison of corpora reads as it always did."""
    figures = adaptation.of_summary(row.summary)
    if figures is None:
        return {}
    memory = figures["memory"]
    return {"unit": row.unit, "validated_model": (row.model or {}).get("sha256"), "adaptation": {
        **{name: {"median": figures[name]["median"], "reason": figures[name]["reason"]}
           for name in ("time_to_validated_model_s", "updates_per_s", "train_examples_per_s", "accuracy", "validation_loss")},
        "method": figures["method"], "estimate_bytes": (memory["estimate"] or {}).get("total_bytes"),
        "estimate_reason": memory["estimate_reason"], "measured": memory["measured"]}}


def _named(row: Row, campaign: str):
    # The separation rule compares two summaries by their labels: each side named by its campaign.
    return dataclasses.replace(row.summary, label=f"{row.summary.name} ({campaign})")


def answer_row(report: Report) -> Row | None:
    """Return the configuration a report answers with: the one that needs no rental where one meets the question (the
    answer says it first, #45), else the cheapest feasible priced one, else the first feasible."""
    return report.owned or report.cheapest or (report.ranked[0] if report.ranked else None)


def configuration_name(row: Row) -> str:
    """Name a configuration across revisions: its variant and hardware (its label also names torch, which may change)."""
    variant, hardware = _key(row)
    return f"{variant} · {hardware}" if hardware else variant


def answer_key(row: Row) -> list:
    """Return what names an answer: the configuration and its package (card, days, periods, lots), not its spare hours."""
    plan = row.plan
    return [*_key(row), None if plan is None else [plan.card.slug, plan.days, plan.periods, plan.lots]]


def _answer(earlier: Report, later: Report) -> tuple[bool | None, Text]:
    old, new = answer_row(earlier), answer_row(later)
    if old is None and new is None:
        return None, Text("Neither revision has a feasible configuration: there is no answer to compare.")
    if old is not None and new is not None and answer_key(old) == answer_key(new):
        return False, Text("The answer is unchanged: {answer}.", answer=_said(new))
    if new is None:
        return True, Text("The answer changed: {old} was the answer, and no configuration of {later} is feasible.",
                          old=_said(old), later=later.campaign)
    if old is None:
        return True, Text("The answer changed: no configuration of {earlier} was feasible; now {new}.",
                          earlier=earlier.campaign, new=_said(new))
    return True, Text("The answer changed from {old} to {new}, because {why}.", old=_said(old), new=_said(new),
                      why=_why(old, later))


def _said(row: Row) -> Text:
    if row.plan:
        return Text("{label}, {plan}", label=row.label, plan=row.plan.describe())
    return Text("{label} ({reason})", label=row.label, reason=row.plan_reason)


def _why(old: Row, later: Report) -> Text:
    again = next((row for row in later.rows if _key(row) == _key(old)), None)
    if again is None:
        return Text("{label} was not measured again", label=old.summary.name)
    if not again.feasible:
        return Text("{label} now fails: {conditions}", label=old.summary.name, conditions="; ".join(again.conditions))
    if again.plan and old.plan and again.plan.total != old.plan.total:
        return Text("{label} is now planned {total} {currency} (was {before})", label=old.summary.name,
                    total=again.plan.total, currency=again.plan.currency, before=old.plan.total)
    return Text("another configuration now ranks first by the same rule (planned spend, then failures, then hours)")


def compare(earlier: CampaignView, later: CampaignView, catalog: Catalog) -> Comparison:
    """Set two revisions side by side, each decided by the decision report's own rule with the same catalog."""
    old_report, new_report = decide_guarded(earlier, catalog), decide_guarded(later, catalog)
    old_manifest = newest(earlier.manifests) if earlier.manifests else {}
    new_manifest = newest(later.manifests) if later.manifests else {}
    old_rows, new_rows = {_key(row): row for row in old_report.rows}, {_key(row): row for row in new_report.rows}
    pairs = [{"configuration": configuration_name(old_rows[key]),
              "earlier": {**_side(old_rows[key]), **serving_side(old_report.serving, old_rows[key].key)},
              "later": {**_side(new_rows[key]), **serving_side(new_report.serving, new_rows[key].key)},
              "separation": separate(_named(old_rows[key], earlier.name), _named(new_rows[key], later.name))["text"]}
             for key in old_rows if key in new_rows]
    different = not_comparable(earlier.name, earlier.kinds, later.name, later.kinds)
    changed, said = ((None, Text("The answers are not compared: the two campaigns do different kinds of work."))
                     if different else serving_answers(old_report.serving, new_report.serving)
                     or _answer(old_report, new_report))
    return Comparison(old_report, new_report, asked_again(new_manifest) == earlier.name, changes(old_manifest, new_manifest),
                      question_differences(old_manifest, new_manifest), pairs,
                      [old_rows[key].label for key in old_rows if key not in new_rows],
                      [new_rows[key].label for key in new_rows if key not in old_rows], changed, said, different)


def compare_campaigns(*, earlier: str, later: str, runs: Path | str, catalog: Path | str | None = None) -> Comparison:
    """Read two campaigns of a runs folder and compare them (iteralab compare EARLIER LATER)."""
    return compare(campaign_view_of(runs, earlier), campaign_view_of(runs, later), load_catalog(catalog))

