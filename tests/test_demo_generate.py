"""The demo's causal LM, trained here on the real reviews with the real MiniLM tokenizer, offline."""

from __future__ import annotations

import hashlib
import random
from collections import Counter

import pytest

from iteralab.core.errors import UserError
from iteralab.declared.corpus import Entry, token_counts
from iteralab.demos import classify as demo
from iteralab.demos import generate as demo_generate


@pytest.fixture(scope="module")
def reviews():
    from transformers import AutoTokenizer

    base, corpus_file = demo.locate_inputs()
    entries = demo.read_reviews(corpus_file)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    counts = token_counts(tokenizer, entries)
    tuning, final = demo.split_corpora(entries, counts)
    return base, tuning, final, counts


def _digest(folder) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_training_sequences_are_review_label_end_with_the_loss_on_label_and_end_only(reviews):
    from transformers import AutoTokenizer

    base, tuning, _, _ = reviews
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    train = tuning[:40]
    batches = demo_generate.training_batches(tokenizer, train, demo_generate.RECIPE, random.Random(1))
    rows = [(ids, mask, targets) for b in batches for ids, mask, targets in zip(b["input_ids"].tolist(), b["attention_mask"].tolist(),
                                                                               b["targets"].tolist(), strict=True)]
    assert len(rows) == len(train)
    words = {tokenizer.convert_tokens_to_ids(label): label for label in demo_generate.LABELS}
    seen = Counter()
    for ids, mask, targets in rows:
        length = sum(mask)
        assert mask == [1] * length + [0] * (len(mask) - length) and set(ids[length:]) <= {tokenizer.pad_token_id}
        assert ids[0] == tokenizer.cls_token_id and ids[length - 1] == ids[length - 3] == tokenizer.sep_token_id
        assert length - 2 <= demo_generate.MAX_LENGTH  # the review truncated to 64 tokens, then label and end
        assert targets == [-100] * (length - 2) + ids[length - 2:length] + [-100] * (len(mask) - length)
        seen[words[ids[length - 2]]] += 1
    assert seen == Counter(e.label for e in train)


def test_generation_entries_are_a_balanced_spread_over_lengths_whatever_the_input_order(reviews):
    _, _, final, counts = reviews
    chosen = demo_generate.generation_entries(final, 120)
    assert len(chosen) == len({e.id for e in chosen}) == 120 and {e.id for e in chosen} <= {e.id for e in final}
    assert Counter(e.label for e in chosen) == {"fresh": 60, "rotten": 60}
    shuffled = list(final)
    random.Random(7).shuffle(shuffled)
    assert demo_generate.generation_entries(shuffled, 120) == chosen
    buckets = Counter("short" if counts[e.id] <= 24 else "medium" if counts[e.id] <= 40 else "long" for e in chosen)
    assert buckets["short"] >= 50 and buckets["medium"] >= 25 and buckets["long"] >= 8  # 600/300/100 in final
    assert [e.label for e in chosen[:10]] != [chosen[0].label] * 10  # mixed, not one label after the other
    assert len(demo_generate.generation_entries(final, 7)) == 7
    with pytest.raises(UserError, match="only 1 rotten"):
        demo_generate.generation_entries([Entry("a", "x", "fresh"), Entry("b", "y", "fresh"), Entry("c", "z", "rotten")], 4)


@pytest.mark.slow
def test_trained_model_loads_as_causal_lm_says_a_label_stops_at_end_and_is_reproducible(reviews, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, tuning, final, _ = reviews
    small = tuning[:400]
    here = demo_generate.train_causal_lm(tokenizer_dir=base, tuning=small, target=tmp_path / "here")
    assert here["train_entries"] == 360 and here["heldout_entries"] == 40
    assert here["heldout_stopped_at_end"] >= 36 and here["heldout_label_words"] >= 36
    # Reproducible in a fresh process, shown on a short recipe (64 entries): the whole recipe again cost seconds (#50).
    short = {**demo_generate.RECIPE, "seed": 1, "train_entries": 64}
    other = demo_generate.train_causal_lm(tokenizer_dir=base, tuning=small, target=tmp_path / "other", recipe=short)
    apart = demo_generate.train_causal_lm_apart(tokenizer_dir=base, tuning=small, target=tmp_path / "apart", recipe=short)
    assert _digest(tmp_path / "other") == _digest(tmp_path / "apart")  # the same weights in a fresh process
    assert {k: v for k, v in other.items() if "seconds" not in k} == {k: v for k, v in apart.items() if "seconds" not in k}
    assert _digest(tmp_path / "other") != _digest(tmp_path / "here") and other["train_entries"] == 64

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "here", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "here", local_files_only=True)
    assert type(model).__name__ == "GPT2LMHeadModel" and tokenizer.padding_side == "left"
    special = (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
    assert (model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id) == special
    assert (model.generation_config.bos_token_id, model.generation_config.eos_token_id,
            model.generation_config.pad_token_id) == special
    prompts = [e.text for e in demo_generate.generation_entries(final, 24)]
    encoded = tokenizer(prompts, padding=True, return_tensors="pt")
    assert set(encoded) == {"input_ids", "attention_mask"}  # no token_type_ids for GPT-2 to add to its inputs
    with torch.inference_mode():
        generated = model.generate(**encoded, max_new_tokens=4, do_sample=False)[:, encoded["input_ids"].shape[1]:].tolist()
    stopped = [row[:row.index(tokenizer.sep_token_id)] for row in generated if tokenizer.sep_token_id in row]
    assert len(stopped) >= 22
    assert sum(tokenizer.decode(row) in demo_generate.LABELS for row in stopped) >= 22
    # Left padding changes nothing: each prompt alone gives the same output as in the batch.
    for prompt, row in zip(prompts[:4], generated[:4], strict=True):
        alone = tokenizer([prompt], return_tensors="pt")
        with torch.inference_mode():
            output = model.generate(**alone, max_new_tokens=4, do_sample=False)[0, alone["input_ids"].shape[1]:].tolist()
        assert output == row[:len(output)] and set(row[len(output):]) <= {tokenizer.pad_token_id}


def test_the_demo_generation_campaign_declares_its_smaller_workload_and_its_threshold_before_timing(tmp_path):
    """#42 part 5: 120 reviews, 3 repetitions, batch 1 against batch 8, greedy, the threshold from the held-out figure."""
    from iteralab.run.campaign import load_campaign

    (tmp_path / "campaign.toml").write_text(demo_generate.generation_campaign_text({"heldout_accuracy": 0.7462}),
                                            encoding="utf-8")
    campaign = load_campaign(tmp_path / "campaign.toml")
    assert campaign.kind == "generate" and campaign.name == demo_generate.GENERATE_CAMPAIGN
    assert [(v.name, v.batch_size) for v in campaign.variants] == [("fp32-b1", 1), ("fp32-b8", 8)]
    protocol = campaign.protocol
    assert protocol["repetitions"] == 3 and protocol["thresholds"] == {"reference_match": 0.69}
    assert protocol["generation"]["decoding"] == "greedy" and protocol["generation"]["max_new_tokens"] == 4
    assert protocol["decision"]["corpora"] == 20 and campaign.model_path == tmp_path / "lm"
