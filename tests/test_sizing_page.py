"""The sizing page's estimate and host memory (#44): dynamic int8 as converted, host RSS above its baseline."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from iteralab.money.quantized import dynamic_int8_bytes
from iteralab.run.campaign import load_campaign
from iteralab.run.runner import run_campaign
from iteralab.site.build import build_site
from iteralab.store import reading
from tests import factory

INT8 = '\n[[variants]]\nname = "int8-b4"\nseries = "precision"\nbatch_size = 4\nquantization = "dynamic-int8"\n'


def sizing_cells(site) -> dict[tuple[str, str], list[str]]:
    page = BeautifulSoup((site / "sizing.html").read_text(encoding="utf-8"), "html.parser")
    return {(row.td.get_text(), row.th.get_text().split(" · ")[0]): [cell.get_text(" ", strip=True) for cell in row.select("td")]
            for row in page.select("tbody tr")}


@pytest.mark.slow
def test_an_int8_variant_is_estimated_as_converted_and_host_rss_is_counted_above_its_baseline(tiny_campaign, tmp_path):
    path = tiny_campaign(repetitions=1, batch_sizes=(1,), extra_variants=INT8)
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert [t["status"] for t in result.trials] == ["ok", "ok"]
    model = result.manifest["model"]
    assert model["dynamic_int8"] == dynamic_int8_bytes(load_campaign(path).model_path)
    for trial in result.trials:
        assert all(phase["host_rss_at_start_bytes"] > 0 for phase in trial["phases"].values() if phase.get("completed"))
    build_site(runs=tmp_path / "runs", out=tmp_path / "site")
    cells = sizing_cells(tmp_path / "site")
    int8 = cells[("tiny", "int8-b4")]
    assert int8[2] == "int8 (Linear layers), fp32 (the rest)" and int8[3].startswith(f"{model['dynamic_int8']['bytes']:,} B")
    assert cells[("tiny", "b1")][2] == "32"
    trial = next(t for t in reading.load(tmp_path / "runs").of_kind("trial") if t["variant"] == "int8-b4")
    phases = trial["phases"]
    above = max(phase["host_peak_rss_bytes"] for name, phase in phases.items() if name != "environment_check"
                and phase.get("host_peak_rss_bytes") is not None) - phases["model_load"]["host_rss_at_start_bytes"]
    assert int8[-1].startswith(f"{above:,} B") and above < phases["model_load"]["host_peak_rss_bytes"] / 2


def test_trials_recorded_without_the_baseline_say_so_instead_of_counting_the_interpreter(tmp_path):
    from iteralab.store import records

    runs = tmp_path / "runs"
    manifest = factory.manifest("old")
    records.append(runs, manifest)
    records.append(runs, factory.trial(manifest))
    build_site(runs=runs, out=tmp_path / "site")
    (row,) = sizing_cells(tmp_path / "site").values()
    assert "no baseline before the model loads was recorded" in row[-1] and "B, counts the interpreter and torch" in row[-1]
