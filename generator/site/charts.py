"""Charts as inline SVG, drawn from each chart's rows (the data table printed beside it) in the page's language."""

from __future__ import annotations

import statistics
from html import escape

from iteralab.core import language
from iteralab.core.language import Figure, Text
from iteralab.site import svg
from iteralab.site.words import COLUMNS

WIDTH = 520  # px of the value axis
BAR = 10  # px of a bar's thickness


def _categories(rows: list[dict], column: str) -> list[str]:
    """Return a column's values in the rows' order, each once (the order the data table shows)."""
    return list(dict.fromkeys(str(row[column]) for row in rows))


def _tooltip(row: dict, columns: tuple[str, ...], places: dict) -> str:
    """Return a mark's hover text: each column's word and value, as the data table writes them."""
    code = language.current()
    said = [f"{COLUMNS[column].say(code)}: {Figure(row[column], places[column]).say(code) if column in places else row[column]}"
            for column in columns]
    return f"<title>{escape('; '.join(said))}</title>"


def _bar(axis: svg.Axis, value: float) -> tuple[str, str]:
    """Return where a bar of VALUE starts and how wide it is: from zero, to the left for a value below zero."""
    zero, end = axis.x(0.0), axis.x(value)
    return svg.num(min(zero, end)), svg.num(abs(end - zero))


def durations_chart(rows: list[dict]) -> str:
    """Strip plot of every successful trial's measured window per variant, median marked."""
    code, variants = language.current(), _categories(rows, "variant")
    axis = svg.Axis([row["seconds"] for row in rows], WIDTH)
    height = len(variants) * svg.STEP
    parts = axis.draw(height, Text("measured window (s)").say(code), code)
    for index, variant in enumerate(variants):
        middle = index * svg.STEP + svg.STEP / 2
        seconds = [row for row in rows if str(row["variant"]) == variant]
        for row in seconds:
            parts.append(f'<circle cx="{svg.num(axis.x(row["seconds"]))}" cy="{svg.num(middle)}" r="4.4" fill="{svg.colour(0)}" '
                         f'fill-opacity="0.7">{_tooltip(row, ("variant", "run_order", "seconds"), {"run_order": 0, "seconds": 3})}'
                         "</circle>")
        x = svg.num(axis.x(statistics.median(row["seconds"] for row in seconds)))
        parts.append(f'<line x1="{x}" x2="{x}" y1="{svg.num(middle - 9)}" y2="{svg.num(middle + 9)}" stroke="black" '
                     'stroke-width="2"/>')
    return svg.document(parts, bands=[(v, i * svg.STEP, svg.STEP) for i, v in enumerate(variants)], width=WIDTH, height=height,
                        overhang=axis.overhang)


def _grouped_bars(rows: list[dict], value: str, group: str, title: Text, places: int, domain=None) -> str:
    """Bars per variant, one per GROUP value side by side in its colour, on a value axis from zero (or DOMAIN)."""
    code, variants, groups = language.current(), _categories(rows, "variant"), _categories(rows, group)
    axis = svg.Axis([row[value] for row in rows], WIDTH, zero=True, domain=domain)
    band = max(svg.STEP, len(groups) * (BAR + 2) + 8)
    parts = axis.draw(len(variants) * band, title.say(code), code)
    for index, variant in enumerate(variants):
        top = index * band + (band - len(groups) * (BAR + 2)) / 2
        for row in rows:
            if str(row["variant"]) != variant:
                continue
            offset = groups.index(str(row[group]))
            start, width = _bar(axis, row[value])
            parts.append(f'<rect x="{start}" y="{svg.num(top + offset * (BAR + 2) + 1)}" width="{width}" '
                         f'height="{BAR}" fill="{svg.colour(offset)}">'
                         f'{_tooltip(row, ("variant", group, value), {value: places})}</rect>')
    key = svg.legend(COLUMNS[group].say(code), groups, 0)
    return svg.document(parts, bands=[(v, i * band, band) for i, v in enumerate(variants)], width=WIDTH,
                        height=len(variants) * band, legend_parts=key, overhang=axis.overhang)


def memory_chart(rows: list[dict]) -> str:
    """Bars of peak memory per variant, one bar per counter, never summed."""
    return _grouped_bars(rows, "mib", "counter", Text("peak (MiB, 2^20 bytes)"), 1)


def quality_chart(rows: list[dict]) -> str:
    """Median accuracy per variant and length bucket."""
    return _grouped_bars(rows, "accuracy", "bucket", COLUMNS["accuracy"], 4, domain=(0.0, 1.0))


def spend_chart(rows: list[dict]) -> str:
    """Bars of the planned package spend per configuration."""
    code, labels = language.current(), _categories(rows, "configuration")
    axis = svg.Axis([row["planned"] for row in rows], WIDTH, zero=True)
    parts = axis.draw(len(labels) * svg.STEP, Text("planned package spend (catalog currency)").say(code), code)
    for index, row in enumerate(rows):
        start, width = _bar(axis, row["planned"])
        parts.append(f'<rect x="{start}" y="{svg.num(index * svg.STEP + (svg.STEP - BAR * 1.4) / 2)}" '
                     f'width="{width}" height="{svg.num(BAR * 1.4)}" fill="{svg.colour(0)}">'
                     f'{_tooltip(row, ("configuration", "planned", "currency"), {"planned": 2})}</rect>')
    return svg.document(parts, bands=[(c, i * svg.STEP, svg.STEP) for i, c in enumerate(labels)], width=WIDTH,
                        height=len(labels) * svg.STEP, overhang=axis.overhang)


def hours_chart(rows: list[dict]) -> str:
    """Projected hours per configuration from min to max, the window or deadline marked in red."""
    # A log axis: minutes of work and a 96 h window both show (on a linear axis the bars were invisible slivers).
    code, labels = language.current(), _categories(rows, "configuration")
    values = [row[key] for row in rows for key in ("low_hours", "high_hours", "limit_hours") if row[key] is not None]
    axis = svg.Axis(values, WIDTH, log=True)
    height = len(labels) * svg.STEP
    parts = axis.draw(height, Text("projected processing hours, min to max (log scale: each step is ten "
                                        "times the last)").say(code), code)
    for index, row in enumerate(rows):
        middle = index * svg.STEP + svg.STEP / 2
        low, high = axis.x(row["low_hours"]), axis.x(row["high_hours"])
        parts.append(f'<rect x="{svg.num(low)}" y="{svg.num(middle - BAR / 2)}" width="{svg.num(high - low)}" '
                     f'height="{BAR}" fill="{svg.colour(0)}">'
                     f'{_tooltip(row, ("configuration", "projected", "lots"), {})}</rect>')
        # The maximum as a tick too: equal min and max still show.
        parts.append(f'<line x1="{svg.num(high)}" x2="{svg.num(high)}" y1="{svg.num(middle - 7)}" '
                     f'y2="{svg.num(middle + 7)}" stroke="{svg.colour(0)}" stroke-width="2"/>')
        if row["limit_hours"] is not None:
            limit = svg.num(axis.x(row["limit_hours"]))
            parts.append(f'<line x1="{limit}" x2="{limit}" y1="{svg.num(middle - 10)}" y2="{svg.num(middle + 10)}" '
                         'stroke="#a4161a" stroke-width="2"/>')
    return svg.document(parts, bands=[(c, i * svg.STEP, svg.STEP) for i, c in enumerate(labels)], width=WIDTH, height=height,
                        overhang=axis.overhang)
