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
from iteralab.workloads import adapting, classify, lengths, training

KIND = "adapt"
DESCRIPTION = "fine-tune a text classifier (all weights, a named subset or LoRA) and validate it"
MEASURED_WINDOW = Text("the protocol's optimizer updates: for each, its microbatches tokenized, moved to the device, "
                       "forward, loss and backward (gradients accumulated), then the optimizer and schedule step")
THRESHOLD_METRICS = ("accuracy", "macro_f1")
QUESTION_UNIT = "models"  # [decision] models = N: validated models, never corpora or entries
PHASES = adapting.PHASES
# [protocol.warmup] is not required (#61): the protocol's warm-up without it, in the shape every protocol's has.
NO_WARMUP = {"batches": 0, "passes": 1, "inputs": Text("none: an adaptation has no warm-up; its first forward, backward "
                                                       "and update are timed as phases of their own")}
NAMED = 20  # a refusal names at most this many entries (and says how many there are)
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
    train, split = _train(table, base or top.source.parent)
    settings = {
        "train": train,
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
    # Each left out when absent, so campaigns written before them keep their fingerprint (#61).
    declared = {"new_head": table.get("new_head", bool, default=None),
                "shuffle": table.get("shuffle", str, default=None, choices=training.SHUFFLES)}
    settings.update({key: value for key, value in declared.items() if value is not None})
    if settings.get("shuffle") == "every_pass":
        settings["order"] = training.ORDER_EVERY_PASS
    if not settings["learning_rate"] > 0:
        table.note("learning_rate", "must be more than 0")
    if settings["max_grad_norm"] is not None and not settings["max_grad_norm"] > 0:
        table.note("max_grad_norm", "must be more than 0 (leave it out for no clipping)")
    if "lora" in table.data:
        settings["lora"] = _lora(Table(table.get("lora", dict), "adaptation.lora", top.source, top.errors))
    _refuse_shared_entries(table, top, base or top.source.parent, split)
    table.finish()
    return {"adaptation": settings}


def _refuse_shared_entries(table: Table, top, base: Path, train) -> None:
    """Refuse validation entries the training split holds (same id or text) as the campaign file is read: before any
    model loads (#61: refused after a 25 s load). A corpus that cannot be read is the corpus check's to name."""
    corpus = (top.data.get("corpus") or {}).get("path") if isinstance(top.data.get("corpus"), dict) else None
    if not isinstance(corpus, str) or train is None:
        return
    try:
        validation = load_corpus(base / Path(corpus).expanduser())
    except UserError:
        return
    seen = {entry.id for entry in train.entries} | {entry.text for entry in train.entries}
    shared = [entry.id for entry in validation.entries if entry.id in seen or entry.text in seen]
    if shared:
        table.note("train", f"{validation.source}: {len(shared)} validation {'entry is' if len(shared) == 1 else 'entries are'} "
                            f"also in the training split {train.source} (same id or text): {named(shared)}; the validation "
                            "split must never be seen in training: remove them from one of the two")


def named(ids: list[str]) -> str:
    """Name IDS, at most NAMED of them, saying so when there are more."""
    shown = ", ".join(ids[:NAMED])
    return shown if len(ids) <= NAMED else f"{shown} (the first {NAMED} of {len(ids)}; at most {NAMED} are named)"


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


def _train(table: Table, base: Path) -> tuple[dict, object]:
    """Read the training split named by [adaptation] train; fingerprint it, as the corpus is; return it too (or None)."""
    relative = table.get("train", str)
    if not relative:
        return {}, None
    try:
        split = load_corpus(base / Path(relative).expanduser())
    except UserError as error:
        table.note("train", str(error))
        return {}, None
    unlabelled = [f"line {entry.line} (id {entry.id})" for entry in split.entries if entry.label is None]
    if unlabelled:
        table.note("train", f"{base / relative}: every entry of a training split needs its gold label; "
                            f"{len(unlabelled)} {'has' if len(unlabelled) == 1 else 'have'} none: {named(unlabelled)}")
    return {"path": relative, "fingerprint": split.fingerprint, "file_sha256": split.file_sha256,
            "entries": len(split.entries), "source_name": Path(relative).name}, split


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
    own = {"optimizer": table.get("optimizer", str, default=None, choices=OPTIMIZERS),
           "learning_rate": table.get("learning_rate", float, default=None),
           "weight_decay": table.get("weight_decay", float, default=None, minimum=0)}
    if own["learning_rate"] is not None and not own["learning_rate"] > 0:
        table.note("learning_rate", "must be more than 0 (leave it out for the campaign's [adaptation] learning_rate)")
    return {"method": table.get("method", str, default="all", choices=METHODS),
            "accumulation": table.get("accumulation", int, default=1, minimum=1),
            "changes_effective_batch": table.get("changes_effective_batch", bool, default=False), **own}


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
        entries = (settings.get("train") or {}).get("entries")
        if settings.get("shuffle") == "every_pass" and entries and variant.batch_size * variant.accumulation > entries:
            errors.append(f"[variants] {variant.name}: an effective batch of {effective_batch(variant)} examples is more "
                          f"than the training split's {entries} entries: under shuffle = \"every_pass\" an update never "
                          "holds entries of two passes; make the effective batch smaller or the split larger")
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
    _check_head(model_dir, found, initialised, protocol["adaptation"].get("new_head"))
    methods = adapting.check_methods(model_dir, model, protocol["adaptation"], initialised)
    return {"labels": labels, **found, "initialised_for_training": initialised, "methods": methods}


def _check_head(model_dir: Path, found: dict, initialised: list[str], new_head: bool | None) -> None:
    """Refuse weights the checkpoint lacks unless the campaign declares that a new head is trained, and a declared new
    head the checkpoint holds (#61: a config claiming a classifier it did not hold was fine-tuned from a random head)."""
    saved = ", ".join(found["saved_architectures"]) or "no architecture"
    if initialised and not new_head:
        shown = ", ".join(initialised[:6]) + (f" and {len(initialised) - 6} more" if len(initialised) > 6 else "")
        claims = any(name.endswith("ForSequenceClassification") for name in found["saved_architectures"])
        what = (f"its config.json names {saved}, a classifier whose head it does not hold" if claims else
                f"it was saved as {saved}, without this classifier's head")
        raise UserError(f"model folder {model_dir}: the checkpoint lacks weights a {found['architecture']} needs "
                        f"({shown}): {what}, and fine-tuning would start them from random values. To train a new head, "
                        "declare it: [adaptation] new_head = true (the head is initialised with the protocol's seed and "
                        "each trial's record says so); to fine-tune a trained classifier, point [model] path at a folder "
                        "that holds its head")
    if new_head and not initialised:
        raise UserError(f"model folder {model_dir}: [adaptation] new_head = true, but the checkpoint ({saved}) holds the "
                        "classifier's head for these labels, which is loaded, not initialised: leave new_head out")


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
    _refuse_long_training_entries(train, campaign)  # shared entries were refused as the campaign file was read
    # max_length beyond the model's positions, over both splits, before any timing (#61)
    lengths.refuse_beyond(campaign, lambda: {**_tokens(campaign, train), **_tokens(campaign, corpus)})


def _tokens(campaign, split) -> dict[str, int]:
    from transformers import AutoTokenizer

    return token_counts(AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True), split.entries)


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
    """Say the training split and its order, the head, the updates per trial and each variant's effective batch, trained
    parameters and the optimizer settings it sets for itself."""
    protocol = prepared.campaign.protocol
    settings, methods = protocol["adaptation"], prepared.model["methods"]
    shuffled = ("shuffled anew for each pass (seeded), no update across two passes"
                if settings.get("shuffle") == "every_pass" else "shuffled once")
    initialised = prepared.model.get("initialised_for_training") or []
    lines = [f"Training split {settings['train']['source_name']}: {settings['train']['entries']} entries, {shuffled} "
             f"with seed {protocol['seed']}; each trial makes 1 first update, then {settings['updates']} in the measured "
             f"window ({settings['optimizer']}, learning rate {settings['learning_rate']:g}, {settings['schedule']} schedule)",
             f"Classifier head: initialised for training with seed {protocol['seed']} ({', '.join(initialised)}), as "
             "[adaptation] new_head declares" if initialised else "Classifier head: loaded from the checkpoint"]
    for variant in prepared.campaign.variants:
        counted = methods[variant.method]
        own = training.optimizer_settings(variant, settings)
        said = "".join(f"; its own {key.replace('_', ' ')} {own[key]:g}" if isinstance(own[key], float) else
                       f"; its own {key.replace('_', ' ')} {own[key]}" for key in own["set_by_variant"])
        lines.append(f"  {variant.name}: {variant.method}, {effective_batch(variant)} examples per update; trains "
                     f"{counted['trainable_parameters']:,} of {counted['total_parameters']:,} parameters{said}")
    if (protocol.get("warmup") or {}).get("inputs") != NO_WARMUP["inputs"]:  # the campaign wrote [protocol.warmup]
        lines.append("[protocol.warmup] is not used by an adaptation: no warm-up runs (a model cannot be warmed without "
                     "training it); the first forward, backward and update are timed as phases of their own")
    return lines


def manifest_fields(campaign) -> dict:
    """Return the training split's copy, fingerprint and size, for the manifest and the evidence bundle."""
    train = campaign.protocol["adaptation"]["train"]
    return {"context": lengths.record(campaign),
            "training_split": {"path": adapting.train_copy(campaign.name, train), "fingerprint": train["fingerprint"],
                               "file_sha256": train["file_sha256"], "entries": train["entries"],
                               "source_name": train["source_name"],
                               "order": campaign.protocol["adaptation"].get("order", ORDER)}}
