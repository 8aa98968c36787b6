"""Campaign files (TOML): corpus, model, protocol and variants, validated before any timing."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.declared.corpus import COLUMNS
from iteralab.declared.question import decision_question
from iteralab.declared.tables import Invalid, Table
from iteralab.machine.disturbance import read_rule
from iteralab.machine.placement import read_placement
from iteralab.store.records import NAME_PATTERN
from iteralab.workloads import PLANNED, WORKLOADS, classify

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
              "generation": "[generation] belongs to a campaign whose [workload] kind = \"generate\"",
              "adaptation": "[adaptation] belongs to a campaign whose [workload] kind = \"adapt\""}


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
    # An adaptation's own settings; None in every other kind, whose recorded settings keep their keys.
    method: str | None = None
    accumulation: int | None = None
    changes_effective_batch: bool | None = None
    # An adaptation variant's own optimizer settings (#61); None: the campaign's [adaptation] ones, and no key recorded.
    optimizer: str | None = None
    learning_rate: float | None = None
    weight_decay: float | None = None
    engine_args: str | None = None  # a serve variant's engine arguments, shell-quoted: a setting is one plain value (#64)

    def config(self) -> dict:
        """Return the settings as a plain dict (the name excluded, and the settings of another kind of work)."""
        settings = asdict(self)
        settings.pop("name")
        return {key: value for key, value in settings.items() if value is not None}


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
    corpus_path, split, columns = top.attempt(lambda: _corpus(top, base), (None, None, {}))
    model_path, revision = top.attempt(lambda: _model(top, base), (None, None))
    kind = top.attempt(lambda: _workload(top), "classify")
    workload = WORKLOADS[kind]
    variants = _variants(top.get("variants", list), path, errors, workload)
    protocol = top.attempt(lambda: _protocol(Table(top.get("protocol", dict), "protocol", path, errors),
                                             {v.name for v in variants} if variants else None, workload), {})
    # What only this kind declares is part of the protocol, so of its fingerprint; a classification adds nothing.
    protocol.update(top.attempt(lambda: workload.read_settings(top, base), {}))
    if columns:  # left out when none is named: campaigns written before the column keys keep their fingerprint
        protocol["corpus_columns"] = columns
        if kind != "classify":
            errors.append(f"[corpus] {', '.join(f'{part}_column' for part in columns)}: named columns are read by "
                          f"classify campaigns; a {kind} campaign's corpus uses the columns id, text and label")
    if protocol.get("reference_variant") in {variant.name for variant in variants}:
        errors.extend(workload.check_variants(variants, protocol))
    if "decision" in data:
        # Part of the protocol, so of its fingerprint: the question cannot change after the times are seen. Left out
        # when absent, so campaigns written before [decision] existed keep their fingerprint.
        protocol["decision"] = top.attempt(
            lambda: decision_question(Table(top.get("decision", dict), "decision", path, errors),
                                      workload.QUESTION_UNIT))
    if "placement" in data:  # left out when absent: campaigns written before [placement] keep their fingerprint (#44)
        protocol["placement"] = top.attempt(
            lambda: read_placement(Table(top.get("placement", dict), "placement", path, errors), variants, kind), {})
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
        planned = f" (not built yet: {', '.join(PLANNED)})" if PLANNED else ""
        table.fail("kind", f"{kind!r} is not a kind of work; the kinds there are: {measured}{planned}")
    return kind


def _corpus(top: Table, base: Path) -> tuple[Path, str, dict[str, str]]:
    corpus = Table(top.get("corpus", dict), "corpus", top.source, top.errors)
    relative = corpus.get("path", str)
    split = corpus.get("split", str, choices=("tuning", "final"))
    # Only the columns named: the others keep their default names, and the corpus reader tells a named one apart.
    declared = {part: corpus.get(f"{part}_column", str, default=None) for part in COLUMNS}
    columns = {part: column for part, column in declared.items() if column is not None}
    named = {**COLUMNS, **columns}
    for part, column in columns.items():
        if not column.strip() or list(named.values()).count(column) > 1:
            corpus.note(f"{part}_column", f"{column!r} must be a column's name that no other part of an entry reads "
                        f"(id, text and label are read from {', '.join(repr(name) for name in named.values())})")
    corpus.finish()
    # ~ is the user's home; other relative paths start at the file
    return base / Path(relative).expanduser(), split, columns


def _model(top: Table, base: Path) -> tuple[Path, str | None]:
    model = Table(top.get("model", dict), "model", top.source, top.errors)
    relative = model.get("path", str)
    revision = model.get("revision", str, default=None)
    model.finish(hints=KIND_HINTS)
    return base / Path(relative).expanduser(), revision


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
        # A kind without a warm-up (an adaptation, #61) says so; the table is read where written (a fingerprint kept)
        "warmup": table.attempt(lambda: _warmup(table), {}) if "warmup" in table.data or not hasattr(workload, "NO_WARMUP")
        else dict(workload.NO_WARMUP),
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


def _variants(raw: list | None, source: Path, errors: list[str], workload) -> tuple[Variant, ...]:
    if raw is None:
        return ()  # noted already: [[variants]] is missing or not a list of tables
    if not raw:
        errors.append("[campaign file] variants: declare at least one [[variants]] table")
        return ()
    variants, names = [], set()
    for index, data in enumerate(raw, start=1):
        try:
            variants.append(_variant(Table(data, f"variants.{index}", source, errors), names, workload))
        except Invalid:
            continue
    return tuple(variants)


def _variant(table: Table, names: set[str], workload) -> Variant:
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
        # A serve variant's engine batches as its arguments say; its batch_size is the runner's validation batch only.
        batch_size=table.get("batch_size", int, minimum=1, **({"default": 1} if workload.KIND == "serve" else {})),
        precision=table.get("precision", str, default="fp32", choices=PRECISIONS),
        quantization=table.get("quantization", str, default="none", choices=QUANTIZATIONS),
        compile=table.get("compile", bool, default=False),
        attention=table.get("attention", str, default="sdpa", choices=ATTENTIONS),
        length_sorted=table.get("length_sorted", bool, default=False),
        device=device,
        **workload.read_variant(table),  # what only this kind of work sets per variant
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


def refuse_changed_model(campaign: Campaign, existing: list[dict], model: dict) -> None:
    """Refuse a model folder other than the one the campaign's runs recorded: a changed model is a new campaign.

    Regression for #61: a changed [model] path joined the old campaign and was scored against the old model's reference.
    The folder's place may change; its revision and its files (weights, tokenizer, configuration) may not.
    """
    for record in existing:
        recorded = record.get("model") if record["kind"] == "manifest" else None
        changes = _model_changes(recorded, model) if isinstance(recorded, dict) else []
        if changes:
            raise UserError(
                f"campaign {campaign.name} was measured with another model (run {record.get('run_id')}): "
                f"{'; '.join(changes)}. A changed model, revision, tokenizer or configuration is a new campaign: set "
                f"campaign = \"{campaign.name}-r2\" in {campaign.source} (with [decision] asks_again = \"{campaign.name}\" "
                "to ask the same question of the new model), or point [model] path back to the recorded model")


def _model_changes(recorded: dict, model: dict) -> list[str]:
    changes = []
    declared = "declared in the campaign file"
    if recorded.get("revision") != model["revision"] and recorded.get("revision_source") == declared == model["revision_source"]:
        changes.append(f"revision {recorded.get('revision')} recorded, {model['revision']} declared now")
    before, now = recorded.get("files_sha256"), model["files_sha256"]
    if not isinstance(before, dict):  # a record without file hashes: its revision is all there is to compare
        return changes or ([f"revision {recorded.get('revision')} recorded, {model['revision']} now"]
                           if recorded.get("revision") != model["revision"] else [])
    files = [f"{name} changed" for name in sorted(before.keys() & now.keys()) if before[name] != now[name]]
    files += [f"{name} is new" for name in sorted(now.keys() - before.keys())]
    files += [f"{name} is gone" for name in sorted(before.keys() - now.keys())]
    if files:
        changes.append(", ".join(files[:5]) + (f" and {len(files) - 5} more files" if len(files) > 5 else ""))
    return changes
