"""Turn figures into page text one way everywhere, and load the Jinja2 templates shipped in the package."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

import jinja2
import orjson
from markupsafe import Markup, escape

import iteralab
from iteralab.core.files import cache_root
from iteralab.decision.plan import SECOND_PERIOD_RISK, span
from iteralab.money.schedule import format_hours
from iteralab.store.records import KINDS
from iteralab.store.trials import PHASES

# Shipped inside the package (iteralab.templates, from the repository's templates/ folder), so a wheel has them too.
TEMPLATES = Path(str(resources.files("iteralab.templates")))

TEMPLATE_SUFFIXES = (".html", ".css")


FORMATS = {
    "seconds": lambda value: f"{value:.3f} s",
    "ns": lambda value: f"{value / 1e9:.3f} s",
    "bytes": lambda value: f"{value:,} B ({value / 2**20:,.1f} MiB)",
    "gib": lambda value: f"{value / 2**30:,.2f} GiB",
    "ratio": lambda value: f"{value:.3f}",
    "int": lambda value: f"{value:,}",
    "rate": lambda value: f"{value:,.1f}/s",
}

ALL_FORMATS = {**FORMATS, "bool": lambda value: "yes" if value else "no", "text": str}


def _fmt(value, kind: str, reason: str | None) -> Markup:
    if value is None:
        why = escape(reason or "not recorded")
        return Markup(f'<span class="missing" data-missing="{why}" title="{why}">—<span class="reason"> {why}</span></span>')
    return escape(ALL_FORMATS.get(kind, str)(value))

# Trial pages repeat the same figures and reasons thousands of times; typed, so True and 1 stay apart.
_fmt_cached = lru_cache(maxsize=1 << 16, typed=True)(_fmt)


def moment(text: str | None) -> str:
    """Write a record's time for a reader: '2026-12-03 06:24 UTC', or '2026-12-01 09:00 UTC+07:00' as it was given."""
    if not text:
        return ""
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return str(text)  # not a time this reader knows: shown as written
    if when.tzinfo is None:
        return f"{when:%Y-%m-%d %H:%M} (no time zone stated)"
    offset = when.utcoffset()
    zone = "UTC" if not offset else f"UTC{when:%z}"[:-2] + ":" + f"{when:%z}"[-2:]
    return f"{when:%Y-%m-%d %H:%M} {zone}"


def fmt(value, kind: str = "text", reason: str | None = None) -> Markup:
    """Format VALUE one way everywhere; a missing value is an empty cell with its reason, never 0."""
    try:
        return _fmt_cached(value, kind, reason)
    except TypeError:  # an unhashable value (a list or object shown as text)
        return _fmt(value, kind, reason)


def _cell(value, kind: str, reason: str | None) -> Markup:
    css = ' class="num"' if kind in FORMATS else ""
    return Markup(f"<td{css}>{fmt(value, kind, reason)}</td>")

_cell_cached = lru_cache(maxsize=1 << 16, typed=True)(_cell)


def cell(value, kind: str = "text", reason: str | None = None) -> Markup:
    """Return a table cell holding fmt(VALUE), right-aligned for numbers."""
    try:
        return _cell_cached(value, kind, reason)
    except TypeError:
        return _cell(value, kind, reason)


@lru_cache(maxsize=16)
def schema_links(root: str) -> Markup:
    """Link the record schemas from a page ROOT levels deep (every page's footer)."""
    return Markup(", ").join(Markup('<a href="{}schemas/{}.schema.json">{}</a>').format(root, kind, kind) for kind in KINDS)


def trial_rows(trial: dict) -> dict:
    """Return the phase and quality rows of a trial page as ready cells (thousands of pages: kept out of Jinja calls)."""
    gpu_reason = trial["memory"].get("gpu_memory_reason")
    phases = []
    for name in PHASES:
        phase = trial["phases"].get(name, {})
        reason = phase.get("reason")
        phases.append((name, Markup("".join((
            cell(phase.get("duration_ns"), "ns", reason),
            cell(phase.get("gpu_peak_allocated_bytes"), "bytes", gpu_reason or reason),
            cell(phase.get("gpu_peak_reserved_bytes"), "bytes", gpu_reason or reason),
            cell(phase.get("host_peak_rss_bytes"), "bytes", reason))))))
    quality = []
    if trial.get("quality"):
        missing = trial["quality"]["missing_reasons"]
        groups = [("overall", trial["quality"]["overall"]), *sorted(trial["quality"]["buckets"].items())]
        for name, scores in groups:
            quality.append((name, Markup("".join((
                cell(scores.get("entries"), "int"),
                *(cell(scores.get(metric), "ratio", missing.get(metric, "no entries in this subgroup"))
                  for metric in ("accuracy", "macro_f1", "agreement")))))))
    return {"phases": phases, "quality": quality}


def pretty_json(value) -> str:
    """Indent a record for reading, keys sorted."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode("utf-8")
    except TypeError:  # TypeError: an integer beyond 64 bits, valid JSON that orjson does not write
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@cache
def jinja_environment():
    """Return the Jinja2 environment: autoescape on, undefined names are errors."""
    # Cached: compiled templates are reused across campaigns; Jinja still reloads a template whose file changed.
    # Compiled templates are kept in the cache folder (keyed by each template's source): compiling them took 0.7 s in
    # every build process and worker.
    env = jinja2.Environment(loader=jinja2.PackageLoader("iteralab.templates", "."), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             bytecode_cache=_bytecode_cache())
    env.globals.update(fmt=fmt, cell=cell, version=iteralab.__version__, schema_links=schema_links,
                       hours=format_hours, span=span, second_period_risk=SECOND_PERIOD_RISK)
    env.filters["tojson_pretty"] = pretty_json
    env.filters["moment"] = moment
    return env


class QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between processes; one that cannot be read or written (a full disk) is compiled again."""

    def load_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            super().load_bytecode(bucket)

    def dump_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache():
    folder = cache_root() / "templates" / iteralab.__version__
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a cache folder that cannot be made only costs compiling again
    return QuietBytecodeCache(str(folder))


def template_files() -> list[Path]:
    """Return the template and stylesheet files, sorted (not the package's __init__ or bytecode)."""
    return sorted(path for path in TEMPLATES.rglob("*") if path.suffix in TEMPLATE_SUFFIXES and path.is_file())
