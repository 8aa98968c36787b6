"""A model folder is checked before any timing (#42, part 1): real tiny models, refused or recorded."""

from __future__ import annotations

import json
import shutil

import pytest

from iteralab.store import reading
from tests.tiny import WORDS

LABELS = {"id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}


def bert_config(**extra):
    from transformers import BertConfig

    return BertConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64, **LABELS, **extra)


def with_tokenizer_of(folder, tiny_model):
    """Copy the tiny classifier's tokenizer files into FOLDER (the weights stay FOLDER's own)."""
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (tiny_model / name).is_file():
            shutil.copy(tiny_model / name, folder / name)
    return folder


def run_refused(cli, tiny_campaign, model, tmp_path):
    """Run a campaign over MODEL; return the error, after checking that nothing was timed or recorded."""
    campaign = tiny_campaign()
    text = campaign.read_text(encoding="utf-8")
    campaign.write_text(text.replace(text.split('[model]\npath = "')[1].split('"')[0], model.as_posix()), encoding="utf-8")
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--quiet")
    assert code == 1, err
    assert not (tmp_path / "runs").exists() or reading.load(tmp_path / "runs").records == []
    assert "Traceback" not in err
    return err


@pytest.mark.slow
def test_a_base_encoder_given_id2label_by_hand_is_refused(cli, tiny_campaign, tiny_model, tmp_path):
    """The base encoder has no classifier head: transformers would make a random one and every trial would run ok."""
    from transformers import BertModel

    folder = tmp_path / "base"
    BertModel(bert_config()).save_pretrained(folder)
    err = run_refused(cli, tiny_campaign, with_tokenizer_of(folder, tiny_model), tmp_path)
    assert f"model folder {folder} was saved as BertModel" in err and "not a text classifier" in err


@pytest.mark.slow
def test_a_checkpoint_that_lacks_the_head_weights_is_refused_naming_them(cli, tiny_campaign, tiny_model, tmp_path):
    """An older checkpoint names no architecture: transformers' loading information finds the head missing."""
    from transformers import BertModel

    folder = tmp_path / "headless"
    BertModel(bert_config()).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = run_refused(cli, tiny_campaign, with_tokenizer_of(folder, tiny_model), tmp_path)
    assert "the checkpoint lacks weights a BertForSequenceClassification needs (classifier.bias, classifier.weight)" in err
    assert "initialise them at random" in err


@pytest.mark.slow
def test_a_model_folder_without_tokenizer_files_is_refused(cli, tiny_campaign, tiny_model, tmp_path):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, folder / name)
    err = run_refused(cli, tiny_campaign, folder, tmp_path)
    assert f"model folder {folder} has no tokenizer files" in err and "tokenizer.save_pretrained" in err


@pytest.mark.slow
def test_a_causal_language_model_in_a_classification_campaign_is_refused(cli, tiny_campaign, tiny_model, tmp_path):
    """A GPT-2 folder given an id2label was benchmarked quietly as a GPT-2 classifier with a random score head."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "gpt2"
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=5 + len(WORDS), n_positions=64, bos_token_id=2,
                        eos_token_id=3, **LABELS)
    GPT2LMHeadModel(config).save_pretrained(folder)
    err = run_refused(cli, tiny_campaign, with_tokenizer_of(folder, tiny_model), tmp_path)
    assert "was saved as GPT2LMHeadModel: a causal language model (it generates text), not a text classifier" in err


@pytest.mark.slow
def test_the_manifest_records_the_architecture_the_loading_information_and_every_warning(cli, tiny_campaign, tiny_model,
                                                                                        tmp_path):
    """A checkpoint with a weight the model does not use still classifies with trained weights: it runs, and what
    transformers said about the extra weight is in the manifest instead of being silenced."""
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(tiny_model, tmp_path / "extra")
    weights = load_file(folder / "model.safetensors")
    save_file({**weights, "leftover.weight": weights["classifier.bias"].clone()}, folder / "model.safetensors",
              metadata={"format": "pt"})
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1,))
    text = campaign.read_text(encoding="utf-8")
    campaign.write_text(text.replace(tiny_model.as_posix(), folder.as_posix()), encoding="utf-8")
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--quiet")
    assert code == 0, err
    (manifest,) = reading.load(tmp_path / "runs").of_kind("manifest")
    model = manifest["model"]
    assert manifest["workload"] == {"kind": "classify"}
    assert model["architecture"] == "BertForSequenceClassification"
    assert model["saved_architectures"] == ["BertForSequenceClassification"]
    assert model["loading"] == {"missing_keys": [], "unexpected_keys": ["leftover.weight"], "mismatched_keys": [],
                                "error_msgs": []}
    assert any("leftover.weight" in warning and "UNEXPECTED" in warning for warning in model["loading_warnings"])
    assert code == 0 and cli("check", tmp_path / "runs")[0] == 0
