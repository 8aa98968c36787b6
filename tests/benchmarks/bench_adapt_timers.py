"""What the adaptation window's part timers cost: the window's update rate with the timers on against off.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m tests.benchmarks.bench_adapt_timers [--pairs 15] [--updates 20] [--device cpu]
Builds a small BERT classifier (2 layers, hidden 128 by default) and a training split in a temporary folder, then for each method
(all weights, LoRA) runs the measured window of ``adapting.Work`` PAIRS times with the timers on and PAIRS times off,
interleaved (on-off, off-on, ...) on one unit of work so that the machine's drift falls on both alike. Each window is timed as the phase clock
times it: the device synchronised before and after, never inside. Prints each method's median rate on and off and how
far the timers move it (the target: at most 2 %). On a GPU (``--device cuda``) the timers are CUDA events.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

WORDS = ["good", "bad", "great", "awful", "movie", "plot", "actor", "scene", "fun", "dull", "long", "short", "story",
         "music", "ending", "the", "a", "was", "very", "not"]


def build(folder: Path, layers: int, hidden: int) -> Path:
    """Save a BERT classifier of LAYERS × HIDDEN with labels neg/pos and its tokenizer into FOLDER."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    config = BertConfig(vocab_size=len(WORDS) + 5, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=hidden * 4, max_position_embeddings=128, num_labels=2,
                        id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def window(work, device: str) -> float:
    """Run one measured window and return its seconds, the device synchronised at its two ends only."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter_ns()
    work.measured(None)
    if cuda:
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter_ns() - start) / 1e9
    work.timers.record()  # read after the window, as the runner reads it
    return seconds


def measure(model_dir: Path, method: str, device: str, pairs: int, updates: int) -> dict:
    """Return the median updates per second of PAIRS windows with the timers on and off, interleaved."""
    from iteralab.declared.corpus import Entry
    from iteralab.workloads import adapting, training

    rng = random.Random(7)
    entries = [Entry(f"e{index}", " ".join(rng.choice(WORDS) for _ in range(40)), ("neg", "pos")[index % 2])
               for index in range(400)]
    settings = {"optimizer": "adamw", "learning_rate": 1e-4, "weight_decay": 0.0, "schedule": "constant",
                "updates": updates, "max_grad_norm": None, "subset": None,
                "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"],
                         "modules_to_save": None}, "labels": None}
    protocol = {"seed": 1, "padding": "longest", "max_length": 64, "adaptation": settings}
    variant = SimpleNamespace(name=method, batch_size=16, accumulation=1, precision="fp32", device=device, method=method,
                              attention="sdpa", optimizer=None, learning_rate=None, weight_decay=None)
    tokenizer, model = adapting.load_model(model_dir, variant, protocol)
    rates = {True: [], False: []}
    # One unit of work, its timers switched on and off between windows: the same model, optimizer state and memory.
    work = adapting.Work(tokenizer, model, variant, protocol)
    work.order = training.TrainingOrder(entries, 1, "once", 16)
    window(work, device)  # not counted: the first window pays for the allocator and the optimizer state
    for pair in range(pairs):
        for on in ((True, False) if pair % 2 == 0 else (False, True)):
            work.timers.enabled = on
            rates[on].append(updates / window(work, device))
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    ratios = [a / b for a, b in zip(rates[True], rates[False], strict=True)]
    # The fastest window of each: the least disturbed on a shared machine (what timeit reports), where other jobs'
    # time only ever adds to a window's.
    return {"on": on, "off": off, "moved": on / off - 1, "fastest_moved": max(rates[True]) / max(rates[False]) - 1,
            "pair_ratios": (min(ratios), statistics.median(ratios), max(ratios))}


def timer_cost(device: str, updates: int = 2000) -> float:
    """Return the seconds the timers' own calls take per update of one microbatch (a mark and a lap per part), alone."""
    from iteralab.workloads import training

    timers = training.WindowTimers(device)
    start = time.perf_counter_ns()
    for _ in range(updates):
        begun = timers.mark(on_host=True)
        timers.lap("data", begun, on_host=True)
        begun = timers.mark()
        begun = timers.lap("forward", begun)
        timers.lap("backward", begun)
        begun = timers.mark()
        timers.lap("optimizer_step", begun)
    seconds = (time.perf_counter_ns() - start) / 1e9 / updates
    timers.record()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch's threads (default: torch's own count)")
    options = parser.parse_args()
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if options.threads:
        torch.set_num_threads(options.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {options.device}"
          + (f" ({torch.cuda.get_device_name(options.device)})" if options.device.startswith("cuda") else ""))
    with tempfile.TemporaryDirectory() as folder:
        model_dir = build(Path(folder) / "model", options.layers, options.hidden)
        for method in ("all", "lora"):
            found = measure(model_dir, method, options.device, options.pairs, options.updates)
            low, middle, high = found["pair_ratios"]
            print(f"{method:>4}: {found['on']:.3f} updates/s with the timers, {found['off']:.3f} without (medians): moved "
                  f"{found['moved'] * 100:+.2f} %; fastest windows: moved {found['fastest_moved'] * 100:+.2f} % (each "
                  f"pair's on/off: {low:.3f} to {high:.3f}, median {middle:.3f})")
            cost = timer_cost(options.device)
            print(f"      the timers' own calls: {cost * 1e6:.1f} µs per update, {cost * found['off'] * 100:.3f} % of "
                  "an update without them")


if __name__ == "__main__":
    main()
