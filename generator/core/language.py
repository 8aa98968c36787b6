"""Say a reader's text in the build's language: gettext catalogs shipped in the package, Babel for figures and dates."""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import functools
import gettext
import hashlib
import math
import re
from decimal import Decimal
from importlib import resources
from pathlib import Path

from markupsafe import escape

# English is the language the code is written in: it needs no catalog. The others have one in locale/CODE/. A code is
# also Babel's locale name, for numbers and dates.
LANGUAGES = {"en": "English", "id": "Bahasa Indonesia"}
DEFAULT = "en"
DOMAIN = "iteralab"
LOCALES = Path(str(resources.files("iteralab"))) / "locale"

_current: contextvars.ContextVar[str] = contextvars.ContextVar("language", default=DEFAULT)


@contextlib.contextmanager
def speaking(language: str):
    """Make LANGUAGE the one every reader's text is said in, inside the block."""
    token = _current.set(language)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> str:
    """Return the language texts are said in now (English unless inside ``speaking``)."""
    return _current.get()


@functools.cache
def translations(language: str) -> gettext.NullTranslations:
    """Return LANGUAGE's compiled catalog (shipped as package data); English needs none."""
    if language == DEFAULT:
        return gettext.NullTranslations()
    with open(_catalog_file(language), "rb") as handle:
        return gettext.GNUTranslations(handle)


def _catalog_file(language: str) -> Path:
    return LOCALES / language / "LC_MESSAGES" / f"{DOMAIN}.mo"


@functools.cache
def catalog_digest(language: str) -> str:
    """Return the sha256 of LANGUAGE's compiled catalog ('' for English): what a page's words come from, for cache keys."""
    return "" if language == DEFAULT else hashlib.sha256(_catalog_file(language).read_bytes()).hexdigest()


def translate(message: str, language: str | None = None) -> str:
    """Return MESSAGE (an English msgid of the catalog) in LANGUAGE, or as it is where the catalog has no entry."""
    return translations(language or current()).gettext(message)


class Figure:
    """A number shown to a reader with a fixed count of decimals: '1,234.5' in English, '1.234,5' in Indonesian."""

    __slots__ = ("grouped", "places", "value")

    def __init__(self, value, places: int = 0, *, grouped: bool = True):
        self.value, self.places, self.grouped = value, places, grouped

    def __str__(self) -> str:
        return self.say(DEFAULT)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __reduce__(self):
        return (_figure, (self.value, self.places, self.grouped))

    def say(self, language: str | None = None) -> str:
        """Write the number in LANGUAGE's way."""
        language = language or current()
        if language == DEFAULT:
            return f"{self.value:{',' if self.grouped else ''}.{self.places}f}"
        return number(self.value, language, self.places, grouped=self.grouped)


def _figure(value, places, grouped) -> Figure:
    return Figure(value, places, grouped=grouped)


class Text(str):
    """A reader's sentence: English as a str, and in any language by ``say``; its values are said in that language too.

    Write the message with ``{name}`` fields and no format specs (a value's own type says how it is written): pybabel
    extracts every ``Text("...")`` call into the catalog. In a Jinja page it is said in the build's language.
    """

    def __new__(cls, message: str, /, **values):
        # English as it is read: an amount grouped ('2,071.00'); other values as they are written.
        english = {name: money(value, DEFAULT) if isinstance(value, Decimal) else value for name, value in values.items()}
        self = super().__new__(cls, message.format(**english) if values else message)
        self.message, self.values = message, values
        return self

    def __reduce__(self):
        return (_text, (self.message, self.values))

    def say(self, language: str | None = None) -> str:
        """Return the sentence in LANGUAGE (the current one by default)."""
        language = language or current()
        if language == DEFAULT:
            return str.__str__(self)
        wording = translate(self.message, language)
        if not self.values:
            return wording
        return wording.format(**{name: say(value, language) for name, value in self.values.items()})

    def __html__(self) -> str:
        return str(escape(self.say()))


def _text(message, values) -> Text:
    return Text(message, **values)


class Joined(Text):
    """Sentences or items said one after another, each in the reader's language: an answer of several sentences."""

    def __new__(cls, separator: str, parts):
        parts = tuple(parts)
        self = str.__new__(cls, separator.join(parts))
        self.message, self.values, self.separator, self.parts = str.__str__(self), {}, separator, parts
        return self

    def __reduce__(self):
        return (Joined, (self.separator, self.parts))

    def say(self, language: str | None = None) -> str:
        """Return every part in LANGUAGE, joined."""
        language = language or current()
        if language == DEFAULT:
            return str.__str__(self)
        return self.separator.join(str(say(part, language)) for part in self.parts)


class Recorded(Text):
    """A sentence a record holds, as the runner wrote it in English: said in another language when the catalog has it."""

    def __new__(cls, text: str):
        self = str.__new__(cls, text)
        self.message, self.values = str(text), {}
        return self

    def __reduce__(self):
        return (Recorded, (self.message,))

    def say(self, language: str | None = None) -> str:
        return recorded(self.message, language or current())


def recorded(text: str, language: str | None = None) -> str:
    """Say TEXT, written into a record by the runner, in LANGUAGE: its message, or a message with fields it was made from."""
    language = language or current()
    if language == DEFAULT or not isinstance(text, str):
        return text
    return _recorded(str(text), language)


@functools.lru_cache(maxsize=4096)
def _recorded(text: str, language: str) -> str:
    catalog = translations(language)
    wording = catalog.gettext(text)
    if wording != text:
        return wording
    for pattern, message in _patterns(language):
        found = pattern.fullmatch(text)
        if found:
            # A field is a name the runner filled in (a phase, a device): said too where the catalog has it.
            return catalog.gettext(message).format(**{name: catalog.gettext(value) for name, value in found.groupdict().items()})
    return text  # not a sentence of this version's runner: shown as written


@functools.cache
def _patterns(language: str) -> list:
    """Return a pattern per message with fields ('not reached: the trial stopped in {phase}'), to read a record back."""
    catalog = translations(language)
    found = []
    # gettext keeps a compiled catalog's messages in _catalog (plural forms under (msgid, n) keys, left out here). The
    # message with the most fixed text is tried first: a field matches any text, so "no GPU: the variant runs on
    # {device}" would otherwise read "no GPU: the variant runs on cpu; the host's memory is measured instead" too.
    messages = [key for key in getattr(catalog, "_catalog", {}) if isinstance(key, str) and "{" in key]
    for message in sorted(messages, key=lambda text: (-len(re.sub(r"\{\w+\}", "", text)), text)):
        parts = re.split(r"\{(\w+)\}", message)
        regex = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>.+?)" for index, part in enumerate(parts))
        with contextlib.suppress(re.error):  # a field named twice: not a sentence the runner writes
            found.append((re.compile(regex, re.DOTALL), message))
    return found


def say(value, language: str | None = None):
    """Write VALUE for a reader in LANGUAGE: a Text translated, a number in the locale's way; other values unchanged."""
    language = language or current()
    if isinstance(value, Text | Figure):
        return value.say(language)
    if isinstance(value, Decimal):  # an amount, in every language: grouped, its own decimals
        return money(value, language)
    if language == DEFAULT or isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float):  # every digit Python would write, no more: 0.73 is '0,73', never '0,730'
        return value if not math.isfinite(value) else money(Decimal(repr(value)), language)
    return number(value, language)


def said(value, language: str | None = None):
    """Return VALUE with every Text inside it (dicts, lists, tuples) said in LANGUAGE: plain data to keep or send."""
    if isinstance(value, Text):
        return value.say(language)
    if isinstance(value, dict):
        return {key: said(item, language) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(said(item, language) for item in value)
    return value


def number(value, language: str, places: int = 0, *, grouped: bool = True) -> str:
    """Write VALUE with PLACES decimals in LANGUAGE's way (Babel's CLDR data: '1.000' and '0,912' in Indonesian)."""
    symbols = _symbols(language)
    if symbols and isinstance(value, int | float | Decimal) and not isinstance(value, bool) and math.isfinite(value):
        # Babel's own result, a hundred times faster (a chart's tooltips and a trials page write thousands of figures):
        # the value as Babel reads it (a float by its shortest repr), rounded half-even, grouped by threes.
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return f"{exact:{',' if grouped else ''}.{places}f}".translate(symbols)
    from babel.numbers import format_decimal

    pattern = ("#,##0" if grouped else "0") + ("." + "0" * places if places else "")
    return format_decimal(value, format=pattern, locale=language, decimal_quantization=True)


@functools.cache
def _symbols(language: str) -> dict | None:
    """Return how Python's ',' '.' and '-' read in LANGUAGE, or None where it groups digits other than by threes."""
    from babel import Locale
    from babel.numbers import get_decimal_symbol, get_group_symbol, get_minus_sign_symbol

    if Locale.parse(language).decimal_formats[None].grouping != (3, 3):
        return None
    return str.maketrans({",": get_group_symbol(language), ".": get_decimal_symbol(language),
                          "-": get_minus_sign_symbol(language)})


def money(value: Decimal, language: str | None = None) -> str:
    """Write an exact amount grouped, with exactly its own decimals: '2,071.00', '2.071,00'; parsed back, the same Decimal."""
    language = language or current()
    if not value.is_finite():
        return str(value)
    exponent = value.as_tuple().exponent
    return number(value, language, -exponent if isinstance(exponent, int) and exponent < 0 else 0)


def moment(when: dt.datetime, zone: str, language: str | None = None) -> str:
    """Write a time as a reader of LANGUAGE reads it, its zone named: '2 Desember 2026 09.00 UTC+07:00'."""
    language = language or current()
    if language == DEFAULT:
        return f"{when:%Y-%m-%d %H:%M} {zone}"
    from babel.dates import format_date

    return f"{format_date(when, 'd MMMM y', locale=language)} {when:%H.%M} {zone}"
