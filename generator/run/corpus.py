"""Corpus loading: JSONL or CSV with id, text and optional label, refused on any defect."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.lines import json_lines


@dataclass(frozen=True)
class Entry:
    """One input of the corpus."""

    id: str
    text: str
    label: str | None


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


def load_corpus(path: Path | str) -> Corpus:
    """Read a corpus file (.jsonl or .csv) and refuse defects with file, line and id."""
    path = Path(path)
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
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 (byte {error.start}); save the corpus as UTF-8") from None
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = _jsonl_rows(text, path)
    elif suffix == ".csv":
        rows = _csv_rows(text, path)
    else:
        raise UserError(f"{path}: corpus files must end in .jsonl or .csv")
    entries = _entries(rows, path)
    if not entries:
        raise UserError(f"{path}: the corpus has no entries")
    return Corpus(str(path), tuple(entries), fingerprint(entries), hashlib.sha256(data).hexdigest())


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


def _csv_rows(text: str, path: Path):
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [column for column in ("id", "text") if column not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{path}:1: missing column(s) {', '.join(missing)}; a corpus CSV needs id, text and optionally label")
    for row in reader:
        if None in row:
            raise UserError(f"{path}:{reader.line_num}: more fields than the header has columns")
        yield reader.line_num, row


def _entries(rows, path: Path) -> list[Entry]:
    entries, seen = [], {}
    for number, row in rows:
        where = f"{path}:{number}"
        raw_id = row.get("id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or not str(raw_id).strip():
            raise UserError(f"{where}: missing or empty id; every entry needs a unique, non-empty id")
        entry_id = str(raw_id).strip()
        if entry_id in seen:
            raise UserError(f"{where}: id {entry_id!r} is a duplicate of line {seen[entry_id]}; ids must be unique")
        seen[entry_id] = number
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{where}: id {entry_id!r} has a missing or empty text")
        label = row.get("label")
        if (label is not None and not isinstance(label, str | int)) or isinstance(label, bool):
            raise UserError(f"{where}: id {entry_id!r} has a label that is not a string")
        label = None if label is None or str(label).strip() == "" else str(label).strip()
        entries.append(Entry(entry_id, text, label))
    return entries


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
