"""Charts as inline SVG: Altair specs rendered at build time by vl-convert, cached by spec hash."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

WIDTH = 520
DATASET = "table"


def _svg(spec: dict, cache_dir: Path | None) -> str:
    import vl_convert

    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()
    cached = cache_dir / f"{key}.svg" if cache_dir else None
    if cached and cached.is_file():
        return cached.read_text(encoding="utf-8")
    svg = vl_convert.vegalite_to_svg(spec)
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_suffix(".partial")
        temporary.write_text(svg, encoding="utf-8")
        temporary.replace(cached)
    return svg


def _template(chart) -> dict:
    """Turn an Altair chart over the named dataset into a plain spec, once per chart kind."""
    # Altair's own schema validation costs more than rendering; the specs are built here, not by users.
    spec = chart.to_dict(validate=False)
    spec.pop("$schema", None)  # a URL string only, but the page should name no other host
    return spec


@cache
def _durations_template() -> dict:
    import altair as alt

    base = alt.Chart(alt.NamedData(DATASET)).encode(y=alt.Y("variant:N", sort=None, title=None))
    points = base.mark_circle(size=60, opacity=0.7).encode(
        x=alt.X("seconds:Q", title="measured window (s)", scale=alt.Scale(zero=False)),
        tooltip=["variant:N", "run_order:Q", "seconds:Q"])
    medians = base.mark_tick(color="black", thickness=2, size=22).encode(x="median(seconds):Q")
    return _template(alt.layer(points, medians).properties(width=WIDTH))


@cache
def _memory_template() -> dict:
    import altair as alt

    chart = alt.Chart(alt.NamedData(DATASET)).mark_bar().encode(
        y=alt.Y("variant:N", sort=None, title=None), x=alt.X("mib:Q", title="peak (MiB, 2^20 bytes)"),
        color=alt.Color("counter:N", title="counter"), yOffset="counter:N")
    return _template(chart.properties(width=WIDTH))


@cache
def _quality_template() -> dict:
    import altair as alt

    chart = alt.Chart(alt.NamedData(DATASET)).mark_bar().encode(
        y=alt.Y("variant:N", sort=None, title=None), x=alt.X("accuracy:Q", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("bucket:N", sort=None), yOffset=alt.YOffset("bucket:N", sort=None))
    return _template(chart.properties(width=WIDTH))


def _render(template: dict, rows: list[dict], cache_dir: Path | None) -> str:
    return _svg({**template, "datasets": {DATASET: rows}}, cache_dir)


def durations_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Strip plot of every successful trial's measured window per variant, median marked."""
    return _render(_durations_template(), rows, cache_dir)


def memory_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Bars of peak memory per variant, one bar per counter, never summed."""
    return _render(_memory_template(), rows, cache_dir)


def quality_chart(rows: list[dict], cache_dir: Path | None) -> str:
    """Median accuracy per variant and length bucket."""
    return _render(_quality_template(), rows, cache_dir)
