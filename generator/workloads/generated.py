"""What a generation trial keeps: its outputs file, their quality against the reference and the corpus, its figures."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from iteralab.core.files import writing
from iteralab.core.language import Text
from iteralab.money.sizing import kv_cache_bytes, kv_shape
from iteralab.workloads.metrics import accuracy, check_ids, verdicts

REFERENCE_METRICS = ("normalised", "exact")
DEFINITIONS = {
    "agreement": Text("exact token-sequence match with the reference variant's output for the same id and seed "
                      "(the new tokens up to and including the end-of-sequence token)"),
    "exact": Text("exact match: the output text, stripped of surrounding spaces, equals the reference output"),
    "normalised": Text("normalised match: both texts case-folded, punctuation removed and spaces collapsed, then equal"),
}
STOP_REASONS = ("eos", "max_new_tokens")


def seeds(protocol: dict) -> list[int | None]:
    """Return the seeds the measured window generates with: one pass per seed, or one greedy pass (None)."""
    sampling = protocol["generation"]["sampling"]
    return list(sampling["seeds"]) if sampling else [None]


def key(output: dict) -> str:
    """Name an output by its id, and by its seed when the protocol samples: each seed's outputs are kept apart."""
    return output["id"] if output.get("seed") is None else f"{output['id']} (seed {output['seed']})"


def normalise(text: str) -> str:
    """Case-fold, drop punctuation and collapse spaces."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def matches(text: str, reference: str, metric: str) -> bool:
    """Tell whether an output matches the corpus's reference output under METRIC."""
    return text.strip() == reference.strip() if metric == "exact" else normalise(text) == normalise(reference)


def write_outputs(runs_dir: Path, campaign: str, trial_id: str, outputs: list[dict]) -> dict:
    """Write every output with its id to the trial's own JSON Lines file, synced to disk; return its path and sha256."""
    relative = f"{campaign}/predictions/{trial_id}.jsonl"
    path = runs_dir / relative
    with writing(path, "the outputs file"), open(path, "x", encoding="utf-8", newline="\n") as handle:
        for output in outputs:
            handle.write(json.dumps({name: output[name] for name in
                                     ("id", "seed", "text", "new_tokens", "stop_reason", "token_ids")},
                                    ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"path": relative, "sha256": digest,
            "format": "jsonl: id, seed (null when greedy), text, new_tokens, stop_reason (eos or max_new_tokens), token_ids"}


def read_outputs(path: Path) -> dict[str, tuple[int, ...]]:
    """Return each output's new token ids by its key, from an outputs file."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = [json.loads(line) for line in handle.read().split("\n") if line.strip()]
    return {key(row): tuple(row["token_ids"]) for row in rows}


def _format_problems(outputs: list[dict]) -> list[str]:
    problems = []
    for output in outputs:
        if output["stop_reason"] not in STOP_REASONS or output["new_tokens"] != len(output["token_ids"]) \
                or not isinstance(output["text"], str):
            problems.append(f"{key(output)}: stop reason {output['stop_reason']!r} with {output['new_tokens']} new tokens "
                            f"for {len(output['token_ids'])} token ids")
        if len(problems) >= 5:
            break
    return problems


def _scores(chosen: list[dict], gold: dict, reference: dict | None, metric: str) -> dict:
    references = [(matches(o["text"], gold[o["id"]], metric), True) for o in chosen if gold.get(o["id"]) is not None]
    same = [(tuple(o["token_ids"]) == reference[key(o)], True) for o in chosen if key(o) in reference] if reference else []
    return {"entries": len(chosen), "accuracy": None, "macro_f1": None, "agreement": accuracy(same),
            "reference_match": accuracy(references) if len(references) == len(chosen) else None,
            "cut_by_max_new_tokens": sum(o["stop_reason"] == "max_new_tokens" for o in chosen)}


def evaluate_outputs(*, prepared, variant, trial_id: str, outputs: list[dict]) -> tuple[dict, dict, dict | None]:
    """Check ids and format; score agreement with the reference variant and the match with the corpus's references."""
    protocol, corpus = prepared.campaign.protocol, prepared.corpus
    expected = [key({"id": entry_id, "seed": seed}) for seed in seeds(protocol) for entry_id in corpus.ids]
    id_check = check_ids(expected, [key(output) for output in outputs])
    reference = prepared.reference
    if reference is None and variant.name == protocol["reference_variant"]:
        reference = {"variant": variant.name, "trial_id": trial_id,
                     "predictions": {key(o): tuple(o["token_ids"]) for o in outputs}}
    metric, gold = protocol["generation"]["reference_metric"], {e.id: e.label for e in corpus.entries}
    compared = reference["predictions"] if reference else None
    overall = _scores(outputs, gold, compared, metric)
    reasons = {"accuracy": Text("a generation campaign has no labels to count: see reference_match"),
               "macro_f1": Text("a generation campaign has no labels to count: see reference_match")}
    if not corpus.labelled:
        reasons["reference_match"] = Text("the corpus has no reference output for every entry")
    if reference is None:
        reasons["agreement"] = Text("the reference variant has no successful trial to compare with")
    limits = {**protocol["thresholds"], **({"agreement": protocol["min_agreement"]}
                                          if protocol.get("min_agreement") is not None else {})}
    found = verdicts(overall, limits, reasons)
    quality = {
        "overall": overall,
        "buckets": {b["name"]: _scores([o for o in outputs if prepared.bucket_of.get(o["id"]) == b["name"]], gold, compared,
                                       metric) for b in protocol["buckets"]},
        "seeds": None if seeds(protocol) == [None] else
        {str(seed): _scores([o for o in outputs if o["seed"] == seed], gold, compared, metric) for seed in seeds(protocol)},
        "missing_reasons": reasons,
        "reference": None if reference is None else {"variant": reference["variant"], "trial_id": reference["trial_id"]},
        "definitions": {"agreement": DEFINITIONS["agreement"], "reference_match": DEFINITIONS[metric]},
        "verdicts": found, "passed": all(verdict["passed"] for verdict in found),
    }
    problems = _format_problems(outputs)
    quality["format_ok"], quality["format_problems"] = not problems, problems
    return id_check, quality, reference


def decode_phase(clock, work, outputs: list[dict]) -> None:
    """Record decode as the window's generation calls less the prefill phase, per pass; empty when it cannot be told."""
    passes = len({output["seed"] for output in outputs}) or 1
    prefill = clock.phases["prefill"]["duration_ns"]
    decode = work.generate_ns - prefill * passes
    if not any(output["new_tokens"] > 1 for output in outputs):
        clock.skip("decode", Text("no output had a token after the first: there was nothing to decode"))
    elif decode <= 0:
        clock.skip("decode", Text("the prefill phase took as long as the window's generation calls: the decoding time is "
                                  "below what these timers can tell apart"))
    else:
        clock.phases["decode"] = {"duration_ns": decode, "completed": True,
                                  "derived": DERIVED_CUDA if work.variant.device.startswith("cuda") else DERIVED_HOST}


# How decode was derived, said for the clock it was timed with: a trial on a CPU has no CUDA to synchronise (#61).
DERIVED_CUDA = Text("the generation calls of the measured window less the prefill phase for each pass (as optimum-benchmark "
                    "derives decode); timed with CUDA synchronised at every boundary")
DERIVED_HOST = Text("the generation calls of the measured window less the prefill phase for each pass (as optimum-benchmark "
                    "derives decode); timed with the host's clock, with no device to synchronise")


def figures(clock, work, outputs: list[dict]) -> dict:
    """Return input and output tokens, output tokens per second, prefill per batch, decode per new token, KV cache."""
    window = clock.phases["measured_window"]["duration_ns"] / 1e9
    output_tokens = sum(output["new_tokens"] for output in outputs)
    decode = clock.phases.get("decode", {}).get("duration_ns")
    decoded = output_tokens - sum(1 for output in outputs if output["new_tokens"])
    batches = -(-len({output["id"] for output in outputs}) // work.variant.batch_size)
    prefill = clock.phases["prefill"]["duration_ns"]
    return {
        "outputs": len(outputs), "input_tokens": sum(output["prompt_tokens"] for output in outputs),
        "output_tokens": output_tokens, "output_tokens_per_s": output_tokens / window if window else None,
        "stopped_at_eos": sum(output["stop_reason"] == "eos" for output in outputs),
        "cut_by_max_new_tokens": sum(output["stop_reason"] == "max_new_tokens" for output in outputs),
        "prefill_s_per_batch": prefill / 1e9 / batches if batches else None,
        "decode_s_per_new_token": decode / 1e9 / decoded if decode and decoded else None,
        "decode_reason": clock.phases.get("decode", {}).get("reason"),
        "kv_cache": kv_cache(clock, work),
    }


MEASURED_AS = Text("bytes of the key and value tensors generate's past_key_values held at the end of a batch, the largest "
                   "batch's (element count × bytes per element): the cache itself, on any device")
PEAK_AS = Text("peak allocated while generating (measured window) less the memory allocated after loading: the cache and "
               "everything else the window held (activations, logits, the window's inputs on the device and, on a first "
               "use, the cuBLAS workspace); not the cache's size")
# What runs recorded before PEAK_AS said what else the window holds: kept so that their pages still say it translated
# (`make translations` keeps in the catalogs only what the code names).
PEAK_AS_RECORDED_BEFORE = Text("peak allocated while generating (measured window) less the memory allocated after "
                               "loading: the cache and the activations")


def _tensors(value, depth: int = 0):
    """The tensors a past_key_values holds: transformers 5's Cache (layers with keys and values), transformers 4's
    DynamicCache (key_cache, value_cache) or the legacy tuples of (key, value) per layer."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif value is None or depth > 4:
        return
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif getattr(value, "layers", None) is not None:
        for layer in value.layers:
            for name in ("keys", "values"):
                yield from _tensors(getattr(layer, name, None), depth + 1)
    else:
        for name in ("key_cache", "value_cache"):
            yield from _tensors(getattr(value, name, None), depth + 1)


def returned_cache(found):
    """The cache a generate call returned with return_dict_in_generate: transformers 5 names it cache (reading its old
    name past_key_values warns), transformers 4 past_key_values."""
    if not hasattr(found, "get"):
        return None
    return found.get("cache") if found.get("cache") is not None else found.get("past_key_values")


def cache_bytes(past) -> int | None:
    """Bytes of the key and value tensors in PAST (a generate call's past_key_values), or None where it holds none."""
    tensors = list(_tensors(past))
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors) if tensors else None


def kv_cache(clock, work) -> dict:
    """Return the KV cache's estimate (size's formula at the padded token count) beside its bytes measured at the end of
    each batch, and the allocator's peak beside them, named as what it is (#63)."""
    settings = work.protocol["generation"]
    tokens = work.padded_prompt + settings["max_new_tokens"]
    bits = 32 if work.variant.precision == "fp32" else 16
    shape = kv_shape(work.model.config.to_dict())
    estimate, reason = None, None
    if not settings["kv_cache"]:
        reason = Text("the protocol turns the KV cache off")
    elif shape is None:
        reason = Text("the model has no KV cache")
    else:
        estimate = int(kv_cache_bytes(**shape, tokens=tokens, sequences=work.variant.batch_size, bits=bits))
    peak = clock.phases["measured_window"].get("gpu_peak_allocated_bytes")
    above = None if work.loaded_bytes is None or peak is None else max(0, peak - work.loaded_bytes)
    measured = work.kv_bytes if settings["kv_cache"] else None
    return {"estimate_bytes": estimate, "estimate_reason": reason, "shape": shape, "tokens": tokens,
            "tokens_as": Text("the longest padded prompt of the window's batches plus max_new_tokens"),
            "longest_prompt_tokens": work.longest_prompt, "sequences": work.variant.batch_size, "bits": bits,
            "estimate_formula": "2 × layers × KV heads × head dim × tokens × sequences × bytes per value",
            "measured_bytes": measured,
            "measured_reason": None if measured is not None else reason or Text(
                "not measured: generate returned no key and value tensors"),
            "measured_as": MEASURED_AS, "allocator_peak_bytes": above,
            "allocator_peak_reason": None if above is not None else _unmeasured(work.variant.device, peak),
            "allocator_peak_as": PEAK_AS}


def _unmeasured(device: str, peak: int | None) -> str:
    """Say why the allocator's peak was not read: no CUDA device, or a model placed across cards (#44)."""
    if device.startswith("cuda") and peak is not None:
        return Text("not measured: the model is placed across cards, and each card's allocator counts only its own part "
                    "of the cache and the activations")
    return Text("not measured: no CUDA device (the KV cache is observed with torch.cuda's allocator counters, which a run "
                "on {device} does not have)", device=device)
