"""Turn loaded records into per-campaign views: variant summaries, separation, cost, problems."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from decimal import Decimal

from iteralab.money.catalog import cost_per_validated_corpus, money
from iteralab.store.configuration import Configuration, configuration_of
from iteralab.store.records import Loaded

CONFIG_FIELDS = ("batch_size", "precision", "quantization", "compile", "attention", "length_sorted", "device")


@dataclass
class VariantSummary:
    """One configuration's trials (a variant on one kind of hardware and software) in run order and their sums."""

    name: str
    series: str
    config: dict
    trials: list[dict]
    configuration: Configuration | None = None
    label: str = ""
    durations: list[tuple[str, float]] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    accepted: int = 0
    _peaks: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        self.label = self.label or self.name

    @property
    def key(self) -> str:
        """Return the configuration's stable identifier (HTML ids, CSV cells)."""
        return self.configuration.key if self.configuration else self.name

    @property
    def seconds(self) -> list[float]:
        return [value for _, value in self.durations]

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def minimum(self) -> float | None:
        return min(self.seconds) if self.seconds else None

    @property
    def maximum(self) -> float | None:
        return max(self.seconds) if self.seconds else None

    @property
    def throughput(self) -> float | None:
        rates = [t["throughput_entries_per_s"] for t in self.trials if t["status"] == "ok" and t.get("throughput_entries_per_s")]
        return statistics.median(rates) if rates else None

    @property
    def ids_match(self) -> bool | None:
        checks = [t["id_check"]["ids_match"] for t in self.trials if t.get("id_check")]
        return all(checks) if checks else None

    def verdicts(self) -> list[dict]:
        """Per threshold: the metric, threshold, median value over ok trials and passes/ok."""
        rows = {}
        for trial in self.trials:
            for verdict in (trial.get("quality") or {}).get("verdicts", []):
                row = rows.setdefault(verdict["metric"], {"metric": verdict["metric"], "threshold": verdict["threshold"],
                                                          "values": [], "passed": 0, "judged": 0, "reason": verdict["reason"]})
                row["judged"] += 1
                row["passed"] += verdict["passed"]
                if verdict["value"] is not None:
                    row["values"].append(verdict["value"])
        for row in rows.values():
            row["median"] = statistics.median(row["values"]) if row["values"] else None
        return [rows[key] for key in sorted(rows)]

    def peak(self, key: str) -> tuple[int | None, str | None]:
        """Highest value of a per-phase memory counter over ok trials, or None with the reason."""
        # Asked for by several tables and charts of the same page; the trials no longer change by then.
        if key not in self._peaks:
            self._peaks[key] = self._peak(key)
        return self._peaks[key]

    def _peak(self, key: str) -> tuple[int | None, str | None]:
        values = [phase[key] for t in self.trials if t["status"] == "ok" for phase in t["phases"].values() if phase.get(key) is not None]
        if values:
            return max(values), None
        if not key.startswith("gpu_"):
            return None, "no successful trial measured it"  # a GPU's absence says nothing about host memory
        reasons = {t["memory"].get("gpu_memory_reason") for t in self.trials if t["memory"].get("gpu_memory_reason")}
        return None, "; ".join(sorted(reasons)) or "no successful trial measured it"

    def bucket_quality(self, metric: str) -> dict[str, float | None]:
        """Median METRIC per bucket over ok trials."""
        per_bucket = {}
        for trial in self.trials:
            for name, scores in ((trial.get("quality") or {}).get("buckets") or {}).items():
                per_bucket.setdefault(name, [])
                if scores.get(metric) is not None:
                    per_bucket[name].append(scores[metric])
        return {name: statistics.median(values) if values else None for name, values in per_bucket.items()}


@dataclass
class CampaignView:
    """Everything the pages show about one campaign."""

    name: str
    title: str
    manifests: list[dict]
    trials: list[dict]
    rentals: list[dict]
    deliverables: list[dict]
    variants: list[VariantSummary]
    problems: list[str]
    sheets: list = field(default_factory=list)

    @property
    def fingerprints(self) -> list[str]:
        seen = []
        for record in self.manifests + self.trials:
            if record["protocol_fingerprint"] not in seen:
                seen.append(record["protocol_fingerprint"])
        return seen

    @property
    def failures(self) -> list[dict]:
        return [t for t in self.trials if t["status"] != "ok"]

    @property
    def first_at(self) -> str:
        return min(r["created_at"] for r in self.manifests + self.trials)

    @property
    def last_at(self) -> str:
        return max(r["created_at"] for r in self.manifests + self.trials)

    @property
    def corpus(self) -> dict | None:
        return self.manifests[-1]["corpus"] if self.manifests else None

    @property
    def protocol(self) -> dict | None:
        return self.manifests[-1]["protocol"] if self.manifests else None

    def compared_and_constant(self) -> tuple[dict, dict]:
        """Split variant settings into those that change across variants and those held constant."""
        compared, constant = {}, {}
        for key in CONFIG_FIELDS:
            values = {str(v.config.get(key)) for v in self.variants}
            (compared if len(values) > 1 else constant)[key] = sorted(values)
        for label, pick in (("model revision", lambda m: m["model"]["revision"]),
                            ("corpus fingerprint", lambda m: m["corpus"]["fingerprint"]),
                            ("CPU", lambda m: m["environment"]["cpu"]["model"]),
                            ("GPUs", lambda m: ", ".join(g["name"] for g in m["environment"]["gpus"] or []) or "none"),
                            ("torch", lambda m: m["environment"]["libraries"].get("torch")),
                            ("transformers", lambda m: m["environment"]["libraries"].get("transformers"))):
            values = sorted({str(pick(manifest)) for manifest in self.manifests})
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
        """Spend from rentals, accepted deliverables and cost per validated corpus (or why not)."""
        currencies = sorted({r["currency"] for r in self.rentals})
        spend = money(sum((Decimal(r["total"]) for r in self.rentals), Decimal(0))) if self.rentals else None
        accepted = len(self.distinct_deliverables())
        if spend is None:
            per, reason = None, "undefined: no rental recorded, so the spend is unknown"
        elif len(currencies) > 1:
            per, reason = None, f"undefined: rentals mix currencies ({', '.join(currencies)})"
        else:
            per, reason = cost_per_validated_corpus(spend, accepted)
            if per is None:
                reason = "undefined: no accepted deliverable"
        return {"rentals": self.rentals, "spend": spend, "currency": currencies[0] if currencies else None,
                "deliverables": accepted, "cost_per_validated_corpus": per, "reason": reason}


def separate(first: VariantSummary, second: VariantSummary) -> dict:
    """Compare two variants' raw durations: separated only when ranges do not overlap and spread < gap."""
    names = f"{first.label} and {second.label}"
    if len(first.seconds) < 2 or len(second.seconds) < 2:
        return {"pair": (first.label, second.label), "separated": None,
                "text": f"{names}: cannot be compared, fewer than two successful trials for at least one of them."}
    gap = abs(first.median - second.median)
    spread = max(first.maximum - first.minimum, second.maximum - second.minimum)
    overlap = max(first.minimum, second.minimum) <= min(first.maximum, second.maximum)
    if overlap or spread >= gap:
        return {"pair": (first.label, second.label), "separated": False,
                "text": (f"{names}: the series has not separated them. The spread of the repetitions "
                         f"({spread:.3f} s) is comparable to the difference between medians ({gap:.3f} s)"
                         + (" and their ranges overlap." if overlap else "."))}
    fast, slow = (first, second) if first.median < second.median else (second, first)
    return {"pair": (first.label, second.label), "separated": True,
            "text": (f"{fast.label} was faster than {slow.label} in every repetition: slowest {fast.maximum:.3f} s "
                     f"against fastest {slow.minimum:.3f} s; medians {fast.median:.3f} s and {slow.median:.3f} s "
                     f"({(slow.median - fast.median) / slow.median:.0%} less time).")}


# 'CAMPAIGN/records/RUN.jsonl:LINE: what is wrong': the folder before the first '/' of the file part is the campaign.
CAMPAIGN_FILE = re.compile(r"(?P<campaign>[^/:]+)/[^:]*:")


def campaign_views(loaded: Loaded) -> list[CampaignView]:
    """Group records by campaign, trials in run order, variants in first-run order."""
    # One pass to group: a scan per campaign made 1,000 campaigns of 100,000 records quadratic.
    grouped: dict[str, list[dict]] = {}
    for record in loaded.records:
        grouped.setdefault(record["campaign"], []).append(record)
    # A problem belongs to the campaign folder its file:line names; one naming no folder concerns all.
    shared_problems, own_problems = [], {}
    for index, problem in enumerate(loaded.problems):
        if found := CAMPAIGN_FILE.match(problem):
            own_problems.setdefault(found["campaign"], []).append((index, problem))
        else:
            shared_problems.append((index, problem))
    views = []
    for name in sorted(grouped):
        mine = grouped[name]
        trials = sorted((r for r in mine if r["kind"] == "trial"), key=lambda t: (t["created_at"], t["sequence"], t["record_id"]))
        manifests = sorted((r for r in mine if r["kind"] == "manifest"), key=lambda m: (m["created_at"], m["record_id"]))
        by_id = {m["record_id"]: m for m in manifests}
        variants: dict[Configuration, VariantSummary] = {}
        for trial in trials:
            # Trials pool only within one configuration: merged folders from two machines give two rows.
            configuration = configuration_of(trial, by_id.get(trial.get("manifest_id")))
            summary = variants.setdefault(configuration, VariantSummary(
                trial["variant"], trial.get("series") or trial["variant_config"].get("series", "main"), trial["variant_config"], [],
                configuration))
            summary.trials.append(trial)
            if trial["status"] == "ok":
                summary.ok += 1
                summary.accepted += trial["corpus_accepted"]
                summary.durations.append((trial["record_id"], trial["phases"]["measured_window"]["duration_ns"] / 1e9))
            else:
                summary.failed += 1
        _label(list(variants.values()))
        problems = [problem for _, problem in sorted(own_problems.get(name, []) + shared_problems)]
        deliverables = sorted((r for r in mine if r["kind"] == "deliverable"), key=lambda r: (r["created_at"], r["record_id"]))
        title = manifests[-1].get("title") if manifests and manifests[-1].get("title") else name
        views.append(CampaignView(name, title, manifests, trials,
                                  sorted((r for r in mine if r["kind"] == "rental"), key=lambda r: r["created_at"]),
                                  deliverables, list(variants.values()), problems))
    return views


def _label(summaries: list[VariantSummary]) -> None:
    """Label each configuration; runtime and driver are named where they alone tell two configurations apart."""
    short = {}
    for summary in summaries:
        short.setdefault(summary.configuration.label(), []).append(summary)
    for same in short.values():
        detailed = len(same) > 1
        for summary in same:
            summary.label = summary.configuration.label(detailed=detailed)
        if detailed and len({s.label for s in same}) < len(same):  # differing settings under one variant name
            for summary in same:
                summary.label += f" · {summary.key[-8:]}"
