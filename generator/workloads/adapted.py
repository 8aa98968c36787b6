"""What an adaptation trial keeps beside its predictions: the exported model, hashed, and its figures and memory."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from iteralab.core.files import writing
from iteralab.core.language import Text

# Phases from loading the model to its export: the time a renter pays to get a model to validate.
TO_MODEL = ("model_load", "first_forward", "first_backward", "first_update", "measured_window", "validation", "export")
EXPORTED = {"lora": Text("the LoRA adapter alone (peft's save_pretrained), to load over the base model"),
            "all": Text("the whole fine-tuned model with its tokenizer (save_pretrained)"),
            "subset": Text("the whole fine-tuned model with its tokenizer (save_pretrained)")}
ESTIMATE = Text("weights (every parameter at its precision) + gradients (one per trainable parameter) + optimizer state "
                "(AdamW: two moments per trainable parameter; SGD without momentum: none); activations, buffers and the "
                "allocator's reserve are not estimated: they depend on the microbatch and the lengths, see the measured "
                "peaks")
SHA256_OF = Text("the sha256sum lines of its files (hash, two spaces, name), sorted by name")
BASELINE = Text("host memory of the process before the model loaded (the interpreter, torch and the data)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export(model, tokenizer, place, method: str) -> dict:
    """Save the trained model (LoRA: the adapter alone) under the trial's id; return its files with their bytes and hashes.

    Written into a .partial folder renamed when whole: a folder under the trial's id holds every file. An export stopped
    by a signal or an error removes its .partial folder. A kill leaves it, or, between the rename and the trial record, a
    whole folder that no record names: check lists both as safe to remove, run --resume sets them aside (run.leftovers).
    """
    relative = f"{place.campaign}/models/{place.trial_id}"
    target = place.runs_dir / relative
    partial = target.with_name(target.name + ".partial")
    with writing(partial / "config.json", "the exported model"):
        try:
            model.save_pretrained(partial)
            if method != "lora":
                tokenizer.save_pretrained(partial)
            files = sorted(path for path in partial.rglob("*") if path.is_file())
            listed = [{"name": path.relative_to(partial).as_posix(), "bytes": path.stat().st_size, "sha256": _sha256(path)}
                      for path in files]
            for path in files:  # on disk before the record says it exists
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
        except BaseException:  # SIGTERM (Interrupted), a full disk: the trial's record says it stopped, nothing is left
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if target.exists():
            shutil.rmtree(target)
        partial.rename(target)
    lines = "".join(f"{entry['sha256']}  {entry['name']}\n" for entry in listed)
    return {"path": relative, "method": method, "what": EXPORTED[method], "files": listed,
            "bytes": sum(entry["bytes"] for entry in listed),
            "sha256": hashlib.sha256(lines.encode("utf-8")).hexdigest(),
            "sha256_of": SHA256_OF}


def counts(model) -> dict:
    """Count the trainable and all parameters."""
    parameters = list(model.parameters())
    return {"trainable_parameters": sum(p.numel() for p in parameters if p.requires_grad),
            "total_parameters": sum(p.numel() for p in parameters)}


def estimate(model, optimizer: str) -> dict:
    """Estimate weights + gradients + optimizer state from the parameter counts and their precision."""
    parameters = list(model.parameters())
    weights = sum(p.numel() * p.element_size() for p in parameters)
    gradients = sum(p.numel() * p.element_size() for p in parameters if p.requires_grad)
    state = 2 * gradients if optimizer == "adamw" else 0
    return {"weights_bytes": weights, "gradients_bytes": gradients, "optimizer_state_bytes": state,
            "total_bytes": weights + gradients + state, "label": "estimate", "formula": ESTIMATE}


def measured(clock, device: str) -> dict:
    """Return the highest peaks of the training phases, each counter apart (allocated and reserved are never summed)."""
    phases = [clock.phases[name] for name in TO_MODEL[:5] if clock.phases.get(name, {}).get("duration_ns") is not None]

    def highest(key: str):
        values = [phase[key] for phase in phases if phase.get(key) is not None]
        return max(values) if values else None

    baseline = clock.phases.get("model_load", {}).get("host_rss_at_start_bytes")
    host = highest("host_peak_rss_bytes")
    return {"label": "measured", "phases": [name for name in TO_MODEL[:5]],
            "gpu_peak_allocated_bytes": highest("gpu_peak_allocated_bytes"),
            "gpu_peak_reserved_bytes": highest("gpu_peak_reserved_bytes"),
            "gpu_reason": None if device.startswith("cuda") else Text(
                "no GPU: the variant runs on {device}; the host's memory is measured instead", device=device),
            "host_peak_rss_bytes": host, "host_baseline_bytes": baseline, "host_baseline": BASELINE,
            "host_above_baseline_bytes": None if host is None or baseline is None else max(0, host - baseline)}


def figures(clock, work) -> dict:
    """Return the window's rates, the time to the validated model, the losses, parameters, memory and the export."""
    variant, settings = work.variant, work.settings
    seconds = clock.phases["measured_window"]["duration_ns"] / 1e9
    window = work.window

    def rate(count):
        return count / seconds if seconds else None

    return {
        "method": variant.method,
        "effective_batch": {"microbatch": variant.batch_size, "accumulation": variant.accumulation, "devices": 1,
                            "examples": variant.batch_size * variant.accumulation},
        "updates": settings["updates"], "updates_per_s": rate(settings["updates"]),
        "train_examples": window["examples"], "train_examples_per_s": rate(window["examples"]),
        "train_tokens": window["tokens"], "train_tokens_per_s": rate(window["tokens"]),
        "time_to_validated_model_s": sum(clock.phases[name]["duration_ns"] for name in TO_MODEL) / 1e9,
        "time_to_validated_model": Text("model load, first forward, first backward, first update, the measured window, "
                                        "validation and export, one after the other"),
        "losses": {"first_update": work.first_loss, "window": work.losses, "validation": work.validation_loss},
        "parameters": counts(work.model),
        "memory": {"estimate": estimate(work.model, work.optimizer_settings["optimizer"]), "measured": measured(clock, variant.device)},
        "export": work.exported,
    }
