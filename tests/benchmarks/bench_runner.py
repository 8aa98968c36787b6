"""Runner overhead: each kind's measured window against the same work written as a bare loop, in one process.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m tests.benchmarks.bench_runner [--kind classify|generate|adapt|both|all]
     [--entries 300] [--rounds 5] [--updates 20] [--microbatch 16]
classify: the runner's window against a bare tokenize + forward + argmax loop over the packaged MiniLM classifier.
generate: the runner's window against a bare tokenize + generate + decode loop over a small GPT-2 (2 layers, 128 wide,
the MiniLM tokenizer) with the same greedy decoding.
adapt: the adaptation runner's measured window (adapting.Work.measured, after the first update has created the
optimizer state) against a bare training loop (tokenize each microbatch, forward, loss, backward, AdamW step, schedule
step, zero_grad) over the packaged MiniLM encoder with a fresh fresh/rotten head, all weights trained, the same
reviews in the same order each round.
Each pair uses the same model and data, alternates round by round, and the ratio of medians is printed (target: at
most 1.02). both: classify and generate; all: the three.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

MAX_NEW_TOKENS = 16


def read_rows(corpus_file: Path) -> list[dict]:
    return [json.loads(line) for line in corpus_file.read_text(encoding="utf-8").split("\n") if line]


def encoded_batches(tokenizer, corpus_file: Path, batch_size: int, max_length: int):
    """Read the corpus file and yield each batch tokenized as the runner's protocol does (padding longest, truncation)."""
    rows = read_rows(corpus_file)
    for start in range(0, len(rows), batch_size):
        yield tokenizer([row["text"] for row in rows[start:start + batch_size]], padding="longest", truncation=True,
                        max_length=max_length, return_tensors="pt")


def bare_classify(model, tokenizer, corpus_file: Path, batch_size: int, max_length: int) -> list:
    import torch

    labels = []
    for encoded in encoded_batches(tokenizer, corpus_file, batch_size, max_length):
        with torch.inference_mode():
            labels.extend(model(**encoded).logits.argmax(-1).tolist())
    return labels


def bare_generate(model, tokenizer, corpus_file: Path, batch_size: int, max_length: int, config) -> list:
    import torch

    texts = []
    for encoded in encoded_batches(tokenizer, corpus_file, batch_size, max_length):
        with torch.inference_mode():
            sequences = model.generate(**encoded, generation_config=config)
        texts.extend(tokenizer.batch_decode(sequences[:, encoded["input_ids"].shape[1]:], skip_special_tokens=True))
    return texts


def small_causal_lm(tokenizer_dir: Path, folder: Path) -> Path:
    """Save a randomly initialised 2-layer GPT-2 over the MiniLM vocabulary (the same work for both loops)."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    tokenizer.save_pretrained(folder)
    config = GPT2Config(vocab_size=tokenizer.vocab_size, n_embd=128, n_layer=2, n_head=4, n_positions=128,
                        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def alternate(rounds: int, runner, bare) -> tuple[list[int], list[int]]:
    """Time RUNNER and BARE ROUNDS times each, alternating which goes first so drift hits both alike."""
    times = {"runner": [], "bare": []}
    for round_index in range(rounds):
        for which in (("runner", "bare") if round_index % 2 == 0 else ("bare", "runner")):
            start = time.perf_counter_ns()
            (runner if which == "runner" else bare)()
            times[which].append(time.perf_counter_ns() - start)
    return times["runner"], times["bare"]


def classify_pair(base: Path, corpus_file: Path, entries, batch_size: int):
    from iteralab.run.campaign import Variant
    from iteralab.workloads import classify

    variant = Variant("bench", "bench", batch_size, "fp32", "none", False, "sdpa", False, "cpu")
    protocol = {"padding": "longest", "max_length": 64}
    tokenizer, model = classify.load_model(base, variant, protocol)
    work = classify.Work(tokenizer, model, variant, protocol)
    work.warmup(entries, {}, 3, 1)
    return (lambda: work.measured(corpus_file)), (lambda: bare_classify(model, tokenizer, corpus_file, batch_size, 64))


def generate_pair(base: Path, corpus_file: Path, entries, batch_size: int, folder: Path):
    from iteralab.run.campaign import Variant
    from iteralab.workloads import generate

    variant = Variant("bench", "bench", batch_size, "fp32", "none", False, "sdpa", False, "cpu")
    model_dir = small_causal_lm(base, folder / "lm")
    protocol = {"padding": "longest", "max_length": 64,
                "generation": {"prompt_template": "{text}", "padding_side": "left", "max_new_tokens": MAX_NEW_TOKENS,
                               "kv_cache": True, "sampling": None}}
    tokenizer, model = generate.load_model(model_dir, variant, protocol)
    work = generate.Work(tokenizer, model, variant, protocol)
    work.warmup(entries, {}, 3, 1)
    return (lambda: work.measured(corpus_file)), (lambda: bare_generate(model, tokenizer, corpus_file, batch_size, 64,
                                                                        work.config))


def bare_train(model, tokenizer, optimizer, schedule, rows: list, microbatch: int, max_length: int) -> list:
    """Train one update per microbatch: tokenize, forward, loss, backward, optimizer and schedule step, zero_grad."""
    import torch

    index = {"fresh": 0, "rotten": 1}
    losses = []
    for start in range(0, len(rows), microbatch):
        chunk = rows[start:start + microbatch]
        encoded = tokenizer([entry.text for entry in chunk], padding="longest", truncation=True, max_length=max_length,
                            return_tensors="pt")
        loss = model(**encoded, labels=torch.tensor([index[entry.label] for entry in chunk])).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return losses


def adapt_pair(base: Path, entries, microbatch: int, updates: int):
    """The runner's Work and a bare loop training the same model on the same UPDATES × MICROBATCH reviews each round."""
    import torch

    from iteralab.run.campaign import Variant
    from iteralab.workloads import adapting, training

    variant = Variant("bench", "bench", microbatch, "fp32", "none", False, "sdpa", False, "cpu", method="all",
                      accumulation=1, changes_effective_batch=False)
    settings = {"labels": ["fresh", "rotten"], "optimizer": "adamw", "learning_rate": 2e-5, "weight_decay": 0.0,
                "schedule": "constant", "updates": updates, "max_grad_norm": None, "subset": None, "lora": None}
    protocol = {"padding": "longest", "max_length": 64, "seed": 1, "adaptation": settings}
    tokenizer, model = adapting.load_model(base, variant, protocol)
    work = adapting.Work(tokenizer, model, variant, protocol)
    rows = list(entries[:updates * microbatch])
    work.order = training.TrainingOrder(rows, 1, "once", microbatch)
    work.order.order = rows  # in file order, as the bare loop takes them
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings["learning_rate"], weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: 1.0)  # as the runner's constant schedule
    # The first update of each, untimed, creates its optimizer state, as the runner's first_update phase does.
    work.step(work.microbatch())
    work.update()
    bare_train(model, tokenizer, optimizer, schedule, rows[:microbatch], microbatch, 64)

    def runner():
        work.order.position = work.examples = work.tokens = 0  # the same reviews each round
        return work.measured(None)

    return runner, (lambda: bare_train(model, tokenizer, optimizer, schedule, rows, microbatch, 64))


def main() -> None:
    from iteralab.declared.corpus import write_jsonl
    from iteralab.demos.classify import locate_inputs, read_reviews

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("classify", "generate", "adapt", "both", "all"), default="all")
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--updates", type=int, default=20, help="adapt: optimizer updates per round")
    parser.add_argument("--microbatch", type=int, default=16, help="adapt: reviews per update")
    options = parser.parse_args()
    kinds = {"both": ("classify", "generate"), "all": ("classify", "generate", "adapt")}.get(options.kind, (options.kind,))
    base, corpus_source = locate_inputs()
    reviews = read_reviews(corpus_source)
    entries = reviews[: options.entries]
    with tempfile.TemporaryDirectory() as folder:
        corpus_file = Path(folder) / "corpus.jsonl"
        write_jsonl(entries, corpus_file)
        for kind in kinds:
            if kind == "adapt":
                pair = adapt_pair(base, reviews, options.microbatch, options.updates)
                said = (f"adapt: {options.updates} updates of {options.microbatch} reviews (all weights, AdamW), "
                        f"rounds {options.rounds}")
            else:
                pair = classify_pair(base, corpus_file, entries, options.batch_size) if kind == "classify" else \
                    generate_pair(base, corpus_file, entries, options.batch_size, Path(folder))
                said = (f"{kind}: entries {options.entries}, batch {options.batch_size}, rounds {options.rounds}"
                        + (f", max_new_tokens {MAX_NEW_TOKENS}" if kind == "generate" else ""))
            runner_times, bare_times = alternate(options.rounds, *pair)
            print(said)
            print("  runner measured window (s):", " ".join(f"{t / 1e9:.3f}" for t in runner_times))
            print("  bare loop (s):             ", " ".join(f"{t / 1e9:.3f}" for t in bare_times))
            print(f"  overhead ratio (median runner / median bare): "
                  f"{statistics.median(runner_times) / statistics.median(bare_times):.4f} (target <= 1.02)")


if __name__ == "__main__":
    main()
