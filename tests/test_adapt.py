"""Adaptation campaigns (#43): a real tiny classifier fine-tuned through run, phase by phase, validated and exported."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from iteralab.core.errors import UserError
from iteralab.run import runner
from iteralab.run.campaign import load_campaign
from iteralab.workloads import adapting
from tests.tiny import (
    build_causal_lm,
    build_model,
    corpus_rows,
    failing_on_load,
    write_adaptation_campaign,
    write_corpus,
)

TRAINING_PHASES = ("first_forward", "first_backward", "first_update", "measured_window", "validation", "export")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("classifier") / "model")


@pytest.fixture(scope="module")
def adapted_once(model, tmp_path_factory):
    """Run the tiny adaptation campaign once for the module: microbatch 8, 4 × 2 and LoRA, two repetitions each."""
    folder = tmp_path_factory.mktemp("adapted")
    campaign = write_adaptation_campaign(folder, model)
    result = runner.run_campaign(campaign_file=campaign, runs_dir=folder / "runs", quiet=True)
    assert not result.interrupted
    return folder, result


def refusal(path) -> str:
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    return str(caught.value)


@pytest.mark.slow
def test_every_phase_is_timed_with_its_memory_and_the_adapter_is_exported_and_hashed(adapted_once):
    folder, result = adapted_once
    assert [t["status"] for t in result.trials] == ["ok"] * 6, [t["error"] for t in result.trials]
    for trial in result.trials:
        phases = trial["phases"]
        assert list(phases) == ["environment_check", "model_load", "compilation", *TRAINING_PHASES, "evaluation",
                                "writing_results"]
        for name in TRAINING_PHASES:
            assert phases[name]["duration_ns"] > 0 and phases[name]["completed"]
            assert phases[name]["host_peak_rss_bytes"] > 0 and phases[name]["host_rss_at_start_bytes"] > 0
        assert "warmup" not in phases and "optimizer step" in phases["first_update"]["holds"]
        figures = trial["adaptation"]
        examples = 8 * 4  # the effective batch, 4 updates in the window
        assert figures["effective_batch"]["examples"] == 8 and figures["train_examples"] == examples
        window = phases["measured_window"]["duration_ns"] / 1e9
        assert figures["updates_per_s"] == pytest.approx(4 / window)
        assert trial["throughput_entries_per_s"] == pytest.approx(examples / window)
        assert figures["time_to_validated_model_s"] > window
        assert len(figures["losses"]["window"]) == 4 and figures["losses"]["validation"] > 0
        # Validation: the 20 validation entries predicted, scored against gold, with the verdict.
        assert trial["entries_expected"] == trial["entries_completed"] == 20 and trial["id_check"]["ids_match"]
        assert trial["quality"]["overall"]["accuracy"] is not None and trial["quality"]["verdicts"][0]["metric"] == "accuracy"
        assert trial["corpus_accepted"] is True
        exported = figures["export"]
        folder_on_disk = folder / "runs" / exported["path"]
        for entry in exported["files"]:
            data = (folder_on_disk / entry["name"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"])
        lines = "".join(f"{entry['sha256']}  {entry['name']}\n" for entry in exported["files"])
        assert exported["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
        names = {entry["name"] for entry in exported["files"]}
        if trial["variant"] == "lora-mb8":
            assert {"adapter_model.safetensors", "adapter_config.json"} <= names and "model.safetensors" not in names
            assert figures["parameters"]["trainable_parameters"] < figures["parameters"]["total_parameters"]
        else:
            assert {"model.safetensors", "config.json", "tokenizer.json"} <= names
            assert figures["parameters"]["trainable_parameters"] == figures["parameters"]["total_parameters"]
        estimate = figures["memory"]["estimate"]
        trainable = figures["parameters"]["trainable_parameters"]
        assert (estimate["gradients_bytes"], estimate["optimizer_state_bytes"]) == (4 * trainable, 8 * trainable)  # AdamW
        measured = figures["memory"]["measured"]
        assert measured["label"] == "measured" and measured["gpu_peak_allocated_bytes"] is None
        assert "no GPU" in measured["gpu_reason"] and measured["host_baseline_bytes"] > 0


@pytest.mark.slow
def test_variants_of_equal_effective_batch_see_the_same_examples_and_the_manifest_keeps_the_training_split(adapted_once):
    folder, result = adapted_once
    manifest = result.manifest
    split = manifest["training_split"]
    assert split["entries"] == 40 and (folder / "runs" / split["path"]).read_bytes() == \
        (folder / "tiny-adapt-train.jsonl").read_bytes()
    assert manifest["protocol"]["adaptation"]["train"]["fingerprint"] == split["fingerprint"]
    assert manifest["model"]["methods"]["lora"]["trainable_parameters"] < manifest["model"]["methods"]["all"]["total_parameters"]
    configs = {t["variant"]: t["variant_config"] for t in result.trials}
    assert configs["mb4x2"]["accumulation"] == 2 and configs["lora-mb8"]["method"] == "lora"
    tokens = {t["variant"]: t["adaptation"]["train_tokens"] for t in result.trials}
    # Padding is per microbatch, but real tokens are the texts': the same updates hold the same examples.
    assert tokens["mb8"] == tokens["mb4x2"] == tokens["lora-mb8"]


def test_a_variant_of_another_effective_batch_is_refused_naming_both_products(model, tmp_path):
    campaign = write_adaptation_campaign(tmp_path, model, variants='\n[[variants]]\nname = "mb4"\nbatch_size = 4\n')
    said = refusal(campaign)
    assert ("[variants] mb4: makes an effective batch of 4 × 1 × 1 device = 4 examples per update, but the reference "
            "variant mb8 makes 8 × 1 × 1 device = 8") in said
    declared = write_adaptation_campaign(tmp_path, model, name="declared", variants=(
        '\n[[variants]]\nname = "mb4"\nbatch_size = 4\nchanges_effective_batch = true\n'))
    assert load_campaign(declared).variant("mb4").config()["changes_effective_batch"] is True


def test_settings_an_adaptation_cannot_hold_are_named(model, tmp_path):
    campaign = write_adaptation_campaign(tmp_path, model, variants=(
        '\n[[variants]]\nname = "half"\nbatch_size = 8\nprecision = "fp16"\n'
        '\n[[variants]]\nname = "int8"\nbatch_size = 8\nquantization = "dynamic-int8"\n'))
    said = refusal(campaign)
    assert "fp16 training needs a loss scaler" in said and "dynamic-int8 is for inference only" in said
    no_lora = tmp_path / "no-lora.toml"
    no_lora.write_text(campaign.read_text().replace("[adaptation.lora]\nrank = 4\nalpha = 8\n"
                                                    "target_modules = [\"query\", \"value\"]\n", ""))
    assert 'lora-mb8: method = "lora" needs the table [adaptation.lora]' in refusal(no_lora)


def test_a_classification_campaign_keeps_its_variant_settings_and_refuses_adaptation_keys(tiny_campaign):
    plain = load_campaign(tiny_campaign())
    assert set(plain.variants[0].config()) == {"series", "batch_size", "precision", "quantization", "compile", "attention",
                                               "length_sorted", "device"}
    path = tiny_campaign()
    path.write_text(path.read_text().replace('batch_size = 1\n', 'batch_size = 1\naccumulation = 2\n', 1))
    assert "unknown key(s) accumulation" in refusal(path)


def test_the_training_split_is_part_of_the_protocol_fingerprint(model, tmp_path):
    first = load_campaign(write_adaptation_campaign(tmp_path, model)).protocol
    rows = corpus_rows(60, seed=3)[:40]
    rows[0]["label"] = "pos" if rows[0]["label"] == "neg" else "neg"
    write_corpus(tmp_path / "tiny-adapt-train.jsonl", rows)
    assert load_campaign(tmp_path / "tiny-adapt.toml").protocol["adaptation"]["train"] != first["adaptation"]["train"]


@pytest.mark.slow
def test_a_validation_entry_seen_in_training_is_refused_before_any_timing(model, tmp_path):
    campaign = write_adaptation_campaign(tmp_path, model)
    validation = corpus_rows(60, seed=3)[40:]
    write_corpus(tmp_path / "tiny-adapt-train.jsonl", corpus_rows(60, seed=3)[:39] + validation[:1])
    with pytest.raises(UserError, match=r"1 validation entry is also in the training split .*\(same id or text\): doc-040;"):
        runner.prepare(campaign, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_model_that_cannot_be_adapted_as_declared_is_refused(tmp_path):
    from transformers import BertModel

    base = build_model(tmp_path / "classifier")
    BertModel.from_pretrained(base).save_pretrained(tmp_path / "encoder")  # no head, no labels
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (base / name).exists():
            shutil.copy(base / name, tmp_path / "encoder" / name)
    config = json.loads((tmp_path / "encoder" / "config.json").read_text())
    config.pop("id2label", None), config.pop("label2id", None)
    (tmp_path / "encoder" / "config.json").write_text(json.dumps(config))
    unlabelled = write_adaptation_campaign(tmp_path, tmp_path / "encoder", name="unlabelled")
    with pytest.raises(UserError, match=r"names no labels \(id2label\) and \[adaptation\] labels is not set"):
        runner.prepare(unlabelled, tmp_path / "runs")
    # The encoder's new head must be trained: a subset that leaves it out would validate a random classifier.
    subset = write_adaptation_campaign(tmp_path, tmp_path / "encoder", name="subset", adaptation=(
        'labels = ["neg", "pos"]\nnew_head = true\nsubset = ["bert.encoder"]\n'), variants=(
        '\n[[variants]]\nname = "top"\nbatch_size = 8\nmethod = "subset"\n'))
    with pytest.raises(UserError, match=r"method subset would leave classifier.bias, classifier.weight at the random"):
        runner.prepare(subset, tmp_path / "runs")
    found = runner.prepare(write_adaptation_campaign(tmp_path, tmp_path / "encoder", name="ok", adaptation=(
        'labels = ["neg", "pos"]\nnew_head = true\n')), tmp_path / "runs").model
    assert found["initialised_for_training"] == ["classifier.bias", "classifier.weight"]
    assert found["architecture"] == "BertForSequenceClassification" and found["saved_architectures"] == ["BertModel"]
    lm = build_causal_lm(tmp_path / "lm")
    with pytest.raises(UserError, match="saved as GPT2LMHeadModel: a causal language model"):
        runner.prepare(write_adaptation_campaign(tmp_path, lm, name="lm", adaptation='labels = ["neg", "pos"]\n'),
                       tmp_path / "runs")


@pytest.mark.slow
def test_out_of_memory_in_the_backward_pass_is_a_failure_row_naming_it_and_the_campaign_goes_on(model, tmp_path,
                                                                                                 monkeypatch):
    """Injected into the model's backward pass (a dependency) for the second trial only, not into the runner."""
    import torch

    monkeypatch.setattr(adapting, "load_model", failing_on_load(adapting.load_model, 2, lambda: torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB (injected)")))
    campaign = write_adaptation_campaign(tmp_path, model, repetitions=1)
    result = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    rows = [(t["variant"], t["status"], t["failed_phase"]) for t in result.trials]
    assert rows == [("mb8", "ok", None), ("mb4x2", "oom", "first_backward"), ("lora-mb8", "ok", None)]
    failed = result.trials[1]
    assert "out of memory" in failed["error"] and failed["entries_completed"] == 0 and not failed["corpus_accepted"]
    assert failed["phases"]["first_forward"]["completed"] and failed["phases"]["first_backward"]["completed"] is False
    assert "not reached" in failed["phases"]["measured_window"]["reason"]


@pytest.mark.slow
def test_a_dry_run_says_the_training_split_the_updates_and_each_effective_batch(model, tmp_path):
    from iteralab.run.summary import describe_plan

    said = describe_plan(runner.prepare(write_adaptation_campaign(tmp_path, model), tmp_path / "runs"))
    assert ("Training split tiny-adapt-train.jsonl: 40 entries, shuffled once with seed 1; each trial makes 1 first "
            "update, then 4 in the measured window (adamw, learning rate 0.001, constant schedule)") in said
    assert "  mb4x2: all, 4 × 2 × 1 device = 8 examples per update; trains 4,018 of 4,018 parameters" in said
    assert "  lora-mb8: lora, 8 × 1 × 1 device = 8 examples per update; trains 290 of 4,308 parameters" in said
    refusing = tmp_path / "refusing.toml"
    refusing.write_text((tmp_path / "tiny-adapt.toml").read_text().replace('truncation = "truncate"',
                                                                            'truncation = "refuse"'))
    write_corpus(tmp_path / "tiny-adapt-validation.jsonl", [row for row in corpus_rows(60, seed=3)[40:]
                                                             if len(row["text"].split()) < 20])
    with pytest.raises(UserError, match=r"tiny-adapt-train.jsonl: 13 training entries exceed max_length 24"):
        runner.prepare(refusing, tmp_path / "runs")


@pytest.mark.slow
def test_an_interrupted_adaptation_resumes_and_runs_that_repetition_again(model, tmp_path, monkeypatch):
    from iteralab.machine.phases import Interrupted

    # The second trial is stopped as SIGTERM would stop it, in its first forward.
    monkeypatch.setattr(adapting, "load_model", failing_on_load(adapting.load_model, 2, lambda: Interrupted("SIGTERM"),
                                                                backward=False))
    campaign = write_adaptation_campaign(tmp_path, model, repetitions=1)
    first = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert first.interrupted and [(t["variant"], t["status"], t["failed_phase"]) for t in first.trials] == [
        ("mb8", "ok", None), ("mb4x2", "interrupted", "first_forward")]
    resumed = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, resume=True)
    assert [(t["variant"], t["status"], t.get("retry_of")) for t in resumed.trials] == [
        ("mb4x2", "ok", first.trials[1]["record_id"]), ("lora-mb8", "ok", None)]
    exported = sorted(path.name for path in (tmp_path / "runs" / "tiny-adapt" / "models").iterdir())
    assert exported == sorted(t["record_id"] for t in (first.trials[0], *resumed.trials))


def test_an_adaptations_question_counts_models(model, tmp_path):
    campaign = write_adaptation_campaign(tmp_path, model)
    asked = tmp_path / "asked.toml"
    asked.write_text(campaign.read_text() + '\n[decision]\nmodels = 3\nwindow_hours = 24\n')
    assert load_campaign(asked).protocol["decision"]["corpora"] == 3
    asked.write_text(campaign.read_text() + '\n[decision]\ncorpora = 3\n')
    assert "[decision] corpora: an adaptation campaign's workload is a number of validated models (models = N)" in \
        refusal(asked)
