"""The pages of an adaptation campaign (#43), built over a real tiny fine-tuning run: the campaign page's figures and
phase table per configuration, the chart of peak memory per phase and per variant, each trial's phases in order and its
export, the sizing page and the qualification sheet with the estimate beside the measured peaks, each labelled, and a
trial that ran out of memory in its first backward pass named with what the source points to for it.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics

import pytest
from bs4 import BeautifulSoup

from iteralab.run import runner
from iteralab.site.build import build_site
from iteralab.workloads import adapting
from tests.tiny import build_model, failing_on_load, write_adaptation_campaign

CAMPAIGN = "tiny-adapt"
PHASES = ("model_load", "first_forward", "first_backward", "first_update", "measured_window", "validation", "export")
BACKWARD_POINTER = ("the microbatch, the activations it keeps for the backward pass, or the compute strategy (gradient "
                    "checkpointing)")
HOST = "host peak RSS above the baseline before the model loads"


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    """Run the tiny adaptation campaign (mb8, mb4x2, lora-mb8, two repetitions each), the second trial running out of
    memory in its backward pass: a hook on the loaded model raises, not the runner (stages off)."""
    import torch

    folder = tmp_path_factory.mktemp("adapt-pages")
    model = build_model(folder / "model")
    load = failing_on_load(adapting.load_model, 2, lambda: torch.OutOfMemoryError("CUDA out of memory (injected)"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(adapting, "load_model", load)
        campaign = write_adaptation_campaign(folder, model)
        result = runner.run_campaign(campaign_file=campaign, runs_dir=folder / "runs", quiet=True, stages=False)
    assert [(t["status"], t["failed_phase"]) for t in result.trials][:2] == [("ok", None), ("oom", "first_backward")]
    sheets = folder / "sheets"
    sheets.mkdir()
    (sheets / "adapt.toml").write_text(f'candidate = "mb4x2 on an RTX 4090"\ncampaign = "{CAMPAIGN}"\nvariant = "mb4x2"\n'
                                       'gpu = "rtx-4090"\nlots = 1\ndays = 7\n', encoding="utf-8")
    site = folder / "site"
    built = build_site(runs=folder / "runs", out=site, sheets=sheets, languages=("en", "id"), processes=1)
    assert built["failed"] == {}
    return folder, result, site


def rate(value: float) -> str:
    """Say a rate as the pages do: three significant figures, one decimal at least (0.257/s, 2.50/s, 55.5/s)."""
    return f"{value:,.{max(1, 2 - math.floor(math.log10(abs(value)))) if value else 1}f}/s"


def page(site, *parts) -> BeautifulSoup:
    return BeautifulSoup(site.joinpath(*parts).read_text(encoding="utf-8"), "html.parser")


def ok_trials(result, variant: str) -> list[dict]:
    return [t for t in result.trials if t["variant"] == variant and t["status"] == "ok"]


def above_baseline(trials: list[dict], phase: str) -> int:
    """The highest host peak of PHASE above each trial's baseline before the model loaded, from the records (0 when
    every peak stayed under it)."""
    return max(max(0, t["phases"][phase]["host_peak_rss_bytes"] - t["adaptation"]["memory"]["measured"]["host_baseline_bytes"])
               for t in trials)


def test_a_phase_whose_peak_stayed_under_the_baseline_is_at_0_above_it_as_in_the_trials_own_figure():
    """The demo's first adaptation trial drew negative bars: its baseline held what the validation stages had used, and
    later phases' peaks (reset per phase) fell under it; the trial's own figure already said 0."""
    from iteralab.pages.adapted import ABOVE, phase_rows

    phases = {name: {"duration_ns": 1_000_000, "host_peak_rss_bytes": peak}
              for name, peak in zip(PHASES, [900, 1_300, 800, 700, 950, 600, 500], strict=False)}
    trial = {"status": "ok", "phases": phases, "adaptation": {"memory": {"measured": {"host_baseline_bytes": 1_000}}}}
    above = {row["phase"]: row[ABOVE][0] for row in phase_rows([trial])}
    assert above["first_forward"] == 300 and all(value >= 0 for value in above.values())
    assert [name for name, value in above.items() if value == 0] == [name for name in PHASES if name != "first_forward"]


def rows_of(table) -> dict[str, list]:
    return {tr.th.get_text(strip=True): tr.find_all("td") for tr in table.select("tbody tr")}


@pytest.mark.slow
def test_the_campaign_page_has_a_phase_table_per_configuration_gpu_and_host_apart(adapted):
    _, result, site = adapted
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    tables = soup.select("#adaptation table.phases")
    assert len(tables) == 3
    for table in tables:
        label = table.caption.get_text()
        variant = label.split(":")[0].removeprefix("Phases of ").split(" · ")[0]
        rows = rows_of(table)
        assert list(rows) == list(PHASES)  # in the order they run
        heads = [th.get_text() for th in table.thead.find_all("th")]
        assert heads == ["Phase", "Duration", "GPU peak allocated", "GPU peak reserved", "Host peak RSS",
                         "Host peak RSS above the baseline"]
        trials = ok_trials(result, variant)
        for phase, cells in rows.items():
            median = statistics.median(t["phases"][phase]["duration_ns"] / 1e9 for t in trials)
            assert cells[0].get_text().startswith(f"{median:.3f} s"), (variant, phase)  # seconds, as on trials.html
            for gpu in cells[1:3]:  # a CPU run: empty with the runner's reason, never 0
                assert gpu.select_one(".missing") and "no GPU: the variant runs on cpu" in gpu.get_text()
            peak = max(t["phases"][phase]["host_peak_rss_bytes"] for t in trials)
            assert cells[3].get_text().startswith(f"{peak:,} B")
            assert cells[4].get_text().startswith(f"{above_baseline(trials, phase):,} B")
    # The failed repetition of mb4x2 counts in no figure of its phase table: one successful trial is left.
    assert len(ok_trials(result, "mb4x2")) == 1


@pytest.mark.slow
def test_the_campaign_page_gives_the_adaptation_figures_per_configuration(adapted):
    _, result, site = adapted
    table = page(site, "campaigns", CAMPAIGN, "index.html").select_one("#adaptation table.adaptation")
    heads = [th.get_text() for th in table.thead.find_all("th")]
    figures = {row.th.get_text().split(" · ")[0]: dict(zip(heads[1:], [td.get_text(" ", strip=True) for td in row.find_all("td")],
                                                           strict=True))
               for row in table.select("tbody tr")}
    assert set(figures) == {"mb8", "mb4x2", "lora-mb8"}
    assert figures["mb8"]["Effective batch (microbatch × accumulation × devices)"] == "8 × 1 × 1 = 8 examples per update"
    assert figures["mb4x2"]["Effective batch (microbatch × accumulation × devices)"] == "4 × 2 × 1 = 8 examples per update"
    lora = ok_trials(result, "lora-mb8")
    assert figures["lora-mb8"]["Method"] == "lora"
    parameters = lora[0]["adaptation"]["parameters"]
    assert parameters["trainable_parameters"] < parameters["total_parameters"]
    assert figures["lora-mb8"]["Trainable parameters"] == f"{parameters['trainable_parameters']:,}"
    assert figures["lora-mb8"]["Total parameters"] == f"{parameters['total_parameters']:,}"
    for variant, said in figures.items():
        trials = ok_trials(result, variant)
        rates = [t["adaptation"]["updates_per_s"] for t in trials]
        assert said["Updates per second"].startswith(rate(statistics.median(rates))), variant
        examples = [t["adaptation"]["train_examples_per_s"] for t in trials]
        assert said["Training examples per second"].startswith(rate(statistics.median(examples)))
        tokens = [t["adaptation"]["train_tokens_per_s"] for t in trials]
        assert said["Training tokens per second"].startswith(rate(statistics.median(tokens)))
        seconds = [t["adaptation"]["time_to_validated_model_s"] for t in trials]
        assert said["Time to the validated model"].startswith(f"{statistics.median(seconds):.3f} s")
        loss = statistics.median(t["adaptation"]["losses"]["validation"] for t in trials)
        assert said["Validation loss"].startswith(f"{loss:.3f}")
        accuracy = statistics.median(t["quality"]["overall"]["accuracy"] for t in trials)
        assert said["Validation accuracy"].startswith(f"{accuracy:.3f}")


@pytest.mark.slow
def test_the_chart_of_peak_memory_has_a_row_per_phase_and_variant_host_above_its_baseline(adapted):
    _, result, site = adapted
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    spec = json.loads(soup.select_one("#spec-phase-memory").string)
    rows = spec["datasets"]["rows"]
    # On a CPU the GPU counters measured nothing: no bar of theirs, never a bar at 0.
    assert {row["counter"] for row in rows} == {HOST}
    assert [(row["variant"], row["phase"]) for row in rows] == [(v, p) for v in ("mb8", "mb4x2", "lora-mb8") for p in PHASES]
    assert "CPU" in spec["title"]  # the hardware every label shares, said once
    for row in rows:
        expected = above_baseline(ok_trials(result, row["variant"]), row["phase"])
        assert row["mib"] == round(expected / 2**20, 3)
    assert spec["encoding"]["row"]["field"] == "counter" and spec["encoding"]["y"]["field"] == "phase"
    figure = soup.select_one("#chart-phase-memory")
    assert [th.get_text() for th in figure.select("thead th")] == ["variant", "phase", "counter", "MiB"]
    assert len(figure.select("tbody tr")) == len(rows)


@pytest.mark.slow
def test_a_trial_page_shows_the_phases_in_order_and_the_export_hashed(adapted):
    folder, result, site = adapted
    soup = page(site, "campaigns", CAMPAIGN, "trials.html")
    trial = ok_trials(result, "lora-mb8")[0]
    article = soup.select_one(f"#{trial['record_id']}")
    names = [tr.th.get_text() for tr in article.select(f"#{trial['record_id']}-phases tbody tr")]
    assert [name for name in names if name in PHASES] == list(PHASES)
    export = trial["adaptation"]["export"]
    said = article.select_one(f"#{trial['record_id']}-adaptation .export").get_text()
    assert export["path"] in said and f"{export['bytes']:,} bytes" in said and export["sha256"] in said
    assert "adapter" in export["what"] and export["what"] in said
    files = {tr.th.get_text(): [td.get_text() for td in tr.find_all("td")]
             for tr in article.select(f"#{trial['record_id']}-adaptation table tbody tr")}
    folder_on_disk = folder / "runs" / export["path"]
    assert set(files) == {item["name"] for item in export["files"]}
    for name, (size, sha) in files.items():
        data = (folder_on_disk / name).read_bytes()
        assert sha == hashlib.sha256(data).hexdigest() and size.startswith(f"{len(data):,} B")
    labels = [strong.get_text() for strong in article.select(f"#{trial['record_id']}-adaptation .memory strong.label")]
    assert labels == ["estimate", "measured"]


@pytest.mark.slow
def test_the_failed_trial_names_its_phase_and_what_the_source_points_to(adapted):
    _, result, site = adapted
    failed = result.trials[1]
    article = page(site, "campaigns", CAMPAIGN, "trials.html").select_one(f"#{failed['record_id']}")
    assert "in first_backward" in article.select_one(".meta").get_text()
    assert BACKWARD_POINTER in article.select_one(".points-to").get_text()
    failures = page(site, "campaigns", CAMPAIGN, "index.html").select_one("#failures tbody").get_text()
    assert failed["record_id"] in failures and "first_backward" in failures


@pytest.mark.slow
def test_the_sizing_page_labels_the_estimate_and_the_measured_peaks(adapted):
    _, result, site = adapted
    for sizing, labels in ((page(site, "sizing.html"), ("Estimate", "Measured")),
                           (page(site, "id", "sizing.html"), ("Estimasi", "Terukur"))):
        table = sizing.select_one("table.adaptation-memory")
        heads = [th.get_text() for th in table.thead.find_all("th")]
        assert [head.split(":")[0] for head in heads[5:12]] == [labels[0]] * 4 + [labels[1]] * 3
        rows = {tr.th.get_text().split(" · ")[0]: [td.get_text(" ", strip=True) for td in tr.find_all("td")]
                for tr in table.select("tbody tr")}
        assert set(rows) == {"mb8", "mb4x2", "lora-mb8"}
    rows = {tr.th.get_text().split(" · ")[0]: [td.get_text(" ", strip=True) for td in tr.find_all("td")]
            for tr in page(site, "sizing.html").select("table.adaptation-memory tbody tr")}
    estimate = ok_trials(result, "lora-mb8")[0]["adaptation"]["memory"]["estimate"]
    campaign, method, _, _, weights, gradients, optimizer, whole, allocated, reserved, host, failures = rows["lora-mb8"]
    assert (campaign, method) == (CAMPAIGN, "lora")
    assert [weights, gradients, optimizer, whole] == [f"{estimate[key]:,} B ({estimate[key] / 2**20:,.1f} MiB)" for key in
                                                      ("weights_bytes", "gradients_bytes", "optimizer_state_bytes", "total_bytes")]
    assert estimate["total_bytes"] == estimate["weights_bytes"] + estimate["gradients_bytes"] + estimate["optimizer_state_bytes"]
    assert "no GPU" in allocated and "no GPU" in reserved  # measured nothing: empty with the reason, never 0
    measured = max(t["adaptation"]["memory"]["measured"]["host_above_baseline_bytes"] for t in ok_trials(result, "lora-mb8"))
    assert host.startswith(f"{measured:,} B") and failures == "no failed trial"
    failed = result.trials[1]["record_id"]
    assert rows["mb4x2"][-1] == f"{failed} failed in first_backward: the source points to {BACKWARD_POINTER}"


@pytest.mark.slow
def test_the_qualification_sheet_says_adaptation_first_and_the_estimate_beside_the_measurement(adapted):
    _, result, site = adapted
    sheet = page(site, "campaigns", CAMPAIGN, "qualification.html").select_one("#sheet-1")
    assert sheet.find("p").get_text() == "Inference or adaptation: adaptation"
    memory = next(tr for tr in sheet.select("tbody tr") if tr.th.get_text() == "memory per gpu").find_all("td")[1].get_text()
    total = ok_trials(result, "mb4x2")[0]["adaptation"]["memory"]["estimate"]["total_bytes"]
    assert f"estimate (weights + gradients + optimizer state): {total:,} B" in memory
    # Measured on a CPU, not on the sheet's card: the measurement is empty there, the estimate holds on any card.
    assert "measured: GPU peak reserved empty (not measured on this card)" in memory
    assert (f"trial {result.trials[1]['record_id']} failed in first_backward: the source points to {BACKWARD_POINTER}"
            in memory)


@pytest.mark.slow
def test_the_adaptation_pages_load_offline_accessible_with_their_charts_drawn(adapted, reader):
    """The browser test's checks (tests/test_browser.py) over this campaign's pages in both languages: no console error
    or request elsewhere, every chart drawn with marks (the phase chart's panels too), axe-core clean at 1,280 px and at
    a phone's width, where the page does not slide sideways."""
    from tests.test_browser import LAYOUT_RULES, PHONE, axe_violations, charts_drawn

    _, _, site = adapted
    for root in (site, site / "id"):
        for path in (root / "campaigns" / CAMPAIGN / "index.html", root / "campaigns" / CAMPAIGN / "trials.html",
                     root / "campaigns" / CAMPAIGN / "qualification.html", root / "sizing.html"):
            page = reader.open(path.as_uri(), width=1280)
            drawn = charts_drawn(page)
            assert all(marks > 0 for marks in drawn.values()), (path, drawn)
            if path.name == "index.html":
                assert "spec-phase-memory" in drawn, drawn
            assert (reader.errors, reader.outside, reader.dialogs) == ([], [], []), path
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280, path
            assert axe_violations(page) == [], path
            page.set_viewport_size({"width": PHONE, "height": 900})
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE, path
            assert axe_violations(page, LAYOUT_RULES) == [], path
