"""The charts: Vega-Lite specs made with Altair (#34), each kind once per language, a chart's rows as its named dataset."""

from __future__ import annotations

import json

import pytest

from iteralab.core import language
from iteralab.pages import charts
from tests import vega

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
          "lots": 1, "limit_hours": 96.0, "feasible": "yes"},
         {"configuration": "int8-b8 · 1× L4", "projected": "3 h to 4 h", "low_hours": 3.0, "high_hours": 4.0, "lots": 2,
          "limit_hours": 96.0, "feasible": "no"}]
ALL = {"durations": DURATIONS, "memory": MEMORY, "quality": QUALITY, "planned-spend": SPEND, "projected-hours": HOURS}


@pytest.mark.parametrize("code", list(language.LANGUAGES))
@pytest.mark.parametrize("kind", list(ALL))
def test_each_kind_is_a_valid_vega_lite_spec_in_each_language(kind, code):
    """The pages use to_dict(validate=False), for speed: this is the check it skips, once per kind and language."""
    import altair

    charts.KINDS[kind](altair, code).properties(width=charts.WIDTH).to_dict(validate=True)  # raises on a schema error
    with language.speaking(code):
        full = charts.spec(kind, ALL[kind], "a title")
    assert full["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6")
    assert full["data"] == {"name": charts.ROWS} and full["description"] == "a title"


@pytest.mark.parametrize("kind", list(ALL))
def test_each_chart_draws_its_marks_the_same_for_the_same_rows(kind):
    rows = ALL[kind]
    first, again = charts.spec_json(charts.spec(kind, rows, "t")), charts.spec_json(charts.spec(kind, [dict(r) for r in rows], "t"))
    assert first == again
    root = vega.drawn(json.loads(first))
    assert vega.marks(root) >= len(rows)  # a mark per row at least (the median and the limit ticks come on top)
    shown = set(vega.texts(root))
    category = charts.CATEGORY[kind]
    assert set(charts.shared_part([str(row[category]) for row in rows])[0]) <= shown  # every category named down the side
    changed = [dict(row) for row in rows]
    key = next(k for k in ("seconds", "mib", "accuracy", "planned", "high_hours") if k in changed[0])
    changed[0][key] = changed[0][key] * 0.9
    assert charts.spec_json(charts.spec(kind, changed, "t")) != first  # a figure moved is a chart changed


def test_a_label_from_the_records_is_data_never_markup():
    hostile = "</script><script>alert(1)</script> & \"quoted\""
    full = charts.spec("durations", [{"variant": hostile, "run_order": 1, "seconds": 1.5}], "t")
    written = charts.in_script(full)
    assert "<" not in written and ">" not in written and "&" not in written  # nothing can end the <script> it sits in
    assert json.loads(written)["datasets"][charts.ROWS][0]["variant"] == hostile
    assert hostile in vega.texts(vega.drawn(full))  # drawn as the text it is


def test_axis_figures_and_tooltips_are_written_in_the_page_language():
    shown = vega.texts(vega.drawn(charts.spec("projected-hours", HOURS, "t")))
    assert {"0.1", "1", "10", "100"} <= set(shown)
    with language.speaking("id"):
        quality = charts.spec("quality", QUALITY, "t")
        assert {"0,0", "0,2", "1,0"} <= set(vega.texts(vega.drawn(quality)))
        spend = vega.texts(vega.drawn(charts.spec("planned-spend", [{**SPEND[0], "planned": 12500.0}], "t")))
        assert "12.000" in spend  # grouped the Indonesian way
        tooltip = quality["layer"][0]["encoding"]["tooltip"] if "layer" in quality else quality["encoding"]["tooltip"]
        assert [field["title"] for field in tooltip] == ["varian", "kelompok", "akurasi"]


@pytest.mark.parametrize(("labels", "expected"), [
    (["b1 · 1× RTX 4090 · torch 2.13", "b8 · 1× RTX 4090 · torch 2.13 (not feasible)"],
     (["b1", "b8 (not feasible)"], "1× RTX 4090 · torch 2.13")),
    (["b1 · 1× RTX 4090 · torch 2.13", "b1 · CPU · torch 2.13"], None),  # two machines: every label whole
    (["b1 · 1× RTX 4090 · torch 2.13"], None),  # one row: nothing to share
    (["fp32-b1", "fp32-b8"], None),  # names without a machine
])
def test_what_every_band_label_shares_is_written_once(labels, expected):
    """Regression for #37: every chart row repeated the whole configuration."""
    assert charts.shared_part(labels) == (expected or (labels, None))


def test_the_shared_machine_is_the_charts_title_and_the_rows_keep_their_own_part():
    full = charts.spec("planned-spend", [{**SPEND[0], "configuration": "b1 · 1× H100"},
                                         {**SPEND[1], "configuration": "b8 · 1× H100 (not feasible)"}], "t")
    assert full["title"] == "1× H100"
    assert [row["configuration"] for row in full["datasets"][charts.ROWS]] == ["b1", "b8 (not feasible)"]


def test_kept_specs_are_the_made_ones_and_a_build_that_renders_need_not_import_altair(tmp_path, monkeypatch):
    """Importing Altair took 0.6 s of every build that renders (a third of one campaign appended): the specs are kept."""
    import subprocess
    import sys

    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path))
    made = {code: charts._make(code) for code in language.LANGUAGES}
    for code in language.LANGUAGES:
        assert charts._kept(code) == made[code]  # made, then kept
        assert charts._kept(code) == made[code]  # read back
    kept = sorted((tmp_path / "charts").iterdir())
    assert len(kept) == len(language.LANGUAGES)
    script = "import sys; from iteralab.pages import charts; charts.made('id'); print('altair' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
    for path in kept:  # a kept file flipped or cut short is made again, never trusted
        data = bytearray(path.read_bytes())
        data[-5] ^= 1
        path.write_bytes(bytes(data))
    assert {code: charts._kept(code) for code in language.LANGUAGES} == made
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"  # made again above, and kept whole
