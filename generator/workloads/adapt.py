"""Adapt: fine-tune a classifier on a training split, phase by phase, and validate it on the campaign's corpus.

The second source document: reuse the inference grid with the learned parameters and the extra phases (backward
pass, first update, validation, export); "batch and accumulation document comparable updates".
"""

from __future__ import annotations

from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.declared.corpus import load_corpus, token_counts
from iteralab.declared.model_check import check_loads
from iteralab.declared.tables import Table
from iteralab.workloads import adapting, classify

KIND = "adapt"
DESCRIPTION = "fine-tune a text classifier (all weights, a named subset or LoRA) and validate it"
MEASURED_WINDOW = Text("the protocol's optimizer updates: for each, its microbatches tokenized, moved to the device, "
                       "forward, loss and backward (gradients accumulated), then the optimizer and schedule step")
THRESHOLD_METRICS = ("accuracy", "macro_f1")
QUESTION_UNIT = "models"  # [decision] models = N: validated models, never corpora or entries
PHASES = adapting.PHASES
STAGE_PHASES = ("tokenize", "forward", "backward")
COUNTED_PHASES = ("validation", "export", "evaluation", "writing_results")  # validation entries done by then
METHODS = ("all", "subset", "lora")
OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("constant", "linear")
ORDER = Text("the training split shuffled once with the protocol's seed; each update takes the next effective batch, "
             "from the start again after the last entry (the same examples in the same updates for every variant of "
             "the same effective batch)")
PRECISION = Text("fp32 weights, gradients and optimizer state; a bf16 variant runs its forward and loss under torch.autocast "
                 "(mixed precision, as transformers' Trainer does with bf16)")
Work = adapting.Work
evaluate_outputs, write_outputs, read_outputs = classify.evaluate_outputs, classify.write_outputs, classify.read_outputs


def read_settings(top, base: Path | None = None) -> dict:
    """Read [adaptation]: training split, labels, optimizer, learning rate, schedule, updates, subset and LoRA."""
    table = Table(top.get("adaptation", dict), "adaptation", top.source, top.errors)
    settings = {
        "train": _train(table, base or top.source.parent),
        "labels": _strings(table, "labels", "the classifier's labels in order, e.g. labels = [\"negative\", \"positive\"]"),
        "optimizer": table.get("optimizer", str, default="adamw", choices=OPTIMIZERS),
        "learning_rate": table.get("learning_rate", float),
        "weight_decay": table.get("weight_decay", float, default=0.0, minimum=0),
        "schedule": table.get("schedule", str, default="constant", choices=SCHEDULES),
        "updates": table.get("updates", int, minimum=1),
        "max_grad_norm": table.get("max_grad_norm", float, default=None),
        "subset": _strings(table, "subset", "the parameter name prefixes the subset method trains, e.g. "
                                            "subset = [\"classifier\", \"bert.encoder.layer.5\"]"),
        "lora": None, "order": ORDER, "precision": PRECISION,
    }
    if not settings["learning_rate"] > 0:
        table.note("learning_rate", "must be more than 0")
    if settings["max_grad_norm"] is not None and not settings["max_grad_norm"] > 0:
        table.note("max_grad_norm", "must be more than 0 (leave it out for no clipping)")
    if "lora" in table.data:
        settings["lora"] = _lora(Table(table.get("lora", dict), "adaptation.lora", top.source, top.errors))
    table.finish()
    return {"adaptation": settings}


def _strings(table: Table, key: str, example: str) -> list[str] | None:
    value = table.data.get(key)
    table.used.add(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or any(not isinstance(item, str) or not item for item in value) \
            or len(set(value)) != len(value):
        table.note(key, f"must be a list of distinct, non-empty names: {example}")
    return value


def _lora(table: Table) -> dict:
    lora = {"rank": table.get("rank", int, minimum=1), "alpha": table.get("alpha", float),
            "dropout": table.get("dropout", float, default=0.0, minimum=0),
            "target_modules": _strings(table, "target_modules", "the modules LoRA adapts, e.g. target_modules = "
                                                                "[\"query\", \"value\"]"),
            "modules_to_save": _strings(table, "modules_to_save", "modules trained whole beside the adapter, e.g. "
                                                                  "[\"classifier\", \"pooler\"]"),
            "library": "peft"}
    if lora["target_modules"] is None:
        table.note("target_modules", "is required: the modules LoRA adapts, e.g. target_modules = [\"query\", \"value\"]")
    if not lora["alpha"] > 0:
        table.note("alpha", "must be more than 0")
    if not lora["dropout"] < 1:
        table.note("dropout", "must be below 1")
    table.finish()
    return lora


def _train(table: Table, base: Path) -> dict:
    """Read the training split named by [adaptation] train; fingerprint it, as the corpus is."""
    relative = table.get("train", str)
    if not relative:
        return {}
    try:
        split = load_corpus(base / Path(relative).expanduser())
    except UserError as error:
        table.note("train", str(error))
        return {}
    if not split.labelled:
        missing = next(entry.id for entry in split.entries if entry.label is None)
        table.note("train", f"{base / relative}: every entry of a training split needs its gold label (first without "
                            f"one: {missing})")
    return {"path": relative, "fingerprint": split.fingerprint, "file_sha256": split.file_sha256,
            "entries": len(split.entries), "source_name": Path(relative).name}


def read_variant(table) -> dict:
    """Read a variant's method, gradient accumulation and whether it changes the effective batch on purpose."""
    for key, allowed, why in (
            ("quantization", "none", "an adaptation trains its weights; dynamic-int8 is for inference only"),
            ("length_sorted", False, "an adaptation takes its training split in the protocol's order (shuffled once "
                                     "with the seed), the same for every variant"),
            ("compile", False, "torch.compile of a training step is not measured by this version; leave compile out")):
        if table.data.get(key, allowed) != allowed:
            table.note(key, why)
    if table.data.get("precision") == "fp16":
        table.note("precision", "fp16 training needs a loss scaler, which this version does not run: use bf16 (autocast, "
                                "weights and optimizer state in fp32) or fp32")
    return {"method": table.get("method", str, default="all", choices=METHODS),
            "accumulation": table.get("accumulation", int, default=1, minimum=1),
            "changes_effective_batch": table.get("changes_effective_batch", bool, default=False)}


def effective_batch(variant) -> str:
    """Say a variant's effective batch as its product: microbatch × accumulation × devices = examples per update."""
    return (f"{variant.batch_size} × {variant.accumulation} × 1 device = "
            f"{variant.batch_size * variant.accumulation}")


def check_variants(variants, protocol: dict) -> list[str]:
    """Refuse variants whose updates are not comparable with the reference's, and methods the protocol does not set up."""
    errors, settings = [], protocol.get("adaptation") or {}
    reference = next(variant for variant in variants if variant.name == protocol["reference_variant"])
    examples = reference.batch_size * reference.accumulation
    for variant in variants:
        if variant.batch_size * variant.accumulation != examples and not variant.changes_effective_batch:
            errors.append(f"[variants] {variant.name}: makes an effective batch of {effective_batch(variant)} examples "
                          f"per update, but the reference variant {reference.name} makes {effective_batch(reference)}: "
                          "updates are comparable only at the same effective batch; change batch_size (the microbatch) "
                          "or accumulation, or set changes_effective_batch = true to make it a new, declared comparison")
        if variant.method == "lora" and not settings.get("lora"):
            errors.append(f"[variants] {variant.name}: method = \"lora\" needs the table [adaptation.lora] (rank, alpha, "
                          "target_modules)")
        if variant.method == "subset" and not settings.get("subset"):
            errors.append(f"[variants] {variant.name}: method = \"subset\" needs [adaptation] subset, the parameter name "
                          "prefixes it trains")
    return errors


def check_model(model_dir: Path, config: dict, protocol: dict) -> dict:
    """Refuse a folder that cannot be fine-tuned into the campaign's classifier; count what each method trains."""
    labels = adapting.labels_of(config, protocol)
    if not labels:
        raise UserError(f"model folder {model_dir}: its config names no labels (id2label) and [adaptation] labels is not "
                        "set: write the classifier's labels, e.g. labels = [\"negative\", \"positive\"]")
    named = adapting.labels_of(config, {"adaptation": {"labels": None}})
    if named and protocol["adaptation"]["labels"] and named != labels:
        raise UserError(f"model folder {model_dir}: its config names the labels {', '.join(named)}, but [adaptation] "
                        f"labels says {', '.join(labels)}; leave labels out to keep the model's, or save the model with "
                        "the labels you mean")
    from transformers import AutoModelForSequenceClassification
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    accepted = set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.values()) | set(MODEL_MAPPING_NAMES.values())
    found, model = check_loads(model_dir, config, AutoModelForSequenceClassification, accepted,
                               "a text encoder to fine-tune as a classifier",
                               "an encoder or a classifier folder (for example saved as BertModel or "
                               "...ForSequenceClassification); fine-tuning causal language models is not built yet",
                               untrained=True, **adapting.label_options(labels))
    initialised = sorted(set(found["loading"]["missing_keys"]) | set(found["loading"]["mismatched_keys"]))
    methods = adapting.check_methods(model_dir, model, protocol["adaptation"], initialised)
    return {"labels": labels, **found, "initialised_for_training": initialised, "methods": methods}


def load_model(model_dir, variant, protocol: dict):
    """Load tokenizer and classifier to train, with the variant's method applied."""
    return adapting.load_model(model_dir, variant, protocol)


def check_corpus(corpus, model: dict, campaign) -> None:
    """Refuse a validation split without gold labels, labels the model lacks, and entries the training split holds."""
    if not corpus.labelled:
        raise UserError(f"{campaign.corpus_path}: an adaptation is validated against gold labels, and this validation "
                        "split has entries without one")
    train = load_corpus(train_path(campaign))
    for split, name in ((corpus, campaign.corpus_path), (train, train.source)):
        unknown = sorted({entry.label for entry in split.entries} - set(model["labels"]))
        if unknown:
            raise UserError(f"{name}: gold label(s) {', '.join(unknown)} are not labels of the classifier "
                            f"({', '.join(model['labels'])})")
    _refuse_long_training_entries(train, campaign)
    seen = {entry.id for entry in train.entries} | {entry.text for entry in train.entries}
    shared = [entry.id for entry in corpus.entries if entry.id in seen or entry.text in seen]
    if shared:
        raise UserError(f"{campaign.corpus_path}: {len(shared)} validation entries are also in the training split "
                        f"{train.source} (same id or text; first: {', '.join(shared[:5])}): the validation split must "
                        "never be seen in training; remove them from one of the two")


def _refuse_long_training_entries(train, campaign) -> None:
    """Refuse training entries over max_length when the protocol refuses truncation, as for the corpus."""
    protocol = campaign.protocol
    if protocol["truncation"] != "refuse":
        return
    from transformers import AutoTokenizer

    counted = token_counts(AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True), train.entries)
    over = [entry_id for entry_id, count in counted.items() if count > protocol["max_length"]]
    if over:
        raise UserError(f"{train.source}: {len(over)} training entries exceed max_length {protocol['max_length']} tokens "
                        f"(first: {', '.join(over[:5])}) and the protocol refuses truncation")


def count_tokens(tokenizer, protocol: dict, entries) -> dict[str, int]:
    """Count each validation entry's tokens as the model sees them (special tokens included)."""
    return token_counts(tokenizer, entries)


def passes(protocol: dict) -> int:
    """Return how many times validation goes over the corpus: once."""
    return 1


def train_path(campaign) -> Path:
    """Return the training split's file: relative to the campaign file, ~ the user's home."""
    return campaign.source.parent / Path(campaign.protocol["adaptation"]["train"]["path"]).expanduser()


def inputs(campaign) -> list[tuple[Path, str]]:
    """Return the training split and where the run keeps its copy, beside the corpus's."""
    train = campaign.protocol["adaptation"]["train"]
    return [(train_path(campaign), adapting.train_copy(campaign.name, train))]


def plan_lines(prepared) -> list[str]:
    """Say the training split, the updates per trial and each variant's effective batch and trained parameters."""
    protocol = prepared.campaign.protocol
    settings, methods = protocol["adaptation"], prepared.model["methods"]
    lines = [f"Training split {settings['train']['source_name']}: {settings['train']['entries']} entries, shuffled once "
             f"with seed {protocol['seed']}; each trial makes 1 first update, then {settings['updates']} in the measured "
             f"window ({settings['optimizer']}, learning rate {settings['learning_rate']:g}, {settings['schedule']} schedule)"]
    for variant in prepared.campaign.variants:
        counted = methods[variant.method]
        lines.append(f"  {variant.name}: {variant.method}, {effective_batch(variant)} examples per update; trains "
                     f"{counted['trainable_parameters']:,} of {counted['total_parameters']:,} parameters")
    return lines


def manifest_fields(campaign) -> dict:
    """Return the training split's copy, fingerprint and size, for the manifest and the evidence bundle."""
    train = campaign.protocol["adaptation"]["train"]
    return {"training_split": {"path": adapting.train_copy(campaign.name, train), "fingerprint": train["fingerprint"],
                               "file_sha256": train["file_sha256"], "entries": train["entries"],
                               "source_name": train["source_name"], "order": ORDER}}
