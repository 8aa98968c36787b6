"""A failure says where it happened (#61): in every phase (warm-up, measured window, validation stages) and every kind,
the record names the failing batch's entry ids and tokens and, in a generation, prefill or the decode step; the trial's
error says the same, so the campaign and trials pages show it beside the error. The run's summary counts the outputs
stopped at the end of sequence and cut at max_new_tokens."""

from __future__ import annotations

import json

import pytest

from iteralab.run.runner import run_campaign
from iteralab.run.summary import format_summary, run_data, summarize
from iteralab.store import reading
from iteralab.workloads import classify, generate
from tests.tiny import WORDS, build_causal_lm, write_campaign, write_corpus, write_generation_campaign

# Three short prompts first, then one of 19 tokens ("{text} ->": [CLS], 15 words, "-", ">", [SEP]).
ROWS = [{"id": f"short-{n}", "text": "good movie", "label": "pos"} for n in range(3)] + \
    [{"id": "long-1", "text": " ".join(WORDS[:15]), "label": "neg"}]


def failing_past(real_load, position: int):
    """Wrap a kind's load_model so that its model raises IndexError (as a table of positions does) on a forward pass that
    reaches POSITION: the failure comes from the model, never from the runner under test."""
    def load(model_dir, variant, protocol):
        tokenizer, model = real_load(model_dir, variant, protocol)

        def hook(module, args, kwargs):
            ids = kwargs.get("position_ids")
            width = kwargs["input_ids"].shape[1] if kwargs.get("input_ids") is not None else 0
            reached = int(ids.max()) + 1 if ids is not None else width
            if reached > position:
                raise IndexError("index out of range in self")

        model.register_forward_pre_hook(hook, with_kwargs=True)
        return tokenizer, model

    return load


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory):
    return build_causal_lm(tmp_path_factory.mktemp("lm") / "lm")


@pytest.mark.slow
def test_a_failure_in_the_measured_window_or_the_warm_up_names_the_decode_step_and_the_batch(causal_lm, tmp_path,
                                                                                             monkeypatch):
    """b1 warms up on short-0 and fails in its window on long-1; b4's first batch holds long-1, so its warm-up fails.
    Position 19 (the 20th) is read by the first decode step after long-1's 19-token prompt."""
    monkeypatch.setattr(generate, "load_model", failing_past(generate.load_model, 19))
    corpus = write_corpus(tmp_path / "corpus.jsonl", ROWS)
    path = write_generation_campaign(tmp_path, causal_lm, corpus, repetitions=1, max_new_tokens=4)
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, stages=False, warn=lambda _: None)
    b1, b4 = result.trials
    assert (b1["status"], b1["failed_phase"], b4["status"], b4["failed_phase"]) == ("error", "measured_window", "error", "warmup")
    assert b1["phases"]["measured_window"]["failed_at"] == {
        "generation_phase": "decode", "decode_step": 1, "entries": 1, "entry_ids": ["long-1"],
        "tokens": {"min": 19, "max": 19, "padded_to": 19}}
    assert b1["error"].endswith("; in decode step 1 (new token 2), on a batch of 1 entry (long-1) of 19 tokens, padded "
                                "to 19")
    found = b4["phases"]["warmup"]["failed_at"]
    assert (found["generation_phase"], found["decode_step"], found["entry_ids"]) == ("decode", 1, [row["id"] for row in ROWS])
    assert found["tokens"] == {"min": 6, "max": 19, "padded_to": 19}
    assert "in decode step 1 (new token 2), on a batch of 4 entries (short-0, short-1, short-2, long-1) of 6 to 19 tokens, " \
           "padded to 19" in b4["error"]
    assert reading.load(tmp_path / "runs").problems == []  # the records hold it within their schemas


@pytest.mark.slow
def test_a_failed_validation_stage_names_its_phase_step_batch_and_tokens_in_the_manifest_and_the_trial_error(
        causal_lm, tmp_path, monkeypatch):
    """The shortest and typical stages (6-token prompts, 4 new tokens) stay within 19 positions; the longest stage's
    19-token prompt passes its prefill and fails at its first decode step."""
    monkeypatch.setattr(generate, "load_model", failing_past(generate.load_model, 19))
    corpus = write_corpus(tmp_path / "corpus.jsonl", ROWS)
    path = write_generation_campaign(tmp_path, causal_lm, corpus, repetitions=1, batch_sizes=(1,), max_new_tokens=4)
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, warn=lambda _: None)
    stage = result.manifest["stages"]["variants"]["b1"]
    assert (stage["passed"], stage["failed_stage"], stage["failed_phase"]) == (False, "longest", "decode")
    assert stage["failed_at"] == {"generation_phase": "decode", "decode_step": 1, "entries": 1, "entry_ids": ["long-1"],
                                  "tokens": {"min": 19, "max": 19, "padded_to": 19}}
    assert [s.get("new_tokens") for s in stage["stages"]] == [4, 4, None]  # the stages that passed made every new token
    (trial,) = result.trials
    assert trial["error"].startswith("variant b1 failed its longest validation stage in decode before any timing "
                                     "(IndexError: index out of range in self")
    assert "in decode step 1 (new token 2), on a batch of 1 entry (long-1) of 19 tokens, padded to 19)" in trial["error"]


@pytest.mark.slow
def test_a_classification_that_fails_in_its_window_names_the_batch(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(classify, "load_model", failing_past(classify.load_model, 10))
    rows = [{"id": f"short-{n}", "text": "good movie", "label": "pos"} for n in range(3)] + \
        [{"id": "long-1", "text": " ".join(WORDS[:12]), "label": "neg"}]
    path = write_campaign(tmp_path, tiny_model, write_corpus(tmp_path / "corpus.jsonl", rows), repetitions=1,
                          batch_sizes=(1, 2))
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, stages=False, warn=lambda _: None)
    b1, b2 = result.trials
    assert b1["failed_phase"] == "measured_window" and b2["failed_phase"] == "measured_window"
    assert b1["phases"]["measured_window"]["failed_at"] == {"entries": 1, "entry_ids": ["long-1"],
                                                            "tokens": {"min": 14, "max": 14, "padded_to": 14}}
    assert b2["error"].endswith("; on a batch of 2 entries (short-2, long-1) of 4 to 14 tokens, padded to 14")


def generation_trial(variant: str, sequence: int, eos: int, cut: int, *, status: str = "ok") -> dict:
    return {"variant": variant, "created_at": f"2026-12-01T00:00:0{sequence}Z", "sequence": sequence, "status": status,
            "failed_phase": None if status == "ok" else "measured_window", "corpus_accepted": True,
            "phases": {"measured_window": {"duration_ns": 1_000_000_000}},
            "generation": {"output_tokens_per_s": 50.0, "stopped_at_eos": eos, "cut_by_max_new_tokens": cut}}


def test_the_run_summary_and_its_json_count_outputs_stopped_at_the_end_of_sequence_and_cut_at_max_new_tokens():
    trials = [generation_trial("b1", 1, 9, 3), generation_trial("b4", 2, 12, 0), generation_trial("b1", 3, 8, 4)]
    rows = summarize(trials)
    assert [(row["variant"], row["stopped_at_eos"], row["cut_by_max_new_tokens"]) for row in rows] == [
        ("b1", [9, 8], [3, 4]), ("b4", [12], [0])]
    shown = format_summary(rows)
    assert ("outputs per counted trial (run order): stopped at the end-of-sequence token 9 8; cut at max_new_tokens 3 4"
            in shown)
    assert "stopped at the end-of-sequence token 12; cut at max_new_tokens 0" in shown
    result = type("Result", (), {"run_id": "run-1", "records_file": None, "earlier": [], "trials": trials, "manifest": None,
                                 "interrupted": False, "resumed": None, "warnings": []})()
    data = json.loads(json.dumps(run_data(result), default=str))
    assert data["summary"][0]["cut_by_max_new_tokens"] == [3, 4] and data["summary"][0]["stopped_at_eos"] == [9, 8]
    classified = summarize([{**generation_trial("c1", 1, 0, 0), "generation": None}])
    assert "stopped_at_eos" not in classified[0] and "outputs per counted trial" not in format_summary(classified)
