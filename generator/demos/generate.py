"""The demo's causal LM: no package ships a small one's weights, so a one-block GPT-2 is trained here, once.

It reads a review as the shipped MiniLM tokenizer encodes it ([CLS] review [SEP]) and writes the label word, then
[SEP] as its end of sequence. Its quality is what a model trained for seconds on 3,500 reviews gives, and is stated.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import write_atomically
from iteralab.declared.corpus import Entry, load_corpus, write_jsonl

LABELS = ("fresh", "rotten")
SEED = 20260924
MAX_LENGTH = 64  # the review's tokens, [CLS] and [SEP] included, as the classification demo reads them
# Everything that shapes the trained model; changing it changes the demo's cache key. Measured on the shared 2-core
# machine over the 386 held-out tuning reviews, greedy generation (label word right when it is the first word):
#   1 layer, embeddings from MiniLM, loss on label and end, 2 epochs: 0.746, 24 s of training (chosen);
#   the same with 2 layers: 0.733, 33 s; with random embeddings (2 layers): 0.666, 32 s; 1 epoch (2 layers): the
#   majority label for every review;
#   the loss on every token instead (the output layer at every position), 24 s, on 600 reviews: 0.098, with only
#   79 of 386 outputs a label word.
RECIPE = {
    "version": 1, "seed": SEED, "max_length": MAX_LENGTH, "heldout_share": 0.1, "train_entries": None,
    # Small for speed: one GPT-2 block, 128 wide with 4 heads; a second block cost 40 % more time for no gain in
    # accuracy. 128 positions hold a 64-token review, its label and [SEP], and room for a campaign's max_new_tokens.
    "n_layer": 1, "n_head": 4, "n_embd": 128, "n_positions": 128, "dropout": 0.1,
    # The word embeddings start from the MiniLM encoder's own (same vocabulary), projected on their first 128
    # principal axes: the model starts knowing which words are alike instead of learning it from 3,500 reviews.
    "embeddings": "minilm-pca",
    # The loss is on the label word and the [SEP] after it only: the model has to learn to classify and to stop, not
    # to write reviews, and the output layer (30,522 words) is computed at two positions instead of all of them.
    "loss_on": "label-and-end",
    "epochs": 2, "batch_size": 32, "learning_rate": 1e-3, "length_batches": 8,
    # One thread: the same weights whatever the machine's core count, and no contention on a shared 2-core machine.
    "threads": 1,
}


def train_causal_lm_apart(*, tokenizer_dir: Path, tuning: list[Entry], target: Path, verbose: bool = False,
                          recipe: dict | None = None) -> dict:
    """Train in a fresh process, so the memory training took is not in the campaign's RSS figures."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_train_keywords, (tokenizer_dir, tuning, target, verbose, recipe))


def _train_keywords(tokenizer_dir: Path, tuning: list[Entry], target: Path, verbose: bool, recipe: dict | None) -> dict:
    """Call train_causal_lm with keywords (a pool passes positional arguments)."""
    return train_causal_lm(tokenizer_dir=tokenizer_dir, tuning=tuning, target=target, verbose=verbose, recipe=recipe)


def split_tuning(tuning: list[Entry], share: float = RECIPE["heldout_share"]) -> tuple[list[Entry], list[Entry]]:
    """Set a share of the tuning reviews aside, drawn with the seed: (held out, train)."""
    shuffled = sorted(tuning, key=lambda e: e.id)
    random.Random(SEED).shuffle(shuffled)
    cut = int(len(shuffled) * share)
    return shuffled[:cut], shuffled[cut:]


def train_causal_lm(*, tokenizer_dir: Path, tuning: list[Entry], target: Path, verbose: bool = False,
                    recipe: dict | None = None) -> dict:
    """Train the GPT-2 on the tuning reviews (CPU, seeded), save it to TARGET, and measure it by greedy generation."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    recipe = recipe or RECIPE
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(recipe["seed"])
    heldout, train = split_tuning(tuning, recipe["heldout_share"])
    train = train[:recipe.get("train_entries")]
    # Saved with the model: left padding for batched generation, and ids and mask only (given token_type_ids, GPT-2
    # would add the embedding of word 0, [PAD], to every position, which it never saw in training).
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True, padding_side="left",
                                              model_input_names=["input_ids", "attention_mask"])
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe["threads"])
    try:
        model = build_model(tokenizer, recipe, Path(tokenizer_dir))
        started, cpu = time.monotonic(), time.process_time()
        _fit(model, tokenizer, train, recipe, verbose)
        seconds, cpu = round(time.monotonic() - started, 1), round(time.process_time() - cpu, 1)
        model.eval()
        outputs = generate_labels(model, tokenizer, [e.text for e in heldout])
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return {"train_entries": len(train), "heldout_entries": len(heldout), "training_seconds": seconds,
            "training_cpu_seconds": cpu,
            "heldout_accuracy": sum(o["word"] == e.label for o, e in zip(outputs, heldout, strict=True)) / max(len(heldout), 1),
            "heldout_stopped_at_end": sum(o["stopped"] for o in outputs),
            "heldout_label_words": sum(o["word"] in LABELS for o in outputs)}


def build_model(tokenizer, recipe: dict, encoder_dir: Path):
    """Build the untrained GPT-2 with the tokenizer's special tokens: bos [CLS], eos [SEP], pad [PAD]."""
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=recipe["n_positions"], n_embd=recipe["n_embd"],
                        n_layer=recipe["n_layer"], n_head=recipe["n_head"], resid_pdrop=recipe["dropout"],
                        embd_pdrop=recipe["dropout"], attn_pdrop=recipe["dropout"], bos_token_id=tokenizer.cls_token_id,
                        eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    model = GPT2LMHeadModel(config)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    if recipe["embeddings"] == "minilm-pca":
        with torch.no_grad():
            model.transformer.wte.weight.copy_(_projected_embeddings(encoder_dir, recipe["n_embd"]))
    return model


def _projected_embeddings(encoder_dir: Path, width: int):
    """Project the MiniLM word embeddings on their first WIDTH principal axes, scaled to GPT-2's initial spread (0.02)."""
    import torch
    from safetensors import safe_open

    with safe_open(str(encoder_dir / "model.safetensors"), "pt") as weights:
        words = weights.get_tensor("embeddings.word_embeddings.weight").float()
    centred = words - words.mean(0)
    _, _, axes = torch.linalg.svd(centred.T @ centred)  # symmetric: deterministic up to sign, fixed below
    axes = axes[:width]
    axes = axes * torch.where(axes.sum(1, keepdim=True) < 0, -1.0, 1.0)
    projected = centred @ axes.T
    return projected * (0.02 / projected.std())


def training_batches(tokenizer, train: list[Entry], recipe: dict, rng: random.Random) -> list[dict]:
    """Encode [CLS] review [SEP] label [SEP], right-padded, in batches of similar length; note where the label is."""
    import torch

    reviews = tokenizer([e.text for e in train], truncation=True, max_length=recipe["max_length"])["input_ids"]
    words = {label: tokenizer(label, add_special_tokens=False)["input_ids"] for label in LABELS}
    sequences = [(ids, ids + words[e.label] + [tokenizer.sep_token_id]) for ids, e in zip(reviews, train, strict=True)]
    rng.shuffle(sequences)
    size, pool = recipe["batch_size"], recipe["batch_size"] * recipe["length_batches"]
    sequences = [s for start in range(0, len(sequences), pool) for s in sorted(sequences[start:start + pool], key=lambda s: len(s[1]))]
    batches = []
    for start in range(0, len(sequences), size):
        chunk = sequences[start:start + size]
        width = max(len(full) for _, full in chunk)
        ids = torch.full((len(chunk), width), tokenizer.pad_token_id)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        targets = torch.full((len(chunk), width), -100)
        for row, (prompt, full) in enumerate(chunk):
            ids[row, :len(full)] = torch.tensor(full)
            mask[row, :len(full)] = 1
            first = len(prompt) if recipe["loss_on"] == "label-and-end" else 1
            targets[row, first:len(full)] = torch.tensor(full[first:])
        batches.append({"input_ids": ids, "attention_mask": mask, "targets": targets})
    rng.shuffle(batches)
    return batches


def _fit(model, tokenizer, train: list[Entry], recipe: dict, verbose: bool) -> None:
    """Run the epochs (AdamW, one-cycle learning rate, gradients clipped at 1)."""
    import torch

    rng = random.Random(recipe["seed"])
    parameters = list(model.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=recipe["learning_rate"], weight_decay=0.01)
    batches = [b for _ in range(recipe["epochs"]) for b in training_batches(tokenizer, train, recipe, rng)]
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=recipe["learning_rate"], total_steps=max(len(batches), 1),
                                                   pct_start=0.1)
    model.train()
    for step, batch in enumerate(batches):
        optimizer.zero_grad()
        loss = _target_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
        if verbose and step % 20 == 0:
            print(f"training the demo's causal LM: batch {step + 1}/{len(batches)}, loss {loss.item():.3f}", file=sys.stderr, flush=True)


def _target_loss(model, batch: dict):
    """Cross-entropy where a target is; position t predicts token t + 1, and the output layer runs there only."""
    import torch

    hidden = model.transformer(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    targets = batch["targets"][:, 1:]
    keep = targets != -100
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[:, :-1][keep]), targets[keep])


def generate_labels(model, tokenizer, texts: list[str], *, batch_size: int = 64, max_new_tokens: int = 4) -> list[dict]:
    """Generate greedily as a campaign would (left padding); return each output's text, first word and stop reason."""
    import torch

    tokenizer.padding_side = "left"  # as saved; said here because the generation depends on it
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            encoded = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, max_length=MAX_LENGTH,
                                return_tensors="pt")
            generated = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False)
            for row in generated[:, encoded["input_ids"].shape[1]:].tolist():
                stopped = tokenizer.sep_token_id in row
                row = row[:row.index(tokenizer.sep_token_id)] if stopped else row
                text = tokenizer.decode(row, skip_special_tokens=True)
                outputs.append({"text": text, "word": (text.split() or [""])[0], "stopped": stopped})
    return outputs


def generation_entries(final: list[Entry], count: int = 120) -> list[Entry]:
    """Take COUNT final reviews spread over lengths (every k-th by length), classes balanced, each label the reference."""
    by_label = {label: sorted((e for e in final if e.label == label), key=lambda e: (len(e.text), e.id)) for label in LABELS}
    chosen = []
    for index, label in enumerate(LABELS):
        pool, wanted = by_label[label], count // len(LABELS) + (index < count % len(LABELS))
        if wanted > len(pool):
            raise UserError(f"only {len(pool)} {label} reviews for {wanted} generation entries")
        chosen += [pool[(2 * i + 1) * len(pool) // (2 * wanted)] for i in range(wanted)]
    # A fixed order that mixes lengths and labels, drawn from the ids so it does not depend on the input order.
    return sorted(chosen, key=lambda e: hashlib.sha256(e.id.encode()).hexdigest())


GENERATE_CAMPAIGN = "demo-rotten-tomatoes-generate"
GENERATE_ENTRIES = 120
MARGIN = 0.05  # the reference-match threshold sits this far under the held-out figure, as the classifier's does


def recipe_key() -> str:
    """Name the trained LM's folder by its recipe: a changed recipe trains anew, an unchanged one is reused."""
    return hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode()).hexdigest()[:12]


def folder_name() -> str:
    """Return the folder, beside the demo's corpora, that holds the trained LM, its prompts and its campaign."""
    return f"generate-{recipe_key()}"


def build_whole(folder: Path, fill, recipe: dict) -> None:
    """Call FILL(building) on a folder beside FOLDER, keep its figures with RECIPE in training.json, then put the folder
    in FOLDER's place: it appears whole or not at all."""
    building = folder.with_name(folder.name + f".building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    training = fill(building)
    (building / "training.json").write_text(json.dumps({**training, "recipe": recipe}, indent=2, sort_keys=True),
                                            encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(building, folder)


def build_generation(*, folder: Path, tokenizer_dir: Path, tuning: list[Entry], final: list[Entry], verbose: bool) -> None:
    """Write the prompts and train the LM into FOLDER, which appears whole or not at all."""

    def fill(building: Path) -> dict:
        write_jsonl(generation_entries(final, GENERATE_ENTRIES), building / "prompts.jsonl")
        return train_causal_lm_apart(tokenizer_dir=tokenizer_dir, tuning=tuning, target=building / "lm", verbose=verbose)

    build_whole(folder, fill, RECIPE)


def kept_campaign(folder: Path, build, text_of, log, saying: str) -> Path:
    """Build FOLDER once (BUILD, cached by its recipe), write its campaign from its training figures; return the file."""
    if not (folder / "training.json").is_file():
        if log:
            log(saying)
        build()
    training = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    campaign_file = folder / "campaign.toml"
    text = text_of(training)
    if not campaign_file.is_file() or campaign_file.read_text(encoding="utf-8") != text:
        write_atomically(campaign_file, text)
    return campaign_file


def prepare_generation(*, workspace: Path, tokenizer_dir: Path, log=None) -> Path:
    """Train the LM once beside the demo's corpora (cached by its recipe); write the generation campaign; return it."""
    folder = workspace / folder_name()
    return kept_campaign(folder, lambda: build_generation(
        folder=folder, tokenizer_dir=tokenizer_dir, tuning=list(load_corpus(workspace / "tuning.jsonl").entries),
        final=list(load_corpus(workspace / "final.jsonl").entries), verbose=log is not None),
        generation_campaign_text, log, f"first run: training the demo's small causal LM once (about 30 s; cached in {folder})")


def floor_hundredth(value: float) -> float:
    """Round VALUE down to two places, as the demos' thresholds are: first to 9 places, so that a float just under a
    two-place figure (0.61 - 0.05 is 0.5599999...) is not cut a hundredth lower."""
    return math.floor(round(value * 100, 9)) / 100


def generation_campaign_text(training: dict) -> str:
    """Write the demo's generation campaign: the label word generated for 120 reviews, batch 1 against batch 8."""
    threshold = floor_hundredth(training["heldout_accuracy"] - MARGIN)
    lines = [
        f'campaign = "{GENERATE_CAMPAIGN}"',
        f'title = "Demo: generate the verdict word for {GENERATE_ENTRIES} film reviews (a one-block GPT-2 trained for '
        'seconds, CPU)"',
        "", "[workload]", 'kind = "generate"',
        "", "[corpus]", 'path = "prompts.jsonl"', 'split = "final"',
        "", "[model]", 'path = "lm"',
        "", "# The review as the MiniLM tokenizer encodes it ([CLS] review [SEP]); the model writes fresh or rotten,",
        "# then [SEP]. Greedy decoding; 4 new tokens leave room to see an output that does not stop (it is counted).",
        "[generation]", 'prompt_template = "{text}"', 'padding_side = "left"', "max_new_tokens = 4", "kv_cache = true",
        'reference_metric = "normalised"',
        "", "# 120 reviews and 3 repetitions instead of 1,000 and 5, declared here, to keep the first demo within minutes.",
        "[protocol]", "repetitions = 3", f"max_length = {MAX_LENGTH}", 'padding = "longest"', 'truncation = "truncate"',
        f"seed = {SEED}", "deterministic = true", 'reference_variant = "fp32-b1"', "min_agreement = 0.98",
        "", f"# Set from the held-out label accuracy of the trained LM ({training['heldout_accuracy']:.4f}) minus {MARGIN},",
        "# before any timing; its quality is what a model trained for seconds gives, and is stated as it is.",
        "[protocol.thresholds]", f"reference_match = {threshold}",
        "", "[protocol.buckets]", "short = 24", "medium = 40", 'long = "rest"',
        "", "[protocol.warmup]", "batches = 2", "passes = 1",
        "", "[decision]", "corpora = 20", 'window_start = "2026-09-28T09:00"', 'window_end = "2026-10-02T09:00"',
        'time_zone = "Asia/Jakarta"',
    ]
    for name, batch in (("fp32-b1", 1), ("fp32-b8", 8)):
        lines += ["", "[[variants]]", f'name = "{name}"', 'series = "batch"', f"batch_size = {batch}",
                  'precision = "fp32"', 'attention = "sdpa"', 'device = "cpu"']
    return "\n".join(lines) + "\n"


def describe_generation(generation: dict, index: Path) -> list[str]:
    """Say what the generation campaign gave: its trials, their match with the verdicts and where its page is."""
    trials = generation["trials"]
    ok = [t for t in trials if t["status"] == "ok"]
    match = sorted(t["quality"]["overall"]["reference_match"] for t in ok if t["quality"]["overall"]["reference_match"] is not None)
    quality = (f"its outputs match the reviews' verdicts {match[0]:.3f} to {match[-1]:.3f} (a one-block GPT-2 trained for "
               "seconds: its quality is what it is)") if match else "no successful trial"
    return [f"Generation: {GENERATE_CAMPAIGN} ({len(trials)} trials, {len(ok)} ok; {quality}); its page: "
            f"{index.parent / 'campaigns' / GENERATE_CAMPAIGN / 'index.html'}"]
