"""Campaign files (TOML): corpus, model, protocol and variants, validated before any timing."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.money.schedule import elapsed_hours, format_hours, parse_time
from iteralab.run.disturbance import read_rule
from iteralab.run.tables import Invalid, Table
from iteralab.run.workloads import PLANNED, WORKLOADS, classify
from iteralab.store.records import NAME_PATTERN

PRECISIONS = ("fp32", "bf16", "fp16")
QUANTIZATIONS = ("none", "dynamic-int8")
ATTENTIONS = ("eager", "sdpa")
PADDINGS = ("longest", "max_length")
TRUNCATIONS = ("truncate", "refuse")
# What the measured window holds, as the protocol of a classification run states it (a sentence of the catalog).
MEASURED_WINDOW = classify.MEASURED_WINDOW
# Keys a user writes for the kind of work where the campaign file has none: each points to where it goes.
KIND_HINTS = {"task": "the kind of work is [workload] kind", "kind": "the kind of work is [workload] kind",
              "workload": "the kind of work is the table [workload] with its key kind",
              "generation": "[generation] belongs to a campaign whose [workload] kind = \"generate\""}


@dataclass(frozen=True)
class Variant:
    """One configuration; a series changes one of these fields at a time."""

    name: str
    series: str
    batch_size: int
    precision: str
    quantization: str
    compile: bool
    attention: str
    length_sorted: bool
    device: str

    def config(self) -> dict:
        """Return the settings as a plain dict (the name excluded)."""
        settings = asdict(self)
        settings.pop("name")
        return settings


@dataclass(frozen=True)
class Campaign:
    """A validated campaign file."""

    source: Path
    name: str
    title: str
    corpus_path: Path
    split: str
    model_path: Path
    model_revision: str | None
    protocol: dict
    variants: tuple[Variant, ...]
    kind: str = "classify"  # [workload] kind

    def variant(self, name: str) -> Variant:
        """Return the variant called NAME."""
        return next(variant for variant in self.variants if variant.name == name)


def protocol_fingerprint(protocol: dict, corpus_fingerprint: str) -> str:
    """Hash the protocol together with the corpus it was fixed for."""
    canonical = json.dumps({"protocol": protocol, "corpus": corpus_fingerprint}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def load_campaign(path: Path | str) -> Campaign:
    """Read and validate a campaign file; every mistake is listed at once, each naming the file, table and key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"campaign file {path.resolve()} does not exist") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}: not valid TOML ({error})") from None
    base, errors = path.parent, []
    top = Table(data, "campaign file", path, errors)
    name = top.get("campaign", str)
    if not NAME_PATTERN.match(name):
        top.attempt(lambda: top.fail("campaign", f"{name!r} must be letters, digits, '.', '_' or '-' (it names a folder)"))
    title = top.get("title", str, default=name)
    corpus_path, split = top.attempt(lambda: _corpus(top, base), (None, None))
    model_path, revision = top.attempt(lambda: _model(top, base), (None, None))
    kind = top.attempt(lambda: _workload(top), "classify")
    variants = _variants(top.get("variants", list), path, errors)
    protocol = top.attempt(lambda: _protocol(Table(top.get("protocol", dict), "protocol", path, errors),
                                             {v.name for v in variants} if variants else None, WORKLOADS[kind]), {})
    # What only this kind declares is part of the protocol, so of its fingerprint; a classification adds nothing.
    protocol.update(top.attempt(lambda: WORKLOADS[kind].read_settings(top), {}))
    if "decision" in data:
        # Part of the protocol, so of its fingerprint: the question cannot change after the times are seen. Left out
        # when absent, so campaigns written before [decision] existed keep their fingerprint.
        protocol["decision"] = top.attempt(
            lambda: decision_question(Table(top.get("decision", dict), "decision", path, errors)))
    top.finish(hints={key: hint for key, hint in KIND_HINTS.items() if key != "workload"})
    if len(errors) == 1:
        raise UserError(f"{path}: {errors[0]}")
    if errors:
        raise UserError(f"{path}: {len(errors)} mistakes, each to fix:\n" + "\n".join(f"  - {line}" for line in errors))
    return Campaign(path, name, title, corpus_path, split, model_path, revision, protocol, variants, kind)


def _workload(top: Table) -> str:
    """Read [workload] kind: classify unless the campaign says otherwise; a planned kind is named as not built yet."""
    if "workload" not in top.data:
        return "classify"
    table = Table(top.get("workload", dict), "workload", top.source, top.errors)
    kind = table.get("kind", str, default="classify")
    table.finish()
    measured = "; ".join(f"{name} ({module.DESCRIPTION})" for name, module in WORKLOADS.items())
    if kind in PLANNED:
        table.fail("kind", f"{kind!r} ({PLANNED[kind]}) is not measured by this version of iteralab yet; the "
                           f"kinds it measures: {measured}")
    if kind not in WORKLOADS:
        table.fail("kind", f"{kind!r} is not a kind of work; the kinds there are: {measured} (not built yet: "
                           + ", ".join(PLANNED) + ")")
    return kind


def _corpus(top: Table, base: Path) -> tuple[Path, str]:
    corpus = Table(top.get("corpus", dict), "corpus", top.source, top.errors)
    relative = corpus.get("path", str)
    split = corpus.get("split", str, choices=("tuning", "final"))
    corpus.finish()
    return base / relative, split


def _model(top: Table, base: Path) -> tuple[Path, str | None]:
    model = Table(top.get("model", dict), "model", top.source, top.errors)
    relative = model.get("path", str)
    revision = model.get("revision", str, default=None)
    model.finish(hints=KIND_HINTS)
    return base / relative, revision


def _protocol(table: Table, variant_names: set[str] | None, workload) -> dict:
    protocol = {
        "repetitions": table.get("repetitions", int, default=5, minimum=1),
        "max_length": table.get("max_length", int, minimum=1),
        "padding": table.get("padding", str, choices=PADDINGS),
        "truncation": table.get("truncation", str, choices=TRUNCATIONS),
        "seed": table.get("seed", int),
        "deterministic": table.get("deterministic", bool, default=True),
        "reference_variant": table.get("reference_variant", str),
        "buckets": table.attempt(lambda: _buckets(table), []),
        "thresholds": table.attempt(lambda: _thresholds(table, workload.THRESHOLD_METRICS), {}),
        "min_agreement": table.get("min_agreement", float, default=None),
        "warmup": table.attempt(lambda: _warmup(table), {}),
        "measured_window": workload.MEASURED_WINDOW,
    }
    if "disturbance" in table.data:  # left out when absent: campaigns written before it keep their fingerprint (#49)
        protocol["disturbance"] = table.attempt(
            lambda: read_rule(Table(table.get("disturbance", dict), "protocol.disturbance", table.source, table.errors)), {})
    if variant_names is not None and protocol["reference_variant"] not in variant_names:
        table.note("reference_variant", f"{protocol['reference_variant']!r} is not a declared variant")
    if protocol["min_agreement"] is not None and not 0 <= protocol["min_agreement"] <= 1:
        table.note("min_agreement", "must be between 0 and 1")
    table.finish()
    return protocol


def decision_question(table: Table) -> dict:
    """Read the decision question: workload, access window (start/end in a zone, or hours), deadline, budget."""
    corpora = table.get("corpora", int, default=None, minimum=1)
    entries = table.get("entries", int, default=None, minimum=1)
    if corpora is not None and entries is not None:
        table.fail("entries", "give the workload either as corpora or as entries, not both")
    zone_name = table.get("time_zone", str, default="UTC")
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
        table.fail("time_zone", f"{zone_name!r} is not an IANA time zone such as Asia/Jakarta or Europe/Berlin")
    start, end, hours = _window(table, zone)
    deadline, deadline_hours = _deadline(table, zone, start)
    budget = _budget(table)
    # The campaign whose question this one asks again (#35): part of the fingerprint, stated before any timing.
    asks_again = table.get("asks_again", str, default=None)
    if asks_again is not None and not NAME_PATTERN.match(asks_again):
        table.fail("asks_again", f"{asks_again!r} is not a campaign name (letters, digits, '.', '_' or '-')")
    table.finish()
    question = {
        "corpora": (corpora or 1) if entries is None else None,
        "entries": entries,
        "window_start": None if start is None else start.isoformat(),
        "window_end": None if end is None else end.isoformat(),
        "time_zone": zone_name,
        "window_hours": None if hours is None else format_hours(hours),
        "deadline": None if deadline is None else deadline.isoformat(),
        "deadline_hours": None if deadline_hours is None else format_hours(Decimal(str(deadline_hours))),
        "budget": budget,
    }
    if asks_again is not None:  # absent otherwise: campaigns without it keep their fingerprint
        question["asks_again"] = asks_again
    return question


def _moment(table: Table, key: str, zone):
    text = table.get(key, str, default=None)
    if text is None:
        return None
    try:
        return parse_time(text, zone, key)
    except UserError as error:
        table.fail(key, str(error).removeprefix(f"--{key} "))
    return None


def _window(table: Table, zone) -> tuple:
    """Return the access window's start, end and hours, from window_start and window_end or from window_hours."""
    start, end = _moment(table, "window_start", zone), _moment(table, "window_end", zone)
    window_hours = table.get("window_hours", float, default=None, minimum=0)
    if (start is None) != (end is None):
        table.fail("window_end" if end is None else "window_start", "give both window_start and window_end")
    if start is not None and window_hours is not None:
        table.fail("window_hours", "give the window either as window_start and window_end or as window_hours, not both")
    if start is not None and end is not None:
        hours = elapsed_hours(start, end)
        if hours <= 0:
            table.fail("window_end", "must be after window_start")
        return start, end, hours
    hours = None if window_hours is None else Decimal(str(window_hours))
    if hours is not None and hours <= 0:
        table.fail("window_hours", "must be more than 0")
    return start, end, hours


def _deadline(table: Table, zone, start) -> tuple:
    """Return the deadline as a time and as hours after the window's start (a date needs the start)."""
    deadline = _moment(table, "deadline", zone)
    deadline_hours = table.get("deadline_hours", float, default=None, minimum=0)
    if deadline is not None:
        if start is None:
            table.fail("deadline", "a deadline date needs window_start and window_end; or give deadline_hours after the start")
            return deadline, deadline_hours
        if deadline_hours is not None:
            table.fail("deadline_hours", "give either deadline or deadline_hours, not both")
        deadline_hours = elapsed_hours(start, deadline)
        if deadline_hours <= 0:
            table.fail("deadline", "must be after window_start")
    return deadline, deadline_hours


def _budget(table: Table) -> str | None:
    """Return the optional budget as written, refusing what is not an amount in cents."""
    budget = table.get("budget", str, default=None)
    if budget is not None:
        try:
            amount = Decimal(budget)
        except InvalidOperation:
            amount = None
        if amount is None or not amount.is_finite() or amount < 0 or amount.as_tuple().exponent < -2:
            table.fail("budget", f"{budget!r} is not an amount such as \"150.00\" in the catalog's currency")
    return budget


def _buckets(table: Table) -> list[dict]:
    raw = table.get("buckets", dict)
    if raw is None:
        raise Invalid  # noted: not a table
    buckets, previous = [], 0
    for index, (name, limit) in enumerate(raw.items()):
        last = index == len(raw) - 1
        if limit == "rest" and last:
            buckets.append({"name": name, "min_tokens": previous + 1, "max_tokens": None})
            continue
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= previous:
            table.fail(f"buckets.{name}", f"must be a token limit above {previous} (or \"rest\" for the last bucket), not {limit!r}")
        buckets.append({"name": name, "min_tokens": previous + 1, "max_tokens": limit})
        previous = limit
    if not buckets:
        table.fail("buckets", "declare at least one length bucket, e.g. short = 24, medium = 40, long = \"rest\"")
    return buckets


def _thresholds(table: Table, metrics: tuple[str, ...]) -> dict:
    raw = table.get("thresholds", dict, default={})
    if raw is None:
        raise Invalid  # noted: not a table
    for metric, value in raw.items():
        if metric not in metrics:
            table.fail(f"thresholds.{metric}", f"unknown metric for this kind of work; use {', '.join(metrics)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            table.fail(f"thresholds.{metric}", f"must be a number between 0 and 1, not {value!r}")
    return {metric: float(value) for metric, value in raw.items()}


def _warmup(table: Table) -> dict:
    warmup = Table(table.get("warmup", dict), "protocol.warmup", table.source, table.errors)
    rule = {
        "batches": warmup.get("batches", int, minimum=0),
        "passes": warmup.get("passes", int, default=1, minimum=1),
        "inputs": Text("the first batches of the corpus in the variant's processing order"),
        "recompilation": warmup.get(
            "recompilation", str,
            default="torch.compile compiles during the compilation phase on the first batch; "
                    "recompilations for new shapes fall in the measured window and are not hidden"),
    }
    warmup.finish()
    return rule


def _variants(raw: list | None, source: Path, errors: list[str]) -> tuple[Variant, ...]:
    if raw is None:
        return ()  # noted already: [[variants]] is missing or not a list of tables
    if not raw:
        errors.append("[campaign file] variants: declare at least one [[variants]] table")
        return ()
    variants, names = [], set()
    for index, data in enumerate(raw, start=1):
        try:
            variants.append(_variant(Table(data, f"variants.{index}", source, errors), names))
        except Invalid:
            continue
    return tuple(variants)


def _variant(table: Table, names: set[str]) -> Variant:
    name = table.get("name", str)
    if not NAME_PATTERN.match(name) or name in names:
        table.fail("name", f"{name!r} must be unique and use letters, digits, '.', '_' or '-'")
    names.add(name)
    device = table.get("device", str, default="cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        table.note("device", f"{device!r} is not cpu, cuda or cuda:N")
    variant = Variant(
        name=name,
        series=table.get("series", str, default="main"),
        batch_size=table.get("batch_size", int, minimum=1),
        precision=table.get("precision", str, default="fp32", choices=PRECISIONS),
        quantization=table.get("quantization", str, default="none", choices=QUANTIZATIONS),
        compile=table.get("compile", bool, default=False),
        attention=table.get("attention", str, default="sdpa", choices=ATTENTIONS),
        length_sorted=table.get("length_sorted", bool, default=False),
        device=device,
    )
    if variant.quantization == "dynamic-int8" and (variant.device != "cpu" or variant.precision != "fp32"):
        table.note("quantization", "dynamic-int8 runs on the cpu device from fp32 weights only")
    table.finish()
    return variant


def rotation(variants: list[str], repetitions: int, reference: str) -> list[tuple[str, int]]:
    """Plan (variant, repetition) pairs: each round rotates the order so no variant is always first.

    The reference variant leads the first round so every later trial has reference predictions
    to be compared with.
    """
    order = [reference, *(name for name in variants if name != reference)]
    plan = []
    for round_index in range(repetitions):
        shift = round_index % len(order)
        plan.extend((name, round_index + 1) for name in order[shift:] + order[:shift])
    return plan


def refuse_changed_protocol(campaign: Campaign, existing: list[dict], fingerprint: str) -> None:
    """Refuse records of another protocol or variant settings under the campaign's name: a change is a new campaign."""
    for record in existing:
        if record["kind"] in ("manifest", "trial") and record["protocol_fingerprint"] != fingerprint:
            raise UserError(
                f"campaign {campaign.name} already holds records under protocol {record['protocol_fingerprint'][:12]} "
                f"(e.g. {record['record_id']}), but {campaign.source} gives protocol {fingerprint[:12]}: a changed protocol "
                f"or corpus is a new campaign: set campaign = \"{campaign.name}-r2\" (with [decision] asks_again = "
                f"\"{campaign.name}\" when only the model or the software changed) or restore the protocol")
        if record["kind"] == "trial" and record["variant"] in {v.name for v in campaign.variants}:
            declared = campaign.variant(record["variant"]).config()
            if record["variant_config"] != declared:
                raise UserError(f"variant {record['variant']} of campaign {campaign.name} was recorded with other settings "
                                f"({record['record_id']}); a changed variant needs a new name")
