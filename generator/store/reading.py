"""Read the record store: every records file under a runs folder, validated, merged by record id."""

from __future__ import annotations

import gc
import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import orjson

from iteralab.core.errors import UserError
from iteralab.core.files import cache_root, write_atomically
from iteralab.store import records
from iteralab.store.records import KINDS


@dataclass
class Loaded:
    """Records read from a runs folder, each with its source, and the problems met."""

    records: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def of_campaign(self, campaign: str, kind: str | None = None) -> list[dict]:
        """Return CAMPAIGN's records (of KIND only, when given) in reading order."""
        return [record for record in self.records if record["campaign"] == campaign and kind in (None, record["kind"])]

    def of_kind(self, kind: str) -> list[dict]:
        """Return the records of KIND in reading order."""
        return [record for record in self.records if record["kind"] == kind]


@cache
def _schemas_digest() -> str:
    folder = resources.files("iteralab.store") / "schemas"
    digest = hashlib.sha256(str(records.SCHEMA_VERSION).encode())
    for kind in ("common", *KINDS):
        digest.update((folder / f"{kind}.schema.json").read_bytes())
    return digest.hexdigest()


class _ValidatedPrefix:
    """Remember, per records file, how many leading bytes were already found valid.

    Files are append-only, so a prefix whose sha256 still matches needs no second schema check;
    any change inside it (a rewrite, an edit) changes the hash and everything is checked again.
    """

    def __init__(self, path: Path):
        key = hashlib.sha256(str(Path(path).resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self.file = cache_root() / "validated" / f"{key}.json"

    def lines(self, data: bytes) -> tuple[int, set[int]]:
        """Return how many leading lines were checked before and which of them had problems."""
        try:
            entry = json.loads(self.file.read_text(encoding="utf-8"))
            size = entry["size"]
            if entry["schemas"] != _schemas_digest() or size > len(data) or hashlib.sha256(memoryview(data)[:size]).hexdigest() != entry["sha256"]:
                return 0, set()
            return entry["lines"], set(entry["problem_lines"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0, set()

    def remember(self, data: bytes, size: int, lines: int, problem_lines: list[int]) -> None:
        entry = {"schemas": _schemas_digest(), "size": size, "sha256": hashlib.sha256(memoryview(data)[:size]).hexdigest(),
                 "lines": lines, "problem_lines": problem_lines}
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.file, json.dumps(entry))
        except OSError:
            pass  # a cache that cannot be written only costs the next reader time


def read_file(path: Path, shown: str) -> tuple[list[tuple[dict, str]], list[str]]:
    """Read one records file; return (record, 'file:line') pairs and problems."""
    found, problems = [], []
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        return [], [f"{shown}: cannot read: {error.strerror or error}"]
    lines = data.split(b"\n")
    torn_tail = lines[-1] != b""
    if not torn_tail:
        lines.pop()
    prefix = _ValidatedPrefix(path)
    checked, known_problems = prefix.lines(data)
    problem_lines = []
    for number, raw in enumerate(lines, start=1):
        where = f"{shown}:{number}"
        if torn_tail and number == len(lines):
            problems.append(f"{where}: incomplete last line (a write was cut off); it is skipped")
            continue
        if not raw.strip():
            continue
        record, problem = _parse_line(raw, trusted=number <= checked and number not in known_problems)
        if problem:
            problems.append(f"{where}: {problem}")
            problem_lines.append(number)
        else:
            found.append((record, where))
    complete = len(lines) - 1 if torn_tail else len(lines)
    if complete > checked:
        prefix.remember(data, sum(len(line) + 1 for line in lines[:complete]), complete, problem_lines)
    return found, problems


def _parse_line(raw: bytes, *, trusted: bool) -> tuple[dict | None, str | None]:
    try:
        record = orjson.loads(raw)
    except (json.JSONDecodeError, ValueError) as error:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None, "not valid UTF-8"
        try:
            json.loads(raw)  # the standard library's message names the column
        except json.JSONDecodeError as detailed:
            return None, f"not valid JSON ({detailed.msg}, column {detailed.colno})"
        return None, f"not valid JSON ({error})"
    if not isinstance(record, dict):
        return None, f"a record must be a JSON object, not {type(record).__name__}"
    try:
        record = records.upgrade(record)
    except UserError as error:
        return None, str(error)
    if trusted:
        return record, None
    problems = records.validate(record)
    if problems:
        return None, "; ".join(problems)
    return record, None


def load(runs_dir: Path) -> Loaded:
    """Read every records file under RUNS_DIR, merging copies by record_id."""
    runs_dir = Path(runs_dir)
    loaded = Loaded()
    if not runs_dir.is_dir():
        raise UserError(f"{runs_dir} is not a folder: pass the runs folder that holds the records")
    seen: dict[str, tuple[dict, str]] = {}
    # Parsing creates millions of small containers and no cycles: the cyclic collector would only
    # rescan the growing heap again and again (it tripled the load time of 100,000 trials).
    collecting = gc.isenabled()
    gc.disable()
    try:
        _read_all(runs_dir, loaded, seen)
    finally:
        if collecting:
            gc.enable()
    _repeated_deliverables(loaded)
    _unknown_references(loaded)
    return loaded


def _unknown_references(loaded: Loaded) -> None:
    """Report an exclusion naming a trial its campaign lacks, and a withdrawal or void naming a record it lacks."""
    kinds = {(r["campaign"], r["record_id"]): r["kind"] for r in loaded.records}
    withdrawn: dict[tuple, str] = {}
    for record, where in zip(loaded.records, loaded.sources, strict=True):
        if record["kind"] == "exclusion":
            for trial_id in record["trials"]:
                if kinds.get((record["campaign"], trial_id)) != "trial":
                    loaded.problems.append(f"{where}: exclusion {record['record_id']} names trial {trial_id}, which is not a "
                                           f"trial of campaign {record['campaign']}; it excludes nothing there")
        elif record["kind"] == "withdrawal":
            target, kind = ((record["exclusion_id"], "exclusion") if "exclusion_id" in record
                            else (record["voided_id"], record["voided_kind"]))
            verb = "withdraws" if kind == "exclusion" else "voids"
            key = (record["campaign"], target)
            if kinds.get(key) != kind:
                loaded.problems.append(f"{where}: withdrawal {record['record_id']} names {kind} {target}, "
                                       f"which is not {'an' if kind[0] in 'ae' else 'a'} {kind} of campaign {record['campaign']}")
            elif key in withdrawn:
                loaded.problems.append(f"{where}: withdrawal {record['record_id']} {verb} {kind} {target} "
                                       f"again (first by {withdrawn[key]}); the first one stands")
            else:
                withdrawn[key] = record["record_id"]


def _repeated_deliverables(loaded: Loaded) -> None:
    """Report a corpus delivered twice (two teams' folders merged): it is one deliverable, counted once."""
    voided = {(r["campaign"], r["voided_id"]) for r in loaded.records if r["kind"] == "withdrawal" and "voided_id" in r}
    first: dict[tuple, tuple[dict, str]] = {}
    for record, where in zip(loaded.records, loaded.sources, strict=True):
        if record["kind"] != "deliverable" or (record["campaign"], record["record_id"]) in voided:
            continue  # a voided deliverable counts nowhere: delivering its corpus again is no repeat
        key = (record["campaign"], record["corpus_fingerprint"])
        earlier = first.setdefault(key, (record, where))
        if earlier[0] is not record:
            loaded.problems.append(
                f"{where}: deliverable {record['record_id']} (trial {record['trial_id']}) repeats the corpus "
                f"{record['corpus_fingerprint'][:19]}… of deliverable {earlier[0]['record_id']} (trial {earlier[0]['trial_id']}) "
                f"at {earlier[1]}; one corpus is one deliverable, counted once")


def voided_ids(records: list[dict]) -> set[str]:
    """Return the ids of the rentals, deliverables and expenses that withdrawals among RECORDS void."""
    return {r["voided_id"] for r in records if r["kind"] == "withdrawal" and "voided_id" in r}


def record_files(runs_dir: Path) -> list[Path]:
    """Return the records files under RUNS_DIR in reading order."""
    # Only records/ folders hold records; corpus copies under inputs/ are JSONL too.
    return sorted(p for p in Path(runs_dir).rglob("*.jsonl") if p.parent.name == "records")


def _read_all(runs_dir: Path, loaded: Loaded, seen: dict) -> None:
    for path in record_files(runs_dir):
        shown = path.relative_to(runs_dir).as_posix()
        found, problems = read_file(path, shown)
        loaded.problems.extend(problems)
        for record, where in found:
            earlier = seen.get(record["record_id"])
            if earlier is None:
                seen[record["record_id"]] = (record, where)
                loaded.records.append(record)
                loaded.sources.append(where)
            elif earlier[0] != record:
                loaded.problems.append(
                    f"{where}: record_id {record['record_id']} already read with other content "
                    f"at {earlier[1]}; this copy is skipped"
                )


def check_data(loaded: Loaded) -> dict:
    """Return the counts per kind and the problems of a check, as plain data."""
    return {"records": len(loaded.records), "by_kind": {kind: len(loaded.of_kind(kind)) for kind in KINDS},
            "problems": loaded.problems}


def describe_check(loaded: Loaded) -> str:
    """List each problem as file:line: reason, then the counts."""
    counts = check_data(loaded)["by_kind"]
    problems = len(loaded.problems)
    summary = (f"{len(loaded.records)} records ({', '.join(f'{n} {k}' for k, n in counts.items())}); "
               f"{problems} problem{'s' * (problems != 1)}")
    return "\n".join([*loaded.problems, summary])
