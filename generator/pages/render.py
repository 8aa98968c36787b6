"""Turn figures into page text one way everywhere, and load the Jinja2 templates shipped in the package."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import math
import re
from decimal import Decimal
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

import jinja2
import orjson
from markupsafe import Markup, escape

import iteralab
from iteralab.core import language
from iteralab.core.files import cache_root
from iteralab.core.language import Figure, Text
from iteralab.decision.answer import measure_price
from iteralab.decision.plan import SECOND_PERIOD_RISK, span
from iteralab.money import compatibility
from iteralab.money.schedule import format_hours
from iteralab.pages import words
from iteralab.store.records import KINDS

# Shipped inside the package (iteralab.templates, from the repository's templates/ folder), so a wheel has them too.
TEMPLATES = Path(str(resources.files("iteralab.templates")))

TEMPLATE_SUFFIXES = (".html", ".css", ".js", ".txt")


def _three_figures(value) -> int:
    """Return the decimals that give VALUE three significant figures: one at least, six at most."""
    return min(6, max(1, 2 - math.floor(math.log10(abs(value))))) if value and math.isfinite(value) else 1


FORMATS = {
    "seconds": lambda value, say: f"{say(value, 3, grouped=False)} s",
    "ns": lambda value, say: f"{say(value / 1e9, 3, grouped=False)} s",
    "bytes": lambda value, say: f"{say(value)} B ({say(value / 2**20, 1)} MiB)",
    "mib": lambda value, say: f"{say(value / 2**20, 1)} MiB",  # a peak beside others; its bytes are in a table of their own
    "gib": lambda value, say: f"{say(value / 2**30, 2)} GiB",
    "ratio": lambda value, say: say(value, 3, grouped=False),
    "int": lambda value, say: say(value),
    "rate": lambda value, say: f"{say(value, 1)}/s",
    # A rate beside another of a different unit says its unit (#61): entries per second next to tokens per second.
    "entries_per_s": lambda value, say: Text("{rate} entries/s", rate=say(value, 1)).say(say.language),
    "tokens_per_s": lambda value, say: Text("{rate} tokens/s", rate=say(value, 1)).say(say.language),
    # Three significant figures, one decimal at least: 0.257/s, 2.50/s, 55.5/s (#61: a rate under 1 was said 0.3/s)
    "rate3": lambda value, say: f"{say(value, _three_figures(value))}/s",
    "ms": lambda value, say: f"{say(value * 1e3, 3, grouped=False)} ms",  # seconds shown in milliseconds: a decode step
}

# Bidirectional controls (embeddings, overrides, isolates): in a record, a note or a corpus they reorder what a reader
# sees, "evil" read as "live" and the rest of the sentence backwards (Trojan Source, CVE-2021-42574). No template or
# message holds one, so every one on a page came from what was recorded: each is shown as its code point instead.
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
# Nine substring tests run at C speed: 1.5 ms against the character class's 45 ms on a 2 MB trials page (#59).
CONTROLS = tuple("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def visible_controls(text: str) -> str:
    """Return TEXT with each bidirectional control shown as its code point ('[U+202E]'): markup stays markup."""
    if not any(control in text for control in CONTROLS):
        return text
    shown = BIDI_CONTROLS.sub(lambda found: f"[U+{ord(found.group()):04X}]", text)
    return Markup(shown) if isinstance(text, Markup) else shown


class Page(jinja2.Template):
    """A template of the site: the page it renders shows every bidirectional control as its code point, wherever its
    text came from (a value, a filter's markup, a note, a chart's data), in one place."""

    def render(self, *args, **kwargs) -> str:
        return visible_controls(super().render(*args, **kwargs))


YES, NO, NOT_RECORDED, NO_ZONE = Text("yes"), Text("no"), Text("not recorded"), Text("(no time zone stated)")
NO_ENTRIES = Text("no entries in this subgroup")

ALL_FORMATS = {**FORMATS, "bool": lambda value, say: (YES if value else NO).say(say.language),
               "text": lambda value, say: language.say(value, say.language)}


class _Say:
    """Write a number in one language's way (kept apart so the formats above read as one table)."""

    def __init__(self, code: str):
        self.language = code

    def __call__(self, value, places: int = 0, *, grouped: bool = True) -> str:
        return Figure(value, places, grouped=grouped).say(self.language)


@cache
def _sayer(code: str) -> _Say:
    return _Say(code)


def say_value(value, code: str):
    """Say VALUE in the language CODE: a Text by the catalog, a record's sentence by its message, a number in its way."""
    return language.recorded(value, code) if type(value) is str else language.say(value, code)


def _fmt(value, kind: str, reason, code: str) -> Markup:
    if value is None:
        why = escape(say_value(reason, code) if reason else NOT_RECORDED.say(code))
        return Markup(f'<span class="missing" data-missing="{why}" title="{why}">—<span class="reason"> {why}</span></span>')
    if kind == "bytes":  # '806,522,880 B (769.2 MiB)' may break before its bracket only, so a narrow column fits (#45)
        return Markup('<span class="nb">{} B</span> <span class="nb">({} MiB)</span>').format(
            _sayer(code)(value), _sayer(code)(value / 2**20, 1))
    return escape(ALL_FORMATS.get(kind, ALL_FORMATS["text"])(value, _sayer(code)))

# Trial pages repeat the same figures and reasons thousands of times; typed, so True and 1 stay apart.
_fmt_cached = lru_cache(maxsize=1 << 16, typed=True)(_fmt)


def shown(value, code: str) -> Markup:
    """Show VALUE as ``{{ value }}`` does on a page: a number or Text said in the language CODE, then escaped."""
    return escape(value if type(value) is str or type(value) is Markup else language.say(value, code))


def moment(text: str | None, code: str | None = None) -> str:
    """Write a record's time for a reader: '2026-12-03 06:24 UTC', or '2026-12-01 09:00 UTC+07:00' as it was given."""
    if not text:
        return ""
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return str(text)  # not a time this reader knows: shown as written
    if when.tzinfo is None:
        return language.moment(when, NO_ZONE.say(code), code)
    offset = when.utcoffset()
    zone = "UTC" if not offset else f"UTC{when:%z}"[:-2] + ":" + f"{when:%z}"[-2:]
    return language.moment(when, zone, code)


def fmt(value, kind: str = "text", reason: str | None = None, code: str | None = None) -> Markup:
    """Format VALUE one way everywhere; a missing value is an empty cell with its reason, never 0."""
    code = code or language.current()
    value = _unsigned_zero(value)
    try:
        return _fmt_cached(value, kind, reason, code)
    except TypeError:  # an unhashable value (a list or object shown as text)
        return _fmt(value, kind, reason, code)


def _unsigned_zero(value):
    """Return 0.0 for -0.0. The caches key -0.0 and 0.0 as one value (equal, same hash): after a record held -0 (from
    another machine), every zero of the build printed "-0" (a generation page's median of [0, 0] did)."""
    return 0.0 if type(value) is float and value == 0 else value


def _cell(value, kind: str, reason, code: str) -> Markup:
    css = ' class="num"' if kind in FORMATS else ""
    return Markup(f"<td{css}>{fmt(value, kind, reason, code)}</td>")

_cell_cached = lru_cache(maxsize=1 << 16, typed=True)(_cell)


def cell(value, kind: str = "text", reason: str | None = None, code: str | None = None) -> Markup:
    """Return a table cell holding fmt(VALUE), right-aligned for numbers."""
    code = code or language.current()
    value = _unsigned_zero(value)
    try:
        return _cell_cached(value, kind, reason, code)
    except TypeError:
        return _cell(value, kind, reason, code)


@lru_cache(maxsize=16)
def schema_links(root: str) -> Markup:
    """Link the record schemas from a page ROOT levels deep (every page's footer)."""
    # A kind is the name the records use (a key of their format): the same in every language.
    return Markup(", ").join(Markup('<a href="{}schemas/{}.schema.json" translate="no">{}</a>').format(root, kind, kind)
                             for kind in KINDS)


def pretty_json(value) -> str:
    """Indent a record for reading, keys sorted."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode("utf-8")
    except TypeError:  # TypeError: an integer beyond 64 bits, valid JSON that orjson does not write
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def jinja_environment(code: str | None = None):
    """Return the Jinja2 environment of a language (the current one by default): autoescape on, undefined names are errors."""
    return _environment(code or language.current())


@cache
def _environment(code: str):
    # Cached: compiled templates are reused across campaigns; Jinja still reloads a template whose file changed.
    # Compiled templates are kept in the cache folder (keyed by each template's source): compiling them took 0.7 s in
    # every build process and worker. The words are looked up as a page renders.
    env = jinja2.Environment(loader=jinja2.PackageLoader("iteralab.templates", "."), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             bytecode_cache=_bytecode_cache(code), extensions=["jinja2.ext.i18n"],
                             finalize=_finalize(code))
    env.template_class = Page
    env.install_gettext_translations(language.translations(code), newstyle=True)
    # The extension's newstyle gettext, without its second call through the template context: a trials page asks for
    # some thirty messages per trial, and that call was a third of the page's time.
    env.globals.update(_=_gettext(code), gettext=_gettext(code), ngettext=_ngettext(code), wording=_wording(code))
    env.globals.update(fmt=functools.partial(fmt, code=code), cell=functools.partial(cell, code=code),
                       version=iteralab.__version__, schema_links=schema_links, span=span,
                       hours=lambda value: language.say(Decimal(format_hours(value)), code),
                       second_period_risk=SECOND_PERIOD_RISK, language=code, alternates=(), measure_price=measure_price,
                       compatibility=compatibility.configuration_verdicts, compatibility_words=compatibility.STATUS_WORDS,
                       machine=None, short=_as_it_is,  # a campaign page passes the machine its rows share, and short names (#45)
                       **words.said(code))
    env.policies["ext.i18n.trimmed"] = True  # a sentence wrapped over lines in a template is one message
    env.filters["fill"] = fill
    env.filters["through"] = lambda value, function: function(value)  # map("through", short): a function over a list
    env.filters["tojson_pretty"] = pretty_json
    env.filters["moment"] = functools.partial(moment, code=code)
    env.filters["say"] = functools.partial(say_value, code=code)
    env.filters["said"] = functools.partial(language.say, language=code)  # a Text in this language; a name stays as written
    env.filters["amount"] = functools.partial(amount, code=code)
    return env


def _as_it_is(label):
    """Return a configuration's label whole: on a page that says no shared machine, each row names its own."""
    return label


def amount(value, code: str):
    """Say an amount a record keeps as a decimal string ('47.14') in the language CODE, as every other amount is."""
    from decimal import InvalidOperation

    try:
        return language.money(Decimal(value), code) if isinstance(value, str) else language.say(value, code)
    except InvalidOperation:
        return value  # not an amount after all: shown as the record holds it


def _gettext(code: str):
    """Return newstyle gettext for the language CODE: the message as trusted markup, its values escaped into it."""
    wording = _wording(code)

    def gettext(message: str, **values) -> Markup:
        found = wording(message)
        # Newstyle always formats (a message's '%%' is one '%'); without values or a '%', there is nothing to format. A
        # value is said in the language too: a count of 1,000 trials is '1.000' in Indonesian.
        return found % {name: language.say(value, code) for name, value in values.items()} if values or "%" in found else found

    return gettext


def fill(message: Markup, **values) -> Markup:
    """Fill a message's %(values)s in, each escaped: Jinja's format filter, without MarkupSafe's slower formatting."""
    return Markup(str.__mod__(message, {name: escape(value) for name, value in values.items()}))


def _finalize(code: str):
    """Return what every {{ value }} of a page goes through: a number or Text said in the language CODE."""
    def finalize(value):
        kind = type(value)
        # Most values are text or markup already: they pass as they are, without the checks of language.say.
        return value if kind is str or kind is Markup else language.say(value, code)

    return finalize


def _wording(code: str):
    """Return a lookup of a message's translation as trusted markup, its %(values)s left for ``format`` to fill in."""
    catalog = language.translations(code)

    @cache
    def wording(message: str) -> Markup:
        return Markup(catalog.gettext(message))

    return wording


def _ngettext(code: str):
    """Return newstyle ngettext for the language CODE: NUM is a value of the message too."""
    catalog = language.translations(code)

    def ngettext(singular: str, plural: str, num: int, **values) -> Markup:
        said = {name: language.say(value, code) for name, value in {"num": num, **values}.items()}
        return Markup(catalog.ngettext(singular, plural, num)) % said

    return ngettext


class QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between processes; one that cannot be read or written (a full disk) is compiled again."""

    def load_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            super().load_bytecode(bucket)

    def dump_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache(code: str):
    # Jinja keys compiled code by each template's source only, but compiles the environment's settings into it (the
    # finalize step that says numbers in the language): one folder per language and per version of these settings.
    settings = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    folder = cache_root() / "templates" / iteralab.__version__ / f"{code}-{settings}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a cache folder that cannot be made only costs compiling again
    return QuietBytecodeCache(str(folder))


def template_files() -> list[Path]:
    """Return the template and stylesheet files, sorted (not the package's __init__ or bytecode)."""
    return sorted(path for path in TEMPLATES.rglob("*") if path.suffix in TEMPLATE_SUFFIXES and path.is_file())
