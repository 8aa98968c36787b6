"""A tiny randomly initialised BERT classifier and corpus, built on disk in seconds."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ["good", "bad", "great", "awful", "movie", "plot", "actor", "scene", "fun", "dull",
         "long", "short", "story", "music", "ending", "the", "a", "was", "very", "not"]


def build_model(folder: Path) -> Path:
    """Save a 1-layer BERT with labels neg/pos and its tokenizer into FOLDER."""
    import torch
    import transformers
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    transformers.utils.logging.disable_progress_bar()

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=2,
                        id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def corpus_rows(count: int = 24, seed: int = 7) -> list[dict]:
    """Return labelled entries of varied length (3 to 30 words)."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        length = [3, 8, 30][index % 3]
        rows.append({"id": f"doc-{index:03d}", "text": " ".join(rng.choice(WORDS) for _ in range(length)),
                     "label": "pos" if index % 2 else "neg"})
    return rows


def write_corpus(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# The protocol both tiny campaigns share (a str.format template, like the campaigns).
PROTOCOL = """\
[protocol]
repetitions = {repetitions}
max_length = 24
padding = "longest"
truncation = "truncate"
seed = 1
reference_variant = "b1"
min_agreement = {min_agreement}
"""

CAMPAIGN = """\
campaign = "{name}"
title = "Tiny test campaign"

[corpus]
path = "{corpus}"
split = "final"

[model]
path = "{model}"

""" + PROTOCOL + """
[protocol.thresholds]
accuracy = {accuracy}

[protocol.buckets]
short = 6
medium = 12
long = "rest"

[protocol.warmup]
batches = 1
passes = 1
{variants}"""


# The tests check what a run records and shows, on a machine the suite's other worker (and whatever else runs) shares:
# a trial the machine disturbed still counts in their figures. The disturbance tests declare their own rule (#49).
DISTURBANCE = "use_disturbed = true"


def _disturbance(rule: str | None) -> str:
    return f"\n[protocol.disturbance]\n{rule}\n" if rule is not None else ""


def write_campaign(folder: Path, model: Path, corpus: Path, *, name="tiny", repetitions=2, batch_sizes=(1, 4, 8),
                   accuracy=0.0, min_agreement=0.9, extra_variants="", disturbance: str | None = DISTURBANCE) -> Path:
    """DISTURBANCE: the body of [protocol.disturbance], or None to leave the table out (iteralab's defaults)."""
    variants = "".join(f'\n[[variants]]\nname = "b{size}"\nseries = "batch"\nbatch_size = {size}\n' for size in batch_sizes)
    path = folder / f"{name}.toml"
    path.write_text(CAMPAIGN.format(name=name, corpus=corpus.as_posix(), model=model.as_posix(), repetitions=repetitions,
                                    accuracy=accuracy, min_agreement=min_agreement, variants=variants + extra_variants)
                    + _disturbance(disturbance), encoding="utf-8")
    return path


def build_causal_lm(folder: Path, *, positions: int = 64, always_end: bool = False, word: str | None = None) -> Path:
    """Save a 1-layer GPT-2 over the tiny vocabulary with a WordPiece tokenizer ([SEP] ends a sequence) into FOLDER.

    ALWAYS_END fixes its final layer norm to one vector whose logits favour [SEP], so every output stops at once; WORD
    makes them favour that word instead, so every output is the word again and again (a served output with text).
    """
    import torch
    import transformers
    from transformers import BertTokenizerFast, GPT2Config, GPT2LMHeadModel

    transformers.utils.logging.disable_progress_bar()
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = (_word_level(vocab) if word else
                 BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), eos_token="[SEP]", bos_token="[CLS]"))
    tokenizer.save_pretrained(folder)
    config = GPT2Config(vocab_size=len(vocab), n_embd=16, n_layer=1, n_head=2, n_positions=positions,
                        bos_token_id=2, eos_token_id=3, pad_token_id=0, tie_word_embeddings=not (always_end or word))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    if always_end or word:
        with torch.no_grad():
            model.transformer.ln_f.weight.zero_()
            model.transformer.ln_f.bias.fill_(1.0)
            model.lm_head.weight.zero_()
            model.lm_head.weight[vocab.index(word) if word else 3] = 1.0  # the only non-zero logit ([SEP], or the word)
    model.save_pretrained(folder)
    return folder


def _word_level(vocab: list[str]):
    """Return a whole-word tokenizer over VOCAB that decodes its words back to text: an engine serving the model returns
    the words as output text (the WordPiece tokenizer above reads these words as [UNK] under transformers 5)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({token: index for index, token in enumerate(vocab)}, unk_token="[UNK]"))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.Whitespace(), decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="[SEP]",
                                   bos_token="[CLS]")


GENERATION = """\
campaign = "{name}"
title = "Tiny generation campaign"

[workload]
kind = "generate"

[corpus]
path = "{corpus}"
split = "final"

[model]
path = "{model}"

[generation]
prompt_template = "{{text}} ->"
max_new_tokens = {max_new_tokens}

""" + PROTOCOL + """
[protocol.buckets]
short = 8
medium = 14
long = "rest"

[protocol.warmup]
batches = 1
passes = 1
{variants}"""


def write_generation_campaign(folder: Path, model: Path, corpus: Path, *, name="tiny-generate", repetitions=2,
                              batch_sizes=(1, 4), max_new_tokens=4, min_agreement=0.0, extra="") -> Path:
    variants = "".join(f'\n[[variants]]\nname = "b{size}"\nseries = "batch"\nbatch_size = {size}\n' for size in batch_sizes)
    path = folder / f"{name}.toml"
    path.write_text(GENERATION.format(name=name, corpus=corpus.as_posix(), model=model.as_posix(), repetitions=repetitions,
                                      max_new_tokens=max_new_tokens, min_agreement=min_agreement,
                                      variants=variants + extra) + _disturbance(DISTURBANCE), encoding="utf-8")
    return path


ADAPTATION = """\
campaign = "{name}"
title = "Tiny adaptation campaign"

[workload]
kind = "adapt"

[corpus]
path = "{corpus}"
split = "final"

[model]
path = "{model}"

[adaptation]
train = "{train}"
learning_rate = 0.001
updates = {updates}
{adaptation}
[adaptation.lora]
rank = 4
alpha = 8
target_modules = ["query", "value"]

[protocol]
repetitions = {repetitions}
max_length = 24
padding = "longest"
truncation = "truncate"
seed = 1
reference_variant = "mb8"

[protocol.thresholds]
accuracy = {accuracy}

[protocol.buckets]
short = 6
medium = 12
long = "rest"

[protocol.warmup]
batches = 0

[[variants]]
name = "mb8"
series = "accumulation"
batch_size = 8

[[variants]]
name = "mb4x2"
series = "accumulation"
batch_size = 4
accumulation = 2

[[variants]]
name = "lora-mb8"
series = "method"
batch_size = 8
method = "lora"
{variants}"""


def write_adaptation_campaign(folder: Path, model: Path, *, name="tiny-adapt", repetitions=2, updates=4, accuracy=0.0,
                              adaptation="", variants="") -> Path:
    """Write a training split (40 entries), a validation split (20 others) and an adaptation campaign over MODEL.

    Three variants: microbatch 8 (the reference), 4 × 2 accumulated (the same effective batch) and LoRA at 8.
    """
    rows = corpus_rows(60, seed=3)
    train = write_corpus(folder / f"{name}-train.jsonl", rows[:40])
    validation = write_corpus(folder / f"{name}-validation.jsonl", rows[40:])
    path = folder / f"{name}.toml"
    path.write_text(ADAPTATION.format(name=name, corpus=validation.name, train=train.name, model=model.as_posix(),
                                      repetitions=repetitions, updates=updates, accuracy=accuracy, adaptation=adaptation,
                                      variants=variants) + _disturbance(DISTURBANCE), encoding="utf-8")
    return path


def failing_on_load(real_load, nth: int, make_error, *, backward: bool = True):
    """Wrap an adaptation's load_model so the NTH model loaded raises MAKE_ERROR() in its classifier's backward pass (or
    forward pass): the failure comes from the model, a dependency, never from the runner under test."""
    loads = {"n": 0}

    def load(model_dir, variant, protocol):
        tokenizer, loaded = real_load(model_dir, variant, protocol)
        loads["n"] += 1
        if loads["n"] == nth:
            def hook(*_):
                raise make_error()

            (loaded.classifier.register_full_backward_hook if backward else loaded.classifier.register_forward_hook)(hook)
        return tokenizer, loaded

    return load


SERVING = """\
campaign = "{name}"
title = "Tiny serving campaign"

[workload]
kind = "serve"

[corpus]
path = "{corpus}"
split = "final"

[model]
path = "{model}"

[serving]
engine = "{engine}"
{url}max_tokens = {max_tokens}
levels = {levels}
requests = {requests}
warmup_requests = 1
ready_timeout_s = 300

[serving.objective]
ttft_ms = 2000
tpot_ms = 500
share = 0.9

""" + PROTOCOL.replace('reference_variant = "b1"', 'reference_variant = "{reference}"') + """
[protocol.buckets]
short = 8
medium = 14
long = "rest"
"""


def write_serving_campaign(folder: Path, model: Path, corpus: Path, *, name="tiny-serve", repetitions=1,
                           variants=(("plain", ()),), levels=(1, 2), requests=4, max_tokens=4, min_agreement=0.0,
                           engine="transformers", url=None, extra="") -> Path:
    """Write a serving campaign over MODEL served by ENGINE; VARIANTS are (name, engine arguments) pairs."""
    declared = "".join(f'\n[[variants]]\nname = "{variant}"\nseries = "engine"\nengine_args = {list(args)!r}\n'
                       .replace("'", '"') for variant, args in variants)
    path = folder / f"{name}.toml"
    path.write_text(SERVING.format(name=name, corpus=corpus.as_posix(), model=model.as_posix(), repetitions=repetitions,
                                   engine=engine, url=f'url = "{url}"\n' if url else "", max_tokens=max_tokens,
                                   levels=list(levels), requests=requests, reference=variants[0][0],
                                   min_agreement=min_agreement) + declared + extra + "\n" + _disturbance(DISTURBANCE),
                    encoding="utf-8")
    return path
