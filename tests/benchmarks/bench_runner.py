"""Runner overhead: the runner's measured window against a bare tokenize + forward + argmax loop.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m tests.benchmarks.bench_runner [--entries 300] [--rounds 5]
Both read the same corpus file, use the same model and batch size, alternate round by round in one
process, and the ratio of medians is printed (target: at most 1.02).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def bare_loop(model, tokenizer, corpus_file: Path, batch_size: int, max_length: int) -> list:
    import torch

    rows = [json.loads(line) for line in corpus_file.read_text(encoding="utf-8").splitlines()]
    labels = []
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        encoded = tokenizer([row["text"] for row in batch], padding="longest", truncation=True, max_length=max_length,
                            return_tensors="pt")
        with torch.inference_mode():
            labels.extend(model(**encoded).logits.argmax(-1).tolist())
    return labels


def main() -> None:
    from iteralab.demo import locate_inputs, read_reviews
    from iteralab.run.campaign import Variant
    from iteralab.run.corpus import write_jsonl
    from iteralab.run.trial import Inference, load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    options = parser.parse_args()
    base, corpus_source = locate_inputs()
    entries = read_reviews(corpus_source)[: options.entries]
    with tempfile.TemporaryDirectory() as folder:
        corpus_file = Path(folder) / "corpus.jsonl"
        write_jsonl(entries, corpus_file)
        variant = Variant("bench", "bench", options.batch_size, "fp32", "none", False, "sdpa", False, "cpu")
        tokenizer, model = load_model(base, variant)
        protocol = {"padding": "longest", "max_length": 64}
        inference = Inference(tokenizer, model, variant, protocol)
        inference.warmup(entries, {}, 3, 1)
        runner_times, bare_times = [], []
        for round_index in range(options.rounds):
            # Alternate which goes first so drift in machine speed hits both alike.
            order = ("runner", "bare") if round_index % 2 == 0 else ("bare", "runner")
            for which in order:
                start = time.perf_counter_ns()
                if which == "runner":
                    inference.completed = 0
                    inference.measured(corpus_file)
                    runner_times.append(time.perf_counter_ns() - start)
                else:
                    bare_loop(model, tokenizer, corpus_file, options.batch_size, 64)
                    bare_times.append(time.perf_counter_ns() - start)
    runner_median, bare_median = statistics.median(runner_times), statistics.median(bare_times)
    print(f"entries {options.entries}, batch {options.batch_size}, rounds {options.rounds}")
    print("runner measured window (s):", " ".join(f"{t / 1e9:.3f}" for t in runner_times))
    print("bare loop (s):             ", " ".join(f"{t / 1e9:.3f}" for t in bare_times))
    print(f"overhead ratio (median runner / median bare): {runner_median / bare_median:.4f} (target <= 1.02)")


if __name__ == "__main__":
    main()
