"""Charts as inline SVG: Altair specs rendered at build time by vl-convert, cached by spec hash."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

WIDTH = 520


def _svg(spec: dict, cache: Path | None) -> str:
    import vl_convert

    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()
    cached = cache / f"{key}.svg" if cache else None
    if cached and cached.is_file():
        return cached.read_text(encoding="utf-8")
    svg = vl_convert.vegalite_to_svg(spec)
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_suffix(".partial")
        temporary.write_text(svg, encoding="utf-8")
        temporary.replace(cached)
    return svg


def _spec(chart) -> dict:
    spec = chart.to_dict()
    spec.pop("$schema", None)  # a URL string only, but the page should name no other host
    return spec


def durations_chart(rows: list[dict], cache: Path | None) -> str:
    """Strip plot of every successful trial's measured window per variant, median marked."""
    import altair as alt
    import pandas as pd

    data = pd.DataFrame(rows, columns=["variant", "run_order", "seconds"])
    base = alt.Chart(data).encode(y=alt.Y("variant:N", sort=None, title=None))
    points = base.mark_circle(size=60, opacity=0.7).encode(
        x=alt.X("seconds:Q", title="measured window (s)", scale=alt.Scale(zero=False)),
        tooltip=["variant", "run_order", "seconds"])
    medians = base.mark_tick(color="black", thickness=2, size=22).encode(x="median(seconds):Q")
    return _svg(_spec(alt.layer(points, medians).properties(width=WIDTH)), cache)


def memory_chart(rows: list[dict], cache: Path | None) -> str:
    """Bars of peak memory per variant, one bar per counter, never summed."""
    import altair as alt
    import pandas as pd

    data = pd.DataFrame(rows, columns=["variant", "counter", "mib"])
    chart = alt.Chart(data).mark_bar().encode(
        y=alt.Y("variant:N", sort=None, title=None), x=alt.X("mib:Q", title="peak (MiB, 2^20 bytes)"),
        color=alt.Color("counter:N", title="counter"), yOffset="counter:N")
    return _svg(_spec(chart.properties(width=WIDTH)), cache)


def quality_chart(rows: list[dict], cache: Path | None) -> str:
    """Median accuracy per variant and length bucket."""
    import altair as alt
    import pandas as pd

    data = pd.DataFrame(rows, columns=["variant", "bucket", "accuracy"])
    chart = alt.Chart(data).mark_bar().encode(
        y=alt.Y("variant:N", sort=None, title=None), x=alt.X("accuracy:Q", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("bucket:N", sort=None), yOffset=alt.YOffset("bucket:N", sort=None))
    return _svg(_spec(chart.properties(width=WIDTH)), cache)
