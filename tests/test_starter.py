"""`iteralab init` (#45): a starter campaign filled from a team's own model and corpus, run as written."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from iteralab.core.errors import UserError
from iteralab.run.runner import run_campaign
from iteralab.run.starter import dry_run, to_fill_in, write_starter
from tests.tiny import build_model, corpus_rows, write_corpus


@pytest.mark.slow
def test_a_starter_filled_from_a_model_and_corpus_runs_as_written(tmp_path):
    model = build_model(tmp_path / "team" / "ticket-classifier")
    corpus = write_corpus(tmp_path / "team" / "tickets.jsonl", corpus_rows(30, seed=11))
    path = write_starter(kind="classify", out=tmp_path / "campaigns" / "tickets.toml", model=model, corpus=corpus)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    # Paths relative to the campaign file's folder, as the runner resolves them.
    assert (data["model"]["path"], data["corpus"]["path"]) == ("../team/ticket-classifier", "../team/tickets.jsonl")
    assert "thresholds" not in data["protocol"] and "# [protocol.thresholds]" in path.read_text()  # never guessed
    assert "The model's labels (id2label): neg, pos" in path.read_text()
    assert data["protocol"]["truncation"] == "refuse" and data["protocol"]["max_length"] == 32  # the longest entry
    assert list(data["protocol"]["buckets"]) == ["short", "medium", "long"] and to_fill_in(path) == []
    would_run, plan = dry_run(path, tmp_path / "runs")
    assert would_run and "Plan (trials in order):" in plan
    result = run_campaign(campaign_file=path, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert [t["status"] for t in result.trials] == ["ok"] * 15  # 3 variants × 5 repetitions


@pytest.mark.slow
def test_an_adaptation_starter_makes_one_effective_batch_and_a_bare_starter_says_what_to_fill_in(tmp_path):
    model = build_model(tmp_path / "model")
    rows = corpus_rows(60, seed=3)
    train, validation = write_corpus(tmp_path / "train.jsonl", rows[:40]), write_corpus(tmp_path / "v.jsonl", rows[40:])
    path = write_starter(kind="adapt", out=tmp_path / "tune.toml", model=model, corpus=validation, train=train)
    assert 'target_modules = ["query", "value"]' in path.read_text()  # peft's default for BERT
    would_run, plan = dry_run(path, tmp_path / "runs")
    assert would_run and "mb2x4: all, 2 × 4 × 1 device = 8 examples per update" in plan
    bare = write_starter(kind="generate", out=tmp_path / "bare.toml")
    assert [line.split(": ", 1)[1].split("=")[0].strip() for line in to_fill_in(bare)] == ["path", "path", "max_new_tokens", "max_length"]
    would_run, said = dry_run(bare, tmp_path / "runs")
    # Every line still to fill in is named by the dry run, before the placeholders are read as paths (#60).
    assert not would_run and said.startswith(f"{bare}: 4 mistakes, each to fix:")
    assert '[campaign file] line 10 still says FILL IN (path = "FILL IN: your corpus' in said
    with pytest.raises(UserError, match="exists: choose another name, or --force"):
        write_starter(kind="generate", out=bare)


def test_a_path_starting_with_a_tilde_is_the_users_home(tmp_path, monkeypatch):
    from iteralab.run.campaign import load_campaign
    from tests.tiny import write_campaign

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    campaign = load_campaign(write_campaign(tmp_path, Path("~/models/m"), Path("~/data/c.jsonl")))  # as typed
    assert (campaign.model_path, campaign.corpus_path) == (tmp_path / "home/models/m", tmp_path / "home/data/c.jsonl")


@pytest.mark.slow
def test_init_writes_the_starter_and_says_what_is_left_then_run_works(tmp_path, cli, monkeypatch):
    model = build_model(tmp_path / "model")
    corpus = write_corpus(tmp_path / "tickets.jsonl", corpus_rows(12, seed=5))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("init", "campaigns/tickets.toml", "--model", model, "--corpus", corpus)
    assert code == 0, err
    assert out.startswith("Wrote campaigns/tickets.toml (classify)") and "none was guessed" in out
    assert "The dry run passes: Campaign tickets: 12 entries" in out and "To fill in" not in out
    code, out, err = cli("run", "campaigns/tickets.toml", "--no-stages", "--quiet")
    assert code == 0, err
    assert (tmp_path / "runs" / "tickets" / "records").is_dir()  # runs/ relative to the working folder
    code, out, err = cli("init", "campaigns/tickets.toml")
    assert code == 1 and "exists: choose another name, or --force" in err
    code, out, _ = cli("init", "tune.toml", "--kind", "adapt", "--json")
    data = json.loads(out)
    filled = [line.split(": ", 1)[1].split("=")[0].strip() for line in data["to_fill_in"]]
    assert code == 0 and not data["would_run"] and filled == ["path", "path", "train", "# labels", "target_modules",
                                                              "max_length"]


@pytest.mark.slow
def test_an_adaptation_starter_of_a_bare_encoder_declares_its_new_head_and_no_warm_up(tmp_path):
    """Regression for #61: init --kind adapt wrote [protocol.warmup], which an adaptation does not use, and nothing for
    a folder without a classifier head, so its own dry run was refused."""
    from transformers import BertModel

    classifier = build_model(tmp_path / "classifier")
    encoder = tmp_path / "encoder"
    BertModel.from_pretrained(classifier).save_pretrained(encoder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (classifier / name).is_file():
            (encoder / name).write_bytes((classifier / name).read_bytes())
    rows = corpus_rows(60, seed=3)
    train, validation = write_corpus(tmp_path / "train.jsonl", rows[:40]), write_corpus(tmp_path / "v.jsonl", rows[40:])
    path = write_starter(kind="adapt", out=tmp_path / "tune.toml", model=encoder, corpus=validation, train=train)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert data["adaptation"]["new_head"] is True and "warmup" not in data["protocol"]
    assert dry_run(path, tmp_path / "runs")[0]
    with_head = write_starter(kind="adapt", out=tmp_path / "head.toml", model=classifier, corpus=validation, train=train)
    assert "new_head" not in tomllib.loads(with_head.read_text(encoding="utf-8"))["adaptation"]
