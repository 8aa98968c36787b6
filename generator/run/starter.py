"""Write a commented starter campaign for a kind of work, filled from a model folder and a corpus when given."""

from __future__ import annotations

import csv
import json
import os
import statistics
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import write_atomically, writing
from iteralab.declared.corpus import COLUMNS, load_corpus, token_counts
from iteralab.run.runner import prepare
from iteralab.run.summary import describe_plan
from iteralab.store.records import NAME_PATTERN
from iteralab.workloads import WORKLOADS

THRESHOLDS = {"classify": ("accuracy", 0.9), "adapt": ("accuracy", 0.8), "generate": ("reference_match", 0.6)}
REFERENCE = {"classify": "b1", "generate": "b1", "adapt": "mb8"}
_INFERENCE = """# One series at a time: batch size, then precision.
[[variants]]
name = "b1"
series = "batch"
batch_size = 1

[[variants]]
name = "b4"
series = "batch"
batch_size = 4

[[variants]]
name = "b1-bf16"
series = "precision"
batch_size = 1
precision = "bf16"
"""
VARIANTS = {"classify": _INFERENCE, "generate": _INFERENCE, "adapt": """# One series at a time: how the effective batch of 8 is made, then precision.
[[variants]]
name = "mb8"
series = "accumulation"
batch_size = 8                          # the microbatch

[[variants]]
name = "mb2x4"
series = "accumulation"
batch_size = 2
accumulation = 4                        # 2 x 4 x 1 device = 8 examples per update, as mb8

[[variants]]
name = "mb8-bf16"
series = "precision"
batch_size = 8
precision = "bf16"                      # mixed precision: weights and optimizer state stay fp32
"""}
KIND_TABLES = {
    "classify": "",
    "generate": """
# What the model generates, fixed before any timing (part of the protocol's fingerprint).
[generation]
prompt_template = "{{text}}"            # {{text}} exactly once, or "chat" for the tokenizer's chat template
max_new_tokens = 32                     # FILL IN: the longest output you need; an output cut here is counted
""",
    "adapt": """
# What the fine-tuning does, fixed before any timing (part of the protocol's fingerprint).
[adaptation]
train = "{train}"
{labels_line}learning_rate = 1e-4
updates = 20                            # optimizer updates in the measured window (after the first update)
# optimizer = "adamw"                   # or "sgd"
# schedule = "constant"                 # or "linear"

[adaptation.lora]                       # used by variants with method = "lora"
rank = 8
alpha = 16
target_modules = {targets}{targets_note}
""",
}


def _relative(path: Path, folder: Path) -> str:
    """Return PATH relative to the campaign file's folder (where the runner resolves it), as POSIX text."""
    return Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()


def _buckets(counts: list[int]) -> str:
    """Return length buckets at the corpus's thirds of token counts (short, medium, the rest)."""
    if len(set(counts)) < 3:
        return 'all = "rest"'
    low, high = statistics.quantiles(counts, n=3)
    low, high = int(low), int(high)
    if high >= max(counts):  # the longest third all share the top count: two buckets say it
        high = low
    return f'short = {low}\nmedium = {max(high, low + 1)}\nlong = "rest"' if high > low else f'short = {low}\nlong = "rest"'


def _columns(corpus: Path | None) -> str:
    """Return [corpus] lines for a CSV whose header lacks id or text: the columns to name, left to fill in, never guessed."""
    if corpus is None or corpus.suffix.lower() != ".csv":
        return ""
    try:
        with open(corpus, encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError):
        return ""  # the dry run says what is wrong with the file, as run would
    missing = [part for part in COLUMNS if part not in header]
    if "id" not in missing and "text" not in missing:
        return ""
    names = ", ".join(header)
    lines = [f'{part}_column = "FILL IN: the column of each entry\'s {part} (the header has {names})"'
             for part in missing if part != "label"]
    if "label" in missing:
        lines.append(f'# label_column = "..."                  # the gold labels\' column, if it has them ({names})')
    return "\n".join(lines) + "\n"


def _model_facts(model: Path | None) -> dict:
    if model is None:
        return {"labels": None, "positions": None, "targets": None}
    config_file = model / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{config_file}: cannot read the model's config ({error}); point --model at a saved model "
                        "folder") from None
    id2label = config.get("id2label") or {}
    labels = [str(id2label[key]) for key in sorted(id2label, key=int)] if id2label else None
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    return {"labels": labels, "positions": config.get("max_position_embeddings") or config.get("n_positions"),
            "targets": TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(config.get("model_type"))}


def _lengths(model: Path | None, corpus: Path | None, positions: int | None, train: Path | None) -> tuple[int, str, str]:
    """Return max_length, the truncation rule and the buckets, from the corpus's token counts when both are given (the
    training split's longest entry counts for max_length too)."""
    if model is None or corpus is None:
        return 128, "truncate", 'short = 32\nmedium = 64\nlong = "rest"'
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load the tokenizer from {model}: {str(error).splitlines()[0]}") from None
    counts = list(token_counts(tokenizer, load_corpus(corpus).entries).values())
    trained = list(token_counts(tokenizer, load_corpus(train).entries).values()) if train else []
    longest = max(counts + trained)
    if positions and longest > positions:
        return positions, "truncate", _buckets([min(count, positions) for count in counts])
    return longest, "refuse", _buckets(counts)


def starter_text(*, kind: str, name: str, folder: Path, model: Path | None = None, corpus: Path | None = None,
                 train: Path | None = None) -> str:
    """Return the commented campaign file for KIND, filled from MODEL, CORPUS (and TRAIN for adapt) where given."""
    facts = _model_facts(model)
    columns = _columns(corpus)
    counted = None if columns else corpus  # a corpus whose columns are still to be named cannot be read yet
    max_length, truncation, buckets = _lengths(model, counted, facts["positions"], train)
    metric, example = THRESHOLDS[kind]
    model_path = _relative(model, folder) if model else "FILL IN: your model folder"
    corpus_path = _relative(corpus, folder) if corpus else "FILL IN: your corpus (.jsonl or .csv: id, text, label)"
    labels = f"labels = {json.dumps(facts['labels'])}\n" if kind == "adapt" and facts["labels"] else (
        '# labels = ["negative", "positive"]   # FILL IN unless the model names them (id2label)\n' if kind == "adapt" else "")
    kind_table = KIND_TABLES[kind].format(
        train=_relative(train, folder) if train else "FILL IN: your training split (.jsonl or .csv, every entry labelled)",
        labels_line=labels, targets=json.dumps(facts["targets"]) if facts["targets"] else '["query", "value"]',
        targets_note="  # peft's default for this architecture" if facts["targets"] else
        "  # FILL IN: your architecture's attention projections")
    said_labels = (f"# The model's labels (id2label): {', '.join(facts['labels'])}; the corpus's gold labels must be "
                   "these names.\n" if facts["labels"] and kind != "generate" else "")
    return f'''# Starter campaign written by `iteralab init --kind {kind}`. Paths are relative to this file's folder.
# Check it with: iteralab run {name}.toml --dry-run
campaign = "{name}"
title = "{name}"

[workload]
kind = "{kind}"                         # {WORKLOADS[kind].DESCRIPTION}

[corpus]
path = "{corpus_path}"
split = "final"                         # "tuning" while you tune settings; "final" for the decision
{columns}
[model]
path = "{model_path}"
{said_labels}{kind_table}
[protocol]
repetitions = 5
max_length = {max_length}  # {"the longest entry in tokens" if counted else "FILL IN: your longest entry in tokens"}
padding = "longest"
truncation = "{truncation}"
seed = 1
reference_variant = "{REFERENCE[kind]}"

# Thresholds are yours to write: the protocol fixes them before any timing, so nothing here guesses one. For example:
# [protocol.thresholds]
# {metric} = {example}

[protocol.buckets]                      # length buckets at the corpus's thirds of token counts
{buckets}

[protocol.warmup]
batches = {0 if kind == "adapt" else 2}

{VARIANTS[kind]}'''


def write_starter(*, kind: str, out: Path, model: Path | None = None, corpus: Path | None = None,
                  train: Path | None = None, force: bool = False) -> Path:
    """Write the starter campaign to OUT (refusing to overwrite unless FORCE); return its path."""
    if kind not in WORKLOADS:
        raise UserError(f"--kind {kind!r}: the kinds there are: {', '.join(WORKLOADS)}")
    out = Path(out).expanduser()
    if out.suffix != ".toml":
        raise UserError(f"{out}: a campaign file ends in .toml")
    if out.exists() and not force:
        raise UserError(f"{out} exists: choose another name, or --force to replace it")
    if not NAME_PATTERN.match(out.stem):
        raise UserError(f"{out.stem!r}: the file's name is the campaign's, in letters, digits, '.', '_' or '-'")
    text = starter_text(kind=kind, name=out.stem, folder=out.parent, model=model and Path(model).expanduser(),
                        corpus=corpus and Path(corpus).expanduser(), train=train and Path(train).expanduser())
    with writing(out, "the campaign file"):
        write_atomically(out, text.encode("utf-8"))
    return out


def to_fill_in(path: Path) -> list[str]:
    """Return each line of the starter that still says FILL IN, with its file and line number."""
    with open(path, encoding="utf-8", newline="") as handle:
        lines = handle.read().split("\n")
    return [f"{path}:{number}: {line.strip()}" for number, line in enumerate(lines, start=1) if "FILL IN" in line]


def dry_run(path: Path, runs_dir: Path) -> tuple[bool, str]:
    """Check the campaign as run --dry-run does; return whether it would run and the plan or what stops it."""
    try:
        return True, describe_plan(prepare(path, runs_dir))
    except UserError as error:
        return False, str(error)


def init_campaign(*, kind: str, out: Path, runs_dir: Path, model: Path | None = None, corpus: Path | None = None,
                  train: Path | None = None, force: bool = False) -> dict:
    """Write the starter campaign, then check it as run --dry-run does; return what was written and what is left."""
    path = write_starter(kind=kind, out=out, model=model, corpus=corpus, train=train, force=force)
    would_run, said = dry_run(path, runs_dir)
    return {"campaign_file": str(path), "kind": kind, "to_fill_in": to_fill_in(path), "would_run": would_run,
            "dry_run": said}


def describe_init(data: dict) -> str:
    """Say where the starter is, what is left to fill in, and what the dry run found."""
    lines = [f"Wrote {data['campaign_file']} ({data['kind']}); its paths are relative to its folder."]
    if data["to_fill_in"]:
        lines += ["To fill in:", *(f"  {line}" for line in data["to_fill_in"])]
    lines.append("Thresholds are yours to write under [protocol.thresholds], before any timing: none was guessed.")
    lines.append(("The dry run passes: " if data["would_run"] else "The dry run stops here: ") + data["dry_run"])
    if data["would_run"]:
        lines.append(f"Next: iteralab run {data['campaign_file']}")
    return "\n".join(lines)
