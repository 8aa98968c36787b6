"""The columnar record cache: each records file is parsed and checked once on a machine, then read back as Arrow columns.

A cache file holds, for the complete lines of one records file, a row per record (where its line lies, its id, kind,
campaign and the trial figures a table needs) and the problems of the lines that are not records. It is keyed like the
records it stands for: the length and sha256 of the prefix it covers. A reader checks that hash against the records file
and the cache file's own checksum; on any mismatch (a record rewritten, a cache file cut short, flipped or written by
another version) the cache is ignored and rebuilt from the records. Lines appended since are parsed and added.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from iteralab.core.errors import UserError
from iteralab.core.files import cache_root, read_sealed, write_sealed
from iteralab.store import records
from iteralab.store.records import KINDS

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = 3  # of the cache file; a change of columns or layout bumps it, and older cache files are then rebuilt
MAGIC = b"iteralab-columns\n"
TORN = "incomplete last line (a write was cut off); it is skipped"
COLUMNS = (("line", "int32"), ("offset", "int64"), ("length", "int32"), ("record_id", "string"), ("kind", "string"),
           ("campaign", "string"), ("created_at", "string"), ("run_id", "string"), ("variant", "string"),
           ("status", "string"), ("sequence", "int64"), ("measured_window_ns", "int64"), ("predictions_path", "string"),
           ("asks_again", "string"), ("digest", "int64"))


@cache
def schema() -> pa.Schema:
    """Return the cache's Arrow schema (pyarrow is imported here, not when any command starts: it took 0.2 s)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in COLUMNS])


def schemas_digest() -> str:
    """Return the digest of the record schemas, which every cache of checked lines names (see _schemas_digest)."""
    return _schemas_digest()


@cache
def _schemas_digest() -> str:
    """Hash the record schemas: a cache made under other schemas checked its lines against other rules."""
    folder = resources.files("iteralab.store") / "schemas"
    digest = hashlib.sha256(f"{records.SCHEMA_VERSION}|{FORMAT}".encode())
    for kind in ("common", *KINDS):
        digest.update((folder / f"{kind}.schema.json").read_bytes())
    return digest.hexdigest()


def _cache_file(path: Path) -> str:
    # The absolute path, not the resolved one: resolving stats every folder of every file, and another name of the
    # same file only costs a second cache entry.
    key = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(_cache_folder(os.environ.get("ITERALAB_CACHE_DIR")), f"{key}.arrow")


@lru_cache(maxsize=4)
def _cache_folder(setting: str | None) -> str:
    """Return the columns cache folder for the cache setting SETTING (a path built once, not once per records file)."""
    return str(cache_root() / "columns")


def cache_exists(path: Path) -> bool:
    """Say whether records file PATH has a cache file (whether it can be trusted is checked when it is read)."""
    return os.path.isfile(_cache_file(path))


class Cached:
    """What a cache file says about the first SIZE bytes of a records file."""

    def __init__(self, header: dict, table: pa.Table):
        self.size, self.sha256, self.lines = header["size"], header["sha256"], header["lines"]
        self.problems = [(int(line), str(message)) for line, message in header["problems"]]
        self.stamp = header.get("stamp")  # the records file's size, times, inode and device when the cache was written
        self.table = table


def read_cache(path: Path) -> Cached | None:
    """Return the cache of records file PATH, or None when there is none that can be trusted as written."""
    return read_table(_cache_file(path), MAGIC, FORMAT, Cached)


def read_table(where: str, magic: bytes, version: int, kind):
    """Return KIND(header, table) of the sealed cache file WHERE, or None when it cannot be trusted as written: not
    sealed with MAGIC, cut short or flipped, of another VERSION, schemas or columns, or refused by KIND (ValueError)."""
    import pyarrow as pa

    sealed = read_sealed(where, magic, "payload")
    if sealed is None:
        return None
    header, payload = sealed
    try:
        if header.get("format") != version or header.get("schemas") != _schemas_digest():
            return None
        table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
        if not table.schema.equals(schema()):
            return None
        return kind(header, table)
    except (ValueError, KeyError, TypeError, pa.ArrowException):
        return None  # of another layout: rebuilt from the records


def write_cache(path: Path, sha256: str, size: int, lines: int, problems: list[tuple[int, str]], table: pa.Table,
                stamp: list[int] | None = None) -> None:
    """Remember TABLE and PROBLEMS for the first SIZE bytes (LINES lines, hashing to SHA256) of records file PATH.

    STAMP: the records file's ``_stamp`` as read, which lets a later read skip hashing a file that did not change.
    """
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema()) as writer:
        writer.write_table(table)
    payload = sink.getvalue().to_pybytes()
    header = {"format": FORMAT, "schemas": _schemas_digest(), "size": size, "lines": lines, "sha256": sha256,
              "problems": problems, "stamp": stamp}
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next reader time
        write_sealed(_cache_file(path), MAGIC, header, payload, "payload")


class Read:
    """What one records file gave: a row per record, its problems as (line, message) (a torn last line's included),
    the sha256 of its complete lines, and its FACTS: the stamp it was read under, its complete lines and bytes (None
    when it was appended to while it was read). KEPT: taken from the folder's cache (folded.py)."""

    def __init__(self, table: pa.Table, problems: list, sha256: str, facts: dict | None, kept: bool = False):
        self.table, self.problems, self.sha256, self.facts, self.kept = table, problems, sha256, facts, kept


def file_columns(path: Path, seen: dict | None = None) -> tuple[pa.Table, list[tuple[int, str]], str]:
    """Return a row per record of records file PATH, its problems as (line, message) and the sha256 of its complete lines.

    Only the lines the cache does not cover are parsed and checked. SEEN: the lines this read parsed already (``_parse``).
    """
    read = read_file(path, seen)
    return read.table, read.problems, read.sha256


def read_file(path: Path, seen: dict | None = None, *, keep: bool = True) -> Read:
    """Return what records file PATH holds, as ``file_columns`` says, with the facts the folder's cache keeps.

    KEEP false: no cache file of its own is written (the folder's cache, written by the caller, holds what was read).
    """
    import pyarrow as pa

    with open(path, "rb") as handle, mapped(handle) as data:
        stamp = _stamp(handle, len(data))
        cached = read_cache(path)
        # A file whose size, times, inode and device are those the cache saw was not written since (its change time
        # moves on any write, and no program can set it back): its bytes are not hashed again, as git trusts its index.
        unchanged = cached is not None and stamp is not None and cached.stamp == stamp
        if cached is not None and not unchanged and (cached.size > len(data) or _sha256(data, cached.size) != cached.sha256):
            cached = None  # the records under the cache were rewritten: every line is parsed and checked again
        start, first_line = (cached.size, cached.lines + 1) if cached else (0, 1)
        rows, problems, new_lines = _parse(data, start, first_line, {} if seen is None else seen)
        complete = data.rfind(b"\n") + 1
        if cached is None:
            table = _table(rows)
        else:  # an empty table costs a millisecond, a thousand files a second: none is made for no new row
            table = pa.concat_tables([cached.table, _table(rows)]) if rows else cached.table
            problems = cached.problems + problems
        digest = cached.sha256 if cached is not None and complete == cached.size else _sha256(data, complete)
        if keep and (new_lines or (cached is not None and not unchanged and stamp is not None)):
            write_cache(path, digest, complete, first_line - 1 + new_lines, problems, table, stamp)
        if complete < len(data):  # a write cut off: said every time it is read, never cached
            problems.append((first_line + new_lines, TORN))
    facts = {"stamp": stamp, "lines": first_line - 1 + new_lines, "complete": complete} if stamp is not None else None
    return Read(table, problems, digest, facts)


def _stamp(handle, length: int) -> list[int] | None:
    """Return the open file's size, modification and change times, inode and device; None when it grew past LENGTH."""
    info = os.fstat(handle.fileno())
    if info.st_size != length:
        return None  # appended to since it was mapped: the next read sees it whole
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


def write_copy_cache(path: Path, table: pa.Table, problems: list[tuple[int, str]], sha256: str) -> dict | None:
    """Cache, for records file PATH, the columns read from another file with the same bytes (a merged copy).

    Return its facts, as ``read_file`` gives them (None when it changed since it was compared, or grew meanwhile)."""
    with open(path, "rb") as handle, mapped(handle) as data:
        stamp = _stamp(handle, len(data))
        complete = data.rfind(b"\n") + 1
        if complete == 0 or _sha256(data, complete) != sha256:
            return None  # changed since it was compared: its own read next time
        lines = _count_lines(data, complete)
    cached = [(line, message) for line, message in problems if message != TORN]
    write_cache(path, sha256, complete, lines, cached, table, stamp)
    return {"stamp": stamp, "lines": lines, "complete": complete} if stamp is not None else None


def ends(path, size: int, count: int = 4096) -> bytes | None:
    """Return a digest of the first and last COUNT bytes of the file PATH of SIZE bytes (None when unreadable)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(count)
            handle.seek(max(size - count, 0))
            return hashlib.blake2b(head + b"\0" + handle.read(count), digest_size=16).digest()
    except OSError:
        return None


def _count_lines(data, size: int) -> int:
    with memoryview(data) as view:
        return bytes(view[:size]).count(b"\n")


def _sha256(data, size: int) -> str:
    with memoryview(data) as view:  # no copy of the mapped file; released before the map is closed
        return hashlib.sha256(view[:size]).hexdigest()


@contextlib.contextmanager
def mapped(handle):
    """Map an open file read-only (an empty file maps to b'')."""
    try:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError:  # empty file
        yield b""
        return
    try:
        yield mapped
    finally:
        mapped.close()


SEEN_LIMIT = 1_000_000  # lines one read remembers: about 300 bytes each beside the rows, 300 MB at most


def _parse(data, start: int, first_line: int, seen: dict) -> tuple[list[tuple], list[tuple[int, str]], int]:
    """Parse and check the complete lines of DATA from byte START, numbered from FIRST_LINE; count them too.

    SEEN: the lines this read already parsed and checked, by a 128-bit digest of their bytes, with the row they gave (all
    but where the line lies). A folder merged with a copy whose files differ by a record still repeats most lines: each
    is parsed and checked once per read, never trusted from another read.
    """
    rows, problems = [], []
    complete = data.rfind(b"\n") + 1
    offset, number = start, first_line
    while offset < complete:
        end = data.find(b"\n", offset)
        raw = data[offset:end]
        if raw.strip():
            key = hashlib.blake2b(raw, digest_size=16).digest()
            row = seen.get(key)
            if row is None:
                record, problem = parse_line(raw)
                if problem:
                    problems.append((number, problem))
                else:
                    row = _row(record, int.from_bytes(key[:8], "little", signed=True))
                    if len(seen) < SEEN_LIMIT:
                        seen[key] = row
            if row is not None:
                rows.append((number, offset, end - offset, *row))
        offset, number = end + 1, number + 1
    return rows, problems, number - first_line


def _row(record: dict, digest: int) -> tuple:
    """Return the columns of RECORD after where its line lies, ending with the line's DIGEST."""
    phases = record.get("phases") or {}
    window = (phases.get("measured_window") or {}).get("duration_ns")
    predictions = record.get("predictions")
    # The campaign a manifest's question asks again (#35): every build looks for them among thousands of manifests.
    decision = (record.get("protocol") or {}).get("decision") if record["kind"] == "manifest" else None
    asks = decision.get("asks_again") if isinstance(decision, dict) else None
    return (record["record_id"], record["kind"], record["campaign"], record["created_at"],
            record.get("run_id"), record.get("variant"), record.get("status"), _int64(record.get("sequence")),
            _int64(window), predictions.get("path") if isinstance(predictions, dict) else None,
            asks if isinstance(asks, str) else None, digest)


def _int64(value) -> int | None:
    """Return VALUE when a 64-bit column can hold it, else None: the schemas bound every count, this guards the cache."""
    return value if type(value) is int and -(2**63) <= value < 2**63 else None


def _table(rows: list[tuple]) -> pa.Table:
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema()]
    return pa.table([pa.array(values, type=field.type) for values, field in zip(columns, schema(), strict=True)], schema=schema())


def parse_line(raw: bytes, *, check: bool = True) -> tuple[dict | None, str | None]:
    """Return the record on line RAW, upgraded to the current version, or what is wrong with it."""
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
    if not check:
        return record, None
    problems = records.validate(record)
    if problems:
        return None, "; ".join(problems)
    return record, None


def empty_table() -> pa.Table:
    """Return the columns of no records, with the file column the loader adds."""
    import pyarrow as pa

    return _table([]).append_column("file", pa.array([], type=pa.int32()))


def to_frame(table: pa.Table):
    """Return TABLE as pandas: text as pandas strings, whole numbers nullable (a trial figure missing is empty, not 0)."""
    import pandas as pd
    import pyarrow as pa

    nullable = ["sequence", "measured_window_ns"]
    frame = table.drop_columns(nullable).to_pandas()
    whole = table.select(nullable).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    for name in nullable:
        frame[name] = whole[name].array
    return frame
