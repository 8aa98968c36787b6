"""Serve: requests to a serving engine in another process, at load levels declared before any timing (#64).

The engine is a real process (transformers serve, vLLM) the runner starts for each trial, or an engine the user already
runs (``engine = "url"``). The load comes from a real load generator (NVIDIA AIPerf), one process per level; every
request is a row with its corpus id. The model lives in the engine: "model_load" is the engine's start up to ready, a
phase a renter pays at every restart.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.declared.tables import Table
from iteralab.serving import requests as serving
from iteralab.serving.requests import Work, expected_keys, key, read_outputs, write_outputs  # noqa: F401 (the seam)
from iteralab.store.trials import PHASES as TRIAL_PHASES
from iteralab.workloads import batched, generate, lengths
from iteralab.workloads.generated import matches
from iteralab.workloads.metrics import check_ids, verdicts

KIND = "serve"
DESCRIPTION = "requests to a serving engine in another process, at load levels declared before timing"
MEASURED_WINDOW = Text("every declared load level in the trial's order: the load generator's requests to the engine, "
                       "from the first request sent to the last answer; each level's warm-up requests come before it and "
                       "are left out of every figure")
THRESHOLD_METRICS = ("reference_match",)
PHASES = (*TRIAL_PHASES[:5], "engine_stop", *TRIAL_PHASES[5:])
STAGE_PHASES = ("tokenize", "request")
COUNTED_PHASES = ("measured_window", "engine_stop", "evaluation", "writing_results")
QUESTION_UNIT = "requests"
AGREEMENT = Text("the output text, its edges trimmed, equals the reference variant's output for the same id (the engine "
                 "gives no token ids)")
NO_WARMUP = {"batches": 0, "passes": 1, "inputs": Text("none before the window: each level's warm-up requests are sent by "
                                                       "the load generator before the level, and left out of its figures")}
ENGINES = ("transformers", "vllm", "url")
ARRIVALS = ("concurrency", "poisson")
inputs = batched.inputs


def read_settings(top, base=None) -> dict:
    """Read [serving]: the engine, the prompts, the arrival and its levels, the requests, and the latency objective."""
    table = Table(top.get("serving", dict), "serving", top.source, top.errors)
    engine = table.get("engine", str, default="transformers", choices=ENGINES)
    template = table.get("prompt_template", str, default="{text}")
    if template.count("{text}") != 1:
        table.note("prompt_template", f"{template!r} must hold {{text}} exactly once")
    settings = {
        "engine": engine,
        "url": table.get("url", str, default=None),
        "port": table.get("port", int, default=None, minimum=1),
        "prompt_template": template,
        "max_tokens": table.get("max_tokens", int, minimum=1),
        "decoding": "greedy",
        "stop": Text("the end-of-sequence token, or max_tokens: the engine stops as it allows (transformers serve takes "
                     "neither min_tokens nor ignore_eos)"),
        "arrival": table.get("arrival", str, default="concurrency", choices=ARRIVALS),
        "levels": table.attempt(lambda: _levels(table), []),
        "requests": table.get("requests", int, minimum=1),
        "warmup_requests": table.get("warmup_requests", int, default=2, minimum=0),
        "arrival_seed": table.get("arrival_seed", int, default=0, minimum=0),
        "ready_timeout_s": table.get("ready_timeout_s", float, default=600.0),
        "objective": table.attempt(lambda: _objective(table, top), {}),
    }
    if settings["port"] is not None and settings["port"] > 65535:
        table.note("port", "must be a port number up to 65535")
    if engine == "url" and not settings["url"]:
        table.note("url", "engine = \"url\" measures an engine you already run: give its base address, e.g. "
                          "url = \"http://127.0.0.1:8000\"")
    if engine != "url" and settings["url"]:
        table.note("url", f"the runner starts the {engine} engine itself; a url is read only with engine = \"url\"")
    if not settings["ready_timeout_s"] > 0:
        table.note("ready_timeout_s", "must be more than 0 seconds")
    table.finish()
    return {"serving": settings}


def _levels(table: Table) -> list:
    levels = table.get("levels", list)
    if levels is None:
        return []
    numbers = [level for level in levels if not isinstance(level, bool) and isinstance(level, int | float) and level > 0]
    arrival = table.data.get("arrival", "concurrency")
    if not levels or len(numbers) != len(levels) or len(set(numbers)) != len(numbers) or \
            (arrival == "concurrency" and any(not isinstance(level, int) for level in numbers)):
        unit = "concurrencies (whole numbers of requests in flight)" if arrival == "concurrency" else \
            "request rates per second"
        table.fail("levels", f"must list distinct {unit} above 0, e.g. levels = [1, 4], not {levels!r}")
    return sorted(numbers)


def _objective(table: Table, top) -> dict:
    objective = Table(table.get("objective", dict), "serving.objective", top.source, top.errors)
    found = {"ttft_ms": objective.get("ttft_ms", float), "tpot_ms": objective.get("tpot_ms", float),
             "share": objective.get("share", float, default=0.99),
             "load": objective.get("load", float, default=None),
             "definition": Text("a request meets the objective when its time to first token is at most ttft_ms and its "
                                "mean time per output token after the first at most tpot_ms (DistServe's goodput; a "
                                "request with one output token is judged on its time to first token); a level meets it "
                                "when at least share of its requests do, failed requests counting as missing it")}
    for name in ("ttft_ms", "tpot_ms"):
        if found[name] is not None and not found[name] > 0:
            objective.note(name, "must be more than 0 milliseconds")
    if not 0 < found["share"] <= 1:
        objective.note("share", "must be more than 0 and at most 1, e.g. 0.99")
    if found["load"] is not None and not found["load"] > 0:
        objective.note("load", "the load the question asks to serve (a concurrency or a request rate) must be above 0")
    objective.finish()
    return found


def read_variant(table) -> dict:
    """Read a serve variant's engine arguments: passed to the engine as written, after the runner's own."""
    args = table.get("engine_args", list, default=[])
    if args is None or any(not isinstance(arg, str) for arg in args):
        table.note("engine_args", "must list the engine's arguments as strings, e.g. engine_args = "
                                  "[\"--continuous-batching\", \"--cb-num-blocks\", \"64\"]")
        args = []
    return {"engine_args": shlex.join(args)}  # one plain value in the records, as every setting is


def check_variants(variants, protocol: dict) -> list[str]:
    """Refuse engine arguments the runner sets itself: the model, host, port, device and dtype are the campaign's."""
    owned = ("--host", "--port", "--device", "--dtype", "--model")
    compiled = [f"variant {variant.name}: compile = true: a serve variant compiles in its engine; pass the engine's own "
                "flag in engine_args (transformers serve: \"--compile\")" for variant in variants if variant.compile]
    return compiled + [f"variant {variant.name}: engine_args sets {arg.split('=')[0]}, which the runner sets from the campaign "
            "(the [model] path, a free port, the variant's device and precision); leave it out"
            for variant in variants for arg in shlex.split(variant.engine_args or "") if arg.split("=")[0] in owned]


def passes(protocol: dict) -> int:
    """Return how many times the window goes over the corpus: once (a level's requests cycle through it)."""
    return 1


def expected(corpus, protocol: dict) -> int:
    """Return the requests a trial's measured window sends: every level's, whatever the corpus's size."""
    return protocol["serving"]["requests"] * len(protocol["serving"]["levels"])


def check_model(model_dir: Path, config: dict, protocol: dict) -> dict:
    """Refuse a folder that is no causal LM with its tokenizer (the engine serves it, the load generator counts with it)."""
    missing = unusable(protocol)  # before any timing: a load generator missing would fail every trial
    if missing:
        raise UserError(missing)
    found = generate.check_model(model_dir, config, {"generation": {"prompt_template": "{text}"}})
    if protocol["serving"]["engine"] == "url":
        found["served_by"] = Text("an engine the runner did not start: the folder gives the tokenizer; the weights the "
                                  "engine serves are not vouched for")
    return found


def check_corpus(corpus, model: dict, campaign) -> None:
    """Refuse thresholds on reference outputs the corpus lacks, and prompts plus max_tokens beyond the model's positions."""
    if campaign.protocol["thresholds"] and not corpus.labelled:
        raise UserError(f"{campaign.source}: [protocol] thresholds need a reference output (label) for every entry, but "
                        f"{campaign.corpus_path} has entries without one; leave [protocol.thresholds] out")
    lengths.refuse_beyond(campaign, lambda: _prompt_tokens(campaign, corpus), campaign.protocol["serving"]["max_tokens"])


def _prompt_tokens(campaign, corpus) -> dict[str, int]:
    from transformers import AutoTokenizer

    return count_tokens(AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True), campaign.protocol,
                        corpus.entries)


def count_tokens(tokenizer, protocol: dict, entries) -> dict[str, int]:
    """Count each entry's prompt tokens as the engine's tokenizer sees them."""
    encoded = tokenizer(serving.prompts(protocol, [entry.text for entry in entries]))
    return {entry.id: len(ids) for entry, ids in zip(entries, encoded["input_ids"], strict=True)}


def manifest_fields(campaign) -> dict:
    """Return the model's positions beside the longest request the protocol lets through."""
    return {"context": lengths.record(campaign, campaign.protocol["serving"]["max_tokens"])}


def plan_lines(prepared) -> list[str]:
    """Say which engine serves, how the load arrives and what the objective is."""
    settings = prepared.campaign.protocol["serving"]
    objective = settings["objective"]
    unit = "requests in flight" if settings["arrival"] == "concurrency" else "requests per second (Poisson arrivals, " \
        f"seed {settings['arrival_seed']})"
    return [f"Serving: {serving.engine_said(settings)}; levels {', '.join(str(v) for v in settings['levels'])} {unit}, "
            f"{settings['requests']} requests each after {settings['warmup_requests']} warm-up requests, greedy, at most "
            f"{settings['max_tokens']} new tokens; objective: time to first token ≤ {objective['ttft_ms']} ms and time "
            f"per output token ≤ {objective['tpot_ms']} ms for {objective['share']:.0%} of requests"]


def load_model(model_dir, variant, protocol: dict):
    """Start the engine for VARIANT (or reach the user's) and wait until it is ready; return the tokenizer and engine."""
    return serving.start_engine(model_dir, variant, protocol)


def unusable(protocol: dict) -> str | None:
    """Say why this machine cannot run the campaign's load generator, before any timing; None when it can."""
    return serving.unusable(protocol["serving"])


def evaluate_outputs(*, prepared, variant, trial_id: str, outputs: list[dict]) -> tuple[dict, dict, dict | None]:
    """Check every planned request has its row; score agreement with the reference and the match with the corpus."""
    protocol, corpus = prepared.campaign.protocol, prepared.corpus
    order = sorted({row["level"] for row in outputs}, key=protocol["serving"]["levels"].index) if outputs else []
    id_check = check_ids(expected_keys(protocol, list(corpus.ids), order or protocol["serving"]["levels"]),
                         [key(row) for row in outputs])
    reference = prepared.reference
    if reference is None and variant.name == protocol["reference_variant"]:
        reference = {"variant": variant.name, "trial_id": trial_id,
                     "predictions": {row["id"]: row["output_text"] for row in outputs if row["status"] == "ok"}}
    answered = [row for row in outputs if row["status"] == "ok"]
    compared = [row for row in answered if reference and row["id"] in reference["predictions"]]
    gold = {entry.id: entry.label for entry in corpus.entries}
    labelled = [row for row in answered if gold.get(row["id"]) is not None]
    overall = {"entries": len(outputs), "failed_requests": len(outputs) - len(answered), "accuracy": None, "macro_f1": None,
               "agreement": sum(row["accepted"] for row in compared) / len(compared) if compared else None,
               "reference_match": (sum(matches(row["output_text"], gold[row["id"]], "normalised") for row in labelled)
                                   / len(labelled)) if labelled and len(labelled) == len(answered) else None}
    reasons = {"accuracy": Text("a serving campaign has no labels to count: see reference_match"),
               "macro_f1": Text("a serving campaign has no labels to count: see reference_match")}
    if reference is None:
        reasons["agreement"] = Text("the reference variant has no successful trial to compare with")
    limits = {**protocol["thresholds"], **({"agreement": protocol["min_agreement"]}
                                          if protocol.get("min_agreement") is not None else {})}
    found = verdicts(overall, limits, reasons)
    problems = [f"{key(row)}: status {row['status']!r}" for row in outputs if row["status"] not in ("ok", "error")][:5]
    quality = {"overall": overall, "buckets": {}, "seeds": None, "missing_reasons": reasons,
               "reference": None if reference is None else {"variant": reference["variant"], "trial_id": reference["trial_id"]},
               "definitions": {"agreement": AGREEMENT, "reference_match": Text("normalised match: both texts case-folded, "
                               "punctuation removed and spaces collapsed, then equal")},
               "verdicts": found, "passed": all(verdict["passed"] for verdict in found),
               "format_ok": not problems, "format_problems": problems}
    return id_check, quality, reference
