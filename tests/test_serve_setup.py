"""A serving campaign from the manual alone (#64): init writes one, doctor and the dry run say what is missing."""

from __future__ import annotations

import re

import pytest

from iteralab.demos.serve import prepare_serving
from iteralab.run.campaign import load_campaign
from tests.tiny import build_causal_lm, corpus_rows, write_corpus, write_serving_campaign


@pytest.fixture(scope="module")
def served_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-setup")
    return build_causal_lm(folder / "lm", word="good"), write_corpus(folder / "corpus.jsonl", corpus_rows(6))


def test_without_the_load_generator_the_dry_run_and_doctor_say_how_to_install_it(served_model, tmp_path, cli,
                                                                                   monkeypatch):
    """Regression for #64: a serving campaign on a machine without AIPerf is refused before any timing (every trial
    would fail), and doctor lists it as missing, with how to install it."""
    model, corpus = served_model
    campaign = write_serving_campaign(tmp_path, model, corpus)
    monkeypatch.setenv("ITERALAB_AIPERF", str(tmp_path / "no-aiperf-here"))
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code != 0 and "ITERALAB_AIPERF" in err and "aiperf==0.13.0" in err and not (tmp_path / "runs").exists()
    code, out, _ = cli("doctor", campaign)
    assert "Missing:" in out and "make setup" in out
    monkeypatch.delenv("ITERALAB_AIPERF")
    code, out, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 0, err
    assert "Serving: transformers serve, started by the runner for every trial" in out


def test_init_writes_a_serving_campaign_that_runs_once_its_values_are_given(served_model, tmp_path, cli):
    """`iteralab init --kind serve` writes the [serving] table and engine variants; its FILL IN lines are the only
    thing the dry run asks for."""
    model, corpus = served_model
    out = tmp_path / "served.toml"
    code, said, _ = cli("init", out, "--kind", "serve", "--model", model, "--corpus", corpus)
    text = out.read_text()
    assert '[serving]\nengine = "transformers"' in text and "[serving.objective]" in text and "engine_args" in text
    assert "[protocol.warmup]" not in text  # each level's warm-up is the load generator's
    assert {line.split("=")[0].strip() for line in text.split("\n") if "FILL IN" in line} == {
        "max_tokens", "levels", "ttft_ms", "tpot_ms"}
    out.write_text(re.sub(r" *# FILL IN[^\n]*", "", text))
    code, said, err = cli("run", out, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 0, err
    assert "continuous-batching (repetition 1)" in said


def test_the_demo_serving_campaign_is_a_valid_campaign_of_two_engines_and_two_levels(tmp_path):
    """The demo's serving campaign (#64): two variants (one request at a time, continuous batching with its KV cache
    bounded) at concurrency 1 and 4, the objective and load declared, beside the generation campaign's model."""
    generation = tmp_path / "generate" / "campaign.toml"
    generation.parent.mkdir()
    campaign = load_campaign(prepare_serving(generation_file=generation))
    serving = campaign.protocol["serving"]
    assert campaign.kind == "serve" and campaign.model_path == tmp_path / "generate" / "lm"
    assert serving["levels"] == [1, 4] and serving["objective"]["load"] == 4 and serving["max_tokens"] == 4
    assert [variant.engine_args for variant in campaign.variants] == [
        "", "--continuous-batching --cb-num-blocks 64 --cb-block-size 32 --cb-max-batch-tokens 512"]
