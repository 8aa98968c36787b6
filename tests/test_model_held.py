"""The protocol holds the model: a campaign whose model folder changed is refused before timing, for every kind of work.

Regression for #61: changing [model] path and running again into the same runs folder joined the new model's trials to
the old campaign, scored against the old model's reference.
"""

from __future__ import annotations

import json
import shutil

import pytest

from iteralab.core.errors import UserError
from iteralab.run import runner
from iteralab.store import records
from tests.tiny import (
    build_causal_lm,
    build_model,
    corpus_rows,
    write_adaptation_campaign,
    write_campaign,
    write_corpus,
    write_generation_campaign,
)


def _campaign(kind: str, folder, model):
    corpus = write_corpus(folder / "corpus.jsonl", corpus_rows())
    if kind == "classify":
        return write_campaign(folder, model, corpus, name="held", repetitions=1, batch_sizes=(1,))
    if kind == "generate":
        return write_generation_campaign(folder, model, corpus, name="held", repetitions=1, batch_sizes=(1,))
    return write_adaptation_campaign(folder, model, name="held", repetitions=1)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"classifier": build_model(root / "classifier"), "causal": build_causal_lm(root / "causal")}


@pytest.mark.parametrize("kind", ["classify", "generate", "adapt"])
def test_a_changed_model_folder_is_a_new_campaign_and_a_moved_one_is_the_same(kind, models, tmp_path):
    original = models["causal" if kind == "generate" else "classifier"]
    model = shutil.copytree(original, tmp_path / "model")
    campaign = _campaign(kind, tmp_path, model)
    runs = tmp_path / "runs"
    records.append(runs, runner._manifest(runner.prepare(campaign, runs)))  # a run was started with this model
    # The same files in another folder: the same model, the same campaign.
    moved = shutil.copytree(model, tmp_path / "moved")
    text = campaign.read_text(encoding="utf-8")
    campaign.write_text(text.replace(model.as_posix(), moved.as_posix()), encoding="utf-8")
    assert runner.prepare(campaign, runs).campaign.model_path == moved
    # A changed configuration (another model): refused before timing, naming the file that changed and what to do.
    config = json.loads((moved / "config.json").read_text(encoding="utf-8"))
    (moved / "config.json").write_text(json.dumps({**config, "initializer_range": 0.5}), encoding="utf-8")
    with pytest.raises(UserError, match=r"campaign held was measured with another model .*config\.json changed.*held-r2"):
        runner.prepare(campaign, runs)
    # A resumed run is held to the same model.
    with pytest.raises(UserError, match="another model"):
        runner.prepare(campaign, runs, resume=True)


def test_a_swapped_tokenizer_and_a_declared_revision_are_named(models, tmp_path):
    model = shutil.copytree(models["classifier"], tmp_path / "model")
    campaign = _campaign("classify", tmp_path, model)
    runs = tmp_path / "runs"
    text = campaign.read_text(encoding="utf-8")
    campaign.write_text(text.replace("[model]\n", '[model]\nrevision = "v1"\n'), encoding="utf-8")
    records.append(runs, runner._manifest(runner.prepare(campaign, runs)))
    (model / "vocab.txt").write_text((model / "vocab.txt").read_text(encoding="utf-8") + "extra\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"vocab\.txt changed"):
        runner.prepare(campaign, runs)
    campaign.write_text(text.replace("[model]\n", '[model]\nrevision = "v2"\n'), encoding="utf-8")
    with pytest.raises(UserError, match="revision v1 recorded, v2 declared now"):
        runner.prepare(campaign, runs)
