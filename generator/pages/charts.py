"""Charts as Vega-Lite specs made with Altair: each kind built once per language, each chart only its rows added.

A page embeds each spec as JSON and vega-embed draws it in the reader's browser (assets/vendor/vega-embed.js); the
evidence bundle carries the same specs, data included, so any Vega-Lite tool can draw them again.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from importlib import metadata
from pathlib import Path

import orjson

import iteralab
from iteralab.core import language, workers
from iteralab.core.files import cache_root, read_sealed, write_sealed
from iteralab.core.language import Text
from iteralab.pages.words import COLUMNS

WIDTH = 520  # px of the value axis
ROWS = "rows"  # the one named dataset of every spec: a chart's rows, as its data table shows them
LABEL, TITLE = 12, 13  # font sizes in px (#37: Vega-Lite's 10 and 11 were 5 pt on paper)
# The category down each chart's side: what its rows are named by.
CATEGORY = {"durations": "variant", "memory": "variant", "phase-memory": "variant", "quality": "variant",
            "planned-spend": "configuration", "projected-hours": "configuration", "revision-medians": "configuration", "revision-model-times": "configuration", "revision-spend": "configuration",
            "serving-ttft": "configuration", "serving-tpot": "configuration", "serving-throughput": "configuration"}
# A serving campaign's chart columns (#64), beside the site's words.
SERVED = {"level": Text("level"), "ttft_ms": Text("time to first token (ms)"), "tpot_ms": Text("time per output token (ms)"),
          "share": Text("share of the level's requests at or under it"), "objective_ms": Text("objective (ms)"),
          "p90_ttft_ms": Text("p90 time to first token (ms)"),
          "capacity_level": Text("capacity level at the objective")}
_made: dict[str, dict[str, dict]] = {}


def _altair():
    # Imported when a chart is made, not with the site: it takes half a second, and a build with nothing to draw never
    # needs it.
    import altair

    return altair


def _word(column: str, code: str) -> str:
    return (SERVED.get(column) or COLUMNS[column]).say(code)


def _tip(alt, column: str, kind: str, code: str, number: str | None = None):
    """Return a tooltip field headed by its column's word, a figure written with NUMBER's format."""
    return alt.Tooltip(f"{column}:{kind}", title=_word(column, code), **({"format": number} if number else {}))


def _category(alt, column: str):
    # sort=None: the order of the rows (the data table's); labelLimit=0: a long configuration is never cut short.
    return alt.Y(f"{column}:N", sort=None, title=None, axis=alt.Axis(labelLimit=0))


def _durations(alt, code: str):
    """Strip plot of every successful trial's measured window per variant, median marked."""
    base = alt.Chart(alt.Data(name=ROWS))
    y = _category(alt, "variant")
    dots = base.mark_circle(size=70, opacity=0.7).encode(
        x=alt.X("seconds:Q", title=Text("measured window (s)").say(code), scale=alt.Scale(zero=False)), y=y,
        tooltip=[_tip(alt, "variant", "N", code), _tip(alt, "run_order", "Q", code, ",.0f"),
                 _tip(alt, "seconds", "Q", code, ",.3f")])
    median = base.mark_tick(color="black", thickness=2, size=18).encode(
        x=alt.X("median(seconds):Q"), y=y,
        tooltip=[_tip(alt, "variant", "N", code), alt.Tooltip("median(seconds):Q", title=Text("median").say(code), format=",.3f")])
    return alt.layer(dots, median)


def _grouped(alt, code: str, value: str, group: str, title: Text, number: str, domain=None):
    """Bars per variant, one per GROUP value side by side in its colour, from zero (or over DOMAIN)."""
    scale = alt.Scale(domain=list(domain)) if domain else alt.Scale(zero=True)
    return alt.Chart(alt.Data(name=ROWS)).mark_bar().encode(
        x=alt.X(f"{value}:Q", title=title.say(code), scale=scale), y=_category(alt, "variant"),
        yOffset=alt.YOffset(f"{group}:N", sort=None),
        color=alt.Color(f"{group}:N", sort=None, legend=alt.Legend(title=_word(group, code), labelLimit=0)),
        tooltip=[_tip(alt, "variant", "N", code), _tip(alt, group, "N", code), _tip(alt, value, "Q", code, number)])


def _memory(alt, code: str):
    """Bars of peak memory per variant, one bar per counter, never summed."""
    return _grouped(alt, code, "mib", "counter", Text("peak (MiB, 2^20 bytes)"), ",.1f")


def _phase_memory(alt, code: str):
    """Bars of peak memory per phase, a bar per variant side by side, a panel per counter (never summed, each its own
    axis: an adaptation's host RSS above its baseline and its GPU peaks differ by orders of magnitude)."""
    return alt.Chart(alt.Data(name=ROWS)).mark_bar().encode(
        x=alt.X("mib:Q", title=Text("peak (MiB, 2^20 bytes)").say(code), scale=alt.Scale(zero=True)),
        y=alt.Y("phase:N", sort=None, title=None, axis=alt.Axis(labelLimit=0)), yOffset=alt.YOffset("variant:N", sort=None),
        color=alt.Color("variant:N", sort=None, legend=alt.Legend(title=_word("variant", code), labelLimit=0)),
        row=alt.Row("counter:N", sort=None, title=None,
                    header=alt.Header(labelAngle=0, labelAlign="left", labelAnchor="start", labelOrient="top",
                                      labelFontSize=TITLE, labelLimit=0)),
        tooltip=[_tip(alt, "variant", "N", code), _tip(alt, "phase", "N", code), _tip(alt, "counter", "N", code),
                 _tip(alt, "mib", "Q", code, ",.3f")]).resolve_scale(x="independent")


def _quality(alt, code: str):
    """Median accuracy per variant and length bucket."""
    return _grouped(alt, code, "accuracy", "bucket", COLUMNS["accuracy"], ",.4f", domain=(0.0, 1.0))


def _spend(alt, code: str):
    """Bars of the planned package spend per configuration."""
    return alt.Chart(alt.Data(name=ROWS)).mark_bar().encode(
        x=alt.X("planned:Q", title=Text("planned package spend (catalog currency)").say(code), scale=alt.Scale(zero=True)),
        y=_category(alt, "configuration"),
        tooltip=[_tip(alt, "configuration", "N", code), _tip(alt, "planned", "Q", code, ",.2f"),
                 _tip(alt, "currency", "N", code)])


def _hours(alt, code: str):
    """Projected hours per configuration from min to max, the window or deadline marked in red."""
    # A log axis: minutes of work and a 96 h window both show (on a linear axis the bars were invisible slivers).
    base = alt.Chart(alt.Data(name=ROWS))
    y = _category(alt, "configuration")
    x = alt.X("low_hours:Q", scale=alt.Scale(type="log"), axis=alt.Axis(format="~g"),
              title=Text("projected processing hours, min to max (log scale: each step is ten times the last)").say(code))
    tooltip = [_tip(alt, "configuration", "N", code), _tip(alt, "projected", "N", code), _tip(alt, "lots", "Q", code, ",.0f"),
               _tip(alt, "feasible", "N", code)]
    span = base.mark_bar(height=10).encode(x=x, x2="high_hours:Q", y=y, tooltip=tooltip)
    # The maximum as a tick too: equal min and max still show.
    most = base.mark_tick(thickness=2, size=14).encode(x="high_hours:Q", y=y, tooltip=tooltip)
    limit = base.mark_tick(color="#a4161a", thickness=2, size=20).encode(
        x="limit_hours:Q", y=y, tooltip=[_tip(alt, "configuration", "N", code), _tip(alt, "limit_hours", "Q", code, ",~g")]
    ).transform_filter("isValid(datum.limit_hours)")
    return alt.layer(span, most, limit)


def _over_revisions(alt, code: str, value: str, title: Text, number: str):
    """A line per configuration across a question's revisions, in their time order (#35)."""
    return alt.Chart(alt.Data(name=ROWS)).mark_line(point=True).encode(
        x=alt.X("revision:N", sort=None, title=_word("revision", code), axis=alt.Axis(labelLimit=0, labelAngle=0)),
        y=alt.Y(f"{value}:Q", title=title.say(code), scale=alt.Scale(zero=value == "planned")),
        color=alt.Color("configuration:N", sort=None, legend=alt.Legend(title=_word("configuration", code), labelLimit=0,
                                                                         orient="bottom", direction="vertical")),
        tooltip=[_tip(alt, "revision", "N", code), _tip(alt, "configuration", "N", code), _tip(alt, value, "Q", code, number)])


def _revision_medians(alt, code: str):
    """Each configuration's median measured window per revision."""
    return _over_revisions(alt, code, "seconds", Text("median measured window (s)"), ",.3f")


def _revision_model_times(alt, code: str):
    """Each configuration's median time to the validated model per revision (an adaptation campaign's)."""
    return _over_revisions(alt, code, "seconds", Text("median time to the validated model (s)"), ",.3f")


def _revision_spend(alt, code: str):
    """Each configuration's planned package spend per revision."""
    return _over_revisions(alt, code, "planned", Text("planned package spend (catalog currency)"), ",.2f")


def _distribution(value: str):
    """Return the drawing of a step line per level of the share of its requests at or under each VALUE (a dash per
    configuration), the objective a red rule."""
    def draw(alt, code: str):
        base = alt.Chart(alt.Data(name=ROWS))
        tooltip = [_tip(alt, "configuration", "N", code), _tip(alt, "level", "N", code), _tip(alt, value, "Q", code, ",.1f"),
                   _tip(alt, "share", "Q", code, ".0%")]
        lines = base.mark_line(interpolate="step-after", point=True).encode(
            x=alt.X(f"{value}:Q", title=_word(value, code), scale=alt.Scale(zero=True)),
            y=alt.Y("share:Q", title=_word("share", code), scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
            color=alt.Color("level:N", sort=None, legend=alt.Legend(title=_word("level", code), labelLimit=0)),
            strokeDash=alt.StrokeDash("configuration:N", sort=None, legend=alt.Legend(
                title=_word("configuration", code), labelLimit=0, orient="bottom", direction="vertical")),
            tooltip=tooltip)
        rule = base.mark_rule(color="#a4161a", strokeWidth=2).encode(
            x=alt.X("max(objective_ms):Q"), tooltip=[alt.Tooltip("max(objective_ms):Q", title=_word("objective_ms", code))])
        return alt.layer(lines, rule)
    return draw


def _throughput(alt, code: str):
    """A line per configuration of output tokens per second against p90 TTFT across its levels, the capacity marked."""
    base = alt.Chart(alt.Data(name=ROWS))
    x = alt.X("p90_ttft_ms:Q", title=_word("p90_ttft_ms", code), scale=alt.Scale(zero=True))
    y = alt.Y("output_tokens_per_s:Q", title=_word("output_tokens_per_s", code), scale=alt.Scale(zero=True))
    tooltip = [_tip(alt, "configuration", "N", code), _tip(alt, "level", "Q", code, ",~g"),
               _tip(alt, "p90_ttft_ms", "Q", code, ",.1f"), _tip(alt, "output_tokens_per_s", "Q", code, ",.1f")]
    lines = base.mark_line(point=True).encode(x=x, y=y, order="level:Q", tooltip=tooltip, color=alt.Color(
        "configuration:N", sort=None, legend=alt.Legend(title=_word("configuration", code), labelLimit=0, orient="bottom",
                                                        direction="vertical")))
    knee = base.mark_point(shape="diamond", size=240, strokeWidth=2, color="#a4161a").encode(
        x=x, y=y, tooltip=[*tooltip, _tip(alt, "capacity_level", "Q", code, ",~g")]
    ).transform_filter("isValid(datum.capacity_level) && datum.level === datum.capacity_level")
    return alt.layer(lines, knee)


KINDS = {"durations": _durations, "memory": _memory, "phase-memory": _phase_memory, "quality": _quality, "planned-spend": _spend, "projected-hours": _hours,
         "revision-medians": _revision_medians, "revision-model-times": _revision_model_times, "revision-spend": _revision_spend,
         "serving-ttft": _distribution("ttft_ms"), "serving-tpot": _distribution("tpot_ms"), "serving-throughput": _throughput}


def _config(code: str) -> dict:
    """Return the look every chart shares, and how its figures are written in the language CODE (vega's format locale)."""
    symbols = language.number(-1234.5, code, 1)  # '-1,234.5' or '-1.234,5': the language's own signs, from CLDR
    minus, group, decimal = symbols[0], symbols[2], symbols[6]
    return {"axis": {"labelFontSize": LABEL, "titleFontSize": TITLE, "labelColor": "#222", "titleColor": "#222"},
            "legend": {"labelFontSize": LABEL, "titleFontSize": TITLE, "labelColor": "#222", "titleColor": "#222"},
            "title": {"fontSize": LABEL, "fontWeight": "normal", "color": "#444", "anchor": "start"},
            "view": {"stroke": "#ddd"}, "font": "sans-serif",
            # Marks, axes and legends carry no ARIA of their own: the chart's box is one image named by its title, and
            # its data table is the reading (an empty layer's marks were an unnamed image to axe).
            "aria": False,
            "locale": {"number": {"decimal": decimal, "thousands": group, "grouping": [3], "minus": minus,
                                  "currency": ["", ""]}}}


def made(code: str) -> dict[str, dict]:
    """Return each kind of chart's spec in the language CODE, without its rows (made once a process, or handed down)."""
    if code not in _made:
        handed = workers.shared().get("chart_specs", {}).get(code)
        _made[code] = handed or _kept(code)
    return _made[code]


MAGIC = b"iteralab-chart-specs\n"


def _kept(code: str) -> dict[str, dict]:
    """Return the specs kept in the cache folder for this code, Altair and language, else make and keep them.

    Importing Altair and making the specs took 0.6 s in every build that renders a campaign, a third of one campaign
    appended to a thousand. A kept file that cannot be trusted as written is made again.
    """
    path = cache_root() / "charts" / f"{_specs_key(code)}.json"
    sealed = read_sealed(path, MAGIC, "body")
    if sealed is not None:
        try:
            return orjson.loads(bytes(sealed[1]))
        except orjson.JSONDecodeError:
            pass  # made again below
    specs = _make(code)
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs making them again
        write_sealed(path, MAGIC, {"language": code}, orjson.dumps(specs), "body")
    return specs


def _specs_key(code: str) -> str:
    """Return what the specs are made from: this module, the words, iteralab's and Altair's versions, the language."""
    here = Path(__file__).parent
    made_from = b"\0".join([(here / "charts.py").read_bytes(), (here / "words.py").read_bytes(), iteralab.__version__.encode(),
                            metadata.version("altair").encode(), code.encode(), language.catalog_digest(code).encode()])
    return hashlib.sha256(made_from).hexdigest()


def _make(code: str) -> dict[str, dict]:
    alt = _altair()
    specs = {}
    for kind, draw in KINDS.items():
        # A band per category; grouped bars get a step per bar (the band holds one for each group); a value up the
        # side (the revisions' lines) a fixed height.
        height = 220 if kind.startswith(("revision-", "serving-")) else alt.Step(12 if kind in ("memory", "phase-memory", "quality") else 22)
        spec = draw(alt, code).properties(width=WIDTH, height=height).to_dict(validate=False)
        spec["config"] = _config(code)
        specs[kind] = spec
    return specs


def shared_part(labels: list[str]) -> tuple[list[str], str | None]:
    """Return LABELS without the hardware and software they all share ('fp32-b8 · CPU … · torch …'), and that part.

    A trailing remark in brackets ('(not feasible)') stays with its label. Labels that share nothing come back whole.
    """
    heads, tails = [], set()
    for label in labels:
        found = re.fullmatch(r"(.*?)( \([^()]*\))?", label)
        head, separator, tail = found.group(1).partition(" · ")
        if not separator:
            return labels, None
        heads.append(head + (found.group(2) or ""))
        tails.add(tail)
    return (heads, tails.pop()) if len(labels) > 1 and len(tails) == 1 else (labels, None)


def spec(kind: str, rows: list[dict], title: str) -> dict:
    """Return the full Vega-Lite spec of a chart of KIND: its rows as the named dataset, TITLE as its description.

    What every category label shares (the hardware and software of one machine) is written once, as the chart's title,
    rather than on every row (#37).
    """
    made_spec = made(language.current())[kind]
    column, rows = CATEGORY[kind], language.said(rows)
    labels = list(dict.fromkeys(str(row[column]) for row in rows))
    names, shared = shared_part(labels)
    if shared:
        short = dict(zip(labels, names, strict=True))
        rows = [{**row, column: short[str(row[column])]} for row in rows]
    full = {**made_spec, "description": language.say(title), "datasets": {ROWS: rows}}
    if shared:
        full["title"] = shared
    return full


def spec_json(full: dict) -> bytes:
    """Write a spec as JSON, the same bytes for the same spec (keys sorted)."""
    return orjson.dumps(full, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def in_script(full: dict) -> str:
    """Write a spec as JSON that can sit in a <script> element: no '<', '>' or '&' that could end it."""
    data = orjson.dumps(full, option=orjson.OPT_SORT_KEYS)
    return data.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026").decode("utf-8")
