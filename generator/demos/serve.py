"""The demo's serving campaign (#64): the demo's small causal LM served by `transformers serve` on the CPU, two engine
configurations at two concurrencies, its requests sent by NVIDIA AIPerf, its outputs checked id by id."""

from __future__ import annotations

from pathlib import Path

from iteralab.core.files import write_atomically

SERVE_CAMPAIGN = "demo-rotten-tomatoes-serve"
LEVELS = (1, 4)
REQUESTS = 24  # per level: enough for a median's interval (6 requests) and a p90's point, and a short demo
VARIANTS = (("one-at-a-time", ""),
            # Continuous batching with its KV cache bounded: at its defaults it reserves about 15 GB.
            ("continuous-batching", "--continuous-batching --cb-num-blocks 64 --cb-block-size 32 --cb-max-batch-tokens 512"))


def serving_campaign_text() -> str:
    """Write the demo's serving campaign: the generation campaign's model and prompts, served at concurrency 1 and 4."""
    lines = [
        f'campaign = "{SERVE_CAMPAIGN}"',
        'title = "Demo: serve the verdict-word model to concurrent requests (transformers serve, CPU)"',
        "", "[workload]", 'kind = "serve"',
        "", "[corpus]", 'path = "prompts.jsonl"', 'split = "final"',
        "", "# The generation campaign's model: the engine serves this folder, the load generator counts with its tokenizer.",
        "[model]", 'path = "lm"',
        "", "# Greedy, at most 4 new tokens, as the generation campaign decodes; the engine stops at the end token.",
        "[serving]", 'engine = "transformers"', "max_tokens = 4", 'arrival = "concurrency"',
        f"levels = [{', '.join(map(str, LEVELS))}]", f"requests = {REQUESTS}", "warmup_requests = 2",
        "", "# The latency a reader of the demo's answers accepts, declared before any timing.",
        "[serving.objective]", "ttft_ms = 1000", "tpot_ms = 250", "share = 0.9", "load = 4",
        "", "# One repetition instead of five, declared here, to keep the first demo within minutes.",
        "[protocol]", "repetitions = 1", "max_length = 64", 'padding = "longest"', 'truncation = "truncate"', "seed = 1",
        f'reference_variant = "{VARIANTS[0][0]}"', "min_agreement = 0.98",
        "", "[protocol.buckets]", "short = 24", "medium = 40", 'long = "rest"',
        "", "[decision]", 'window_start = "2026-09-28T09:00"', 'window_end = "2026-10-02T09:00"',
        'time_zone = "Asia/Jakarta"',
    ]
    for name, arguments in VARIANTS:
        lines += ["", "[[variants]]", f'name = "{name}"', 'series = "engine"',
                  f"engine_args = [{', '.join(repr(arg).replace(chr(39), chr(34)) for arg in arguments.split())}]"]
    return "\n".join(lines) + "\n"


def prepare_serving(*, generation_file: Path) -> Path:
    """Write the serving campaign beside the generation campaign (its model and prompts); return its path."""
    campaign_file = generation_file.parent / "serve.toml"
    text = serving_campaign_text()
    if not campaign_file.is_file() or campaign_file.read_text(encoding="utf-8") != text:
        write_atomically(campaign_file, text)
    return campaign_file


def describe_serving(serving: dict, index: Path) -> list[str]:
    """Say what the serving campaign gave: its trials, each configuration's capacity, and where its pages are."""
    trials = serving["trials"]
    ok = [trial for trial in trials if trial["status"] == "ok"]
    levels = [f"{trial['variant']}: {_capacity(trial)}" for trial in ok]
    return [f"Serving: {SERVE_CAMPAIGN} ({len(trials)} trials, {len(ok)} ok; capacity at the objective: "
            f"{'; '.join(levels) or 'none measured'}); its decision: "
            f"{index.parent / 'campaigns' / SERVE_CAMPAIGN / 'decision.html'}"]


def _capacity(trial: dict) -> str:
    capacity = (trial.get("serving") or {}).get("capacity") or {}
    if capacity.get("level") is None:
        return str(capacity.get("reason") or "no level meets the objective")
    return f"concurrency {capacity['level']}"
