"""A serving campaign's evidence (#64): the bundle carries the load generator's files and the engine's log; compare reads it in requests."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import iteralab

FIXTURE = Path(__file__).parent / "fixtures" / "serve-runs"


def test_the_bundle_carries_aiperf_files_and_the_engine_log_and_verify_checks_them(tmp_path, cli):
    """Regression for #64: "keep AIPerf's own files in the evidence bundle"; a trial names them with their sha256, so
    verify refuses a bundle whose copy of one differs (a bag's manifest made again to match cannot hide it)."""
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    bundle = tmp_path / "tiny-serve.zip"
    code, _, err = cli("bundle", "tiny-serve", "--runs", runs, "--output", bundle)
    assert code == 0, err
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
    serving = sorted(name.split("/data/", 1)[1] for name in names if "/data/serving/" in name)
    kept = sorted(str(path.relative_to(runs / "tiny-serve")) for path in (runs / "tiny-serve" / "serving").rglob("*")
                  if path.is_file())
    assert serving == kept and any(name.endswith("profile_export.jsonl") for name in serving)
    assert cli("verify", bundle)[0] == 0
    # The same trial names the log with another sha256: the bundle made from it no longer carries those bytes.
    log = next((runs / "tiny-serve" / "serving").rglob("engine.log"))
    log.write_text(log.read_text() + "one more line\n")
    damaged = tmp_path / "damaged.zip"
    assert cli("bundle", "tiny-serve", "--runs", runs, "--output", damaged)[0] == 0
    code, out, err = cli("verify", damaged)
    assert code != 0 and "engine.log" in out + err and "sha256 differs" in out + err


def test_compare_sets_two_serving_campaigns_side_by_side_by_capacity_and_cost(cli):
    """Regression for #64: compare read a serving campaign in corpora; it now gives each configuration's capacity at the
    objective and its cost per million accepted output tokens, and the answer by the serving ranking."""
    code, out, err = cli("compare", "tiny-serve", "tiny-serve-w", "--runs", FIXTURE)
    assert code == 0, err
    plain = out[out.index("plain · CPU"):]
    assert "capacity at the objective: level 2 → level 2" in plain
    assert "cost per million accepted output tokens: undefined: not in the catalog: CPU → undefined" in plain
    assert "The answer changed: cb · CPU" in out and "→ plain · CPU" in out


def test_the_python_api_decides_a_serving_campaign_in_both_languages():
    """Regression for #64: the API's decision carries the serving figures, and its answer said in Indonesian."""
    decided = iteralab.open_runs(FIXTURE).decide("tiny-serve", lang="id")
    serving = decided["serving"]
    assert [row["capacity_level"] for row in serving["ranked"]] == [2, 2]
    assert serving["ranked"][0]["per_million_accepted_output_tokens"] is None
    assert serving["ranked"][0]["cost_reason"] == "not in the catalog: CPU"
    assert "melayani hingga tingkat 2 dalam sasaran" in decided["answer_said"]


def test_the_decision_states_a_serving_workload_in_requests_not_corpora(cli):
    """Regression for #64: the decision page's question said "1 corpus like the campaign's" for a serving campaign."""
    code, out, _ = cli("decide", "tiny-serve", "--runs", FIXTURE, "--json")
    assert code == 0 and '"workload": "requests at the campaign\'s declared load' in out and "corpus like" not in out
