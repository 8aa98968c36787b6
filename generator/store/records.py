"""Append-only JSON Lines record store under ``runs/``: write, read, validate, migrate."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
import secrets
import socket
from functools import cache, reduce
from importlib import resources
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import writing

SCHEMA_VERSION = 1
KINDS = ("manifest", "trial", "rental", "deliverable", "exclusion", "withdrawal", "expense", "start", "resumption")
VOIDABLE = ("rental", "deliverable", "expense")  # what iteralab void withdraws; trials are set aside by exclusions
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DRIVE_PATTERN = re.compile(r"[A-Za-z]:")  # C:foo is absolute on Windows

# update_to_N turns a record of version N-1 into version N. Version 1 is the first
# format, so nothing is registered yet; the reader already walks this table.
MIGRATIONS: dict[int, object] = {}


def utc_now() -> str:
    """Return the current UTC time as ISO 8601 with a Z suffix."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def shown_time(stamp: str) -> str:
    """Return a record's UTC time to the second for a reader ('2026-12-04 14:56:43 UTC'); the record keeps microseconds."""
    return f"{stamp[:19].replace('T', ' ')} UTC" if isinstance(stamp, str) and stamp.endswith("Z") else stamp


def new_id(prefix: str) -> str:
    """Return a unique, sortable identifier such as ``trial-20261202T113600Z-3f9a1c0b7d2e``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{prefix}-{stamp}-{secrets.token_hex(6)}"


def new_run_id() -> str:
    """Return a run id naming the UTC time and the host, unique across machines."""
    host = re.sub(r"[^A-Za-z0-9-]", "", socket.gethostname())[:24] or "host"
    return new_id(f"run-{host}")


def check_name(value: str, what: str) -> str:
    """Refuse a campaign or run name that cannot be a folder name."""
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise UserError(
            f"{what} {value!r} is not a valid name: use letters, digits, '.', '_' or '-' "
            "(at most 128, starting with a letter or digit)"
        )
    return value


def make_record(kind: str, *, campaign: str, run_id: str, **fields) -> dict:
    """Return a record of KIND with the common fields filled in."""
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "record_id": new_id(kind), "campaign": campaign,
            "run_id": run_id, "created_at": utc_now(), **fields}


@cache
def _fast_validators() -> dict:
    """Compile each kind's schema with jsonschema-rs: a quick yes/no (about 10 µs a trial) before any detailed message."""
    import jsonschema_rs

    schemas = {name: validator.schema for name, validator in _validators().items()}
    registry = jsonschema_rs.Registry([(f"{name}.schema.json", schema) for name, schema in schemas.items()])
    return {kind: jsonschema_rs.validator_for(schemas[kind], registry=registry) for kind in KINDS}


@cache
def _validators() -> dict:
    import jsonschema
    from referencing import Registry, Resource

    folder = resources.files("iteralab.store") / "schemas"
    loaded = {name: json.loads((folder / f"{name}.schema.json").read_text(encoding="utf-8")) for name in ("common", *KINDS)}
    registry = Registry().with_resources((f"{name}.schema.json", Resource.from_contents(schema)) for name, schema in loaded.items())
    return {name: jsonschema.Draft202012Validator(schema, registry=registry) for name, schema in loaded.items()}


def safe_relative_path(value: str) -> bool:
    """Tell whether VALUE is a relative path that stays inside the runs folder."""
    if not isinstance(value, str) or not value or "\\" in value or "\x00" in value:
        return False
    parts = value.split("/")  # each a possible file name: a longer one raised "File name too long" (#62)
    return not value.startswith("/") and ".." not in parts and not DRIVE_PATTERN.match(value) and \
        max(len(part.encode("utf-8", "surrogatepass")) for part in parts) <= 255


# Where each kind keeps paths into the runs folder (a dotted holder lies inside another object).
PATH_FIELDS = {"manifest": ("corpus", "training_split"), "trial": ("predictions", "adaptation.export"), "rental": ("receipt",),
               "deliverable": (), "exclusion": ("document",), "withdrawal": (), "expense": ("receipt",), "start": (),
               "resumption": ()}


def _path_problems(record: dict) -> list[str]:
    problems = []
    for holder in PATH_FIELDS[record["kind"]]:
        found = reduce(lambda held, key: held.get(key) if isinstance(held, dict) else None, holder.split("."), record)
        value = found.get("path") if isinstance(found, dict) else None
        if value is not None and not safe_relative_path(value):
            problems.append(f"{holder}.path: {str(value)[:60]!r}{'...' * (len(str(value)) > 60)} must be a path relative to the runs "
                            "folder, without '..'")
    return problems


def validate(record) -> list[str]:
    """Return what is wrong with RECORD (empty when it is valid)."""
    if not isinstance(record, dict):
        return [f"a record must be a JSON object, not {type(record).__name__}"]
    if record.get("kind") in KINDS and _fast_validators()[record["kind"]].is_valid(record):
        return _path_problems(record)
    # Invalid (or of no known kind): the pure-Python validator's messages name the field.
    validators = _validators()
    problems = [_schema_message(error) for error in validators["common"].iter_errors(record)]
    if problems:
        return problems
    problems = _first_per_field(validators[record["kind"]].iter_errors(record))
    return problems or _path_problems(record)


def _first_per_field(errors) -> list[str]:
    # A rule stated twice (any phase may lack a duration, a successful trial's window may not) says one thing per field.
    first = {}
    for error in errors:
        first.setdefault(tuple(error.absolute_path), _schema_message(error))
    return list(first.values())


def _schema_message(error) -> str:
    where = ".".join(str(part) for part in error.absolute_path) or "record"
    message = error.message if len(error.message) < 200 else error.message[:197] + "..."
    return f"{where}: {message}"


def upgrade(record: dict) -> dict:
    """Migrate RECORD to the current schema version or raise UserError saying what to do."""
    version = record.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"schema_version {version!r} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"schema_version {version} is newer than this iteralab understands "
            f"({SCHEMA_VERSION}): upgrade iteralab to read it"
        )
    while version < SCHEMA_VERSION:
        record = MIGRATIONS[version + 1](record)
        version = record["schema_version"]
    return record


def records_file(runs_dir: Path, campaign: str, run_id: str) -> Path:
    """Return the file that holds the records of one run of one campaign."""
    check_name(campaign, "campaign")
    check_name(run_id, "run id")
    return Path(runs_dir) / campaign / "records" / f"{run_id}.jsonl"


def append(runs_dir: Path, record: dict) -> Path:
    """Validate RECORD and append it as one fsynced line; return the file written."""
    path = records_file(runs_dir, record.get("campaign"), record.get("run_id"))
    record = _plain(record)
    problems = validate(record)
    if problems:
        raise UserError(f"refusing to write {record.get('kind', 'record')}: " + "; ".join(problems))
    try:
        line = json.dumps(record, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n"
    except ValueError as error:  # NaN or infinity: not JSON, and no reader could load the line again
        # Only a valid record gets here, so it has a kind.
        raise UserError(f"refusing to write {record['kind']}: {error} (a NaN or infinite number)") from None
    # The file is never removed from outside: a record another writer appended to it meanwhile would go too.
    with writing(path, f"a {record['kind']} record to", remove_new_file=False):
        _append_line(path, line.encode("utf-8"))
    return path


def _plain(value):
    """Return VALUE as JSON's own types: a sentence the runner wrote as a Text (a str that can be translated) becomes a str."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def _append_line(path: Path, data: bytes) -> None:
    """Append DATA as whole lines under a lock; on failure cut the file back to its size before, never shorter."""
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # The lock keeps two writers of the same file from interleaving their lines.
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = os.fstat(fd).st_size
        if before and not _ends_with_newline(path):
            # A crash left a torn last line: start on a new line, never touch its bytes.
            data = b"\n" + data
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            # Only this call's bytes go: a full disk must not leave a torn line for every later reader to report.
            os.ftruncate(fd, before)
            if created and before == 0:
                os.unlink(path)
            raise
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


