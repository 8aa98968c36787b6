"""Turn loaded records into per-campaign views: variant summaries, separation, cost, problems."""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property

from iteralab.core.errors import CampaignFailed, within_campaign
from iteralab.core.language import Text
from iteralab.money.catalog import cost_per_validated_corpus, money
from iteralab.store import adaptation, expenses
from iteralab.store.configuration import Configuration, configuration_of, setting_text
from iteralab.store.disturbance import is_disturbed, set_aside
from iteralab.store.reading import Loaded
from iteralab.store.records import VOIDABLE
from iteralab.store.separation import separate
from iteralab.store.trials import VariantSummary
from iteralab.store.trials import window_figures as window_figures  # where the runner's summary and the lab read it

CONFIG_FIELDS = ("batch_size", "precision", "quantization", "compile", "attention", "length_sorted", "device")
OPTIMIZER = ("optimizer", "learning_rate", "weight_decay")  # an adaptation's, unless a variant sets its own (#61)
DEFAULT_KIND = "classify"  # the kind of work of a manifest written before [workload] existed


def kind_of(manifest: dict) -> str:
    """Return the kind of work a manifest names ([workload] kind); one written without it classifies."""
    return (manifest.get("workload") or {}).get("kind") or DEFAULT_KIND


@dataclass(frozen=True)
class CampaignView:
    """Everything the pages show about one campaign, complete when built and read-only afterwards."""

    name: str
    title: str
    manifests: tuple[dict, ...]
    trials: tuple[dict, ...]
    rentals: tuple[dict, ...]
    deliverables: tuple[dict, ...]
    variants: tuple[VariantSummary, ...]
    problems: tuple[str, ...]
    missing_predictions: frozenset[str] = frozenset()  # trials whose prediction file is not in the runs folder
    failure: str | None = None  # why the campaign's records could not be read into a view (then it holds none)
    exclusions: tuple[dict, ...] = ()  # every exclusion recorded, withdrawn ones included, in the order recorded
    withdrawals: tuple[dict, ...] = ()
    excluded: dict = field(default_factory=dict)  # trial id -> id of the active exclusion that sets it aside
    expenses: tuple[dict, ...] = ()  # other project costs, never package spend
    voids: tuple[dict, ...] = ()  # withdrawals of a rental, deliverable or expense (iteralab void), in the order recorded
    voided: tuple[dict, ...] = ()  # the records they void: kept as evidence, counted nowhere
    resumptions: tuple[dict, ...] = ()  # runs continued by run --resume after their process ended

    def resumed_before(self, trial: dict) -> dict | None:
        """Return the latest resumption of the trial's run recorded before it: the warm-up rule ran again after it."""
        earlier = [r for r in self.resumptions if r["run_id"] == trial["run_id"] and r["created_at"] <= trial["created_at"]]
        return earlier[-1] if earlier else None

    @cached_property
    def retried(self) -> dict[str, str]:
        """Map each trial that runs a repetition again (retry_of) to why the one it replaces does not count: 'disturbed'
        (run --resume --rerun-disturbed) or 'interrupted' (run --resume after its process ended)."""
        by_id = {t["record_id"]: t for t in self.trials}
        return {t["record_id"]: "disturbed" if is_disturbed(by_id.get(t["retry_of"]) or {}) else "interrupted"
                for t in self.trials if t.get("retry_of")}

    def void_of(self, record_id: str) -> dict | None:
        """Return the void of a rental, deliverable or expense, or None while it counts."""
        return next((v for v in self.voids if v["voided_id"] == record_id), None)

    def withdrawal_of(self, exclusion_id: str) -> dict | None:
        """Return the withdrawal of an exclusion, or None while it applies."""
        return next((w for w in self.withdrawals if w["exclusion_id"] == exclusion_id), None)

    def exclusion_table(self) -> list[dict]:
        """Per exclusion: its rule, document, times, withdrawal and, for every configuration, the trials it set aside."""
        last_trial = max((t["created_at"] for t in self.trials), default=None)
        table = []
        for exclusion in self.exclusions:
            withdrawal = self.withdrawal_of(exclusion["record_id"])
            applies = withdrawal is None
            rows = [{"label": s.label, "key": s.key, "checked": s.key in exclusion["checked_configurations"],
                     "trials": [t["record_id"] for t in s.trials if t["record_id"] in exclusion["trials"]
                                and (not applies or self.excluded.get(t["record_id"]) == exclusion["record_id"])]}
                    for s in self.variants]
            table.append({"record_id": exclusion["record_id"], "rule": exclusion["rule"], "document": exclusion["document"],
                          "recorded_at": exclusion["created_at"], "after_results": bool(last_trial) and exclusion["created_at"] > last_trial,
                          "withdrawal": withdrawal, "configurations": rows,
                          "unchecked": [row["label"] for row in rows if not row["checked"]]})
        return table

    @property
    def fingerprints(self) -> list[str]:
        seen = []
        for record in (*self.manifests, *self.trials):
            if record["protocol_fingerprint"] not in seen:
                seen.append(record["protocol_fingerprint"])
        return seen

    @property
    def failures(self) -> list[dict]:
        return [t for t in self.trials if t["status"] != "ok"]

    @property
    def first_at(self) -> str:
        return min(r["created_at"] for r in (*self.manifests, *self.trials))

    @property
    def last_at(self) -> str:
        """Return the time of the newest record of any kind: a rental or an exclusion recorded after the runs counts."""
        return max(r["created_at"] for r in (*self.manifests, *self.trials, *self.rentals, *self.deliverables,
                                             *self.exclusions, *self.withdrawals, *self.expenses, *self.voids,
                                             *self.voided, *self.resumptions))

    @property
    def kinds(self) -> tuple[str, ...]:
        """Return the kinds of work its manifests name, first run first; several (never the runner's) are said, not picked."""
        return tuple(dict.fromkeys(kind_of(manifest) for manifest in self.manifests))

    @property
    def corpus(self) -> dict | None:
        return self.manifests[-1]["corpus"] if self.manifests else None

    @property
    def protocol(self) -> dict | None:
        return self.manifests[-1]["protocol"] if self.manifests else None

    def compared_and_constant(self) -> tuple[dict, dict]:
        """Split variant settings into those that change across variants and those held constant: every kind's (#61), an
        adaptation's optimizer settings from its campaign where a variant sets none of its own."""
        compared, constant = {}, {}
        campaign = {key: value for key, value in ((self.protocol or {}).get("adaptation") or {}).items() if key in OPTIMIZER}
        settings = [{**campaign, **v.config} for v in self.variants]
        for key in (*CONFIG_FIELDS, *sorted({key for found in settings for key in found} - {*CONFIG_FIELDS, "series"})):
            values = {setting_text(found.get(key)) for found in settings}
            (compared if len(values) > 1 else constant)[key] = sorted(values)
        for label, pick in ((Text("model revision"), lambda m: m["model"]["revision"]),
                            (Text("corpus fingerprint"), lambda m: m["corpus"]["fingerprint"]),
                            ("CPU", lambda m: m["environment"]["cpu"]["model"]),
                            ("GPUs", lambda m: ", ".join(g["name"] for g in m["environment"]["gpus"] or []) or Text("none")),
                            ("torch", lambda m: m["environment"]["libraries"].get("torch")),
                            ("transformers", lambda m: m["environment"]["libraries"].get("transformers"))):
            values = sorted({found if isinstance(found := pick(manifest), Text) else str(found) for manifest in self.manifests})
            (compared if len(values) > 1 else constant)[label] = values
        return compared, constant

    def separation(self) -> list[dict]:
        """Say for each pair of variants whether the repetitions separate them."""
        statements = []
        for index, first in enumerate(self.variants):
            for second in self.variants[index + 1:]:
                statements.append(separate(first, second))
        return statements

    def distinct_deliverables(self) -> list[dict]:
        """Return the first deliverable of each corpus: after a merge, two teams' records of one corpus count once."""
        first = {}
        for deliverable in self.deliverables:
            first.setdefault(deliverable["corpus_fingerprint"], deliverable)
        return list(first.values())

    def cost(self) -> dict:
        """Spend from rentals, accepted deliverables and cost per validated corpus (or why not). A campaign whose trials
        carry the adaptation object delivers models (unit 'model'): one per configuration with a validated model."""
        currencies = sorted({r["currency"] for r in self.rentals})
        spend = money(sum((Decimal(r["total"]) for r in self.rentals), Decimal(0))) if self.rentals else None
        models = adaptation.has_block(self.trials)
        accepted = adaptation.models(self.variants) if models else len(self.distinct_deliverables())
        other, other_currency, other_reason = expenses.total(self.expenses)
        includes = None
        if spend is None:
            per, reason = None, Text("undefined: no rental recorded, so the spend is unknown")
        elif len(currencies) > 1:
            per, reason = None, Text("undefined: rentals mix currencies ({currencies})", currencies=", ".join(currencies))
        else:
            whole, _, includes = expenses.plus(spend, currencies[0], self.expenses)
            per, reason = ((None, Text("undefined: {reason}", reason=includes)) if whole is None
                           else cost_per_validated_corpus(whole, accepted))
            if whole is not None and per is None:
                reason = Text("undefined: {reason}", reason=adaptation.NO_MODEL) if models else Text("undefined: no accepted deliverable")
        return {"rentals": self.rentals, "spend": spend, "currency": currencies[0] if currencies else None,
                "voided": [{"record": r, "void": self.void_of(r["record_id"])} for r in self.voided], "expenses": self.expenses, "other": other, "other_currency": other_currency, "other_reason": other_reason,
                "deliverables": accepted, "cost_per_validated_corpus": per, "reason": reason, "includes": includes,
                **({"unit": "model"} if models else {})}  # the deliverables are validated models (a campaign of corpora: none)


# 'CAMPAIGN/records/RUN.jsonl:LINE: what is wrong': the folder before the first '/' of the file part is the campaign.
CAMPAIGN_FILE = re.compile(r"(?P<campaign>[^/:]+)/[^:]*:")


def campaign_views(loaded: Loaded, *, present: set[str] | None = None) -> list[CampaignView]:
    """Group records by campaign, trials in run order, variants in first-run order.

    PRESENT, the runs folder's files (relative posix paths), when given: a trial whose prediction file is not among
    them is named in its campaign's problems and in ``missing_predictions``.
    """
    # One pass to group: a scan per campaign made 1,000 campaigns of 100,000 records quadratic.
    grouped: dict[str, list[dict]] = {}
    for record in loaded.records:
        grouped.setdefault(record["campaign"], []).append(record)
    own = problems_by_campaign(loaded.problems, grouped)
    return [_guarded_view(name, grouped[name], own[name], present) for name in sorted(grouped)]


def problems_by_campaign(problems: list[str], names) -> dict[str, list[str]]:
    """Give each campaign of NAMES the problems its folder's files have, and those naming no campaign folder, in order."""
    # A problem belongs to the campaign folder its file:line names; one naming no folder concerns all.
    shared_problems, own_problems = [], {}
    for index, problem in enumerate(problems):
        if found := CAMPAIGN_FILE.match(problem):
            own_problems.setdefault(found["campaign"], []).append((index, problem))
        else:
            shared_problems.append((index, problem))
    return {name: [p for _, p in sorted(own_problems.get(name, []) + shared_problems)] for name in names}


def _guarded_view(name: str, mine: list[dict], problems: list[str], present: set[str] | None) -> CampaignView:
    """Return the campaign's view, or an empty one saying why it could not be made: the other campaigns go on."""
    try:
        with within_campaign(name):
            return _view(name, mine, problems, present)
    except CampaignFailed as failed:
        return CampaignView(name, name, (), (), (), (), (), tuple(problems), failure=failed.reason)


def _view(name: str, mine: list[dict], problems: list[str], present: set[str] | None) -> CampaignView:
    def of_kind(kind, key):
        return tuple(sorted((r for r in mine if r["kind"] == kind), key=key))

    trials = of_kind("trial", lambda t: (t["created_at"], t["sequence"], t["record_id"]))
    manifests = of_kind("manifest", lambda m: (m["created_at"], m["record_id"]))
    missing = frozenset(t["record_id"] for t in trials if present is not None and t.get("predictions")
                        and posixpath.normpath(t["predictions"]["path"]) not in present)
    problems += [f"{t['predictions']['path']}: prediction file of trial {t['record_id']} is missing from the runs folder"
                 for t in trials if t["record_id"] in missing]
    title = manifests[-1].get("title") if manifests and manifests[-1].get("title") else name
    exclusions = of_kind("exclusion", lambda r: (r["created_at"], r["record_id"]))
    corrections = of_kind("withdrawal", lambda r: (r["created_at"], r["record_id"]))
    withdrawals = tuple(w for w in corrections if "exclusion_id" in w)
    voids = tuple(w for w in corrections if "voided_id" in w)
    voided_ids = {v["voided_id"] for v in voids}
    excluded = _excluded(exclusions, withdrawals, {t["record_id"] for t in trials})
    summaries = _summaries(trials, by_id := {m["record_id"]: m for m in manifests}, excluded, set_aside(trials, by_id))
    # A record written before a configuration's key changed (#44, #60) names it by its old key: read as its key now.
    current = {old: s.key for s in summaries if s.configuration for old in s.configuration.aliases}
    exclusions = tuple(_renamed(e, "checked_configurations", current) for e in exclusions)

    def counted(kind, key):
        return tuple(r for r in of_kind(kind, key) if r["record_id"] not in voided_ids)

    costs = tuple(_renamed(e, "applies_to", current) for e in counted("expense", lambda r: (r["created_at"], r["record_id"])))
    keys = {summary.key for summary in summaries}
    problems += [f"expense {e['record_id']} names configuration {key}, which campaign {name} lacks; it is added to none"
                 for e in costs if e["applies_to"] != "all" for key in e["applies_to"] if key not in keys]
    voided = tuple(r for r in mine if r["record_id"] in voided_ids and r["kind"] in VOIDABLE)
    return CampaignView(name, title, manifests, trials, counted("rental", lambda r: r["created_at"]),
                        counted("deliverable", lambda r: (r["created_at"], r["record_id"])), summaries, tuple(problems),
                        missing, exclusions=exclusions, withdrawals=withdrawals, excluded=excluded, expenses=costs,
                        voids=voids, voided=tuple(sorted(voided, key=lambda r: (r["created_at"], r["record_id"]))),
                        resumptions=of_kind("resumption", lambda r: (r["created_at"], r["record_id"])))


def _excluded(exclusions: tuple, withdrawals: tuple, trial_ids: set[str]) -> dict[str, str]:
    """Map each trial an exclusion still applies to (none withdrew it) to the first such exclusion."""
    withdrawn = {w["exclusion_id"] for w in withdrawals}
    excluded: dict[str, str] = {}
    for exclusion in exclusions:
        if exclusion["record_id"] not in withdrawn:
            for trial_id in exclusion["trials"]:
                if trial_id in trial_ids:  # a trial of another campaign or none at all is a problem check names
                    excluded.setdefault(trial_id, exclusion["record_id"])
    return excluded


def _summaries(trials: tuple[dict, ...], manifests: dict, excluded: dict, disturbed: dict) -> tuple[VariantSummary, ...]:
    """Pool trials per configuration only: merged folders from two machines give two rows; set-aside trials count in none."""
    pooled: dict[Configuration, list[dict]] = {}
    for trial in trials:
        pooled.setdefault(_configuration(trial, manifests.get(trial.get("manifest_id"))), []).append(trial)
    labels = _labels(list(pooled))
    summaries = []
    for configuration, mine in pooled.items():
        first = mine[0]
        counted = [t for t in mine if t["record_id"] not in excluded and t["record_id"] not in disturbed]
        ok = [t for t in counted if t["status"] == "ok"]
        summaries.append(VariantSummary(
            first["variant"], first.get("series") or first["variant_config"].get("series", "main"), first["variant_config"],
            tuple(mine), configuration, labels[configuration],
            tuple((t["record_id"], t["phases"]["measured_window"]["duration_ns"] / 1e9) for t in ok),
            len(ok), len(counted) - len(ok), sum(bool(t["corpus_accepted"]) for t in ok),
            frozenset(t["record_id"] for t in mine if t["record_id"] in excluded),
            frozenset(t["record_id"] for t in mine if t["record_id"] in disturbed and t["record_id"] not in excluded)))
    return tuple(summaries)


@dataclass(frozen=True)
class KindConfiguration(Configuration):
    """A configuration of another kind of work than classification: its key names the kind, so that one variant on one
    machine is never one key for two kinds of work (#60); the key it had before (a sheet's, an expense's) still finds it."""

    kind: str = DEFAULT_KIND

    @cached_property
    def key(self) -> str:
        plain = Configuration.key.func(self)  # "fp32-b8-cpu-86f6ac95" -> "generate-fp32-b8-cpu-" and a hash of both
        return f"{self.kind}-{plain[:-9]}-{hashlib.sha256(f'{plain} {self.kind}'.encode()).hexdigest()[:8]}"

    @cached_property
    def aliases(self) -> tuple[str, ...]:
        plain = Configuration(**{name: getattr(self, name) for name in Configuration.__dataclass_fields__})  # its old key
        return tuple(dict.fromkeys(name for name in (plain.key, *plain.aliases) if name not in (self.key, self.label())))


def _configuration(trial: dict, manifest: dict | None) -> Configuration:
    """Return TRIAL's configuration, of its run's kind of work (a classification's key as it always was)."""
    found, kind = configuration_of(trial, manifest), kind_of(manifest or {})
    return found if kind == DEFAULT_KIND else KindConfiguration(**vars(found), kind=kind)  # a new one: its fields only


def _renamed(record: dict, field: str, current: dict) -> dict:
    """Return RECORD with each configuration its FIELD names by a key the configuration had before, by its key now."""
    named = record[field]
    return record if named == "all" or not current.keys() & set(named) else {**record, field: [current.get(k, k) for k in named]}


def _labels(configurations: list[Configuration]) -> dict[Configuration, str]:
    """Label each configuration; runtime and driver are named where they alone tell two configurations apart."""
    short: dict[str, list[Configuration]] = {}
    for configuration in configurations:
        short.setdefault(configuration.label(), []).append(configuration)
    labels = {}
    for same in short.values():
        detailed = len(same) > 1
        for configuration in same:
            labels[configuration] = configuration.label(detailed=detailed)
        if detailed and len({labels[c] for c in same}) < len(same):  # differing settings under one variant name
            for configuration in same:
                labels[configuration] += f" · {configuration.key[-8:]}"
    return labels
