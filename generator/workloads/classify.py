"""Classify: label every text of a corpus with a fine-tuned sequence classifier (the first kind of work)."""

from __future__ import annotations

import warnings
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.declared.corpus import load_corpus, token_counts
from iteralab.declared.model_check import check_loads
from iteralab.machine.phases import InBatch, batches, torch_dtype
from iteralab.machine.placement import load_options, placed
from iteralab.store.trials import PHASES as TRIAL_PHASES
from iteralab.workloads import batched, lengths
from iteralab.workloads.batched import Batched
from iteralab.workloads.metrics import check_format, check_ids, evaluate
from iteralab.workloads.predictions import read_predictions, write_predictions

KIND = "classify"
DESCRIPTION = "label every text of a corpus with a fine-tuned classifier"
MEASURED_WINDOW = Text("read corpus, tokenize, host-to-device transfer, inference, predictions on host")
THRESHOLD_METRICS = ("accuracy", "macro_f1")
PHASES = TRIAL_PHASES
STAGE_PHASES = ("tokenize", "forward")
UNIT = "entries"  # what the measured window produces, counted by entries_completed
COUNTED_PHASES = ("measured_window", "evaluation", "writing_results")  # a trial failing here did some entries
read_variant, check_variants, inputs, plan_lines = (
    batched.read_variant, batched.check_variants, batched.inputs, batched.plan_lines)
QUESTION_UNIT = batched.QUESTION_UNIT


def read_settings(top, base=None) -> dict:
    """Read what only this kind declares: nothing beyond the shared protocol."""
    return {}


def passes(protocol: dict) -> int:
    """Return how many times the measured window goes over the corpus: once."""
    return 1


def check_model(model_dir: Path, config: dict, protocol: dict) -> dict:
    """Refuse a folder that is no trained classifier; return its labels and what loading it said."""
    id2label = config.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        raise UserError(f"{model_dir}/config.json has no id2label: the classifier's labels must be named")
    labels = [str(id2label[key]) for key in sorted(id2label, key=int)]
    from transformers import AutoModelForSequenceClassification
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    found, _ = check_loads(model_dir, config, AutoModelForSequenceClassification,
                           set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.values()),
                           "a text classifier", "a model fine-tuned for classification (for example saved as "
                           "...ForSequenceClassification with its id2label)")
    return {"labels": labels, **found}


def gold_labels(corpus, labels: list[str], source) -> dict[str, str | None]:
    """Return each entry's gold label by name: a label written as a whole number is a class id of the model's id2label.

    Names win: when every whole-number label is also one of the model's label names (a model whose labels are named
    "0", "1", ...), they are read as names, as they always were. LABELS are the names in id order (id2label's ids are
    0 to n-1, as transformers numbers a classifier's outputs); SOURCE is the corpus file the refusal names.
    """
    numbers = {entry.label for entry in corpus.entries if entry.label_is_number}
    if numbers <= set(labels):
        return {entry.id: entry.label for entry in corpus.entries}
    for entry in corpus.entries:
        if entry.label_is_number and not 0 <= int(entry.label) < len(labels):
            mapping = ", ".join(f'{index} → "{label}"' for index, label in enumerate(labels))
            raise UserError(f"{source}: id {entry.id!r} has gold label {entry.label}, a whole number that is no class id "
                            f"of the model, whose id2label is {mapping}: write each gold label as one of these names, "
                            f"or as its id (0 to {len(labels) - 1})")
    return {entry.id: labels[int(entry.label)] if entry.label_is_number else entry.label for entry in corpus.entries}


def check_corpus(corpus, model: dict, campaign) -> None:
    """Refuse gold labels the model cannot predict, and thresholds on a corpus without gold labels."""
    gold = gold_labels(corpus, model["labels"], campaign.corpus_path)
    lacking = [entry for entry in corpus.entries if gold[entry.id] is not None and gold[entry.id] not in model["labels"]]
    if lacking:
        first, unknown = lacking[0], sorted({gold[entry.id] for entry in lacking})
        where = f"{campaign.corpus_path}:{first.line}" if first.line else str(campaign.corpus_path)
        others = (f"; {len(lacking)} entries have a label the model lacks ({', '.join(map(repr, unknown))})"
                  if len(lacking) > 1 else "")
        raise UserError(f"{where}: id {first.id!r} has gold label {gold[first.id]!r}, which is not a label of the model "
                        f"({', '.join(model['labels'])}){others}: write each gold label as one of the model's labels")
    if campaign.protocol["thresholds"] and not corpus.labelled:
        raise UserError(f"{campaign.source}: [protocol] thresholds on {', '.join(campaign.protocol['thresholds'])} need "
                        f"gold labels, but {campaign.corpus_path} has entries without a label; a campaign without "
                        "thresholds runs too: leave [protocol.thresholds] out")
    lengths.refuse_beyond(campaign, lambda: _tokens(campaign, corpus))  # max_length beyond the model's positions (#61)


def _tokens(campaign, corpus) -> dict[str, int]:
    from transformers import AutoTokenizer

    return token_counts(AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True), corpus.entries)


def manifest_fields(campaign) -> dict:
    """Return the model's positions beside the protocol's max_length (#61)."""
    return {"context": lengths.record(campaign)}


def count_tokens(tokenizer, protocol: dict, entries) -> dict[str, int]:
    """Count each entry's tokens as the model sees them (special tokens included)."""
    return token_counts(tokenizer, entries)


def load_model(model_dir, variant, protocol: dict):
    """Load tokenizer and classifier from a local folder with the variant's precision and backends."""
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    # What loading says was kept in the manifest by the model check; each trial loading again would only repeat it.
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    dtype = torch_dtype(variant.precision)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, local_files_only=True, attn_implementation=variant.attention, **load_options(variant, protocol, dtype))
    model.eval()
    model = placed(model, variant, protocol, dtype)
    if variant.quantization == "dynamic-int8":
        model = quantize(model)
    return tokenizer, model


def quantize(model):
    """Quantize the Linear layers dynamically to int8 (CPU, from fp32 weights); refuse a model they would leave in fp32."""
    import torch

    # GPT-2's attention and MLP weights are transformers' Conv1D, which quantize_dynamic does not touch: the variant
    # would time an fp32 model with an int8 head under the name int8.
    others = sorted({type(module).__name__ for module in model.modules() if type(module).__name__ == "Conv1D"})
    if others:
        raise ValueError(f"dynamic-int8 quantizes torch.nn.Linear layers only, and this model's attention and MLP weights "
                         f"are {', '.join(others)} layers: most of it would stay fp32 while the variant says int8; leave "
                         "this variant out or quantize the model yourself and save it")

    with warnings.catch_warnings():
        # torch marks eager dynamic quantization deprecated in favour of torchao, which is not a dependency
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


class Work(Batched):
    """Run the classifier over texts the way the protocol says, counting completed entries."""

    def __init__(self, tokenizer, model, variant, protocol: dict):
        self.tokenizer, self.model, self.variant, self.protocol = tokenizer, model, variant, protocol
        self.labels = [model.config.id2label[index] for index in range(model.config.num_labels)]
        self.completed = 0

    def compile(self) -> None:
        import torch

        self.model = torch.compile(self.model)

    def encode(self, texts: list[str]):
        padding = "max_length" if self.protocol["padding"] == "max_length" else "longest"
        encoded = self.tokenizer(texts, padding=padding, truncation=True, max_length=self.protocol["max_length"],
                                 return_tensors="pt")
        return {key: value.to(self.variant.device) for key, value in encoded.items()}

    def forward(self, encoded):
        import torch

        with torch.inference_mode():
            probabilities = self.model(**encoded).logits.float().softmax(dim=-1)
            scores, indexes = probabilities.max(dim=-1)
        return indexes.cpu().tolist(), scores.cpu().tolist()

    def step(self, encoded):
        """Run one encoded batch through the model (the warm-up's unit)."""
        return self.forward(encoded)

    def stage(self, clock, encoded) -> None:
        """Run one encoded validation batch untimed, each step after tokenizing in its own phase."""
        with clock.phase("forward"):
            self.forward(encoded)

    def measured(self, corpus_path) -> list[tuple[str, str, float]]:
        """Read the corpus, tokenize, transfer, infer and bring predictions to the host."""
        entries = list(load_corpus(corpus_path, self.protocol.get("corpus_columns")).entries)
        if self.variant.length_sorted:
            lengths = self.tokenizer([entry.text for entry in entries], add_special_tokens=True)["input_ids"]
            token_counts = {entry.id: len(ids) for entry, ids in zip(entries, lengths, strict=True)}
            entries = self.order(entries, token_counts)
        predictions = []
        for batch in batches(entries, self.variant.batch_size):
            with InBatch(batch) as where:  # a failure names the batch's ids and tokens (#61)
                indexes, scores = self.step(where.encoded(self.encode([entry.text for entry in batch])))
            predictions.extend((entry.id, self.labels[index], score)
                               for entry, index, score in zip(batch, indexes, scores, strict=True))
            self.completed += len(batch)
        return predictions

    def after_window(self, clock, outputs, place) -> list:
        """Return the outputs: nothing to measure outside the window beyond the shared phases."""
        return outputs

    def figures(self, clock, outputs) -> dict:
        """Return the trial's figures beyond the shared ones: none for this kind."""
        return {}


def evaluate_outputs(*, prepared, variant, trial_id: str, outputs) -> tuple[dict, dict, dict | None]:
    """Check the ids and the format, score quality against gold labels and the reference; return the reference used."""
    protocol = prepared.campaign.protocol
    id_check = check_ids(prepared.corpus.ids, [entry_id for entry_id, _, _ in outputs])
    format_problems = check_format(outputs, prepared.model["labels"])
    reference = prepared.reference
    if reference is None and variant.name == protocol["reference_variant"]:
        reference = {"variant": variant.name, "trial_id": trial_id,
                     "predictions": {entry_id: label for entry_id, label, _ in outputs}}
    gold = gold_labels(prepared.corpus, prepared.model["labels"], prepared.corpus.source)
    quality = evaluate(predictions=outputs, gold=gold,
                       bucket_of=prepared.bucket_of, bucket_names=[b["name"] for b in protocol["buckets"]],
                       reference=reference, protocol=protocol)
    quality["format_ok"], quality["format_problems"] = not format_problems, format_problems
    return id_check, quality, reference


write_outputs = write_predictions
read_outputs = read_predictions
