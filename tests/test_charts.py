"""The charts drawn as SVG by the site itself (#22: vl-convert took 40 ms a chart, most of a cold build's time)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest

from iteralab.core import language
from iteralab.site import charts, svg

NS = {"s": "http://www.w3.org/2000/svg"}

DURATIONS = [{"variant": variant, "run_order": order, "seconds": seconds}
             for order, (variant, seconds) in enumerate([("fp32-b1", 12.5), ("fp32-b1", 13.0), ("fp32-b1", 15.25),
                                                         ("int8-b8", 5.5), ("int8-b8", 6.0)], start=1)]
MEMORY = [{"variant": "fp32-b1", "counter": "GPU peak allocated", "mib": 812.5},
          {"variant": "fp32-b1", "counter": "host peak RSS (process)", "mib": 1400.0},
          {"variant": "int8-b8", "counter": "host peak RSS (process)", "mib": 700.25}]
QUALITY = [{"variant": "fp32-b1", "bucket": bucket, "accuracy": value} for bucket, value in (("short", 0.9), ("long", 0.75))]
SPEND = [{"configuration": "fp32-b1 · 1× H100", "planned": 2071.0, "currency": "USD"},
         {"configuration": "int8-b8 · 1× L4", "planned": 310.5, "currency": "USD"}]
HOURS = [{"configuration": "fp32-b1 · 1× H100", "projected": "2.4 min to 2.7 min", "low_hours": 0.04, "high_hours": 0.045,
          "lots": 1, "limit_hours": 96.0},
         {"configuration": "int8-b8 · 1× L4", "projected": "3 h to 4 h", "low_hours": 3.0, "high_hours": 4.0, "lots": 2,
          "limit_hours": 96.0}]
ALL = [(charts.durations_chart, DURATIONS), (charts.memory_chart, MEMORY), (charts.quality_chart, QUALITY),
       (charts.spend_chart, SPEND), (charts.hours_chart, HOURS)]


def _parsed(drawn: str) -> ET.Element:
    return ET.fromstring(drawn)  # well-formed XML, or this raises


def _texts(root: ET.Element) -> list[str]:
    return [element.text or "" for element in root.iter("{http://www.w3.org/2000/svg}text")]


@pytest.mark.parametrize(("draw", "rows"), ALL, ids=lambda value: getattr(value, "__name__", ""))
def test_each_chart_is_well_formed_svg_the_same_for_the_same_rows(draw, rows):
    first, again = draw(rows), draw([dict(row) for row in rows])
    assert first == again
    root = _parsed(first)
    width, height = float(root.get("width")), float(root.get("height"))
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}" and width > 520 and height > 40
    labels = {row.get("variant", row.get("configuration")) for row in rows}
    assert labels <= set(_texts(root))  # every category named down the side
    changed = [dict(row) for row in rows]
    key = next(k for k in ("seconds", "mib", "accuracy", "planned", "high_hours") if k in changed[0])
    changed[0][key] = changed[0][key] * 0.9
    assert draw(changed) != first  # a figure moved is a chart changed


def test_a_label_from_the_records_is_text_never_markup():
    hostile = "<script>alert(1)</script> & \"quoted\""
    root = _parsed(charts.durations_chart([{"variant": hostile, "run_order": 1, "seconds": 1.5}]))
    assert hostile in _texts(root)
    assert not list(root.iter("{http://www.w3.org/2000/svg}script")) and not list(root.iter("script"))


def test_marks_sit_at_their_values_on_the_axis():
    root = _parsed(charts.durations_chart(DURATIONS))
    axis = svg.Axis([row["seconds"] for row in DURATIONS], charts.WIDTH)
    assert axis.low <= 5.5 and axis.high >= 15.25
    circles = [float(c.get("cx")) for c in root.iter("{http://www.w3.org/2000/svg}circle")]
    assert sorted(circles) == sorted(round(axis.x(row["seconds"]), 2) for row in DURATIONS)
    medians = {float(line.get("x1")) for line in root.iter("{http://www.w3.org/2000/svg}line") if line.get("stroke") == "black"}
    assert medians == {round(axis.x(13.0), 2), round(axis.x(5.75), 2)}  # the median of two is their mean
    tooltips = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "variant: fp32-b1; run order: 3; seconds: 15.250" in tooltips  # #37: words, not the rows' keys


def test_ticks_are_round_figures_covering_the_values():
    low, high, ticks = svg.linear_ticks(0.0, 850.0)
    assert (low, high) == (0.0, 1000.0) and ticks == [Decimal(n) for n in range(0, 1001, 200)]
    assert svg.linear_ticks(0.0, 1.0)[2] == [Decimal("0.0"), Decimal("0.2"), Decimal("0.4"), Decimal("0.6"), Decimal("0.8"),
                                            Decimal("1.0")]
    assert svg.linear_ticks(7.0, 7.0)[:2] == (6.0, 8.0)  # one value still gets an axis around it
    low, high, ticks = svg.log_ticks(0.04, 96.0)
    assert (low, high) == (0.01, 100.0) and [str(t) for t in ticks] == ["0.01", "0.1", "1", "1E+1", "1E+2"]


def test_axis_figures_are_written_in_the_page_language():
    root = _parsed(charts.hours_chart(HOURS))
    assert {"0.01", "0.1", "1", "10", "100"} <= set(_texts(root))
    with language.speaking("id"):
        root = _parsed(charts.quality_chart(QUALITY))
        assert {"0,0", "0,2", "1,0"} <= set(_texts(root))
        spend = _texts(_parsed(charts.spend_chart([{**SPEND[0], "planned": 12500.0}])))
        assert "12.000" in spend and "14.000" in spend  # grouped the Indonesian way


def test_a_title_wider_than_the_axis_still_fits_inside_the_chart():
    long_title = "x" * 200
    axis = svg.Axis([1.0, 2.0], 100)
    parts = axis.draw(20, long_title, "en")
    drawn = svg.document(parts, bands=[("a", 0, 20)], width=100, height=20, overhang=axis.overhang)
    assert float(_parsed(drawn).get("width")) >= svg.text_width(long_title, svg.TITLE)


def test_a_bar_starts_at_zero_whatever_its_sign():
    rows = [{"variant": "a", "counter": "c", "mib": -50.0}, {"variant": "b", "counter": "c", "mib": 150.0}]
    root = _parsed(charts.memory_chart(rows))
    axis = svg.Axis([-50.0, 150.0], charts.WIDTH, zero=True)
    bars = [(float(r.get("x")), float(r.get("width"))) for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.find(
        "{http://www.w3.org/2000/svg}title") is not None]
    zero = round(axis.x(0.0), 2)
    assert bars == [(round(axis.x(-50.0), 2), round(zero - axis.x(-50.0), 2)), (zero, round(axis.x(150.0) - zero, 2))]


def test_coordinates_are_written_one_way():
    assert [svg.num(v) for v in (-0.001, 0.0, 12.5, 12.499, 3.0)] == ["0", "0", "12.5", "12.5", "3"]


def test_labels_in_wide_scripts_get_room_for_every_character():
    assert svg.text_width("検証済みコーパス", 10) == 80 * svg.ROOM  # eight full-width characters: an em each, with room
    assert svg.text_width("iiii", 10) < svg.text_width("MMMM", 10)


@pytest.mark.parametrize(("labels", "expected"), [
    (["b1 · 1× RTX 4090 · torch 2.13", "b8 · 1× RTX 4090 · torch 2.13 (not feasible)"],
     (["b1", "b8 (not feasible)"], "1× RTX 4090 · torch 2.13")),
    (["b1 · 1× RTX 4090 · torch 2.13", "b1 · CPU · torch 2.13"], None),  # two machines: every label whole
    (["b1 · 1× RTX 4090 · torch 2.13"], None),  # one row: nothing to share
    (["fp32-b1", "fp32-b8"], None),  # names without a machine
])
def test_what_every_band_label_shares_is_written_once(labels, expected):
    """Regression for #37: every chart row repeated the whole configuration."""
    assert svg.shared_part(labels) == (expected or (labels, None))
