"""An adaptation's unit of work: a classifier trained update by update, each phase apart, then validated and exported."""

from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.declared.corpus import load_corpus
from iteralab.machine.phases import InBatch, batches, torch_dtype
from iteralab.machine.placement import dtype_option
from iteralab.store.trials import PHASES as TRIAL_PHASES
from iteralab.workloads import adapted, training
from iteralab.workloads.batched import Batched

# The first forward, backward and update are phases of their own before the window (the optimizer state is created
# at the first update); validation and export come after it. They replace the warm-up: a trained model cannot be
# warmed without changing it.
PHASES = (*TRIAL_PHASES[:3], "first_forward", "first_backward", "first_update", "measured_window", "validation", "export",
          *TRIAL_PHASES[5:])
_DEFAULT_LABEL = re.compile(r"LABEL_\d+")
BASE_PATH = Text("adapter_config.json holds the base model's folder as an absolute path on the machine that trained it; "
                 "elsewhere, load the adapter over a copy of the base whose revision is the one recorded")
FIRST_UPDATE = Text("the other microbatches of the first update, if the variant accumulates, and its optimizer step, "
                    "which creates the optimizer state")


def labels_of(config: dict, protocol: dict) -> list[str] | None:
    """Return the classifier's labels: the campaign's, or those the model's config names (never transformers' defaults)."""
    declared = protocol["adaptation"]["labels"]
    id2label = config.get("id2label")
    named = None
    if isinstance(id2label, dict) and id2label and not all(_DEFAULT_LABEL.fullmatch(str(v)) for v in id2label.values()):
        named = [str(id2label[key]) for key in sorted(id2label, key=int)]
    return declared or named


def label_options(labels: list[str]) -> dict:
    """Return from_pretrained's options that give a classifier LABELS (a new head where the checkpoint has another)."""
    return {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
            "label2id": {label: index for index, label in enumerate(labels)}, "ignore_mismatched_sizes": True}


def train_copy(campaign: str, train: dict) -> str:
    """Return where a run keeps its copy of the training split, beside the corpus's copy."""
    suffix = "." + train["source_name"].rsplit(".", 1)[-1].lower()
    return f"{campaign}/inputs/{train['file_sha256'][:16]}{suffix}"


def apply_method(model, method: str, settings: dict):
    """Leave trainable what METHOD trains (all weights, a subset by name prefix, or a LoRA adapter); return the model."""
    if method == "lora":
        from peft import LoraConfig, TaskType, get_peft_model

        lora = settings["lora"]
        config = LoraConfig(task_type=TaskType.SEQ_CLS, r=lora["rank"], lora_alpha=lora["alpha"],
                            lora_dropout=lora["dropout"], target_modules=lora["target_modules"],
                            modules_to_save=lora["modules_to_save"])
        with warnings.catch_warnings():
            # peft asks transformers for is_gradient_checkpointing, which transformers 5 marks deprecated: a warning
            # between the two libraries, about nothing the campaign chose
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            return get_peft_model(model, config)
    prefixes = tuple(settings["subset"] or ()) if method == "subset" else None
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(prefixes is None or any(name == p or name.startswith(p + ".") for p in prefixes))
    return model


def check_methods(model_dir, model, settings: dict, initialised: list[str]) -> dict:
    """Refuse a method that trains nothing, or leaves a weight the checkpoint lacks at its random start; count each."""
    methods = ["all", *(["subset"] if settings["subset"] else []), *(["lora"] if settings["lora"] else [])]
    found = {}
    for method in methods:  # LoRA last: it wraps the model
        try:
            model = apply_method(model, method, settings)
        except ValueError as error:
            raise UserError(f"model folder {model_dir}: {method} cannot be applied: {str(error).splitlines()[0]}") from None
        trained = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
        left = [key for key in initialised if not any(f".{key.rsplit('.', 1)[0]}." in f".{name}" for name in trained)]
        if not trained or left:
            what = ("trains no parameter: no name starts with " + ", ".join(settings["subset"] or ())) if not trained else (
                f"would leave {', '.join(left[:4])} at the random values transformers gave them (the checkpoint lacks "
                "them): add their module to " + ("modules_to_save" if method == "lora" else "subset"))
            raise UserError(f"model folder {model_dir}: method {method} {what}")
        found[method] = adapted.counts(model)
    return found


def load_model(model_dir, variant, protocol: dict):
    """Load tokenizer and classifier with the campaign's labels, seeded, with the variant's method applied, to train."""
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    transformers.logging.set_verbosity_error()  # what loading says is kept in the manifest by the model check
    transformers.utils.logging.disable_progress_bar()
    config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True).to_dict()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    torch.manual_seed(protocol["seed"])  # a new head, and LoRA's matrices, start the same in every variant
    # fp32 weights, gradients and optimizer state for every variant: bf16 is autocast over them (mixed precision). Without
    # the dtype transformers 5 keeps the checkpoint's saved one, and an fp32 variant of a bf16 checkpoint trained in bf16.
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, local_files_only=True, attn_implementation=variant.attention,
        **label_options(labels_of(config, protocol)), **dtype_option(torch_dtype("fp32")))
    model = apply_method(model, variant.method, protocol["adaptation"]).to(variant.device)
    model.train()
    return tokenizer, model


class Work(Batched):
    """Train the classifier update by update as the protocol says, then validate it and export it."""

    def __init__(self, tokenizer, model, variant, protocol: dict, timed_parts: bool = True):
        import torch

        self.tokenizer, self.model, self.variant, self.protocol = tokenizer, model, variant, protocol
        self.settings = settings = protocol["adaptation"]
        self.labels = [model.config.id2label[index] for index in range(model.config.num_labels)]
        self.label_ids = {label: index for index, label in enumerate(self.labels)}
        trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
        # The variant's own optimizer settings where it sets them (#61: full fine-tuning and LoRA want rates 10-20 apart)
        self.optimizer_settings = chosen = training.optimizer_settings(variant, settings)
        self.optimizer = (torch.optim.AdamW if chosen["optimizer"] == "adamw" else torch.optim.SGD)(
            trainable, lr=chosen["learning_rate"], weight_decay=chosen["weight_decay"])
        total = settings["updates"] + 1  # the first update, then the window's
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, (lambda done: 1.0) if settings["schedule"] == "constant" else (lambda done: 1 - done / total))
        self.trainable = trainable
        self.progress_total, self.progress_unit = settings["updates"], "updates"
        self.completed, self.examples, self.tokens, self.entries = 0, 0, 0, []
        self.first_loss, self.validation_loss, self.exported, self.corpus_path = None, None, None, None
        self.window, self.losses = {"examples": 0, "tokens": 0}, []
        self.timers = training.WindowTimers(variant.device, enabled=timed_parts)
        self.order, self.head, self.base = None, None, None

    def autocast(self):
        """Return the context the forward runs in: bf16 autocast (mixed precision) or nothing for fp32."""
        import torch

        if self.variant.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.variant.device.split(":")[0], dtype=torch.bfloat16)

    def encode(self, texts: list[str], labels: list[str] | None = None):
        import torch

        padding = "max_length" if self.protocol["padding"] == "max_length" else "longest"
        encoded = self.tokenizer(texts, padding=padding, truncation=True, max_length=self.protocol["max_length"],
                                 return_tensors="pt")
        self.tokens += int(encoded["attention_mask"].sum())
        # The validation stages have no labels to train towards: every entry counts as the first label, which costs the
        # same memory and time (the stage's model is thrown away).
        encoded["labels"] = torch.tensor([self.label_ids[label] for label in labels] if labels else [0] * len(texts))
        return {key: value.to(self.variant.device) for key, value in encoded.items()}

    def loss(self, encoded):
        """Run the forward and return the microbatch's loss, scaled so the accumulated gradient is the update's mean."""
        with self.autocast():
            return self.model(**encoded).loss / self.variant.accumulation

    def step(self, encoded):
        """Run one microbatch forward and backward (the gradient accumulates); return its loss, detached."""
        loss = self.loss(encoded)
        loss.backward()
        return loss.detach()

    def update(self) -> None:
        """Clip as the protocol says, step the optimizer and the schedule, drop the gradients."""
        import torch

        if self.settings["max_grad_norm"] is not None:
            torch.nn.utils.clip_grad_norm_(self.trainable, self.settings["max_grad_norm"])
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)

    def microbatch(self) -> dict:
        """Encode the next microbatch of the training order (``training.TrainingOrder``)."""
        chosen = self.order.take(self.variant.batch_size)
        self.examples += len(chosen)
        self.chosen = chosen  # named by a failure in its forward or backward (#61)
        return self.encode([entry.text for entry in chosen], [entry.label for entry in chosen])

    def stage(self, clock, encoded) -> None:
        """Run one encoded validation batch forward and backward, untimed, and drop the gradient (no update)."""
        with clock.phase("forward"):
            loss = self.loss(encoded)
        with clock.phase("backward"):
            loss.backward()
        self.optimizer.zero_grad(set_to_none=True)

    def before_window(self, clock, prepared, runs_dir) -> None:
        """Read the training split's copy in the protocol's order; time the first forward, backward and update apart."""
        train = self.settings["train"]
        split = load_corpus(runs_dir / train_copy(prepared.campaign.name, train))
        if split.fingerprint != train["fingerprint"]:
            raise ValueError(f"the run's copy of the training split ({split.source}) is not the one the protocol fixed")
        self.entries = list(split.entries)
        self.order = training.TrainingOrder(self.entries, self.protocol["seed"], self.settings.get("shuffle", "once"),
                                            self.variant.batch_size * self.variant.accumulation)
        self.head = training.head(prepared.model.get("initialised_for_training") or [], self.settings,
                                  self.protocol["seed"])
        self.base = {"path": str(Path(prepared.campaign.model_path).resolve()),
                     **{key: prepared.model_identity.get(key) for key in ("revision", "revision_source")}}
        self.order.begin_update()
        with clock.phase("first_forward"):
            encoded = self.microbatch()
            with InBatch(self.chosen) as where:  # a failure names the microbatch's ids and tokens (#61)
                loss = self.loss(where.encoded(encoded))
        with clock.phase("first_backward"), InBatch(self.chosen) as where:
            where.encoded(encoded)
            loss.backward()
        loss = loss.detach()
        with clock.phase("first_update"):
            for _ in range(self.variant.accumulation - 1):
                loss = loss + self.step(self.microbatch())
            self.update()
        clock.phases["first_update"]["holds"] = FIRST_UPDATE
        self.first_loss = float(loss)
        self.examples = self.tokens = 0  # the window's figures count its own updates only

    def measured(self, corpus_path) -> list:
        """Run the protocol's updates: each one's microbatches forward and backward, then the optimizer step; the data,
        forward, backward and optimizer step are each summed over the window (``training.WindowTimers``)."""
        self.corpus_path = corpus_path
        losses, timers = [], self.timers
        for _ in range(self.settings["updates"]):
            self.order.begin_update()
            loss = None
            for _ in range(self.variant.accumulation):
                start = timers.mark(on_host=True)
                encoded = self.microbatch()
                timers.lap("data", start, on_host=True)
                with InBatch(self.chosen) as where:  # a failure names the microbatch's ids and tokens (#61)
                    where.encoded(encoded)
                    start = timers.mark()
                    part = self.loss(encoded)
                    start = timers.lap("forward", start)
                    part.backward()
                    timers.lap("backward", start)
                loss = part.detach() if loss is None else loss + part.detach()
            start = timers.mark()
            self.update()
            timers.lap("optimizer_step", start)
            losses.append(loss)  # on the device: read after the window, never synchronised inside it
            self.completed += 1
        self.window = {"examples": self.examples, "tokens": self.tokens}
        return losses

    def after_window(self, clock, losses: list, place) -> list:
        """Validate the trained model on the corpus, then export it (LoRA: the adapter alone); return the predictions."""
        self.completed = 0
        with clock.phase("validation"):
            predictions = self.validate(load_corpus(self.corpus_path).entries)
        with clock.phase("export"):
            tied = base_of_adapter(self.model, self.base)
            self.exported = {**adapted.export(self.model, self.tokenizer, place, self.variant.method), **tied}
        self.losses = [float(loss) for loss in losses]
        return predictions

    def validate(self, entries) -> list[tuple[str, str, float]]:
        """Predict every validation entry in file order at the microbatch size; keep the mean validation loss."""
        import torch

        self.model.eval()
        predictions, total = [], 0.0
        with torch.inference_mode():
            for batch in batches(list(entries), self.variant.batch_size):
                with InBatch(batch) as where:  # a failure names the batch's ids and tokens (#61)
                    encoded = where.encoded(self.encode([entry.text for entry in batch], [entry.label for entry in batch]))
                    with self.autocast():
                        output = self.model(**encoded)
                total += float(output.loss) * len(batch)
                scores, indexes = output.logits.float().softmax(dim=-1).max(dim=-1)
                predictions.extend((entry.id, self.labels[index], score) for entry, index, score in
                                   zip(batch, indexes.cpu().tolist(), scores.cpu().tolist(), strict=True))
                self.completed += len(batch)
        self.validation_loss = total / len(predictions) if predictions else None
        return predictions

    def window_units(self, outputs) -> int:
        """Return the training examples of the measured window: its throughput counts them."""
        return self.window["examples"]

    def warmup(self, entries: list, token_counts: dict[str, int], batch_count: int, passes: int) -> None:
        raise NotImplementedError("an adaptation has no warm-up: its first forward, backward and update are its own phases")

    def figures(self, clock, outputs) -> dict:
        """Return updates, examples and tokens per second, the losses, parameters, memory beside its estimate, export;
        the optimizer settings, the training order, the head's origin and the window's parts summed."""
        return {"adaptation": {**adapted.figures(clock, self), "optimizer": self.optimizer_settings,
                               "order": self.order.record(), "head": self.head, **self.timers.record()}}


def base_of_adapter(model, base: dict) -> dict:
    """Write into a LoRA adapter's config the base model's absolute path, so that it loads from any folder (#61: it held
    the path as given, relative to where run started); return what the record says of it: the path the file holds, the
    base's revision that ties the adapter to it, and the modules inside the adapter (the classifier head among them)."""
    config = (getattr(model, "peft_config", None) or {}).get("default")
    if config is None:
        return {}
    config.base_model_name_or_path = base["path"]
    return {"base_model": {**base, "held_in": "adapter_config.json base_model_name_or_path", "said": BASE_PATH},
            "inside_adapter": sorted(name.removeprefix("base_model.model.") for name, module in model.named_modules()
                                     if type(module).__name__ == "ModulesToSaveWrapper")}
