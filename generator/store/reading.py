"""Read the record store: every records file under a runs folder, validated, merged by record id."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from pathlib import Path

from iteralab.core import processes
from iteralab.core.errors import UserError
from iteralab.store import columns, folded, torn


@dataclass
class Loaded:
    """Records read from a runs folder, each with its source, and the problems met."""

    records: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    compatibility: list[dict] = field(default_factory=list)  # check's: each run's matrix verdict (information)
    notices: list[str] = field(default_factory=list)  # check's: a sheet naming a configuration by its old name (#44)
    torn: list[dict] = field(default_factory=list)  # the torn writes a resume closed and named (torn.py): no problems

    def of_campaign(self, campaign: str, kind: str | None = None) -> list[dict]:
        """Return CAMPAIGN's records (of KIND only, when given) in reading order."""
        return [record for record in self.records if record["campaign"] == campaign and kind in (None, record["kind"])]

    def of_kind(self, kind: str) -> list[dict]:
        """Return the records of KIND in reading order."""
        return [record for record in self.records if record["kind"] == kind]


class RecordTable:
    """Every record under a runs folder as one pandas row (where its line lies, id, kind, campaign, trial figures).

    The nested records themselves are read from their files only when asked for, by ``records`` or ``loaded``.
    """

    def __init__(self, frame, paths: list[Path], shown: list[str], problems: tuple[str, ...] = (),
                 digests: list[str] | None = None):
        self.frame, self.paths, self.shown, self.problems = frame, paths, shown, list(problems)
        self.digests = digests or []  # per file: sha256 of the complete lines read, which the rows stand for
        self._all_problems: list[str] | None = None
        self.torn: list[dict] = []  # all_problems's: the torn writes a resume closed and named, set apart (torn.py)

    def where(self, index) -> str:
        """Return 'file:line' of the row at INDEX."""
        return f"{self.shown[self.frame.at[index, 'file']]}:{self.frame.at[index, 'line']}"

    def records(self, rows) -> list[dict | None]:
        """Return the records of ROWS (a slice of the frame), in the slice's order, read from their files."""
        offsets = rows["offset"].to_numpy()
        return read_lines(self.paths, self.shown, rows["file"].to_numpy(), offsets, offsets + rows["length"].to_numpy(),
                          rows["record_id"].tolist())

    def loaded(self, campaigns=None) -> Loaded:
        """Return the records of CAMPAIGNS (every campaign when None), and every problem of the whole folder."""
        rows = self.frame if campaigns is None else self.frame[self.frame["campaign"].isin(list(campaigns))]
        with processes.collector_paused():
            return Loaded(self.records(rows), self.places(rows), self.all_problems(), torn=list(self.torn))  # in this order

    def places(self, rows) -> list[str]:
        """Return 'file:line' of each of ROWS (a slice of the frame)."""
        files, lines = rows["file"].tolist(), rows["line"].tolist()
        return [f"{self.shown[file]}:{lines[position]}" for position, file in enumerate(files)]

    def all_problems(self) -> list[str]:
        """Return the lines skipped (less the torn writes a resume closed: ``torn``), repeated deliverables and references to nothing."""
        if self._all_problems is None:
            # All are found among a few kinds of records, read for every campaign.
            light = self.frame[self.frame["kind"].isin(("deliverable", "exclusion", "withdrawal", "resumption")).to_numpy()]
            few = Loaded(self.records(light), self.places(light))
            paths = {name: self.paths[index] for index, name in enumerate(self.shown)}
            problems, self.torn = torn.set_apart(self.problems, few.of_kind("resumption"), paths)
            named = {r.get("exclusion_id") or r.get("voided_id") for r in few.of_kind("withdrawal")}
            named |= {trial for r in few.of_kind("exclusion") for trial in r["trials"]}
            known = self.frame[self.frame["record_id"].isin(list(named)).to_numpy()]
            kinds = {(campaign, record_id): kind
                     for campaign, record_id, kind in known[["campaign", "record_id", "kind"]].to_numpy().tolist()}
            _repeated_deliverables(few, problems)
            _unknown_references(few, kinds, problems)
            self._all_problems = problems
        return list(self._all_problems)


def read_lines(paths: list, shown: list[str], files, offsets, ends, ids: list[str]) -> list[dict | None]:
    """Return the records whose lines lie in PATHS[FILES] (arrays) from OFFSETS to ENDS, checked to be IDS, in order."""
    import numpy as np

    found: list = [None] * len(ids)
    order = np.lexsort((offsets, files))  # by file, then where each line lies in it: each file read front to back
    for group in np.split(order, np.flatnonzero(np.diff(files[order])) + 1) if len(order) else ():
        file_index = files[group[0]]
        try:
            with open(paths[file_index], "rb") as handle, columns.mapped(handle) as data:
                for position in group:
                    line = data[offsets[position]:ends[position]]
                    record, problem = columns.parse_line(line, check=False)
                    if problem or record.get("record_id") != ids[position]:
                        raise OSError("its lines moved")
                    found[position] = record
        except OSError as error:
            raise UserError(f"{shown[file_index]} changed while it was being read ({error}); records are only "
                            "ever appended: if another program rewrote it, restore it, then run the command again") from None
    return found


def load(runs_dir: Path) -> Loaded:
    """Read every records file under RUNS_DIR, merging copies by record_id."""
    return load_table(runs_dir).loaded()


def load_table(runs_dir: Path, files: list[Path] | None = None, *, shown: list[str] | None = None,
               stats: list | None = None) -> RecordTable:
    """Read the columns of every records file under RUNS_DIR (from the columnar cache where it holds), merged by record_id.

    FILES: the records files, when the caller listed the folder already (in reading order, as ``record_files`` does);
    SHOWN and STATS: their paths under RUNS_DIR and ``os.stat`` results, when it has them (a tenth of a second at 4,000).
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UserError(f"{runs_dir} is not a folder: pass the runs folder that holds the records")
    with processes.collector_paused():
        return _read_all(runs_dir, record_files(runs_dir) if files is None else files, shown, stats)


def _unknown_references(loaded: Loaded, kinds: dict, problems: list[str]) -> None:
    """Report an exclusion naming a trial its campaign lacks, and a withdrawal or void naming a record it lacks."""
    withdrawn: dict[tuple, str] = {}
    for position, record in enumerate(loaded.records):
        where = loaded.sources[position]
        if record["kind"] == "exclusion":
            for trial_id in record["trials"]:
                if kinds.get((record["campaign"], trial_id)) != "trial":
                    problems.append(f"{where}: exclusion {record['record_id']} names trial {trial_id}, which is not a "
                                           f"trial of campaign {record['campaign']}; it excludes nothing there")
        elif record["kind"] == "withdrawal":
            target, kind = ((record["exclusion_id"], "exclusion") if "exclusion_id" in record
                            else (record["voided_id"], record["voided_kind"]))
            verb = "withdraws" if kind == "exclusion" else "voids"
            key = (record["campaign"], target)
            if kinds.get(key) != kind:
                problems.append(f"{where}: withdrawal {record['record_id']} names {kind} {target}, "
                                       f"which is not {'an' if kind[0] in 'ae' else 'a'} {kind} of campaign {record['campaign']}")
            elif key in withdrawn:
                problems.append(f"{where}: withdrawal {record['record_id']} {verb} {kind} {target} "
                                       f"again (first by {withdrawn[key]}); the first one stands")
            else:
                withdrawn[key] = record["record_id"]


def _repeated_deliverables(loaded: Loaded, problems: list[str]) -> None:
    """Report a corpus delivered twice (two teams' folders merged): it is one deliverable, counted once."""
    voided = {(r["campaign"], r["voided_id"]) for r in loaded.records if r["kind"] == "withdrawal" and "voided_id" in r}
    first: dict[tuple, tuple[dict, str]] = {}
    for position, record in enumerate(loaded.records):
        where = loaded.sources[position]
        if record["kind"] != "deliverable" or (record["campaign"], record["record_id"]) in voided:
            continue  # a voided deliverable counts nowhere: delivering its corpus again is no repeat
        key = (record["campaign"], record["corpus_fingerprint"])
        earlier = first.setdefault(key, (record, where))
        if earlier[0] is not record:
            problems.append(
                f"{where}: deliverable {record['record_id']} (trial {record['trial_id']}) repeats the corpus "
                f"{record['corpus_fingerprint'][:19]}… of deliverable {earlier[0]['record_id']} (trial {earlier[0]['trial_id']}) "
                f"at {earlier[1]}; one corpus is one deliverable, counted once")


def voided_ids(records: list[dict]) -> set[str]:
    """Return the ids of the rentals, deliverables and expenses that withdrawals among RECORDS void."""
    return {r["voided_id"] for r in records if r["kind"] == "withdrawal" and "voided_id" in r}


def is_records_file(relative: str) -> bool:
    """Say whether RELATIVE (a posix path under a runs folder) names a records file: a .jsonl file in a records/ folder."""
    folder, _, name = relative.rpartition("/")
    return name.endswith(".jsonl") and (folder == "records" or folder.endswith("/records"))


def record_files(runs_dir: Path) -> list[Path]:
    """Return the records files under RUNS_DIR in reading order."""
    # Only records/ folders hold records; corpus copies under inputs/ are JSONL too.
    runs_dir = Path(runs_dir)
    return sorted(p for p in runs_dir.rglob("*.jsonl") if is_records_file(p.relative_to(runs_dir).as_posix()))


# Records files without a cache, above this many bytes in all, are parsed on every core: a first read of 100,000 trials
# (220 MB) took 7 s on one; starting the processes costs about half a second.
PARALLEL_BYTES = 64 * 2**20


_WORKER_SEEN: dict = {}  # in a spawned reader: the lines its share of one read parsed already (columns._parse)


def _file_columns(path: Path, seen: dict | None = None, keep: bool = True):
    """Return ``columns.read_file(PATH)``, or the OSError it raised (sent back whole from a worker)."""
    try:
        return columns.read_file(path, _WORKER_SEEN if seen is None else seen, keep=keep)
    except OSError as error:
        return error


def _start_reader() -> None:
    # The collector is paused in the workers: parsing makes millions of objects and no cycle.
    gc.disable()
    _WORKER_SEEN.clear()


def _each_file(paths: list[Path], folded_next: bool = False) -> list:
    """Read each records file's columns; return, in PATHS' order, its ``columns.Read`` or the OSError it raised.

    Files without a cache are parsed on every core when there are many bytes of them; the others, and a few new
    lines, are read here, one after another: four threads took half as long again as one at 4,000 files (each file's
    work is short, and the threads mostly waited for the interpreter's lock).
    FOLDED_NEXT: the folder's cache will hold every file read; files parsed on every core then get no cache file of their
    own (4,000 files made and renamed: 7 s of CPU); a file appended later is parsed whole once, then cached alone.
    """
    results: list = [None] * len(paths)
    cold = [index for index, path in enumerate(paths) if not columns.cache_exists(path)]
    twins = _identical(paths, cold)
    cold = [index for index in cold if index not in twins]
    cores = processes.available_cores()
    if cores > 1 and len(cold) > 1 and sum(_size(paths[index]) for index in cold) >= PARALLEL_BYTES:
        parsed = _on_every_core([paths[index] for index in cold], cores, not folded_next)
        for position, index in enumerate(cold):
            results[index] = parsed[position]
    seen: dict = {}  # the lines this read parsed
    for index, path in enumerate(paths):
        if results[index] is None and index not in twins:
            results[index] = _file_columns(path, seen)
    for index, first in twins.items():
        results[index] = results[first]
        if not isinstance(results[first], OSError):
            one = results[first]
            facts = columns.write_copy_cache(paths[index], one.table, one.problems, one.sha256)
            results[index] = columns.Read(one.table, one.problems, one.sha256, facts)
    return results


def _identical(paths: list[Path], cold: list[int]) -> dict[int, int]:
    """Return, among the COLD files, each one whose bytes equal an earlier one's, with the index of that earlier one.

    A folder merged with its own copy holds every run file twice: parsed once, the copy's columns are the same. Only
    files of equal size and ends are hashed whole (4,000 run files of a size took a second to hash).
    """
    import hashlib

    by_size: dict[int, list[int]] = {}
    for index in cold:
        by_size.setdefault(_size(paths[index]), []).append(index)
    twins: dict[int, int] = {}
    for size, indexes in by_size.items():
        if size == 0 or len(indexes) < 2:
            continue
        by_ends: dict[bytes | None, list[int]] = {}
        for index in indexes:
            by_ends.setdefault(columns.ends(paths[index], size), []).append(index)
        for alike in (alike for alike in by_ends.values() if len(alike) > 1):
            first_of: dict[str, int] = {}
            for index in alike:
                try:
                    with open(paths[index], "rb") as handle:
                        digest = hashlib.file_digest(handle, hashlib.sha256).hexdigest()
                except OSError:
                    continue  # read below, where its error is reported
                twins_with = first_of.setdefault(digest, index)
                if twins_with != index:
                    twins[index] = twins_with
    return twins


def _on_every_core(paths: list[Path], cores: int, keep: bool = True) -> list:
    """Return ``_file_columns`` of each of PATHS (KEEP: as ``read_file`` takes it), worked out in spawned processes; all
    None where none can be started."""
    import functools

    count = min(cores, len(paths))
    try:
        with processes.spawned_pool(count, initializer=_start_reader) as pool:
            return pool.map(functools.partial(_file_columns, keep=keep), paths, chunksize=max(1, len(paths) // (8 * count)))
    except OSError:
        return [None] * len(paths)  # no process could be started (a sandbox, no /dev/shm): this process reads them


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # read below, where its error is reported


def _read_all(runs_dir: Path, paths: list[Path], shown: list[str] | None = None, stats: list | None = None) -> RecordTable:
    import numpy as np
    import pyarrow as pa

    if shown is None:
        shown = [path.relative_to(runs_dir).as_posix() for path in paths]
    # The folder's cache in one piece; only the files whose stamp it does not hold are read one by one (folded.py).
    whole = folded.read(runs_dir)
    if whole is None:
        reads = [None] * len(paths)
    else:
        stamps = [folded.stamp(path) for path in paths] if stats is None else [folded.stamp_of(info) for info in stats]
        reads = [whole.kept(shown[index], stamp) for index, stamp in enumerate(stamps)]
    rest = [index for index, read in enumerate(reads) if read is None]
    fresh = _each_file([paths[index] for index in rest], folded_next=whole is None)
    for position, index in enumerate(rest):
        reads[index] = fresh[position]
    file_problems, digests = [], []
    for index, read in enumerate(reads):
        if isinstance(read, OSError):
            reads[index] = None
            digests.append("unreadable")
            file_problems.append([f"{shown[index]}: cannot read: {read.strerror or read}"])
            continue
        digests.append(read.sha256)
        file_problems.append([f"{shown[index]}:{line}: {message}" for line, message in read.problems])
    if folded.worth_writing(whole, reads):
        folded.write(runs_dir, whole, shown, reads)
    present = [(index, read.table.num_rows) for index, read in enumerate(reads) if read is not None]
    if present:
        # The file column is made once for all files (a column per file cost a millisecond each, a second at 1,000).
        owner = np.repeat(np.array([index for index, _ in present], dtype=np.int32), [rows for _, rows in present])
        joined = pa.concat_tables(folded.pieces(whole, shown, reads))
        frame = columns.to_frame(joined.append_column("file", pa.array(owner)))  # int32, as made
    else:
        frame = columns.to_frame(columns.empty_table())
    table = RecordTable(frame, paths, shown, digests=digests)
    _drop_copies(table, file_problems)
    table.problems = [problem for problems in file_problems for problem in problems]
    return table


def _drop_copies(table: RecordTable, file_problems: list[list[str]]) -> None:
    """Keep the first record of each id; a later copy with other content is named in its file's problems.

    Copies are matched in bulk: each row's line digest against the first row of its id. Only pairs whose lines differ
    are read and compared as records (the same record written with other spacing or key order is still a copy).
    """
    import numpy as np

    frame = table.frame
    codes, _ = frame["record_id"].factorize()
    _, first_of = np.unique(codes, return_index=True)  # the first row of each id
    earlier = first_of[codes]
    repeated = earlier != np.arange(len(codes))
    if not repeated.any():
        return
    ids = frame["record_id"].to_numpy()
    later = np.flatnonzero(repeated)
    earlier = earlier[later]
    digests = frame["digest"].to_numpy()
    differs = digests[later] != digests[earlier]
    later, earlier = later[differs], earlier[differs]
    if len(later):
        mine, theirs = table.records(frame.iloc[later]), table.records(frame.iloc[earlier])
        files = frame["file"].to_numpy()
        for position, one in enumerate(mine):
            if one != theirs[position]:
                row, first = frame.index[later[position]], frame.index[earlier[position]]
                file_problems[files[later[position]]].append(
                    f"{table.where(row)}: record_id {ids[later[position]]} already read with other content at "
                    f"{table.where(first)}; this copy is skipped")
    table.frame = frame[~repeated]
