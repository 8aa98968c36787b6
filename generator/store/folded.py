"""One column cache for a whole runs folder: the rows of every records file, read in one piece.

Reading 4,004 cache files, one per records file, took a second of a build that had one campaign to add. This cache
holds the rows of all of a runs folder's records files as one Arrow table, with each file's stamp as it was read (size,
modification and change times, inode, device), the sha256 of its complete lines, its line count and its problems. A file
whose stamp is still the one kept is taken from it, as its own cache file would be (see columns.py: no program can set
a change time back); any other file (appended to, new, rewritten) is read through its own cache file, which checks its
bytes. The files read beside it are written into it again once they hold a sixteenth of the rows, so that an appended
campaign costs its own files, not a rewrite of the whole.

The whole is sealed with its checksum: cut short, flipped, of another version or of other schemas, it is ignored, every
file is read through its own cache, and it is written anew. Two builds at once each write a complete one under a name
of its own, and the last one stays: each is true of the stamps it names.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from iteralab.core.files import cache_root, write_sealed
from iteralab.store import columns

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = 1  # of this cache file; another one is ignored and written anew
MAGIC = b"iteralab-folder-columns\n"
REWRITE_SHARE = 16  # written again when the rows read beside it (or kept for files gone) reach 1/16 of all rows


class Folded:
    """The folder's cache as read: its table, and per records file (by its path under the runs folder) its place in it."""

    def __init__(self, header: dict, table: pa.Table):
        self.table = table
        self.files: dict[str, tuple[int, int, dict]] = {}  # shown -> (first row, rows, facts)
        start = 0
        for shown, stamp, sha256, lines, complete, rows, problems in header["files"]:
            facts = {"stamp": list(stamp), "sha256": str(sha256), "lines": int(lines), "complete": int(complete),
                     "problems": [(int(line), str(message)) for line, message in problems]}
            self.files[str(shown)] = (start, int(rows), facts)
            start += int(rows)
        if start != table.num_rows:
            raise ValueError("its files' rows do not add up to its table")

    def kept(self, shown: str, stamp: list[int] | None) -> columns.Read | None:
        """Return the rows kept for the file SHOWN when its STAMP is the one they were read under, else None."""
        found = self.files.get(shown)
        if found is None or stamp is None or found[2]["stamp"] != stamp:
            return None
        _, rows, facts = found
        problems = list(facts["problems"])
        if facts["complete"] < stamp[0]:  # a write cut off: said every time it is read, as columns.file_columns says
            problems.append((facts["lines"] + 1, columns.TORN))
        # Its rows are sliced from the table by ``pieces``, files kept one after another as one slice.
        return columns.Read(_Rows(rows), problems, facts["sha256"], facts, kept=True)


class _Rows:
    """Stands for a kept file's table where only its number of rows is asked for."""

    def __init__(self, num_rows: int):
        self.num_rows = num_rows


def _cache_file(runs_dir: Path) -> str:
    key = hashlib.sha256(os.path.abspath(runs_dir).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(cache_root(), "folders", f"{key}.arrow")


def stamp(path: Path) -> list[int] | None:
    """Return records file PATH's size, times, inode and device now (None when it cannot be read)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return stamp_of(info)


def stamp_of(info: os.stat_result) -> list[int]:
    """Return the stamp of a records file from its stat result: size, modification and change times, inode, device."""
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


def read(runs_dir: Path) -> Folded | None:
    """Return the cache of runs folder RUNS_DIR, or None when there is none that can be trusted as written."""
    return columns.read_table(_cache_file(runs_dir), MAGIC, FORMAT, Folded)


def worth_writing(folded: Folded | None, reads: list) -> bool:
    """Say whether the folder's cache is to be written again: there is none, or what it lacks has grown.

    READS: every file's Read (None where it could not be read), those taken from FOLDED marked kept.
    """
    if folded is None:
        return any(read is not None and read.facts for read in reads)
    total = sum(read.table.num_rows for read in reads if read is not None)
    kept = [read for read in reads if read is not None and read.kept]
    beside = sum(read.table.num_rows for read in reads if read is not None and not read.kept)
    gone = folded.table.num_rows - sum(read.table.num_rows for read in kept)
    changed = len(kept) != len(reads) or len(folded.files) != len(kept)
    return changed and (beside + gone) * REWRITE_SHARE >= max(total, 1)


def pieces(folded: Folded | None, shown: list[str], reads: list) -> list[pa.Table]:
    """Return the tables of READS (None: unreadable, left out) in order, files kept from FOLDED one after another as
    one slice of its table (4,000 tables of a few rows each took longer to join than one of 200,000)."""
    found, run = [], None  # run: the rows [start, end) of FOLDED's table not yet added
    for name, read in zip(shown, reads, strict=True):
        if read is None:
            continue
        start, rows = folded.files[name][:2] if read.kept else (-1, 0)
        if run is not None and run[1] != start:
            found.append(folded.table.slice(run[0], run[1] - run[0]))
            run = None
        if not read.kept:
            found.append(read.table)
        elif run is None:
            run = [start, start + rows]
        else:
            run[1] += rows
    if run is not None:
        found.append(folded.table.slice(run[0], run[1] - run[0]))
    return found


def write(runs_dir: Path, folded: Folded | None, shown: list[str], reads: list) -> None:
    """Keep the rows and facts of every file of SHOWN whose Read (in READS) was whole, as the folder's cache."""
    import pyarrow as pa

    files, names, whole = [], [], []
    for name, read in zip(shown, reads, strict=True):
        if read is None or not read.facts or read.facts["stamp"] is None:
            continue  # appended to while it was read, or unreadable: read through its own cache next time
        facts = read.facts
        problems = [(line, message) for line, message in read.problems if message != columns.TORN]
        files.append([name, facts["stamp"], read.sha256, facts["lines"], facts["complete"], read.table.num_rows, problems])
        names.append(name)
        whole.append(read)
    if not files:
        return
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, columns.schema()) as writer:
        # One batch: a table of 4,000 batches took a millisecond a slice, a second for the files of one read.
        writer.write_table(pa.concat_tables(pieces(folded, names, whole)).combine_chunks())
    header = {"format": FORMAT, "schemas": columns.schemas_digest(), "files": files}
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next reader time
        write_sealed(_cache_file(runs_dir), MAGIC, header, sink.getvalue().to_pybytes(), "payload")
