"""Lengths against the model's positions, before any timing (#61): a prompt limit plus max_new_tokens beyond the model's
positions is refused at the dry run, with its keys, the limit and the entries past it; the manifest records the limit;
the validation stages generate every new token they claim; init writes limits that fit; right padding is refused where
a prompt is padded; and the manual's whole campaign files run as printed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from iteralab.core.errors import UserError
from iteralab.run.campaign import load_campaign
from iteralab.run.runner import prepare, run_campaign
from iteralab.run.starter import dry_run, write_starter
from iteralab.workloads import classify, generate, lengths
from tests.tiny import (
    WORDS,
    build_causal_lm,
    build_model,
    corpus_rows,
    write_campaign,
    write_corpus,
    write_generation_campaign,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory):
    return build_causal_lm(tmp_path_factory.mktemp("lm") / "lm")


def long_rows() -> list[dict]:
    """The tiny corpus (prompts of up to 34 tokens with the template) and three of 54, 58 and 62 tokens."""
    return corpus_rows(6) + [{"id": f"long-{n}", "text": " ".join(WORDS[(n + k) % len(WORDS)] for k in range(50 + 4 * n)),
                              "label": "pos"} for n in range(3)]


def with_lengths(path: Path, max_length: int) -> Path:
    path.write_text(path.read_text(encoding="utf-8").replace("max_length = 24", f"max_length = {max_length}"), encoding="utf-8")
    return path


@pytest.mark.parametrize(("max_length", "new_tokens", "past", "fixes"), [
    (60, 8, "2 of the corpus's 9 prompts would run past them (first: long-1, long-2)",
     "lower max_length to at most 56 (truncation = \"truncate\" cuts a longer prompt) or max_new_tokens to at most 4"),
    (100, 4, "1 of the corpus's 9 prompts would run past them (first: long-2)",
     "lower max_length to at most 60 (truncation = \"truncate\" cuts a longer prompt)"),
])
def test_a_prompt_limit_plus_max_new_tokens_beyond_the_models_positions_is_refused_at_the_dry_run(
        causal_lm, tmp_path, max_length, new_tokens, past, fixes):
    corpus = write_corpus(tmp_path / "corpus.jsonl", long_rows())
    path = with_lengths(write_generation_campaign(tmp_path, causal_lm, corpus, max_new_tokens=new_tokens), max_length)
    with pytest.raises(UserError) as caught:
        prepare(path, tmp_path / "runs")
    said = str(caught.value)
    assert said.startswith(f"{path}: [protocol] max_length = {max_length} plus [generation] max_new_tokens = {new_tokens} "
                           f"makes {max_length + new_tokens} tokens, beyond the model's 64 positions (n_positions = 64 in "
                           f"config.json): {past}.")
    assert said.endswith(fixes)
    assert not (tmp_path / "runs").exists()  # before any timing, and before anything is written


def test_a_limit_no_prompt_reaches_is_still_refused_and_one_that_fits_passes(causal_lm, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(6))
    path = with_lengths(write_generation_campaign(tmp_path, causal_lm, corpus, max_new_tokens=8), 60)
    with pytest.raises(UserError, match="none of the corpus's 6 prompts is that long, but the protocol lets 60 tokens through"):
        prepare(path, tmp_path / "runs")
    with_lengths(write_generation_campaign(tmp_path, causal_lm, corpus, max_new_tokens=8), 56)
    campaign = load_campaign(path)
    assert generate.manifest_fields(campaign) == {"context": {
        "positions": 64, "read_from": "n_positions = 64 in config.json", "reason": None, "max_length": 56,
        "max_new_tokens": 8, "longest_sequence": 64,
        "longest_sequence_as": "max_length plus max_new_tokens: the longest prompt the protocol lets through and every new token"}}
    plan = prepare(path, tmp_path / "runs")
    said = generate.plan_lines(plan)[0]
    assert "a longer prompt is cut on the tokenizer's truncation_side, right: its end goes, the template's end with it" in said
    assert said.endswith("Longest sequence 64 tokens (max_length + max_new_tokens); the model holds 64 positions "
                         "(n_positions = 64 in config.json)")


def test_a_classification_whose_max_length_is_beyond_the_models_positions_is_refused(tiny_model, tmp_path):
    rows = [*corpus_rows(6), {"id": "long-0", "text": " ".join(WORDS * 4), "label": "pos"}]
    path = with_lengths(write_campaign(tmp_path, tiny_model, write_corpus(tmp_path / "corpus.jsonl", rows)), 120)
    with pytest.raises(UserError) as caught:
        prepare(path, tmp_path / "runs")
    assert ("[protocol] max_length = 120 is beyond the model's 64 positions (max_position_embeddings = 64 in config.json): "
            "1 of the corpus's 7 entries would run past them (first: long-0)") in str(caught.value)
    fits = load_campaign(write_campaign(tmp_path, tiny_model, tmp_path / "corpus.jsonl"))
    assert classify.manifest_fields(fits)["context"] == {
        "positions": 64, "read_from": "max_position_embeddings = 64 in config.json", "reason": None, "max_length": 24,
        "max_new_tokens": None, "longest_sequence": 24,
        "longest_sequence_as": "max_length: the longest input the protocol lets through"}


def test_the_positions_are_read_as_size_reads_them_and_robertas_padding_offset_is_taken_off():
    assert lengths.positions({"model_type": "llama", "max_position_embeddings": 64})["positions"] == 64
    roberta = lengths.positions({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1})
    assert roberta["positions"] == 512 and "less 2: roberta's position ids start after the padding token's" in roberta["read_from"]
    assert lengths.positions({"model_type": "mamba"}) == {"positions": None, "read_from": None, "reason": lengths.NOT_STATED}


def test_the_validation_stages_generate_every_new_token_even_where_the_model_stops_at_once(tmp_path):
    """A model that ends every output after one token: the decode stage still runs max_new_tokens forward passes."""
    from iteralab.machine.phases import PhaseClock
    from iteralab.run.campaign import Variant

    model = build_causal_lm(tmp_path / "lm", always_end=True)
    variant = Variant("b2", "batch", 2, "fp32", "none", False, "sdpa", False, "cpu")
    protocol = {"padding": "longest", "max_length": 24, "generation": {
        "prompt_template": "{text}", "padding_side": "left", "max_new_tokens": 6, "kv_cache": True, "sampling": None}}
    work = generate.Work(*generate.load_model(model, variant, protocol), variant, protocol)
    forwards = []
    work.model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    assert work.stage(PhaseClock("cpu"), work.encode(["good movie", "a very long dull story"])) == 6
    assert len(forwards) == 1 + 6  # prefill's one pass, then the whole decode: 6 new tokens
    assert work.output(work.generate(work.encode(["good movie"]))[0])[1] == "eos"  # the window itself still stops at eos


@pytest.mark.slow
def test_init_writes_limits_that_fit_the_model_and_its_trials_run(causal_lm, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", long_rows())
    path = write_starter(kind="generate", out=tmp_path / "gen.toml", model=causal_lm, corpus=corpus)
    text = path.read_text(encoding="utf-8")
    assert "max_length + max_new_tokens must stay within the model's 64 positions" in text
    data = tomllib.loads(text)
    assert data["protocol"]["max_length"] + data["generation"]["max_new_tokens"] <= 64
    assert (data["protocol"]["max_length"], data["protocol"]["truncation"]) == (32, "truncate")  # 64 less 32 new tokens
    # The user keeps the starter's max_new_tokens (deletes the FILL IN) and runs one repetition of each variant.
    path.write_text(re.sub(r"# FILL IN: the longest output.*", "", text).replace("repetitions = 5", "repetitions = 1"),
                    encoding="utf-8")
    would_run, said = dry_run(path, tmp_path / "runs")
    assert would_run, said
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, warn=lambda _: None)
    assert [t["status"] for t in result.trials] == ["ok"] * 3, [t["error"] for t in result.trials]
    stages = result.manifest["stages"]["variants"]["b4"]["stages"]
    assert stages[-1]["tokens_executed"]["padded_to"] == 32 and stages[-1]["new_tokens"] == 32  # the whole 64 positions
    assert result.manifest["context"]["longest_sequence"] == 64 and result.manifest["context"]["positions"] == 64


def test_right_padding_is_refused_where_a_prompt_is_padded_and_accepted_at_batch_1(causal_lm, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    path = write_generation_campaign(tmp_path, causal_lm, corpus)
    text = path.read_text(encoding="utf-8").replace("max_new_tokens = 4", 'max_new_tokens = 4\npadding_side = "right"')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    said = str(caught.value)
    assert ('[generation] padding_side: "right" with variant(s) b4 (batch_size above 1 pads the shorter prompts of a '
            "batch): a decoder-only model generates after each row's last position") in said
    assert 'use padding_side = "left" (the default)' in said
    path.write_text(text.replace('padding = "longest"', 'padding = "max_length"'), encoding="utf-8")
    with pytest.raises(UserError, match=r'variant\(s\) b1, b4 \(padding = "max_length" pads every prompt\)'):
        load_campaign(path)
    single = write_generation_campaign(tmp_path, causal_lm, corpus, batch_sizes=(1,), name="single")
    single.write_text(single.read_text().replace("max_new_tokens = 4", 'max_new_tokens = 4\npadding_side = "right"'))
    assert load_campaign(single).protocol["generation"]["padding_side"] == "right"


def whole_file(page: str) -> str:
    """Return the first TOML block of a manual page that is a whole campaign file."""
    blocks = re.findall(r"```toml\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S)
    return next(block for block in blocks if block.startswith("campaign = "))


@pytest.mark.slow
@pytest.mark.parametrize(("page", "kind"), [("generate.md", "generate"), ("classify.md", "classify"),
                                            ("campaign-file.md", "classify")])
def test_each_kinds_whole_campaign_file_in_the_manual_runs_as_printed(page, kind, tmp_path):
    text = whole_file(page)
    data = tomllib.loads(text)
    assert data["workload"]["kind"] == kind
    if kind == "generate":
        build_causal_lm(tmp_path / data["model"]["path"], positions=128)  # a model whose positions hold the file's lengths
    else:
        build_model(tmp_path / data["model"]["path"])
    write_corpus(tmp_path / data["corpus"]["path"], corpus_rows(9))
    path = tmp_path / "campaign.toml"
    path.write_text(text, encoding="utf-8")
    would_run, said = dry_run(path, tmp_path / "runs")  # as printed
    assert would_run, said
    assert f"Campaign {data['campaign']}: 9 entries" in said
    # Then a real run of one repetition each, the rest of the file as printed.
    path.write_text(text.replace("repetitions = 5", "repetitions = 1"), encoding="utf-8")
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, warn=lambda _: None)
    assert {t["status"] for t in result.trials} == {"ok"}, [t["error"] for t in result.trials]
    assert len(result.trials) == len(data["variants"])
