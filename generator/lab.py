"""The lab exercise: the runner's instruments on a small network this module builds itself, section by section.

A two-layer GPT-2 made from a config with random weights (nothing downloaded) is timed with the runner's PhaseClock:
the environment check that doctor makes, phases timed apart, memory per phase, the measured window against batch size,
and the KV cache's estimate beside what CUDA observes. Each section says what it does not prove: the exercise shows the
instruments, it does not replace a trial of your model. Run it as ``python -m iteralab.lab`` or ``iteralab lab``; the
notebook that ``iteralab notebook DIR`` copies out calls the same functions.
"""

from __future__ import annotations

import contextlib
import shutil
from importlib import resources
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.machine.phases import PhaseClock, host_rss
from iteralab.money.sizing import kv_cache_bytes, kv_shape
from iteralab.run import doctor
from iteralab.store.views import window_figures
from iteralab.workloads.generated import MEASURED_AS, PEAK_AS, cache_bytes, returned_cache

NOTEBOOK = "lab.ipynb"
# The network: small enough that the whole exercise takes seconds on two CPU cores, a real transformer all the same.
NETWORK = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000, "n_positions": 128, "bos_token_id": 0,
           "eos_token_id": 0, "pad_token_id": 0}
PHASE_ORDER = ("build", "to_device", "first_pass", "measured_window")
NOT_PROVEN = {
    "environment": "It does not prove the machine is quiet during a trial, nor that your campaign's devices and "
                   "model fit: give doctor the campaign file, and run a trial of your model.",
    "phases": "It does not prove how long your model takes: a two-layer network with random weights times the "
              "instrument, not your workload; it does not replace a trial of your model.",
    "memory": "It does not prove your model's memory need: this network is a few MiB, and the allocator's reserve, "
              "fragmentation and your batch shapes differ; it does not replace a trial of your model.",
    "batch": "It does not prove which batch size is best for your model or card: where the curve flattens depends on "
             "the model, the sequence lengths and the device; it does not replace a trial of your model.",
    "kv_cache": "It does not prove your generation fits: the formula counts the cache alone, not the weights, "
                "activations or allocator reserve; it does not replace a trial of your model.",
}
FIRST_PASS_WHY = ("The first pass pays one-off costs (kernel and algorithm selection, the allocator growing its pools, "
                  "library handles and caches created): it is timed as its own phase and kept out of the measured "
                  "window, which times the later passes, as every trial does.")


def default_device() -> str:
    """Return cuda:0 where torch sees a CUDA device, else cpu."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def gpu_reason(device: str) -> str | None:
    """Say why the GPU memory cells are empty on DEVICE, or None where CUDA counts them."""
    if device.startswith("cuda"):
        return None
    return (f"empty: no CUDA device, this exercise runs on {device} (torch.cuda's allocator counters exist only on CUDA, "
            "so there is no GPU figure to print, not a zero)")


def environment(*, runs_dir: Path | str = DEFAULT_RUNS) -> dict:
    """Return doctor's description of this machine (nothing loaded, nothing written)."""
    return doctor.diagnose(runs_dir=runs_dir)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2Config, GPT2LMHeadModel


def build_network(*, seed: int = 0):
    """Return a small GPT-2 made from a config, random weights seeded with SEED, nothing downloaded, in eval mode."""
    import torch

    config, network = _gpt2()
    torch.manual_seed(seed)
    return network(config(**NETWORK)).eval()


def _inputs(*, batch_size: int, tokens: int, device: str, seed: int = 0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, NETWORK["vocab_size"], (batch_size, tokens), generator=generator).to(device)


@contextlib.contextmanager
def _threads(count: int | None):
    """Run with COUNT torch CPU threads (None: torch's own setting), the caller's setting restored after."""
    import torch

    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _forward(model, ids) -> None:
    import torch

    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)


def time_phases(*, device: str, batch_size: int = 4, tokens: int = 32, passes: int = 10, threads: int | None = 1) -> dict:
    """Build the network, move it to DEVICE, time its first pass and a measured window of PASSES later passes apart.

    Each phase has its duration, host RSS peak above the baseline taken before the build (torch and transformers loaded), and on CUDA the allocator's
    peak allocated and peak reserved bytes, each as its own figure (never summed). On a CPU the GPU cells are None.
    THREADS torch CPU threads (None: torch's setting): one by default, since a network this small gains nothing from a
    second, and on a shared machine a second thread waits for a busy core, a pass taking fifty times as long.
    """
    with _threads(threads):
        return _time_phases(device=device, batch_size=batch_size, tokens=tokens, passes=passes)


def _time_phases(*, device: str, batch_size: int, tokens: int, passes: int) -> dict:
    import torch

    _gpt2()  # imported before the baseline: the build phase times the network, not transformers' import
    clock, baseline = PhaseClock(device), host_rss()
    with clock.phase("build"):
        model = build_network()
    with clock.phase("to_device"):
        model = model.to(device)
    ids = _inputs(batch_size=batch_size, tokens=tokens, device=device)
    with clock.phase("first_pass"):
        _forward(model, ids)
    with clock.phase("measured_window"):
        for _ in range(passes):
            _forward(model, ids)
    rows = [_phase_row(name, clock.phases[name], baseline) for name in PHASE_ORDER]
    return {"device": device, "threads": torch.get_num_threads(), "batch_size": batch_size, "tokens": tokens,
            "passes": passes, "baseline_rss_bytes": baseline,
            "rows": rows, "gpu_reason": gpu_reason(device), "model": model}


def _phase_row(name: str, phase: dict, baseline: int | None) -> dict:
    peak = phase.get("host_peak_rss_bytes")
    return {"phase": name, "duration_s": phase["duration_ns"] / 1e9,
            "host_peak_rss_above_baseline_bytes": None if peak is None or baseline is None else peak - baseline,
            "gpu_peak_allocated_bytes": phase.get("gpu_peak_allocated_bytes"),
            "gpu_peak_reserved_bytes": phase.get("gpu_peak_reserved_bytes")}


def first_pass_against_later(timed: dict) -> dict:
    """Return the first pass's duration beside one later pass's mean (the measured window over its passes)."""
    by_name = {row["phase"]: row for row in timed["rows"]}
    first, later = by_name["first_pass"]["duration_s"], by_name["measured_window"]["duration_s"] / timed["passes"]
    return {"first_pass_s": first, "later_pass_s": later, "ratio": first / later if later else None, "why": FIRST_PASS_WHY}


def batch_sweep(*, model, device: str, batch_sizes: tuple[int, ...] = (1, 2, 4, 8), tokens: int = 32, passes: int = 5,
                repetitions: int = 3, threads: int | None = 1) -> list[dict]:
    """Time a measured window of PASSES passes REPETITIONS times per batch size, after one first pass left out.

    Each row has the repetitions' windows, their median, minimum, maximum and spread (maximum less minimum, as a share
    of the median), and the median time per sequence. THREADS as time_phases takes it.
    """
    with _threads(threads):
        return [_batch_row(model=model, device=device, size=size, tokens=tokens, passes=passes, repetitions=repetitions)
                for size in batch_sizes]


def _batch_row(*, model, device: str, size: int, tokens: int, passes: int, repetitions: int) -> dict:
    ids = _inputs(batch_size=size, tokens=tokens, device=device, seed=size)
    clock = PhaseClock(device)
    with clock.phase("first_pass"):  # this shape's one-off costs, kept out of the windows below
        _forward(model, ids)
    for repetition in range(repetitions):
        with clock.phase(f"window_{repetition}"):
            for _ in range(passes):
                _forward(model, ids)
    windows = [clock.phases[f"window_{repetition}"]["duration_ns"] / 1e9 for repetition in range(repetitions)]
    fastest, median, slowest = window_figures(windows)  # as the campaign pages figure a variant's windows
    return {"batch_size": size, "windows_s": windows, "median_s": median, "min_s": fastest, "max_s": slowest,
            "spread": (slowest - fastest) / median, "per_sequence_s": median / (passes * size)}


def kv_cache(*, model, device: str, batch_size: int = 4, prompt_tokens: int = 32, new_tokens: int = 16) -> dict:
    """Return the KV cache's estimate (size's formula) beside the cache measured as the runner measures it (the bytes of
    the key and value tensors generate's past_key_values holds at the end), and on CUDA the allocator's peak beside it.

    The allocator's peak while generating less what was allocated before holds the cache and the activations, logits and
    workspace: it is kept as what it is, never called the cache. On a CPU there is no allocator counter.
    """
    import torch

    shape = kv_shape(model.config.to_dict())
    tokens = prompt_tokens + new_tokens
    estimate = int(kv_cache_bytes(**shape, tokens=tokens, sequences=batch_size, bits=32))  # fp32 weights: 4 bytes a value
    result = {"shape": shape, "tokens": tokens, "sequences": batch_size, "bits": 32, "estimate_bytes": estimate,
              "formula": "2 × layers × KV heads × head dim × tokens × sequences × bytes per value",
              "measured_bytes": None, "measured_reason": None, "measured_as": MEASURED_AS,
              "allocator_peak_bytes": None, "allocator_peak_as": PEAK_AS,
              "allocator_peak_reason": None if device.startswith("cuda") else
              f"empty: not measured on {device}; torch.cuda's allocator counters exist only on a CUDA device"}
    ids = _inputs(batch_size=batch_size, tokens=prompt_tokens, device=device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    with torch.inference_mode():
        found = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, use_cache=True, pad_token_id=0,
                               return_dict_in_generate=True)
    if cuda:
        torch.cuda.synchronize(device)
        result["allocator_peak_bytes"] = torch.cuda.max_memory_allocated(device) - before
    result["measured_bytes"] = cache_bytes(returned_cache(found))
    if result["measured_bytes"] is None:
        result["measured_reason"] = "empty: generate returned no key and value tensors"
    return result


def frame(rows: list[dict]):
    """Return ROWS as a pandas table (a missing figure stays empty, never 0)."""
    import pandas as pd

    return pd.DataFrame(rows).drop(columns=["windows_s"], errors="ignore")


def ranked(report: dict):
    """Return a decision report's configurations in its ranking (``Runs.decide``): the figures the rule compares."""
    import pandas as pd

    rows = [{"rank": place, "configuration": entry["configuration"], "label": entry["label"],
             "accepted_trials": entry["accepted_trials"], "median_s": entry["median_s"], "min_s": entry["min_s"],
             "max_s": entry["max_s"], "projected_hours_median": (entry.get("projected_hours") or {}).get("median"),
             "planned_total": (entry.get("planned_total") or {}).get("total"),
             "planned_reason": entry.get("planned_reason")}
            for place, entry in enumerate(report["ranked"], start=1)]
    return pd.DataFrame(rows, columns=["rank", "configuration", "label", "accepted_trials", "median_s", "min_s", "max_s",
                                       "projected_hours_median", "planned_total", "planned_reason"])


def copy_notebook(*, folder: Path | str) -> Path:
    """Copy the lab notebook into FOLDER (made if missing) and return its path; an existing file is never overwritten."""
    target = Path(folder) / NOTEBOOK
    if target.exists():
        raise UserError(f"{target} already exists: nothing was copied and it was left as it is; move it away or choose "
                        "another folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    with (resources.files("iteralab") / "data" / "notebook" / NOTEBOOK).open("rb") as source, open(target, "xb") as out:
        shutil.copyfileobj(source, out)
    return target


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:+.2f} MiB" if value < 0 else f"{value / 2**20:.2f} MiB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _section(title: str, lines: list[str], key: str) -> str:
    return "\n".join([f"== {title} ==", *lines, f"Does not prove: {NOT_PROVEN[key]}", ""])


def describe_environment(checked: dict) -> str:
    """Say doctor's description of this machine, and what it does not prove."""
    return _section("Environment (what iteralab doctor checks)", [doctor.describe(checked)], "environment")


def describe_phases(timed: dict) -> str:
    """Say each phase's duration and why the first pass is not the measured window."""
    lines = [f"{row['phase']:<16} {_ms(row['duration_s']):>12}" for row in timed["rows"]]
    first = first_pass_against_later(timed)
    ratio = f"{first['ratio']:.1f}×" if first["ratio"] else "—"
    lines += [f"First pass {_ms(first['first_pass_s'])} against {_ms(first['later_pass_s'])} for one later pass "
              f"({ratio}; measured window: {timed['passes']} passes of batch {timed['batch_size']} × {timed['tokens']} "
              "tokens).", first["why"]]
    threads = f"{timed['threads']} torch thread{'s' if timed['threads'] > 1 else ''}"
    return _section(f"Phases timed apart (PhaseClock on {timed['device']}, {threads})", lines, "phases")


def describe_memory(timed: dict) -> str:
    """Say each phase's host RSS peak above the baseline and the GPU's allocated and reserved peaks, apart."""
    lines = [f"Baseline host RSS before the build (interpreter, torch and transformers loaded): {_mib(timed['baseline_rss_bytes'])}",
             f"{'phase':<16} {'host RSS peak above baseline':>28} {'GPU peak allocated':>20} {'GPU peak reserved':>20}"]
    lines += [f"{row['phase']:<16} {_mib(row['host_peak_rss_above_baseline_bytes']):>28} "
              f"{_mib(row['gpu_peak_allocated_bytes']):>20} {_mib(row['gpu_peak_reserved_bytes']):>20}"
              for row in timed["rows"]]
    lines.append("GPU allocated (tensors alive) and reserved (the allocator's pools, which hold the allocated) are two "
                 "views of one memory: never add them.")
    if timed["gpu_reason"]:
        lines.append(f"GPU cells {timed['gpu_reason']}")
    return _section("Memory per phase", lines, "memory")


def describe_batches(rows: list[dict]) -> str:
    """Say the measured window's median, range and spread per batch size, and the time per sequence."""
    lines = [f"{'batch':>5} {'median window':>14} {'min':>10} {'max':>10} {'spread':>8} {'per sequence':>13}"]
    lines += [f"{row['batch_size']:>5} {_ms(row['median_s']):>14} {_ms(row['min_s']):>10} {_ms(row['max_s']):>10} "
              f"{row['spread']:>8.1%} {_ms(row['per_sequence_s']):>13}" for row in rows]
    lines.append(f"{len(rows[0]['windows_s'])} repetitions per batch size, each after one first pass left out; spread is "
                 "(max - min) / median.")
    return _section("The measured window against batch size", lines, "batch")


def describe_kv(kv: dict) -> str:
    """Say the KV cache's estimate with its formula, beside the measurement or the reason there is none."""
    shape = kv["shape"]
    lines = [f"Estimate: {kv['formula']} = 2 × {shape['layers']} × {shape['kv_heads']} × {shape['head_dim']} × "
             f"{kv['tokens']} × {kv['sequences']} × {kv['bits'] // 8} = {kv['estimate_bytes']:,} bytes "
             f"({_mib(kv['estimate_bytes'])})"]
    if kv["measured_bytes"] is None:
        lines.append(f"Measured: {kv['measured_reason']}")
    else:
        lines.append(f"Measured: {kv['measured_bytes']:,} bytes ({_mib(kv['measured_bytes'])}), {kv['measured_as']}")
    peak = kv.get("allocator_peak_bytes")
    lines.append(f"Allocator peak: {peak:,} bytes ({_mib(peak)}), {kv['allocator_peak_as']}" if peak is not None else
                 f"Allocator peak: {kv.get('allocator_peak_reason')}")
    return _section("KV cache: estimate and measurement", lines, "kv_cache")


def report(*, device: str | None = None, runs_dir: Path | str = DEFAULT_RUNS) -> str:
    """Run every section on DEVICE (cuda:0 where there is one, else cpu) and return the text the script prints."""
    device = device or default_device()
    timed = time_phases(device=device)
    sections = [describe_environment(environment(runs_dir=runs_dir)), describe_phases(timed), describe_memory(timed),
                describe_batches(batch_sweep(model=timed["model"], device=device)),
                describe_kv(kv_cache(model=timed["model"], device=device))]
    return "\n".join(sections)


if __name__ == "__main__":
    print(report())
