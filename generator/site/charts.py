"""Charts as inline SVG: Altair specs compiled once to Vega, rendered at build time by vl-convert, cached by spec hash."""

from __future__ import annotations

import contextlib
import hashlib
import json
from functools import cache
from importlib import metadata
from pathlib import Path

from iteralab.core import language
from iteralab.core.files import cache_root, write_atomically
from iteralab.core.language import Text
from iteralab.site.words import COLUMNS

WIDTH = 520
DATASET = "table"


@cache
def number_locale(code: str) -> dict:
    """Return d3-format's locale for a language, from Babel's: axis figures written as the page writes them ('1.000,5')."""
    from babel.numbers import get_decimal_symbol, get_group_symbol

    return {"decimal": get_decimal_symbol(code), "thousands": get_group_symbol(code), "grouping": [3], "currency": ["", ""]}


def _svg(spec: dict, cache_dir: Path | None) -> str:
    import vl_convert

    locale = number_locale(language.current())
    key = hashlib.sha256((json.dumps(spec, sort_keys=True) + json.dumps(locale, sort_keys=True)).encode("utf-8")).hexdigest()
    cached = cache_dir / f"{key}.svg" if cache_dir else None
    if cached and cached.is_file():
        return cached.read_text(encoding="utf-8")
    svg = vl_convert.vega_to_svg(spec, format_locale=locale)
    if cached:
        # Two workers may draw the same chart: each writes its own temporary file. A cache that cannot be written
        # (a full disk) only costs the next build time; the page itself says so if it cannot be written either.
        with contextlib.suppress(OSError):
            cached.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(cached, svg)
    return svg


# Labels and titles are never cut short (a truncated variant name misleads) and never thinned out, and the
# value axis has about six ticks (exact figures are in the table beside each chart). vl-convert spends
# most of a chart's time measuring text, about 1.5 ms per label, so this is also a third faster.
CONFIG = {"axis": {"labelLimit": 0, "labelOverlap": False}, "axisX": {"tickCount": 6}, "legend": {"labelLimit": 0},
          "title": {"limit": 0}}


def _spec(chart) -> dict:
    # Altair's own schema validation costs more than rendering; the specs are built here, not by users.
    spec = chart.to_dict(validate=False)
    spec.pop("$schema", None)  # a URL string only, but the page should name no other host
    return spec


@cache
def _altair_specs(code: str) -> dict:
    """Return the Vega-Lite spec of each chart kind over the named dataset, its titles in the language CODE."""
    import altair as alt

    def words(text: Text) -> str:
        return text.say(code)

    base = alt.Chart(alt.NamedData(DATASET)).encode(y=alt.Y("variant:N", sort=None, title=None))
    points = base.mark_circle(size=60, opacity=0.7).encode(
        x=alt.X("seconds:Q", title=words(Text("measured window (s)")), scale=alt.Scale(zero=False)),
        tooltip=[alt.Tooltip("variant:N", title=words(COLUMNS["variant"])),
                 alt.Tooltip("run_order:Q", title=words(COLUMNS["run_order"])),
                 alt.Tooltip("seconds:Q", title=words(COLUMNS["seconds"]))])
    medians = base.mark_tick(color="black", thickness=2, size=22).encode(
        x=alt.X("median(seconds):Q", title=words(Text("measured window (s)"))))
    memory = alt.Chart(alt.NamedData(DATASET)).mark_bar().encode(
        y=alt.Y("variant:N", sort=None, title=None), x=alt.X("mib:Q", title=words(Text("peak (MiB, 2^20 bytes)"))),
        color=alt.Color("counter:N", title=words(COLUMNS["counter"])), yOffset="counter:N")
    quality = alt.Chart(alt.NamedData(DATASET)).mark_bar().encode(
        y=alt.Y("variant:N", sort=None, title=None),
        x=alt.X("accuracy:Q", title=words(COLUMNS["accuracy"]), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("bucket:N", sort=None, title=words(COLUMNS["bucket"])), yOffset=alt.YOffset("bucket:N", sort=None))
    spend = alt.Chart(alt.NamedData(DATASET)).mark_bar().encode(
        y=alt.Y("configuration:N", sort=None, title=None),
        x=alt.X("planned:Q", title=words(Text("planned package spend (catalog currency)"))))
    span = alt.Chart(alt.NamedData(DATASET)).encode(y=alt.Y("configuration:N", sort=None, title=None))
    # A log axis: minutes of work and a 96 h window both show (on a linear axis the bars were invisible slivers).
    axis = alt.X("low_hours:Q", title=words(Text("projected processing hours, min to max (log scale: each step is ten times "
                                                 "the last)")), scale=alt.Scale(type="log"))
    hours = alt.layer(
        span.mark_bar(height=10).encode(x=axis, x2="high_hours:Q"),
        span.mark_tick(thickness=2, size=14).encode(x="high_hours:Q"),  # equal min and max still show
        span.mark_tick(color="#a4161a", thickness=2, size=22, aria=False).encode(x="limit_hours:Q"))
    return {"durations": _spec(alt.layer(points, medians).properties(width=WIDTH)),
            "spend": _spec(spend.properties(width=WIDTH)), "hours": _spec(hours.properties(width=WIDTH)),
            "memory": _spec(memory.properties(width=WIDTH)), "quality": _spec(quality.properties(width=WIDTH))}


@cache
def _template(kind: str, code: str) -> dict:
    """Compile one chart kind to Vega once per machine (kept in the cache folder); the rows are filled in per chart."""
    # Compiling Vega-Lite to Vega does not depend on the rows, so it is not repeated for every chart; importing Altair
    # and compiling the kinds took a second in every build process. The key is everything the compiled spec comes from.
    key = hashlib.sha256("|".join([kind, metadata.version("altair"), metadata.version("vl-convert-python"),
                                   json.dumps(CONFIG, sort_keys=True), code, language.catalog_digest(code)]).encode()
                         + Path(__file__).read_bytes()).hexdigest()
    stored = cache_root() / "vega" / f"{key}.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(stored.read_text(encoding="utf-8"))
    import vl_convert

    vega = vl_convert.vegalite_to_vega({**_altair_specs(code)[kind], "config": CONFIG, "datasets": {DATASET: []}})
    vega.pop("$schema", None)
    with contextlib.suppress(OSError):
        stored.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(stored, json.dumps(vega, sort_keys=True))
    return vega


def _render(template: dict, rows: list[dict], cache_dir: Path | None) -> str:
    data = [{**source, "values": rows} if source.get("name") == DATASET else source for source in template["data"]]
    return _svg({**template, "data": data}, cache_dir)


def durations_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Strip plot of every successful trial's measured window per variant, median marked."""
    return _render(_template("durations", language.current()), rows, cache_dir)


def memory_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Bars of peak memory per variant, one bar per counter, never summed."""
    return _render(_template("memory", language.current()), rows, cache_dir)


def quality_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Median accuracy per variant and length bucket."""
    return _render(_template("quality", language.current()), rows, cache_dir)


def spend_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Bars of the planned package spend per configuration."""
    return _render(_template("spend", language.current()), rows, cache_dir)


def hours_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Projected hours per configuration from min to max, the window or deadline marked in red."""
    return _render(_template("hours", language.current()), rows, cache_dir)
