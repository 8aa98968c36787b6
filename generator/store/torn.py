"""A records line a kill cut off, which run --resume then closed and named in its resumption record (file, line, bytes,
sha256): a torn write a resume saw, not damage (#62). Every reader sets it apart from the problems while its bytes are the
ones named; one whose bytes differ, or that no resumption names, stays a problem ("not valid JSON")."""

from __future__ import annotations

import hashlib
import itertools

from iteralab.store import records


def set_apart(problems: list[str], resumptions: list[dict], paths: dict) -> tuple[list[str], list[dict]]:
    """Return PROBLEMS less the lines RESUMPTIONS name as the torn writes they closed, and those lines: where, bytes, the
    resumption, the sentence check says. PATHS: each records file by its name in the problems (under the runs folder)."""
    torn = {(named["file"], named["line"]): (named, record) for record in reversed(resumptions) for named in record.get("torn") or ()
            if isinstance(named, dict) and records.safe_relative_path(named.get("file")) and isinstance(named.get("line"), int)}
    kept, found = [], []
    for problem in problems:
        where = problem.partition(": ")[0]
        file, _, line = where.rpartition(":")
        named, by = torn.get((file, int(line)) if line.isdecimal() else None, (None, None))
        if named is None or file not in paths or not _unchanged(paths[file], named):
            kept.append(problem)
            continue
        found.append({"file": file, "line": named["line"], "bytes": named["bytes"], "resumption": by["record_id"],
                      "said": f"{where}: a write cut off when its process ended ({named['bytes']} bytes, no record), closed "
                              f"and named by run --resume in resumption {by['record_id']} "
                              f"({records.shown_time(by['created_at'])}); skipped, not damage"})
    return kept, found


def _unchanged(path, named: dict) -> bool:
    """Say whether complete line NAMED["line"] of PATH still has the length and the sha256 NAMED gives."""
    try:
        with open(path, "rb") as handle:
            raw = next(itertools.islice(handle, named["line"] - 1, None), b"")
    except OSError:
        return False
    return raw.endswith(b"\n") and len(raw) - 1 == named.get("bytes") and hashlib.sha256(raw[:-1]).hexdigest() == named.get("sha256")
