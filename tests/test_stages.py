"""Validation in stages before any timing (#42, part 4): shortest at batch 1, typical, then the longest at the batch."""

from __future__ import annotations

import pytest

from iteralab.run import stages
from iteralab.store import reading
from iteralab.workloads import classify
from tests.tiny import WORDS, corpus_rows, write_campaign, write_corpus


def campaign_with_long_entries(tmp_path, tiny_model, *, words: int, batch_sizes, max_length: int = 64):
    """The tiny corpus plus two entries of WORDS words, under a max_length of 64 tokens (all the model holds)."""
    rows = corpus_rows() + [{"id": f"long-{index}", "text": " ".join(WORDS[(index + n) % len(WORDS)] for n in range(words)),
                             "label": "pos"} for index in range(2)]
    corpus = write_corpus(tmp_path / "corpus.jsonl", rows)
    path = write_campaign(tmp_path, tiny_model, corpus, repetitions=1, batch_sizes=batch_sizes)
    path.write_text(path.read_text(encoding="utf-8").replace("max_length = 24", f"max_length = {max_length}"),
                    encoding="utf-8")
    return path


def outcome(runs):
    loaded = reading.load(runs)
    assert loaded.problems == []
    (manifest,) = loaded.of_kind("manifest")
    return manifest["stages"], {(t["variant"], t["repetition"]): t for t in loaded.of_kind("trial")}


def test_the_stages_take_the_shortest_entry_then_typical_then_the_longest_at_the_batch():
    entries = [type("Entry", (), {"id": f"e{n}", "text": ""})() for n in range(10)]
    counts = {f"e{n}": 10 - n for n in range(10)}  # e9 is the shortest, e0 the longest
    picked = {name: (size, [entry.id for entry in chosen])
              for name, (size, chosen) in stages.pick(entries, counts, 4).items()}
    assert picked == {"shortest": (1, ["e9"]), "typical": (4, ["e6", "e5", "e4", "e3"]),
                      "longest": (4, ["e3", "e2", "e1", "e0"])}
    assert {name: len(chosen) for name, (_, chosen) in stages.pick(entries[:2], counts, 8).items()} == \
        {"shortest": 1, "typical": 2, "longest": 2}


def test_a_max_length_beyond_the_models_positions_is_refused_before_any_stage(cli, tiny_model, tmp_path):
    """The protocol lets 120 tokens through, the model has 64 positions: refused at the dry run (#61)."""
    campaign = campaign_with_long_entries(tmp_path, tiny_model, words=80, batch_sizes=(1, 4), max_length=120)
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code != 0 and "max_length = 120 is beyond the model's 64 positions" in err
    assert "2 of the corpus's 26 entries would run past them (first: long-0, long-1)" in err


@pytest.mark.slow
def test_entries_longer_than_the_model_holds_fail_the_longest_stage_and_every_trial_names_it(cli, tiny_model, tmp_path,
                                                                                             monkeypatch):
    """A model that fails past 60 tokens (an IndexError, as a table of positions raises): the setup error is found in
    the longest stage, before any timing, and every trial names it with the failing batch (#61)."""
    real_forward = classify.Work.forward

    def forward_failing_past_60(self, encoded):
        if encoded["input_ids"].shape[1] > 60:
            raise IndexError("index out of range in self")
        return real_forward(self, encoded)

    monkeypatch.setattr(classify.Work, "forward", forward_failing_past_60)
    campaign = campaign_with_long_entries(tmp_path, tiny_model, words=62, batch_sizes=(1, 4))
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--quiet")
    assert code == 0, err
    found, trials = outcome(tmp_path / "runs")
    assert found["ran"] is True and set(found["variants"]) == {"b1", "b4"}
    for name in ("b1", "b4"):
        variant = found["variants"][name]
        assert [stage["stage"] for stage in variant["stages"]] == ["shortest", "typical", "longest"]
        assert [stage["outcome"] for stage in variant["stages"]] == ["ok", "ok", "error"]
        longest = variant["stages"][-1]
        assert longest["failed_phase"] == "forward" and longest["tokens_executed"]["max"] == 64  # 62 words + CLS, SEP
        assert longest["ids"] == (["long-1"] if name == "b1" else ["doc-020", "doc-023", "long-0", "long-1"])
        assert longest["failed_at"]["entry_ids"] == longest["ids"] and longest["failed_at"]["tokens"]["padded_to"] == 64
        assert variant["passed"] is False and variant["failed_stage"] == "longest"
        assert "context (tokens per entry)" in variant["points_to"]
        row = trials[(name, 1)]
        assert row["status"] == "error" and row["failed_phase"] == "validation_stages"
        assert row["error"].startswith(f"variant {name} failed its longest validation stage in forward before any timing")
        assert f"on a batch of {len(longest['ids'])} " in row["error"] and "tokens, padded to 64" in row["error"]
        assert row["phases"]["measured_window"]["duration_ns"] is None and row["entries_completed"] == 0
        assert f"variant {name} failed its longest validation stage" in err
    shortest = found["variants"]["b1"]["stages"][0]
    assert shortest["entries"] == 1 and shortest["peak_memory"]["forward"]["host_peak_rss_bytes"] > 0
    assert cli("check", tmp_path / "runs")[0] == 0


@pytest.mark.slow
def test_a_variant_whose_longest_batch_runs_out_of_memory_is_not_timed_and_the_others_are(cli, tiny_model, tmp_path,
                                                                                          monkeypatch):
    """A card's memory stands in here: a batch of 8 entries over 35 tokens raises torch's OutOfMemoryError."""
    import torch

    real_forward = classify.Work.forward

    def forward_on_a_small_card(self, encoded):
        if encoded["input_ids"].shape[0] >= 8 and encoded["input_ids"].shape[1] > 35:
            raise torch.OutOfMemoryError("out of memory: 8 entries of this length do not fit the card")
        return real_forward(self, encoded)

    monkeypatch.setattr(classify.Work, "forward", forward_on_a_small_card)
    campaign = campaign_with_long_entries(tmp_path, tiny_model, words=40, batch_sizes=(1, 4, 8))
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--quiet")
    assert code == 0, err
    found, trials = outcome(tmp_path / "runs")
    assert {name: variant["passed"] for name, variant in found["variants"].items()} == {"b1": True, "b4": True, "b8": False}
    assert [stage["outcome"] for stage in found["variants"]["b8"]["stages"]] == ["ok", "ok", "oom"]
    assert trials[("b1", 1)]["status"] == trials[("b4", 1)]["status"] == "ok"
    assert trials[("b8", 1)]["status"] == "oom" and trials[("b8", 1)]["failed_phase"] == "validation_stages"
    assert "failed its longest validation stage in forward" in trials[("b8", 1)]["error"]


@pytest.mark.slow
def test_run_without_stages_says_so_in_the_manifest(cli, tiny_model, tmp_path):
    campaign = campaign_with_long_entries(tmp_path, tiny_model, words=10, batch_sizes=(1,))
    assert cli("run", campaign, "--runs", tmp_path / "runs", "--quiet", "--no-stages")[0] == 0
    found, trials = outcome(tmp_path / "runs")
    assert found == {"ran": False, "reason": str(stages.SKIPPED)}
    assert trials[("b1", 1)]["status"] == "ok"
