"""Generation campaigns (#42, part 3): a real tiny causal LM through run, check, decide, build, bundle and verify."""

from __future__ import annotations

import io
import json
import shutil
import zipfile

import pytest
from bs4 import BeautifulSoup

from iteralab.core.errors import UserError
from iteralab.run.campaign import load_campaign
from iteralab.run.runner import prepare, run_campaign
from iteralab.run.summary import Progress
from iteralab.store import reading
from iteralab.workloads import generated
from tests.tiny import WORDS, build_causal_lm, corpus_rows, write_corpus, write_generation_campaign


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory):
    return build_causal_lm(tmp_path_factory.mktemp("lm") / "lm")


@pytest.fixture(scope="module")
def generated_once(causal_lm, tmp_path_factory):
    """Run the tiny generation campaign once for the module; each test copies its runs folder."""
    folder = tmp_path_factory.mktemp("generated")
    corpus = write_corpus(folder / "corpus.jsonl", corpus_rows(12))
    # 16 new tokens: decoding takes several times the prefill, so no load on the machine hides it in the timers' noise.
    campaign = write_generation_campaign(folder, causal_lm, corpus, max_new_tokens=16)
    result = run_campaign(campaign_file=campaign, runs_dir=folder / "runs", quiet=True)
    assert not result.interrupted
    return folder / "runs", result


@pytest.fixture
def runs(generated_once, tmp_path):
    return shutil.copytree(generated_once[0], tmp_path / "runs")


@pytest.mark.slow
def test_a_generation_trial_keeps_prefill_decode_outputs_stop_reasons_and_the_kv_cache_beside_its_estimate(generated_once):
    runs, result = generated_once
    assert [t["status"] for t in result.trials] == ["ok"] * 4, [t["error"] for t in result.trials]
    manifest = result.manifest
    assert manifest["workload"] == {"kind": "generate"} and manifest["model"]["architecture"] == "GPT2LMHeadModel"
    assert manifest["protocol"]["generation"]["max_new_tokens"] == 16 and manifest["protocol"]["generation"]["decoding"] == "greedy"
    # "{text} ->": [CLS], the words, "-", ">", [SEP]; the longest corpus text has 30 words, cut at max_length 24.
    longest_prompt = min(24, 30 + 4)
    for trial in result.trials:
        phases = trial["phases"]
        assert list(phases)[4:7] == ["measured_window", "prefill", "decode"]
        assert phases["prefill"]["duration_ns"] > 0 and phases["decode"]["duration_ns"] > 0 and "derived" in phases["decode"]
        figures = trial["generation"]
        assert figures["outputs"] == 12 and figures["output_tokens"] == 12 * 16  # random weights: every output is cut
        assert figures["cut_by_max_new_tokens"] == 12 and figures["stopped_at_eos"] == 0
        assert figures["output_tokens_per_s"] == pytest.approx(12 * 16 / (phases["measured_window"]["duration_ns"] / 1e9))
        assert figures["decode_s_per_new_token"] == pytest.approx(phases["decode"]["duration_ns"] / 1e9 / (12 * 15))
        kv = figures["kv_cache"]
        batch = trial["variant_config"]["batch_size"]
        assert kv["shape"] == {"layers": 1, "kv_heads": 2, "head_dim": 8} and kv["sequences"] == batch
        assert kv["estimate_bytes"] == 2 * 1 * 2 * 8 * kv["tokens"] * batch * 4  # fp32: 4 bytes a value
        # The cache itself, measured on any device: its key and value tensors at the end of the largest batch hold the
        # padded prompt and every new token but the last (#63); the allocator's peak exists only on CUDA.
        assert kv["measured_bytes"] == 2 * 1 * 2 * 8 * (kv["tokens"] - 1) * batch * 4 and kv["measured_reason"] is None
        assert kv["allocator_peak_bytes"] is None and "no CUDA device" in kv["allocator_peak_reason"]
        rows = [json.loads(line) for line in (runs / trial["predictions"]["path"]).read_text().split("\n") if line]
        assert sorted(row["id"] for row in rows) == sorted(row["id"] for row in corpus_rows(12))
        assert all(row["stop_reason"] == "max_new_tokens" and len(row["token_ids"]) == row["new_tokens"] == 16 for row in rows)
        assert kv["tokens"] == longest_prompt + 16  # the longest prompt the window executed, then max_new_tokens
        assert trial["id_check"]["ids_match"] and trial["quality"]["overall"]["cut_by_max_new_tokens"] == 12
    from iteralab.run.summary import format_summary, summarize

    shown = format_summary(summarize(result.trials))
    assert shown.count("output tokens per second: median ") == 2
    b4 = [t for t in result.trials if t["variant"] == "b4"]
    verdict = b4[0]["quality"]["verdicts"][0]
    assert verdict["metric"] == "agreement" and b4[0]["quality"]["reference"]["variant"] == "b1"
    assert b4[0]["quality"]["definitions"]["agreement"].startswith("exact token-sequence match")


@pytest.mark.slow
def test_check_decide_build_bundle_and_verify_take_a_generation_campaign(runs, tmp_path, cli):
    assert cli("check", runs)[0] == 0
    code, out, err = cli("decide", "tiny-generate", "--runs", runs)
    assert code == 0, err
    assert "b1" in out and "b4" in out
    code, _, err = cli("build", "--runs", runs, "--out", tmp_path / "site")
    assert code == 0, err
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "tiny-generate" / "index.html").read_text(), "html.parser")
    assert page.find("h1") is not None
    bundle = tmp_path / "evidence.zip"
    assert cli("bundle", "tiny-generate", "-o", bundle, "--runs", runs)[0] == 0
    with zipfile.ZipFile(bundle) as archive:
        outputs = [name for name in archive.namelist() if "/predictions/" in name]
    assert len(outputs) == 4 and all(name.endswith(".jsonl") for name in outputs)
    code, out, _ = cli("verify", bundle)
    assert code == 0 and "valid" in out


@pytest.mark.slow
def test_outputs_that_end_stop_at_the_end_of_sequence_token_and_decode_is_empty_with_its_reason(tmp_path):
    model = build_causal_lm(tmp_path / "lm", always_end=True)
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(8))
    campaign = write_generation_campaign(tmp_path, model, corpus, repetitions=1, batch_sizes=(4,),
                                         extra="").read_text().replace('reference_variant = "b1"', 'reference_variant = "b4"')
    (tmp_path / "tiny-generate.toml").write_text(campaign, encoding="utf-8")
    result = run_campaign(campaign_file=tmp_path / "tiny-generate.toml", runs_dir=tmp_path / "runs", quiet=True)
    (trial,) = result.trials
    assert trial["status"] == "ok", trial["error"]
    assert trial["generation"]["stopped_at_eos"] == 8 and trial["generation"]["cut_by_max_new_tokens"] == 0
    assert trial["phases"]["decode"]["duration_ns"] is None and "nothing to decode" in trial["phases"]["decode"]["reason"]
    assert trial["generation"]["decode_s_per_new_token"] is None
    rows = [json.loads(line) for line in (tmp_path / "runs" / trial["predictions"]["path"]).read_text().split("\n") if line]
    assert {(row["new_tokens"], row["stop_reason"], row["token_ids"][-1], row["text"]) for row in rows} == {(1, "eos", 3, "")}


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.slow
def test_sampling_runs_once_per_listed_seed_and_keeps_each_seeds_outputs_apart(causal_lm, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(6))
    path = write_generation_campaign(tmp_path, causal_lm, corpus, repetitions=1, batch_sizes=(1, 4))
    path.write_text(path.read_text().replace("max_new_tokens = 4", "max_new_tokens = 4\n\n[generation.sampling]\n"
                                                                   "seeds = [11, 12]\ntemperature = 0.9"), encoding="utf-8")
    terminal = Terminal()
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", progress=Progress(stream=terminal))
    assert [t["status"] for t in result.trials] == ["ok", "ok"], [t["error"] for t in result.trials]
    assert "/12 [" in terminal.getvalue()  # the bar on a terminal counts every output of both seeds
    reference, other = result.trials
    rows = [json.loads(line) for line in (tmp_path / "runs" / other["predictions"]["path"]).read_text().split("\n") if line]
    assert sorted((row["seed"], row["id"]) for row in rows) == sorted((seed, row["id"]) for seed in (11, 12)
                                                                      for row in corpus_rows(6))
    assert other["id_check"]["ids_match"] and other["id_check"]["expected"] == 12
    assert set(other["quality"]["seeds"]) == {"11", "12"} and other["generation"]["outputs"] == 12
    by_seed = generated.read_outputs(tmp_path / "runs" / reference["predictions"]["path"])
    assert set(by_seed) == {f"{row['id']} (seed {seed})" for seed in (11, 12) for row in corpus_rows(6)}


@pytest.mark.slow
def test_a_variant_whose_longest_prompts_do_not_fit_fails_its_last_stage_and_the_others_are_timed(tmp_path, monkeypatch):
    """A model that fails past 24 positions (an IndexError, as a table of positions raises) under max_length 40: the
    longest prompts (33 tokens) fail at batch 4, the shortest fit at batch 1. A max_length beyond the model's own positions
    is refused before any stage (#61), so the model's failure stands in here."""
    from iteralab.workloads import generate

    real_load = generate.load_model

    def load(model_dir, variant, protocol):
        tokenizer, model = real_load(model_dir, variant, protocol)

        def past_24(module, args, kwargs):
            if kwargs.get("position_ids") is not None and int(kwargs["position_ids"].max()) >= 24:
                raise IndexError("index out of range in self")

        model.register_forward_pre_hook(past_24, with_kwargs=True)
        return tokenizer, model

    monkeypatch.setattr(generate, "load_model", load)
    model = build_causal_lm(tmp_path / "lm")
    rows = [*corpus_rows(12), {"id": "long-1", "text": " ".join(WORDS[:25]), "label": "pos"}]
    corpus = write_corpus(tmp_path / "corpus.jsonl", rows)
    path = write_generation_campaign(tmp_path, model, corpus, repetitions=1, batch_sizes=(1, 4))
    path.write_text(path.read_text().replace("max_length = 24", "max_length = 40"), encoding="utf-8")
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, warn=lambda _: None)
    stages = result.manifest["stages"]["variants"]
    assert stages["b4"]["passed"] is False and stages["b4"]["failed_stage"] == "longest"
    assert stages["b4"]["failed_phase"] in ("prefill", "decode")
    assert [stage["outcome"] for stage in stages["b4"]["stages"]] == ["ok", "ok", "error"]
    b4 = next(t for t in result.trials if t["variant"] == "b4")
    assert b4["status"] == "error" and b4["failed_phase"] == "validation_stages" and "longest validation stage" in b4["error"]
    assert "on a batch of 4 entries (" in b4["error"]  # the failing batch's ids and tokens, beside the error (#61)
    assert reading.load(tmp_path / "runs").problems == []


def test_generation_settings_are_checked_with_the_table_and_key(causal_lm, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    path = write_generation_campaign(tmp_path, causal_lm, corpus)
    text = path.read_text()
    path.write_text(text.replace('prompt_template = "{text} ->"\nmax_new_tokens = 4',
                                 'prompt_template = "no slot"\n\n[generation.sampling]\ntemperature = 0.5'))
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    said = str(caught.value)
    assert "[generation] prompt_template: 'no slot' must hold {text} exactly once" in said
    assert "[generation] max_new_tokens: is required" in said
    assert "[generation.sampling] seeds: sampling needs the list of shared seeds" in said
    path.write_text(text.replace("[workload]\nkind = \"generate\"\n", ""))
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    assert "unknown key generation: [generation] belongs to a campaign whose [workload] kind = \"generate\"" in str(caught.value)


def test_a_classifier_is_refused_by_a_generation_campaign_before_any_timing(tiny_model, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    path = write_generation_campaign(tmp_path, tiny_model, corpus)
    with pytest.raises(UserError) as caught:
        prepare(path, tmp_path / "runs")
    assert (f"model folder {tiny_model} was saved as BertForSequenceClassification: a text classifier (it labels texts), "
            "not a causal language model") in str(caught.value)
    assert not (tmp_path / "runs").exists()


def test_a_causal_lm_without_an_end_of_sequence_token_is_refused(tmp_path):
    model = build_causal_lm(tmp_path / "lm")
    for name in ("config.json", "generation_config.json"):
        config = json.loads((model / name).read_text())
        config.pop("eos_token_id", None)
        (model / name).write_text(json.dumps(config))
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer_config.pop("eos_token", None)
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    with pytest.raises(UserError) as caught:
        prepare(write_generation_campaign(tmp_path, model, corpus), tmp_path / "runs")
    assert "names an end-of-sequence token within its vocabulary of 25 (found: [50256])" in str(caught.value)


def test_a_causal_lm_whose_checkpoint_lacks_its_head_is_refused(tmp_path):
    """An untied GPT-2 saved without lm_head.weight: transformers would draw the head at random."""
    from safetensors.torch import load_file, save_file

    model = build_causal_lm(tmp_path / "lm", always_end=True)  # untied: lm_head has weights of its own
    weights = load_file(model / "model.safetensors")
    save_file({name: tensor for name, tensor in weights.items() if not name.startswith("lm_head")},
              model / "model.safetensors", metadata={"format": "pt"})
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    with pytest.raises(UserError) as caught:
        prepare(write_generation_campaign(tmp_path, model, corpus), tmp_path / "runs")
    assert "lacks weights a GPT2LMHeadModel needs (lm_head.weight)" in str(caught.value)


def test_outputs_are_cut_after_the_first_end_of_sequence_token():
    from iteralab.workloads.generate import Work

    work = Work.__new__(Work)
    work.eos = {3}
    assert work.output([7, 8, 3, 3]) == ([7, 8, 3], "eos")
    assert work.output([7, 8, 9, 10]) == ([7, 8, 9, 10], "max_new_tokens")
    assert generated.matches(" Fresh! ", "fresh", "normalised") and not generated.matches(" Fresh! ", "fresh", "exact")


def test_a_model_folders_own_generation_config_does_not_change_the_declared_decoding(tmp_path):
    """A repetition penalty and sampling saved with the model would change the outputs; the campaign's decoding holds."""
    from iteralab.run.campaign import Variant
    from iteralab.workloads import generate

    model = build_causal_lm(tmp_path / "lm")
    config = json.loads((model / "generation_config.json").read_text())
    config.update(repetition_penalty=3.0, no_repeat_ngram_size=1, do_sample=True, temperature=0.5)
    (model / "generation_config.json").write_text(json.dumps(config))
    variant = Variant("b1", "batch", 1, "fp32", "none", False, "sdpa", False, "cpu")
    protocol = {"padding": "longest", "max_length": 24, "generation": {
        "prompt_template": "{text}", "padding_side": "left", "max_new_tokens": 4, "kv_cache": True, "sampling": None}}
    work = generate.Work(*generate.load_model(model, variant, protocol), variant, protocol)
    assert (work.config.repetition_penalty, work.config.no_repeat_ngram_size, work.config.do_sample) == (1.0, 0, False)


@pytest.mark.slow
def test_dynamic_int8_on_a_gpt2_is_refused_in_its_first_stage_rather_than_timed_as_int8(causal_lm, tmp_path):
    """GPT-2 keeps its weights in Conv1D layers, which quantize_dynamic leaves in fp32: the variant would not be int8."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    int8 = '\n[[variants]]\nname = "int8-b4"\nseries = "precision"\nbatch_size = 4\nquantization = "dynamic-int8"\n'
    path = write_generation_campaign(tmp_path, causal_lm, corpus, repetitions=1, batch_sizes=(1,), extra=int8)
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, warn=lambda _: None)
    found = result.manifest["stages"]["variants"]["int8-b4"]
    assert (found["passed"], found["failed_phase"]) == (False, "model_load")
    assert "most of it would stay fp32" in found["error"]
    assert [(t["variant"], t["status"]) for t in result.trials] == [("b1", "ok"), ("int8-b4", "error")]
