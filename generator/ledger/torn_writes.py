"""A records line a kill cut off, which run --resume closed and named: a torn write that a resume saw, not damage.

A torn last line is "incomplete last line" while it is last. ``run --resume`` appends behind it, so it stops being last;
its resumption record names it (file, line, bytes, sha256) in the very write that closes it. ``check`` then takes that
line out of the problems when its bytes are still the ones named, and says what it is instead. A line whose bytes differ
from the ones named, or that no resumption names, stays a problem.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from iteralab.store import records


def named(loaded) -> dict[tuple[str, int], tuple[dict, dict]]:
    """Return (file, line) -> (what a resumption record of LOADED names there, that record), first one first."""
    found: dict[tuple[str, int], tuple[dict, dict]] = {}
    for record in loaded.of_kind("resumption"):
        for torn in record.get("torn") or ():
            if isinstance(torn, dict) and records.safe_relative_path(torn.get("file")) and isinstance(torn.get("line"), int):
                found.setdefault((torn["file"], torn["line"]), (torn, record))
    return found


def line_at(path: Path, number: int) -> bytes | None:
    """Return the bytes of complete line NUMBER of PATH, without its newline (None when it has no such line)."""
    try:
        with open(path, "rb") as handle:
            for index, raw in enumerate(handle, start=1):
                if index == number:
                    return raw[:-1] if raw.endswith(b"\n") else None
    except OSError:
        return None
    return None


def set_apart(runs_dir: Path | str, loaded) -> list[dict]:
    """Take out of LOADED's problems each line a resumption named as the torn write it closed, its bytes unchanged.

    Return each such line: where it is, its bytes, the resumption that named it and the sentence check says.
    """
    torn = named(loaded)
    if not torn:
        return []
    kept, found = [], []
    for problem in loaded.problems:
        where, _, _ = problem.partition(": ")
        file, _, line = where.rpartition(":")
        entry = torn.get((file, int(line))) if line.isdigit() else None
        if entry is not None and _unchanged(Path(runs_dir) / file, entry[0]):
            named_by = entry[1]
            found.append({"file": file, "line": int(line), "bytes": entry[0]["bytes"], "resumption": named_by["record_id"],
                          "said": f"{where}: a write cut off when its process ended ({entry[0]['bytes']} bytes, no "
                                  f"record), closed and named by run --resume in resumption {named_by['record_id']} "
                                  f"({records.shown_time(named_by['created_at'])}); skipped, not damage"})
        else:
            kept.append(problem)
    loaded.problems = kept
    return found


def _unchanged(path: Path, torn: dict) -> bool:
    raw = line_at(path, torn["line"])
    return raw is not None and len(raw) == torn.get("bytes") and hashlib.sha256(raw).hexdigest() == torn.get("sha256")
