"""The demo's adaptation campaign (#43): real reviews, the demo's classifier trained further, a threshold set before timing."""

from __future__ import annotations

import json
import tomllib

import pytest
from bs4 import BeautifulSoup

from iteralab.declared.corpus import load_corpus, token_counts, write_jsonl
from iteralab.demos import adapt as demo_adapt
from iteralab.demos import classify as demo
from iteralab.run.campaign import load_campaign


@pytest.fixture(scope="module")
def reviews():
    from transformers import AutoTokenizer

    base, corpus_file = demo.locate_inputs()
    entries = demo.read_reviews(corpus_file)
    tuning, final = demo.split_corpora(entries, token_counts(AutoTokenizer.from_pretrained(base, local_files_only=True),
                                                             entries))
    return base, tuning, final


def _written(folder, base, tuning, training):
    """Write the splits and the campaign text into FOLDER as build_adaptation does; return the loaded campaign."""
    for name, entries in zip(("train", "validation"), demo_adapt.adaptation_splits(tuning), strict=True):
        write_jsonl(entries, folder / f"{name}.jsonl")
    (folder / "campaign.toml").write_text(demo_adapt.adaptation_campaign_text(training, base), encoding="utf-8")
    return load_campaign(folder / "campaign.toml")


def test_the_splits_are_disjoint_tuning_reviews_never_the_final_corpus(reviews):
    _, tuning, final = reviews
    train, validation = demo_adapt.adaptation_splits(tuning)
    recipe = demo_adapt.RECIPE
    assert len(train) == (recipe["updates"] + 1) * recipe["effective_batch"] == 336  # each training review seen once
    assert len(validation) == recipe["validation_entries"] == 256
    splits = (train, validation, final)
    for index, one in enumerate(splits):
        for other in splits[index + 1:]:
            assert not {e.id for e in one} & {e.id for e in other} and not {e.text for e in one} & {e.text for e in other}
    assert {e.id for e in train + validation} <= {e.id for e in tuning}
    for split in (train, validation):
        assert {e.label for e in split} == {"fresh", "rotten"}
    assert demo_adapt.adaptation_splits(list(reversed(tuning))) == (train, validation)  # drawn, not taken in order


def test_the_campaign_adapts_the_demo_classifier_on_reviews_its_fine_tuning_never_used(reviews):
    """The demo's classifier trained on the tuning reviews demo.fine_tune drew (same seed, same order); the adaptation
    trains it further on others, and validates it on reviews neither training saw."""
    import random

    _, tuning, _ = reviews
    shuffled = sorted(tuning, key=lambda e: e.id)
    random.Random(demo.SEED).shuffle(shuffled)
    cut = int(len(shuffled) * demo.RECIPE["heldout_share"])
    classifier_heldout, classifier_train = shuffled[:cut], shuffled[cut:][:demo.RECIPE["train_entries"]]
    assert demo_adapt.RECIPE["classifier_train_entries"] == demo.RECIPE["train_entries"] == len(classifier_train)
    train, validation = demo_adapt.adaptation_splits(tuning)
    # Neither the classifier's training reviews nor those it held out (the threshold's figure comes from them).
    assert not {e.id for e in train + validation} & {e.id for e in classifier_train + classifier_heldout}


def test_the_campaign_compares_equal_effective_batches_and_lora_and_says_what_was_cut(reviews, tmp_path):
    base, tuning, _ = reviews
    campaign = _written(tmp_path, base, tuning, {"heldout_accuracy": 0.7343, "heldout_entries": 386})
    assert campaign.kind == "adapt" and campaign.name == demo_adapt.ADAPT_CAMPAIGN and campaign.model_path == base
    variants = {v.name: (v.series, v.batch_size, v.accumulation, v.method, v.precision) for v in campaign.variants}
    assert variants == {"mb16": ("accumulation", 16, 1, "subset", "fp32"), "mb4x4": ("accumulation", 4, 4, "subset", "fp32"),
                        "lora-mb16": ("method", 16, 1, "lora", "fp32")}
    protocol = campaign.protocol
    # The threshold: the recipe's held-out accuracy minus the margin, rounded down, fixed before any timing.
    assert protocol["thresholds"] == {"accuracy": 0.62} and protocol["reference_variant"] == "mb16"
    settings = protocol["adaptation"]
    assert settings["labels"] == ["fresh", "rotten"] and settings["updates"] == 20 and settings["train"]["entries"] == 336
    assert settings["subset"] == [f"bert.encoder.layer.{demo_adapt.ENCODER_LAYERS - 1}", "bert.pooler", "classifier"]
    assert settings["lora"]["rank"] == 8 and settings["lora"]["target_modules"] == ["query", "value"]
    assert protocol["repetitions"] == 1 and protocol["decision"]["corpora"] == 1
    text = (tmp_path / "campaign.toml").read_text(encoding="utf-8")
    assert "Cut to keep the first demo within minutes" in text and "1 repetition instead of 5" in text
    assert "20 updates in the measured window" in text and "0.7343 over 386" in text and "minus 0.0552" in text
    assert "must not be worse than the model" in text and tomllib.loads(text)["protocol"]["thresholds"]


def test_the_demo_encoder_is_the_packaged_encoders_first_layers_unchanged(reviews, tmp_path):
    """The demo's smaller encoder (#42, #43: the first demo within 6 minutes): the packaged MiniLM's first layers, each
    weight as packaged, loaded with nothing missing or new, with its tokenizer."""
    import torch
    from transformers import AutoModel

    base, _, _ = reviews
    demo_adapt.save_encoder(base, tmp_path / "encoder", layers=2)
    small, info = AutoModel.from_pretrained(tmp_path / "encoder", local_files_only=True, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    full = AutoModel.from_pretrained(base, local_files_only=True)
    assert len(small.encoder.layer) == small.config.num_hidden_layers == 2 < full.config.num_hidden_layers
    packaged = full.state_dict()
    kept = small.state_dict()
    assert not any(".layer.2." in name for name in kept)
    assert all(torch.equal(tensor, packaged[name]) for name, tensor in kept.items())
    assert {"tokenizer.json", "vocab.txt"} <= {path.name for path in (tmp_path / "encoder").iterdir()}


def test_the_threshold_follows_the_measured_figure_and_a_changed_recipe_is_measured_again(monkeypatch):
    # 0.7343 - 0.05 - 2 * sqrt(0.7343 * 0.2657 / 256) = 0.6291; 0.5 over 100 reviews: 0.5 - 0.05 - 0.1 = 0.35 exactly
    assert demo_adapt.threshold({"heldout_accuracy": 0.7343}) == 0.62
    monkeypatch.setitem(demo_adapt.RECIPE, "validation_entries", 100)
    assert demo_adapt.threshold({"heldout_accuracy": 0.5}) == 0.35
    before = demo_adapt.folder_name()
    monkeypatch.setitem(demo_adapt.RECIPE, "updates", 21)
    assert demo_adapt.folder_name() != before and demo_adapt.folder_name().startswith("adapt-")


@pytest.mark.slow
def test_the_demo_adaptation_runs_validates_against_its_threshold_and_is_on_the_site(reviews, tmp_path, monkeypatch):
    """The demo's own campaign, scaled down here (1 update in the window, 1 repetition, 32 validation reviews) and
    started from the 3-layer encoder instead of the demo's classifier (whose fine-tuning takes half a minute), so the
    suite stays short: its threshold set from the classifier's figures, then run, then built into a page."""
    from iteralab.run.runner import run_campaign
    from iteralab.site.build import build_site

    base, tuning, _ = reviews
    for key, value in (("updates", 1), ("repetitions", 1), ("validation_entries", 32)):
        monkeypatch.setitem(demo_adapt.RECIPE, key, value)
    write_jsonl(tuning, tmp_path / "tuning.jsonl")
    classifier = {"heldout_accuracy": 0.5, "heldout_entries": 386, "train_entries": 2400}
    (tmp_path / "training.json").write_text(json.dumps(classifier), encoding="utf-8")
    demo_adapt.save_encoder(base, tmp_path / "encoder")
    campaign_file = demo_adapt.prepare_adaptation(workspace=tmp_path, model_dir=tmp_path / "encoder")
    # The encoder has no head: its campaign declares the new one it trains (#61), as the demo's classifier needs none.
    campaign_file.write_text(campaign_file.read_text(encoding="utf-8").replace(
        'train = "train.jsonl"\n', 'train = "train.jsonl"\nnew_head = true\n', 1), encoding="utf-8")
    training = json.loads((campaign_file.parent / "training.json").read_text(encoding="utf-8"))
    assert (training["heldout_accuracy"], training["heldout_entries"]) == (0.5, 386)
    assert len(load_corpus(campaign_file.parent / "validation.jsonl").entries) == 32
    threshold = load_campaign(campaign_file).protocol["thresholds"]["accuracy"]
    assert threshold == demo_adapt.threshold(training) == 0.27  # 0.5 - 0.05 - 2 * sqrt(0.25 / 32) = 0.2732

    run = run_campaign(campaign_file=campaign_file, runs_dir=tmp_path / "runs", quiet=True)
    assert [t["variant"] for t in run.trials] == ["mb16", "mb4x4", "lora-mb16"]
    for trial in run.trials:
        assert trial["status"] == "ok", trial.get("error")
        assert all(trial["phases"][phase]["duration_ns"] > 0 for phase in
                   ("first_forward", "first_backward", "first_update", "measured_window", "validation", "export"))
        accuracy = trial["quality"]["overall"]["accuracy"]
        assert trial["corpus_accepted"] is (accuracy >= threshold)  # the validation verdict, against the measured figure
        exported = trial["adaptation"]["export"]
        assert exported["files"] and all(len(item["sha256"]) == 64 for item in exported["files"])
    adapter = {f["name"] for f in run.trials[2]["adaptation"]["export"]["files"]}
    assert "adapter_model.safetensors" in adapter and "model.safetensors" not in adapter  # LoRA: the adapter alone

    index = build_site(runs=tmp_path / "runs", out=tmp_path / "site", languages=("en",), quiet=True)["index"]
    home = BeautifulSoup(index.read_text(encoding="utf-8"), "html.parser")
    assert any(demo_adapt.ADAPT_CAMPAIGN in (a.get("href") or "") for a in home.find_all("a"))
    page = BeautifulSoup((index.parent / "campaigns" / demo_adapt.ADAPT_CAMPAIGN / "index.html").read_text(encoding="utf-8"),
                         "html.parser")
    shown = page.get_text(" ")
    assert all(name in shown for name in ("mb16", "mb4x4", "lora-mb16"))
