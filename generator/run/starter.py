"""Write a commented starter campaign for a kind of work, filled from a model folder and a corpus when given."""

from __future__ import annotations

import json
import os
import shlex
import statistics
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import write_atomically, writing
from iteralab.declared.corpus import COLUMNS, guess_columns, load_corpus, token_counts
from iteralab.declared.tables import left_to_fill
from iteralab.run.runner import prepare
from iteralab.run.summary import describe_plan
from iteralab.store.records import NAME_PATTERN
from iteralab.workloads import WORKLOADS, lengths

THRESHOLDS = {"classify": ("accuracy", 0.9), "adapt": ("accuracy", 0.8), "generate": ("reference_match", 0.6),
              "serve": ("reference_match", 0.6)}
REFERENCE = {"classify": "b1", "generate": "b1", "adapt": "mb8", "serve": "one-at-a-time"}
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
""", "serve": """# One engine configuration per variant: its own arguments, after the runner's (model, host, port, device, dtype).
[[variants]]
name = "one-at-a-time"
series = "engine"
engine_args = []

[[variants]]
name = "continuous-batching"
series = "engine"
engine_args = ["--continuous-batching", "--cb-num-blocks", "64", "--cb-block-size", "32", "--cb-max-batch-tokens", "512"]
"""}
KIND_TABLES = {
    "classify": "",
    "generate": """
# What the model generates, fixed before any timing (part of the protocol's fingerprint).
[generation]
prompt_template = "{{text}}"            # {{text}} exactly once, or "chat" for the tokenizer's chat template
max_new_tokens = {max_new_tokens:<23}# FILL IN: the longest output you need; an output cut here is counted{room}
""",
    "adapt": """
# What the fine-tuning does, fixed before any timing (part of the protocol's fingerprint).
[adaptation]
train = "{train}"
{labels_line}{new_head_line}learning_rate = 1e-4
updates = 20                            # optimizer updates in the measured window (after the first update)
# optimizer = "adamw"                   # or "sgd"
# schedule = "constant"                 # or "linear"

[adaptation.lora]                       # used by variants with method = "lora"
rank = 8
alpha = 16
target_modules = {targets}{targets_note}
""",
    "serve": """
# The engine, the load and the latency objective, fixed before any timing (part of the protocol's fingerprint).
[serving]
engine = "transformers"                 # "transformers" (transformers serve), "vllm", or "url" with url = "http://..."
max_tokens = {max_new_tokens:<23}# FILL IN: the longest answer you need; decoding is greedy{room}
arrival = "concurrency"                 # levels are requests in flight; "poisson": requests per second
levels = [1, 4]                         # FILL IN: the loads to measure
requests = 100                          # per level, after warmup_requests
warmup_requests = 4

[serving.objective]
ttft_ms = 500                           # FILL IN: the time to first token your users accept
tpot_ms = 50                            # FILL IN: the time per output token after the first
share = 0.99                            # of a level's requests
# load = 4                              # the load the question asks to serve
""",
}


TEMPLATE = """# Starter campaign written by `iteralab init --kind {kind}`. Paths are relative to this file's folder.
# Check it with: iteralab run {shown} --dry-run
campaign = "{name}"
title = "{name}"

[workload]
kind = "{kind}"                         # {description}

[corpus]
path = "{corpus_path}"
split = "final"                         # "tuning" while you tune settings; "final" for the decision
{columns}
[model]
path = "{model_path}"
{said_labels}{kind_table}
[protocol]
repetitions = 5
max_length = {max_length}  # {max_length_note}
padding = "longest"
truncation = "{truncation}"
seed = 1
reference_variant = "{reference}"

# Thresholds are yours to write: the protocol fixes them before any timing, so nothing here guesses one. For example:
# [protocol.thresholds]
# {metric} = {example}

[protocol.buckets]                      # {buckets_note}
{buckets}
{warmup}
{variants}"""
DEFAULT_BUCKETS = 'short = 32\nmedium = 64\nlong = "rest"'


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


def _line(key: str, value: str, comment: str) -> str:
    """Return a TOML line KEY = VALUE with COMMENT beside it, on one line whatever the corpus's cells hold."""
    return f"{f'{key} = {json.dumps(value, ensure_ascii=False)}':<39} # {' '.join(comment.split())}"


def _columns(corpus: Path | None, kind: str, given: dict[str, str], labels: list[str] | None):
    """Return the [corpus] lines naming the columns, the columns to read the corpus with (None: it cannot be read until
    they are named) and the columns found, each with how (given, its default name or guessed from the rows)."""
    if corpus is None:
        return "", {}, None
    found = guess_columns(corpus, given, labels)
    names = ", ".join(" ".join(column.split()) for column in found.header) or "none"  # said in a comment: one line
    missing = [part for part in ("id", "text") if part not in found.named]
    if kind != "classify":  # only a classification reads named columns
        unnamed = missing or [part for part, column in found.named.items() if column != COLUMNS[part]]
        if not unnamed:
            return "", {}, found
        return (f"# FILL IN: a {kind} campaign reads the columns id, text and label; rename your corpus's columns "
                f"(its header has {names})\n", None, None)
    lines = [_line(f"{part}_column", column, found.why[part] if found.why[part] == "as given" else f"guessed: {found.why[part]}")
             for part, column in found.named.items() if column != COLUMNS[part]]
    lines += [f"{part}_column = " + json.dumps(f"FILL IN: the column of each entry's {part} (the header has {names})",
                                               ensure_ascii=False) for part in missing]
    if "label" not in found.named:
        lines.append(f'# label_column = "..."                  # the gold labels\' column, if it has them ({names})')
    named = {part: column for part, column in found.named.items() if column != COLUMNS[part]}
    return "\n".join(lines) + "\n" if lines else "", None if missing else named, found


def _model_facts(model: Path | None) -> dict:
    if model is None:
        return {"labels": None, "positions": None, "targets": None, "head": None}
    config_file = model / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{config_file}: cannot read the model's config ({error}); point --model at a saved model "
                        "folder") from None
    id2label = config.get("id2label") or {}
    labels = [str(id2label[key]) for key in sorted(id2label, key=int)] if id2label else None
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    # A classifier's head is there when the folder was saved as one with its labels; the dry run checks the weights.
    head = bool(labels) and any(str(name).endswith("ForSequenceClassification") for name in config.get("architectures") or [])
    return {"labels": labels, "positions": lengths.positions(config)["positions"], "head": head,  # as the dry run reads them
            "targets": TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(config.get("model_type"))}


def _lengths(model: Path | None, corpus: Path | None, positions: int | None, train: Path | None,
             columns: dict[str, str] | None = None) -> tuple[int, str, str] | None:
    """Return max_length, the truncation rule and the buckets, from the corpus's token counts (read through its COLUMNS)
    when both are given (the training split's longest entry counts for max_length too); None when they cannot be."""
    if model is None or corpus is None:
        return None
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load the tokenizer from {model}: {str(error).splitlines()[0]}") from None
    counts = list(token_counts(tokenizer, load_corpus(corpus, columns or None).entries).values())
    trained = list(token_counts(tokenizer, load_corpus(train).entries).values()) if train else []
    longest = max(counts + trained)
    if positions and longest > positions:
        return positions, "truncate", _buckets([min(count, positions) for count in counts])
    return longest, "refuse", _buckets(counts)


def new_tokens(positions: int | None) -> int:
    """Return the starter's max_new_tokens: 32, or half the model's positions where it holds fewer than 64 (#61)."""
    return 32 if not positions or positions >= 64 else max(1, positions // 2)


def _kind_table(kind: str, folder: Path, facts: dict, train: Path | None) -> str:
    labels = f"labels = {json.dumps(facts['labels'])}\n" if kind == "adapt" and facts["labels"] else (
        '# labels = ["negative", "positive"]   # FILL IN unless the model names them (id2label)\n' if kind == "adapt" else "")
    positions = facts["positions"]
    room = (f"\n# max_length + max_new_tokens must stay within the model's {positions} positions: the dry run refuses more"
            if positions else "")
    return KIND_TABLES[kind].format(
        max_new_tokens=new_tokens(positions), room=room,
        train=_relative(train, folder) if train else "FILL IN: your training split (.jsonl or .csv, every entry labelled)",
        labels_line=labels, new_head_line=_new_head_line(facts), targets=json.dumps(facts["targets"]) if facts["targets"] else '["query", "value"]',
        targets_note="  # peft's default for this architecture" if facts["targets"] else
        "  # FILL IN: your architecture's attention projections")


def _new_head_line(facts: dict) -> str:
    if facts["head"] is False:
        return "new_head = true                         # the folder holds no classifier head: a new one is trained\n"
    return "" if facts["head"] else "# new_head = true                     # when the model folder holds no classifier head\n"


def starter_text(*, kind: str, name: str, folder: Path, model: Path | None = None, corpus: Path | None = None,
                 train: Path | None = None, shown: str | None = None, columns: dict[str, str] | None = None) -> str:
    """Return the commented campaign file for KIND, filled from MODEL, CORPUS (and TRAIN for adapt) where given.

    SHOWN: the campaign file's path as the user gave it (its first comment's command runs from where init ran); COLUMNS:
    the corpus's columns given for id, text or label, the others found from its header and rows.
    """
    return _starter(kind=kind, name=name, folder=folder, model=model, corpus=corpus, train=train, shown=shown,
                    columns=columns)[0]


def _starter(*, kind, name, folder, model, corpus, train, shown, columns):
    facts = _model_facts(model)
    column_lines, named, found = _columns(corpus, kind, dict(columns or {}), facts["labels"])
    # A generation's prompt and its new tokens share the model's positions: the prompt gets what max_new_tokens leaves (#61).
    room = (facts["positions"] - new_tokens(facts["positions"]) if kind in ("generate", "serve") and facts["positions"]
            else facts["positions"])
    sized = _lengths(model, corpus if named is not None else None, room, train, named)
    max_length, truncation, buckets = sized or (min(128, room) if room else 128, "truncate", DEFAULT_BUCKETS)
    metric, example = THRESHOLDS[kind]
    said_labels = (f"# The model's labels (id2label): {', '.join(facts['labels'])}; the corpus's gold labels must be "
                   "these names.\n" if facts["labels"] and kind != "generate" else "")
    text = TEMPLATE.format(
        kind=kind, shown=shlex.quote(shown or f"{name}.toml"), name=name, description=WORKLOADS[kind].DESCRIPTION,
        corpus_path=_relative(corpus, folder) if corpus else "FILL IN: your corpus (.jsonl or .csv: id, text, label)",
        columns=column_lines, model_path=_relative(model, folder) if model else "FILL IN: your model folder",
        said_labels=said_labels, kind_table=_kind_table(kind, folder, facts, train), max_length=max_length,
        max_length_note=_length_note(kind, sized, facts["positions"]),
        truncation=truncation, reference=REFERENCE[kind], metric=metric, example=example,
        buckets_note="length buckets at the corpus's thirds of token counts" if sized else
        "length buckets in tokens: defaults, not sized from a corpus (init sizes them from --model and --corpus)",
        buckets=buckets, variants=VARIANTS[kind],
        # An adaptation has no warm-up: its first update is timed apart, so it writes no [protocol.warmup] (#61).
        warmup="" if kind in ("adapt", "serve") else "\n[protocol.warmup]\nbatches = 2\n")
    return text, found


def _length_note(kind: str, sized, positions: int | None) -> str:
    """Say where max_length comes from: the longest entry, or the model's positions (less max_new_tokens) that cut it."""
    if not sized:
        return "FILL IN: your longest entry in tokens"
    if sized[1] != "truncate":
        return "the longest entry in tokens"
    if kind == "generate":
        return (f"the model's {positions} positions less max_new_tokens {new_tokens(positions)}: a longer prompt is cut, "
                "special tokens counted")
    return f"the model's {positions} positions: a longer entry is cut, special tokens counted"


def write_starter(*, kind: str, out: Path, model: Path | None = None, corpus: Path | None = None,
                  train: Path | None = None, force: bool = False, id_column: str | None = None,
                  text_column: str | None = None, label_column: str | None = None) -> Path:
    """Write the starter campaign to OUT (refusing to overwrite unless FORCE); return its path.

    ID_COLUMN, TEXT_COLUMN, LABEL_COLUMN: the corpus's columns for each part of an entry; those not given are found
    from the corpus's header and rows (a column of long text, one unique on every row, one of few values).
    """
    return _write(kind=kind, out=out, model=model, corpus=corpus, train=train, force=force,
                  columns={"id": id_column, "text": text_column, "label": label_column})[0]


def _write(*, kind, out, model, corpus, train, force, columns) -> tuple[Path, object]:
    if kind not in WORKLOADS:
        raise UserError(f"--kind {kind!r}: the kinds there are: {', '.join(WORKLOADS)}")
    given, out = str(out), Path(out).expanduser()
    if out.suffix != ".toml":
        raise UserError(f"{out}: a campaign file ends in .toml")
    if out.exists() and not force:
        raise UserError(f"{out} exists: choose another name, or --force to replace it")
    if not NAME_PATTERN.match(out.stem):
        raise UserError(f"{out.stem!r}: the file's name is the campaign's, in letters, digits, '.', '_' or '-'")
    named = {part: column for part, column in columns.items() if column}
    if named and corpus is None:
        raise UserError(f"--{'/--'.join(f'{part}-column' for part in named)} name(s) a column of the corpus: give --corpus too")
    text, found = _starter(kind=kind, name=out.stem, folder=out.parent, model=model and Path(model).expanduser(),
                           corpus=corpus and Path(corpus).expanduser(), train=train and Path(train).expanduser(),
                           shown=given, columns=named)
    with writing(out, "the campaign file"):
        write_atomically(out, text.encode("utf-8"))
    return out, found


def to_fill_in(path: Path) -> list[str]:
    """Return each line of the starter that still says FILL IN, with its file and line number."""
    return [f"{path}:{number}: {line}" for number, line in left_to_fill(path)]


def dry_run(path: Path, runs_dir: Path) -> tuple[bool, str]:
    """Check the campaign as run --dry-run does; return whether it would run and the plan or what stops it."""
    try:
        return True, describe_plan(prepare(path, runs_dir))
    except UserError as error:
        return False, str(error)


def init_campaign(*, kind: str, out: Path, runs_dir: Path, model: Path | None = None, corpus: Path | None = None,
                  train: Path | None = None, force: bool = False, id_column: str | None = None,
                  text_column: str | None = None, label_column: str | None = None) -> dict:
    """Write the starter campaign, then check it as run --dry-run does; return what was written and what is left.

    ID_COLUMN, TEXT_COLUMN, LABEL_COLUMN: the corpus's columns as given; the others are guessed from its header and rows,
    and ``columns`` says which column was taken for each part of an entry, and why.
    """
    path, found = _write(kind=kind, out=out, model=model, corpus=corpus, train=train, force=force,
                         columns={"id": id_column, "text": text_column, "label": label_column})
    would_run, said = dry_run(path, runs_dir)
    columns = {part: {"column": column, "found": found.why[part]} for part, column in found.named.items()} if found else {}
    return {"campaign_file": str(path), "kind": kind, "columns": columns, "to_fill_in": to_fill_in(path),
            "would_run": would_run, "dry_run": said}


def describe_init(data: dict) -> str:
    """Say where the starter is, which columns of the corpus it reads, what is left to fill in, and what the dry run found."""
    lines = [f"Wrote {data['campaign_file']} ({data['kind']}); its paths are relative to its folder."]
    guessed = {part: found for part, found in data.get("columns", {}).items() if found["found"] != "its default name"}
    if guessed:
        lines.append("Columns of the corpus (check them under [corpus]):")
        lines += [f"  {part}: {found['column']} ({'given' if found['found'] == 'as given' else 'guessed: ' + found['found']})"
                  for part, found in guessed.items()]
    if data["to_fill_in"]:
        lines += ["To fill in:", *(f"  {line}" for line in data["to_fill_in"])]
    lines.append("Thresholds are yours to write under [protocol.thresholds], before any timing: none was guessed.")
    lines.append(("The dry run passes: " if data["would_run"] else "The dry run stops here: ") + data["dry_run"])
    if data["would_run"]:
        lines.append(f"Next: iteralab run {shlex.quote(data['campaign_file'])}")
    return "\n".join(lines)
