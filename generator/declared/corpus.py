"""Corpus loading: JSONL or CSV with id, text and optional label (under names a campaign may choose), refused on any
defect."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.lines import json_lines


@dataclass(frozen=True)
class Entry:
    """One input of the corpus."""

    id: str
    text: str
    label: str | None
    # Written as a whole number (a JSON number, or digits in a CSV): a classifier may read it as a class id of its
    # id2label. The label itself stays the text written, so the corpus's fingerprint is what it always was.
    label_is_number: bool = False
    # The file's line it was read from (0 when made in code): a refusal names it. Not part of the entry's identity.
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Corpus:
    """Entries in processing order with the fingerprint of their content and order."""

    source: str
    entries: tuple[Entry, ...]
    fingerprint: str
    file_sha256: str

    @property
    def ids(self) -> list[str]:
        """Return the ids in processing order."""
        return [entry.id for entry in self.entries]

    @property
    def labelled(self) -> bool:
        """Tell whether every entry has a gold label."""
        return all(entry.label is not None for entry in self.entries)


def fingerprint(entries) -> str:
    """Hash ids, texts and labels in processing order: reordering changes the fingerprint."""
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(json.dumps([entry.id, entry.text, entry.label], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return "sha256:" + digest.hexdigest()


DIGITS = re.compile(r"[0-9]+")  # a CSV's whole-number label; str.isdigit would take other scripts' digits too
# Each part of an entry and the column (a CSV's) or key (a JSON object's) that holds it unless the campaign names another.
COLUMNS = {"id": "id", "text": "text", "label": "label"}


def load_corpus(path: Path | str, columns: dict[str, str] | None = None) -> Corpus:
    """Read a corpus file (.jsonl or .csv) and refuse defects with file, line and id.

    COLUMNS: the columns (CSV) or keys (JSON Lines) a campaign names for id, text or label; the others keep their name.
    """
    path, named = Path(path), {**COLUMNS, **(columns or {})}
    data, text = _read(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = _jsonl_rows(text, path)
    elif suffix == ".csv":
        rows = _csv_rows(text, path, named, declared=set(columns or {}))
    else:
        raise UserError(f"{path}: corpus files must end in .jsonl or .csv")
    entries = _entries(rows, path, named, digits_are_numbers=suffix == ".csv")
    if not entries:
        raise UserError(f"{path}: the corpus has no entries")
    return Corpus(str(path), tuple(entries), fingerprint(entries), hashlib.sha256(data).hexdigest())


def _read(path: Path) -> tuple[bytes, str]:
    """Return the corpus file's bytes and its text (UTF-8, a spreadsheet's BOM dropped), refusing what cannot be read."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"corpus file {path.resolve()} does not exist (a campaign file's paths are relative to its "
                        "folder)") from None
    except OSError as error:
        raise UserError(f"cannot read corpus {path}: {error.strerror or error}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a BOM from spreadsheet exports is not part of the first id
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 (byte {error.start}); save the corpus as UTF-8") from None


def _jsonl_rows(text: str, path: Path):
    for number, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{path}:{number}: not valid JSON ({error.msg}, column {error.colno})") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{number}: each line must be a JSON object with id, text and optional label")
        yield number, row


def _csv_rows(text: str, path: Path, named: dict[str, str], declared: set[str]):
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    # A label column the campaign names must be there; the default one may be absent (an unlabelled corpus).
    missing = [named[part] for part in ("id", "text", "label")
               if named[part] not in header and (part != "label" or part in declared)]
    if missing:
        names = ", ".join(f'"{column}"' for column in header) or "none"
        raise UserError(f"{path}:1: missing column(s) {', '.join(missing)}; a corpus CSV needs id, text and optionally "
                        f"label, and its header has the columns {names}: name the ones to read with [corpus] id_column, "
                        "text_column and label_column")
    for row in reader:
        if None in row:
            raise UserError(f"{path}:{reader.line_num}: more fields than the header has columns")
        yield reader.line_num, row


def _entries(rows, path: Path, named: dict[str, str], *, digits_are_numbers: bool) -> list[Entry]:
    entries, seen = [], {}
    # Where the campaign named another column, the messages name it too.
    called = {part: "" if column == part else f" (column {column!r})" for part, column in named.items()}
    for number, row in rows:
        where = f"{path}:{number}"
        raw_id = row.get(named["id"])
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or not str(raw_id).strip():
            raise UserError(f"{where}: missing or empty id{called['id']}; every entry needs a unique, non-empty id")
        entry_id = str(raw_id).strip()
        if entry_id in seen:
            raise UserError(f"{where}: id {entry_id!r} is a duplicate of line {seen[entry_id]}; ids must be unique")
        seen[entry_id] = number
        text = row.get(named["text"])
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{where}: id {entry_id!r} has a missing or empty text{called['text']}")
        label = row.get(named["label"])
        if (label is not None and not isinstance(label, str | int)) or isinstance(label, bool):
            raise UserError(f"{where}: id {entry_id!r} has a label{called['label']} that is not a string")
        number_written = isinstance(label, int) or (digits_are_numbers and bool(DIGITS.fullmatch(str(label or "").strip())))
        label = None if label is None or str(label).strip() == "" else str(label).strip()
        entries.append(Entry(entry_id, text, label, label_is_number=number_written, line=number))
    return entries


@dataclass(frozen=True)
class Columns:
    """The columns of a corpus that hold each part of an entry, and why each was taken (for the reader to check)."""

    header: tuple[str, ...]
    named: dict[str, str]  # part -> column; a part missing here was not found (label: an unlabelled corpus)
    why: dict[str, str]  # part -> how it was found: given, the default name, or what the rows showed


FEW = 20  # at most this many distinct values (and at most a third of the rows) make a column of labels


def guess_columns(path: Path | str, given: dict[str, str] | None = None, labels: list[str] | None = None) -> Columns:
    """Find the columns (CSV) or keys (JSON Lines) of id, text and label: GIVEN ones as given, then the default names,
    then from the rows: a column of long text is the text, a column unique on every row the id, a column of few values
    the label (one whose values are all LABELS, the model's, first). Refuse a GIVEN column the header lacks."""
    path = Path(path)
    header, rows = _table(path)
    named, why = {}, {}
    for part, column in (given or {}).items():
        if column not in header:
            raise UserError(f"{path}:1: no column {column!r} for the {part}; the header has {', '.join(header) or 'none'}")
        named[part], why[part] = column, "as given"
    for part, column in COLUMNS.items():
        if part not in named and column in header and column not in named.values():
            named[part], why[part] = column, "its default name"
    values = {column: [str(row.get(column) if row.get(column) is not None else "").strip() for row in rows]
              for column in header}
    free = [column for column in header if column not in named.values()]
    if "text" not in named:
        filled = [column for column in free if all(values[column])]
        if filled:
            column = max(filled, key=lambda name: sum(map(len, values[name])))
            named["text"] = column
            why["text"] = f"the longest texts, {sum(map(len, values[column])) // max(len(rows), 1)} characters on average"
            free.remove(column)
    if "id" not in named:
        unique = [column for column in free if all(values[column]) and len(set(values[column])) == len(rows)]
        if unique:
            named["id"], why["id"] = unique[0], f"a value of its own on each of the {len(rows)} rows"
            free.remove(unique[0])
    if "label" not in named:
        _guess_label(free, values, len(rows), labels, named, why)
    return Columns(tuple(header), {part: named[part] for part in COLUMNS if part in named}, why)


def _guess_label(free: list[str], values: dict, count: int, labels, named: dict, why: dict) -> None:
    kinds = {column: sorted(set(filter(None, values[column]))) for column in free}
    few = [column for column, seen in kinds.items() if 1 <= len(seen) <= min(FEW, max(2, count // 3))]
    known = set(labels or ()) | {str(index) for index in range(len(labels or ()))}
    fitting = [column for column in few if labels and set(kinds[column]) <= known]
    chosen = (fitting or sorted(few, key=lambda column: (len(kinds[column]) < 2, len(kinds[column]))))[:1]
    if chosen:
        seen = kinds[chosen[0]]
        named["label"] = chosen[0]
        why["label"] = (f"{len(seen)} value{'s' if len(seen) > 1 else ''}: {', '.join(seen[:6])}{', ...' if len(seen) > 6 else ''}"
                        + (", all labels of the model" if chosen[0] in fitting else ""))
        others = [column for column in few if column != chosen[0]]
        if others:
            why["label"] += f"; {', '.join(others)} has few values too"


def _table(path: Path) -> tuple[list[str], list[dict]]:
    """Return the header (a CSV's, or a JSON Lines file's keys in order of appearance) and the rows of a corpus file."""
    _, text = _read(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        return list(reader.fieldnames or []), list(reader)
    if suffix != ".jsonl":
        raise UserError(f"{path}: corpus files must end in .jsonl or .csv")
    rows = [row for _, row in _jsonl_rows(text, path)]
    return list(dict.fromkeys(key for row in rows for key in row)), rows


def write_jsonl(entries, path: Path) -> None:
    """Write ENTRIES as a corpus JSONL file."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for entry in entries:
            row = {"id": entry.id, "text": entry.text}
            if entry.label is not None:
                row["label"] = entry.label
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def token_counts(tokenizer, entries, *, max_length: int | None = None) -> dict[str, int]:
    """Count each entry's tokens as the model sees them (special tokens included), capped at MAX_LENGTH when given."""
    texts = [entry.text for entry in entries]
    encoded = tokenizer(texts, add_special_tokens=True, truncation=max_length is not None, max_length=max_length)
    return {entry.id: len(ids) for entry, ids in zip(entries, encoded["input_ids"], strict=True)}
