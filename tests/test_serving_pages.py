"""The pages of a serving campaign (#64), built from a real tiny run (tests/fixtures/serve-runs/tiny-serve-w: one
configuration, levels 1 and 2, six requests each): per level its load, latency quantiles with their intervals and
throughput; the capacity at the objective; the engine's start as a phase; the distributions of TTFT and time per output
token with the objective drawn; throughput against p90 TTFT with the knee marked; every request as CSV; the decision's
serving ranking; both languages. A copy of the run made hostile shows that what a request or an engine says stays inert.
"""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest
from bs4 import BeautifulSoup

from iteralab.pages import served
from iteralab.site.build import build_site
from tests.conftest import ROOT

CAMPAIGN = "tiny-serve-w"
FIXTURE = ROOT / "tests" / "fixtures" / "serve-runs" / CAMPAIGN
HOSTILE_TEXT = "<script>alert('output')</script>"
HOSTILE_MODEL = "<script>alert('model')</script>"


def _records(runs) -> list[dict]:
    return [json.loads(line) for path in sorted((runs / CAMPAIGN / "records").glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").split("\n") if line]


def _trial(runs) -> dict:
    return next(record for record in _records(runs) if record["kind"] == "trial")


def _requests(runs) -> list[dict]:
    path = runs / _trial(runs)["predictions"]["path"]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def _build(folder, change=None):
    runs = folder / "runs"
    shutil.copytree(FIXTURE, runs / CAMPAIGN)
    if change:
        change(runs)
    built = build_site(runs=runs, out=folder / "site", languages=("en", "id"), processes=1)
    assert built["failed"] == {}
    return runs, folder / "site"


def _hostile(runs) -> None:
    """Make the copy hostile: a request's output text a script, another's a formula; the engine's model and command
    scripts; the engine not started by the runner (url mode); level 2's p99 TTFT missing with its reason."""
    records_file = next((runs / CAMPAIGN / "records").glob("*.jsonl"))
    lines = []
    for record in (json.loads(line) for line in records_file.read_text(encoding="utf-8").split("\n") if line):
        if record["kind"] == "trial":
            engine = record["serving"]["engine"]
            engine.update(model_name=HOSTILE_MODEL, started_by_runner=False, command=["serve", HOSTILE_MODEL])
            level = record["serving"]["levels"][1]
            level["ttft_ms"]["p99"].update(value=None, reason="no request was measured")
            level["client_bound"] = False
        lines.append(json.dumps(record))
    records_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    predictions = next((runs / CAMPAIGN / "predictions").glob("*.jsonl"))
    rows = [json.loads(line) for line in predictions.read_text(encoding="utf-8").split("\n") if line]
    rows[0]["output_text"], rows[1]["output_text"] = HOSTILE_TEXT, "=HYPERLINK(\"http://example.invalid\")"
    predictions.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("serve-pages"))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("serve-hostile"), _hostile)


def page(site, *parts) -> BeautifulSoup:
    return BeautifulSoup(site.joinpath(*parts).read_text(encoding="utf-8"), "html.parser")


def text(tag) -> str:
    return " ".join(tag.get_text(" ").split())


def _spec(soup, chart: str) -> dict:
    return json.loads(soup.select_one(f"#spec-{chart}").string)


def test_the_campaign_page_shows_each_level_in_order_with_its_figures(built):
    runs, site = built
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    levels = _trial(runs)["serving"]["levels"]
    load = soup.select_one("#serving table.serving-levels")
    rows = load.select("tbody tr")
    assert [row.th.get_text(strip=True) for row in rows] == ["1", "2"]
    first = [text(td) for td in rows[0].find_all("td")]
    assert first[0] == "concurrency"
    assert first[1].startswith("6") and "0 failed" in first[1]
    assert first[2].startswith("100.0 %") and "meets the declared share (90.0 %)" in first[2]
    assert first[3] == f"{levels[0]['goodput_requests_per_s']:.2f} requests/s"
    assert first[4] == f"{levels[0]['output_tokens_per_s']:.1f} tokens/s"
    # The load generator used more than the cores it may: marked as a disturbed trial is.
    assert first[5].startswith(f"{levels[0]['client_cores']:.2f} cores") and rows[0].select_one(".client-bound.warning")
    assert first[6] == "per chunk"
    latency = soup.select_one("#serving table.serving-latency").select("tbody tr")
    assert [row.th.get_text(strip=True) for row in latency] == ["1", "2"]
    cells = latency[0].find_all("td")
    p50 = levels[0]["ttft_ms"]["p50"]
    assert text(cells[0]) == (f"{p50['value']:.1f} ms 95 %: {p50['low']:.1f} ms – {p50['high']:.1f} ms "
                              f"{p50['requests']} request(s)")
    # p90 has a value but too few requests for its interval: the value, then the interval empty with its reason.
    assert text(cells[1]).startswith(f"{levels[0]['ttft_ms']['p90']['value']:.1f} ms")
    assert cells[1].select_one(".missing")["data-missing"] == levels[0]["ttft_ms"]["p90"]["reason"]
    tpot = levels[1]["tpot_ms"]["p50"]
    assert text(latency[1].find_all("td")[3]).startswith(f"{tpot['value']:.1f} ms 95 %: {tpot['low']:.1f} ms")


def test_the_capacity_and_the_engine_start_are_said(built):
    runs, site = built
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    block = _trial(runs)["serving"]
    capacity = soup.select_one("#serving p.capacity")
    assert text(capacity) == f"Capacity at the objective: level {block['capacity']['level']}."
    assert [text(li) for li in soup.select("#serving ul.caveats li")] == block["capacity"]["caveats"]
    engine = {text(dt): dt.find_next_sibling("dd") for dt in soup.select("#serving dl.engine dt")}
    ready = text(engine["Start to ready"])
    phase = _trial(runs)["phases"]["model_load"]["duration_ns"] / 1e9
    assert ready.startswith(f"{block['engine']['ready_s']:.3f} s from its start to ready (the model_load phase: {phase:.3f} s)")
    assert "pays it again at each restart of the engine" in ready
    assert text(engine["Started by the runner"]) == "yes"
    assert text(engine["Engine"]) == f"transformers {block['engine']['version']}"
    assert text(engine["Command"]) == " ".join(block["engine"]["command"]) and engine["Command"]["translate"] == "no"
    objective = text(soup.select_one("#serving-objective"))
    assert "at most 2000 ms" in objective and "at most 500 ms" in objective and "at least 90.0 %" in objective


def test_the_distributions_chart_every_answered_request_with_the_objective_as_a_rule(built):
    runs, site = built
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    requests = _requests(runs)
    for chart, figure, objective in (("serving-ttft", "ttft_ms", 2000), ("serving-tpot", "tpot_ms", 500)):
        spec = _spec(soup, chart)
        rows = spec["datasets"]["rows"]
        assert len(rows) == len(requests) == 12
        for level in ("1", "2"):
            shares = [row["share"] for row in rows if row["level"] == level]
            values = [row[figure] for row in rows if row["level"] == level]
            assert values == sorted(values) and shares == [round(rank / 6, 4) for rank in range(1, 7)]
        assert {row["objective_ms"] for row in rows} == {objective}
        rules = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
        assert rules and rules[0]["encoding"]["x"] == {"aggregate": "max", "field": "objective_ms", "type": "quantitative"}
    row = requests[0]
    expected = round((row["end_ns"] - row["first_token_ns"]) / (row["output_tokens"] - 1) / 1e6, 3)
    assert expected in [found["tpot_ms"] for found in _spec(soup, "serving-tpot")["datasets"]["rows"]]


def test_throughput_against_p90_ttft_marks_the_capacity_on_both_pages(built):
    runs, site = built
    levels = _trial(runs)["serving"]["levels"]
    for name in ("index.html", "decision.html"):
        spec = _spec(page(site, "campaigns", CAMPAIGN, name), "serving-throughput")
        rows = spec["datasets"]["rows"]
        assert [(row["level"], row["p90_ttft_ms"], row["output_tokens_per_s"]) for row in rows] == [
            (entry["level"], round(entry["ttft_ms"]["p90"]["value"], 3), round(entry["output_tokens_per_s"], 3)) for entry in levels]
        assert {row["capacity_level"] for row in rows} == {2}
        knee = [layer for layer in spec["layer"] if layer["mark"]["type"] == "point"]
        assert "datum.level === datum.capacity_level" in knee[0]["transform"][0]["filter"]


def test_requests_csv_has_every_request_with_its_trial(built):
    runs, site = built
    trial = _trial(runs)
    assert 'href="requests.csv"' in site.joinpath("campaigns", CAMPAIGN, "index.html").read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(site.joinpath("campaigns", CAMPAIGN, "requests.csv").read_text(encoding="utf-8"))))
    requests = _requests(runs)
    assert [(row["trial"], row["variant"], row["id"], row["level"]) for row in rows] == [
        (trial["record_id"], trial["variant"], request["id"], str(request["level"])) for request in requests]
    assert json.loads(rows[0]["chunk_times_ms"]) == requests[0]["chunk_times_ms"]
    assert rows[0]["output_text"] == requests[0]["output_text"]


def test_the_decision_page_ranks_serving_not_corpora(built):
    _, site = built
    soup = page(site, "campaigns", CAMPAIGN, "decision.html")
    assert soup.select_one("#feasible") is None and soup.select_one("#infeasible") is None
    assert "serves up to level 2 within the objective" in text(soup.select_one("#answer"))
    row = soup.select_one("#serving-ranked table tbody tr")
    cells = [text(td) for td in row.find_all("td")]
    assert cells[0] == "1" and cells[1].startswith("2")
    assert cells[2] == "24 output tokens, 6 requests in 1.023 s"
    assert row.select(".missing")[0]["data-missing"] == "not in the catalog: CPU"
    assert "None: every configuration measured serves it" in text(soup.select_one("#serving-not"))


def test_the_indonesian_pages_have_the_same_structure_in_indonesian(built):
    _, site = built
    english, indonesian = page(site, "campaigns", CAMPAIGN, "index.html"), page(site, "id", "campaigns", CAMPAIGN, "index.html")
    for selector in ("#serving table.serving-levels tbody tr", "#serving table.serving-latency tbody tr", "#serving dl.engine dt",
                     "#serving p.capacity", "figure.chart"):
        assert len(indonesian.select(selector)) == len(english.select(selector)) > 0, selector
    assert text(indonesian.select_one("#serving h2")) == "Penyajian: tingkat, latensi, dan kapasitas pada sasaran"
    assert [text(th) for th in indonesian.select("#serving table.serving-levels thead th")][:3] == [
        "Tingkat", "Kedatangan", "Permintaan"]
    assert text(indonesian.select_one("#serving p.capacity")) == "Kapasitas pada sasaran: tingkat 2."
    assert "inti" in text(indonesian.select_one("#serving table.serving-levels tbody td:nth-of-type(6)"))
    decision = page(site, "id", "campaigns", CAMPAIGN, "decision.html")
    assert text(decision.select_one("#serving-ranked h2")).startswith("Melayani pada sasaran")


def test_what_a_request_or_the_engine_says_stays_inert(hostile):
    _, site = hostile
    for path in site.rglob("*.html"):
        html = path.read_text(encoding="utf-8")
        assert HOSTILE_TEXT not in html and HOSTILE_MODEL not in html, path
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    engine = {text(dt): dt.find_next_sibling("dd") for dt in soup.select("#serving dl.engine dt")}
    assert text(engine["Model"]) == HOSTILE_MODEL and not engine["Model"].find("script")
    assert text(engine["Started by the runner"]) == "not started by the runner: its weights are not vouched for"
    rows = list(csv.DictReader(io.StringIO(site.joinpath("campaigns", CAMPAIGN, "requests.csv").read_text(encoding="utf-8"))))
    assert rows[0]["output_text"] == HOSTILE_TEXT
    assert rows[1]["output_text"] == "'=HYPERLINK(\"http://example.invalid\")"  # never run as a formula by a spreadsheet


def test_a_missing_quantile_is_empty_with_its_reason_never_0(hostile):
    _, site = hostile
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    level2 = soup.select("#serving table.serving-latency tbody tr")[1]
    p99 = level2.find_all("td")[2]
    assert p99.select_one(".missing")["data-missing"] == "no request was measured"
    assert "ms" not in text(p99).replace("no request was measured", "")
    assert not soup.select("#serving table.serving-levels tbody tr")[1].select(".client-bound")


def test_a_request_file_outside_the_runs_folder_is_never_read(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "secret.jsonl").write_text('{"id": "secret"}\n', encoding="utf-8")
    trial = {"serving": {"levels": []}, "predictions": {"path": "../secret.jsonl"}}
    assert served.request_rows(trial, runs) is None
    (runs / "inside.jsonl").write_text('{"id": "x"}\nnot json\n', encoding="utf-8")
    assert served.request_rows({**trial, "predictions": {"path": "inside.jsonl"}}, runs) == [{"id": "x"}]


def test_engine_arguments_that_one_variant_leaves_empty_are_said_none(tmp_path):
    """The variant that passes the engine no arguments is "none" in what was compared, not an empty value before a
    comma (tests/fixtures/serve-runs/tiny-serve: one engine as it starts, one with continuous batching)."""
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE.parent / "tiny-serve", runs / "tiny-serve")
    built = build_site(runs=runs, out=tmp_path / "site", languages=("en",), processes=1)
    assert built["failed"] == {}
    caption = page(tmp_path / "site", "campaigns", "tiny-serve", "index.html").find("caption", id="compared-caption")
    cells = {text(row.th): text(row.td) for row in caption.find_parent("table").select("tr")}
    assert cells["engine_args"].startswith("none, --continuous-batching --cb-num-blocks 16"), cells
