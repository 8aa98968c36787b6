"""The decision report: per configuration, quality, time, planned and observed money, and which one to pick."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from iteralab.core.errors import CampaignFailed, UserError, within_campaign
from iteralab.core.language import Figure, Joined, Text
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.decision import together
from iteralab.decision.answer import answer
from iteralab.decision.kinds import CORPUS, MODEL
from iteralab.decision.plan import Plan, decimal_hours, plan_row
from iteralab.decision.question import Question, question_of
from iteralab.decision.serving import serving_answer
from iteralab.ledger.rental_checks import check_rentals
from iteralab.money.catalog import Catalog, load_catalog, money
from iteralab.money.schedule import format_hours, package_plans, single_package
from iteralab.store import adaptation, expenses
from iteralab.store.configuration import catalog_card
from iteralab.store.disturbance import unstable_statements
from iteralab.store.reading import load
from iteralab.store.trials import initialisation, left_out_words, trial_table
from iteralab.store.views import CampaignView, VariantSummary, campaign_views


@dataclass(frozen=True)
class Row:
    """One configuration of the decision report, built in steps (measured, planned, observed, judged), each a new row."""

    summary: VariantSummary
    statuses: dict
    window_seconds: tuple  # min, median, max of one unit: the measured window per corpus, the time to a validated model
    one_time_seconds: tuple  # min, max of environment check + load + compilation + warm-up (a model: check, compilation),
    # plus each trial's run's CUDA initialisation where its manifest timed it (see initialisation)
    lots: int | None = None
    hours: tuple | None = None  # projected (min, median, max) processing hours for the workload on those lots
    plan: Plan | None = None
    plan_reason: str | None = None
    owned: bool = False  # on hardware the catalog does not price (a CPU, an unlisted card): it runs without a rental
    capacity_bytes: int | None = None
    capacity_reason: str | None = None
    observed_spend: Decimal | None = None
    observed_currency: str | None = None
    observed_rentals: tuple = ()
    observed_reason: str | None = None
    shared_with: int = 0
    deliverables: int = 0  # accepted deliverables of a corpus; validated models of a model (one at most, see model)
    cost_per_corpus: Decimal | None = None  # the cost per validated unit: a corpus, or a model where unit says so
    cost_reason: str | None = None
    cost_includes: str | None = None  # which costs the cost per validated corpus sums
    other_items: tuple = ()  # the expenses that apply to this configuration
    other_costs: Decimal | None = None
    other_currency: str | None = None
    other_reason: str | None = None
    planned_total: Decimal | None = None  # planned package + other costs; never added to observed money
    planned_total_reason: str | None = None
    observed_total: Decimal | None = None  # observed package + other costs
    observed_total_reason: str | None = None
    conditions: tuple = ()
    unit: str = CORPUS  # what the configuration delivers: a validated corpus, or a validated model
    model: dict | None = None  # a model's: the validated model (store.adaptation.validated_model), None without one
    # CUDA's initialisation of each of its runs ({run_id, manifest_id, seconds, reason, recorded}), only where one of them
    # timed it (a row of runs that never did, or of manifests without the field, has none: nothing was counted)
    initialisation: tuple = ()
    # One trial per card at the same time ([placement] per_card): the cards, the sets and their throughput (decision.together)
    together: dict | None = None

    @property
    def feasible(self) -> bool:
        return not self.conditions

    @property
    def label(self) -> str:
        return self.summary.label

    @property
    def key(self) -> str:
        return self.summary.key


@dataclass(frozen=True)
class Report:
    """The whole decision report of one campaign, complete when built."""

    campaign: str
    title: str
    question: Question
    corpus_entries: int | None
    catalog_version: str
    rows: list[Row]
    ranked: list[Row]
    infeasible: list[Row]
    to_measure: list[dict]
    problems: list[str]
    answer: str
    summary_line: str
    cheapest: Row | None = None
    runner_up: Row | None = None
    gap_money: Decimal | None = None
    gap_hours: float | None = None
    tie: str | None = None
    fastest: Row | None = None
    owned: Row | None = None  # the feasible configuration that needs no rental, which the answer names first
    exclusions: tuple = ()  # the campaign's exclusions, each listed for every configuration (CampaignView.exclusion_table)
    unequal: tuple = ()  # expenses that apply to some configurations only (store.expenses.unequal)
    unequal_note: str | None = None  # how the ranking treats them, in words
    next_step: str = ""  # the answer's first sentence: what to rent, or what to measure next and why
    points: tuple = ()  # the answer's other sentences, each a point of the list under the first (the cards to measure apart)
    paid_for: dict = field(default_factory=dict)  # rental id -> labels of the configurations it validly paid for
    unlinked: tuple = ()  # rentals that paid for no configuration: counted in the campaign's spend only
    kinds: tuple = ()  # the kinds of work its manifests name (CampaignView.kinds): one, or several said as such
    unstable: tuple = ()  # variants whose slowest repetition is far above their median, said in words (#49)
    serving: dict | None = None  # a serving campaign's capacities and costs at the objective (decision.serving, #64)

    def rental_story(self, rentals) -> dict:
        """Tell the one story of the money: all rentals, those paid for configurations, those linked to none."""
        linked = [r for r in rentals if r["record_id"] in self.paid_for]
        return {"all": _sum(rentals), "linked": _sum(linked), "unlinked": _sum(self.unlinked),
                "per_configuration": [row for row in self.rows if row.observed_rentals or row.deliverables]}


def _figures(table) -> dict:
    """Group the trial table by configuration: counts per status, window min/median/max, one-time min/max."""
    # Over the table's columns as lists: pandas' groupby, unstack and .loc took most of a decision's time on the hundred
    # rows of a campaign, a thousand times per build.
    counts: dict = {}
    windows: dict = {}
    for key, status, excluded, aside, window, once in zip(table["configuration_key"].tolist(), table["status"].tolist(),
                                                          table["excluded_by"].tolist(), table["set_aside"].tolist(),
                                                          table["window_s"].tolist(), table["one_time_s"].tolist(), strict=True):
        # An excluded trial (or a disturbed one the protocol does not use, #49) stays in the table and counts in no figure.
        if aside or (excluded is not None and excluded == excluded):
            continue
        statuses = counts.setdefault(key, {})
        statuses[status] = statuses.get(status, 0) + 1
        if status == "ok":
            found = windows.setdefault(key, ([], []))
            found[0].append(window)
            found[1].append(once)
    figures = {}
    for key, statuses in counts.items():
        seconds, one_time = windows.get(key, (None, None))
        figures[key] = {
            "statuses": dict(sorted(statuses.items())),
            "window": (min(seconds), statistics.median(seconds), max(seconds)) if seconds else (None, None, None),
            "one_time": (min(one_time), max(one_time)) if one_time else (None, None),
        }
    return figures


def _observed(row: Row, links: dict, rows_by_run: dict, items: tuple = ()) -> Row:
    """Return ROW with the rentals validly linked to its runs summed, once each, its other costs (ITEMS), the totals
    and its cost per delivered corpus."""
    runs = sorted({trial["run_id"] for trial in row.summary.trials})
    rentals = {r["record_id"]: r for run in runs for r in links.get(run, [])}
    found = {"observed_rentals": tuple(sorted(rentals.values(), key=lambda r: r["created_at"])),
             "shared_with": len({key for run in runs if run in links for key in rows_by_run.get(run, ())} - {row.key})}
    currencies = {r["currency"] for r in rentals.values()}
    if not rentals:
        found["observed_reason"] = Text("no rental linked to its runs")
    elif len(currencies) > 1:
        found["observed_reason"] = Text("rentals mix currencies ({currencies})", currencies=", ".join(sorted(currencies)))
    else:
        found["observed_spend"] = money(sum((Decimal(r["total"]) for r in rentals.values()), Decimal(0)))
        found["observed_currency"] = currencies.pop()
    found.update(_other_costs(row, items, found.get("observed_spend"), found.get("observed_currency")))
    if found.get("observed_spend") is None:
        found["cost_reason"] = Text("undefined: {reason}", reason=found["observed_reason"])
    elif found["observed_total"] is None:
        found["cost_reason"] = Text("undefined: {reason}", reason=found["observed_total_reason"])
    elif row.deliverables == 0:
        found["cost_reason"] = (Text("undefined: {reason}", reason=adaptation.NO_MODEL) if row.unit == MODEL
                                else Text("undefined: no accepted deliverable"))
    else:
        found["cost_per_corpus"] = money(found["observed_total"] / row.deliverables)
    return dataclasses.replace(row, **found)


def _other_costs(row: Row, items: tuple, observed: Decimal | None, observed_currency: str | None) -> dict:
    """Sum the other costs of a configuration and add them to its planned and to its observed package spend, apart."""
    other, currency, reason = expenses.total(items)
    planned = (expenses.plus(row.plan.total, row.plan.currency, items) if row.plan
               else (None, None, Text("no planned package ({reason})", reason=row.plan_reason)))
    observed_sum = expenses.plus(observed, observed_currency, items) if observed is not None else (
        None, None, Text("no observed package spend"))
    return {"other_items": items, "other_costs": other, "other_currency": currency, "other_reason": reason,
            "planned_total": planned[0], "planned_total_reason": planned[2],
            "observed_total": observed_sum[0], "observed_total_reason": observed_sum[2], "cost_includes": observed_sum[2]}


def _conditions(row: Row, question: Question) -> list[str]:
    """Name every feasibility condition the row fails: quality, ids, window, deadline, budget."""
    failed = []
    ok = [t for t in row.summary.counted if t["status"] == "ok"]
    aside = row.summary.left_out_counts(successes=True)  # each reason by its name: excluded by a rule, disturbed (#60)
    if not ok:
        failed.append(Text("quality: no successful trial") if not aside else
                      Text("disturbed: no successful trial left to count ({left_out})", left_out=left_out_words(aside))
                      if "disturbed" in aside else
                      Text("quality: no successful trial left ({count} excluded)", count=aside["excluded"]))
    elif len(ok) < 2 and aside:
        # Exclusions and disturbance must not let one lucky repetition win: with fewer than two left, nothing is compared.
        failed.append(Text("comparison: cannot be compared, {left} successful trial left ({left_out})", left=len(ok),
                           left_out=left_out_words(aside)) if "disturbed" in aside else
                      Text("comparison: cannot be compared, {left} successful trial left after {count} excluded",
                           left=len(ok), count=aside["excluded"]))
    if ok:
        rejected = [t for t in ok if not t["corpus_accepted"]]
        if rejected:
            misses = {(v["metric"], round(v["value"], 3), v["threshold"]) for t in rejected
                      for v in (t.get("quality") or {}).get("verdicts", []) if not v["passed"] and v["value"] is not None}
            said = [Text("{metric} {value} < {threshold}", metric=metric, value=Figure(value, 3, grouped=False), threshold=limit)
                    for metric, value, limit in sorted(misses)]
            failed.append(Text("quality: {rejected} of {ok} successful trials not accepted ({misses})", rejected=len(rejected),
                               ok=len(ok), misses=Joined("; ", said) if said else Text("ids or format")))
        mismatched = [t for t in ok if not (t.get("id_check") or {}).get("ids_match")]
        if mismatched:
            failed.append(Text("ids: {count} of {ok} successful trials did not return every id exactly once",
                               count=len(mismatched), ok=len(ok)))
    if ok and row.together and not row.together["complete_sets"]:  # one card's window is never the set's (#44)
        failed.append(Text("cards: no set where every card ended ok ({sets} recorded): nothing is projected from one card "
                           "of a set", sets=row.together["sets"]))
    if row.hours is not None:
        longest = decimal_hours(row.hours[2])
        if question.window_hours is not None and longest > question.window_hours:
            failed.append(Text("window: projected up to {longest} h, longer than the {window} h access window",
                               longest=Figure(longest, 2, grouped=False), window=Decimal(format_hours(question.window_hours))))
        if question.deadline_hours is not None and longest > question.deadline_hours:
            failed.append(Text("deadline: projected up to {longest} h, later than the {deadline} h until the deadline",
                               longest=Figure(longest, 2, grouped=False), deadline=Decimal(format_hours(question.deadline_hours))))
    if question.budget is not None:
        if row.plan is None:
            if not row.owned:  # hardware the catalog does not price needs no package: it spends nothing of the budget
                failed.append(Text("budget: cannot be checked ({reason})", reason=row.plan_reason))
        elif row.plan.total > question.budget:
            failed.append(Text("budget: planned {total} exceeds the ceiling {budget}", total=row.plan.total,
                               budget=money(question.budget)))
    return failed


def _to_measure(rows: list[Row], question: Question, catalog: Catalog) -> list[dict]:
    """List catalog cards no configuration ran on, priced for the window (one lot): no time, no quality."""
    measured = {card.slug for row in rows if (card := catalog_card(catalog, row.summary.configuration)) is not None}
    cards = []
    for card in sorted(catalog.gpus.values(), key=lambda c: c.slug):
        if card.slug in measured:
            continue
        plans = package_plans(catalog, card.slug, question.window_hours)
        best, single = (plans[0], single_package(plans)) if plans else (None, None)
        cards.append({"card": card, "plan": best, "single": single if best and best.explicit else None,
                      # Measuring takes minutes: any package holds it, so the cheapest one is the measuring rental's price.
                      "measuring": catalog.cheapest_covering(card.slug, None),
                      "reason": None if best else Text("catalog {catalog} lists no package for {card}",
                                                         catalog=catalog.version, card=card.name)})
    return cards


def _rank_key(row: Row):
    total = row.plan.total if row.plan else Decimal("Infinity")
    return (total, sum(n for s, n in row.statuses.items() if s != "ok"), row.hours[1], row.label)


def decide(view: CampaignView, catalog: Catalog, table=None) -> Report:
    """Build the decision report of one campaign, from its trial table (built here unless given)."""
    question = question_of(view)
    corpus_entries = (view.corpus or {}).get("entries")
    table = trial_table(view) if table is None else table
    figures, measured = _figures(table), together.counted(table)
    links, problems = check_rentals(view)
    rows_by_run: dict[str, set] = {}
    delivered: dict[str, set] = {}
    trial_config = {t["record_id"]: s.key for s in view.variants for t in s.trials}
    for deliverable in view.distinct_deliverables():
        key = trial_config.get(deliverable["trial_id"])
        if key is None:
            problems.append(Text("deliverable {record} names trial {trial}, which is not in this campaign's records",
                                 record=deliverable["record_id"], trial=deliverable["trial_id"]))
        else:
            delivered.setdefault(key, set()).add(deliverable["corpus_fingerprint"])
    planned = []
    for summary in view.variants:
        found = figures.get(summary.key, {"statuses": {}, "window": (None, None, None), "one_time": (None, None)})
        found = together.figures(summary, found, measured)  # per_card: a set's slowest card, never a card alone
        row = Row(summary, found["statuses"], found["window"], found["one_time"],
                  **_delivered(summary, question, delivered.get(summary.key, ())),
                  initialisation=_initialised(summary, view.manifests), together=found.get("together"))
        planned.append(plan_row(row, question, corpus_entries, catalog))
        for trial in summary.trials:
            rows_by_run.setdefault(trial["run_id"], set()).add(summary.key)
    rows = []
    for row in planned:
        row = _observed(row, links, rows_by_run, tuple(e for e in view.expenses if expenses.applies(e, row.key)))
        rows.append(dataclasses.replace(row, conditions=tuple(_conditions(row, question))))
    ranked = sorted((row for row in rows if row.feasible), key=_rank_key)
    infeasible = [row for row in rows if not row.feasible]
    to_measure = _to_measure(rows, question, catalog)
    paid_for: dict[str, list[str]] = {}
    for row in rows:
        for rental in row.observed_rentals:
            paid_for.setdefault(rental["record_id"], []).append(row.label)
    said = answer(question, ranked, infeasible, rows, to_measure, corpus_entries)
    serving = serving_answer(view, catalog, question)
    if serving is not None:  # requests served within the objective are the useful unit, not corpora (#64)
        said.update(answer=serving["answer"], summary_line=serving["answer"], next_step=serving["answer"], points=())
    return Report(view.name, view.title, question, corpus_entries, catalog.version, rows, ranked, infeasible, to_measure,
                  problems, **said, serving=serving,
                  exclusions=tuple(view.exclusion_table()), **_unequal(view, rows, ranked), paid_for=paid_for,
                  unlinked=tuple(r for r in view.rentals if r["record_id"] not in paid_for), kinds=view.kinds,
                  unstable=tuple(unstable_statements(view)))


def _delivered(summary: VariantSummary, question: Question, corpora) -> dict:
    """Return what a configuration delivers: the distinct corpora of its deliverables; for a campaign whose unit is a
    model, its validated model, one at most whatever its repetitions (five repetitions are not five models)."""
    if question.unit != MODEL:
        return {"deliverables": len(corpora)}
    model = adaptation.validated_model(summary.counted)
    return {"unit": MODEL, "model": model, "deliverables": int(model is not None)}


def _initialised(summary: VariantSummary, manifests) -> tuple:
    """Return CUDA's initialisation of each run a configuration's trials ran in (once per run, as its one-time seconds
    count it), or nothing where none of those runs timed it."""
    used = {trial.get("manifest_id") for trial in summary.trials}
    found = tuple({"run_id": manifest["run_id"], "manifest_id": manifest["record_id"], **initialisation(manifest)}
                  for manifest in manifests if manifest["record_id"] in used)
    return found if any(entry["seconds"] is not None for entry in found) else ()


def _sum(rentals) -> dict:
    """Sum rentals' totals per currency (never across currencies): {"USD": Decimal}, empty when none."""
    totals: dict[str, Decimal] = {}
    for rental in rentals:
        totals[rental["currency"]] = totals.get(rental["currency"], Decimal(0)) + Decimal(rental["total"])
    return {currency: money(amount) for currency, amount in sorted(totals.items())}


def _unequal(view: CampaignView, rows: list[Row], ranked: list[Row]) -> dict:
    """Name the expenses that only some configurations carry, and say how the ranking treats them."""
    found = expenses.unequal(view.expenses, [(row.key, row.label) for row in rows])
    if not found:
        return {"unequal": (), "unequal_note": None}
    note = Text("The ranking orders by planned package spend, the items every configuration carries alike; other costs that "
                "only some configurations carry are shown beside it and never decide the order.")
    # Among the rentals: a configuration that needs none (a CPU) has no package to add its other costs to (#45).
    priced = [row for row in ranked if row.planned_total is not None]
    with_others = sorted(priced, key=lambda row: (row.planned_total, _rank_key(row)))
    if [row.key for row in with_others] != [row.key for row in priced]:
        note = Joined(" ", [note, Text("Counted in, they would put {label} first: compare the items before deciding.",
                                       label=with_others[0].label)])
    return {"unequal": tuple(found), "unequal_note": note}


def decision_report(*, campaign: str, runs: Path | str = DEFAULT_RUNS, catalog: Path | str | None = None) -> Report:
    """Load the runs folder and build CAMPAIGN's decision report."""
    runs = Path(runs)
    if not runs.is_dir():
        raise UserError(f"{runs} is not a folder: pass the runs folder that holds the records (--runs)")
    views = {view.name: view for view in campaign_views(load(runs))}
    if campaign not in views:
        raise UserError(f"campaign {campaign} has no records in {runs}; campaigns there: {', '.join(sorted(views)) or 'none'}")
    return decide_guarded(views[campaign], load_catalog(catalog))


def decide_guarded(view: CampaignView, catalog: Catalog, table=None) -> Report:
    """Decide VIEW, or raise CampaignFailed naming the campaign and why its records could not be decided."""
    if view.failure:
        raise CampaignFailed(view.name, view.failure)
    with within_campaign(view.name):
        return decide(view, catalog, table)
