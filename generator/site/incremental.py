"""Work out, from the record table alone, what each campaign's pages are made from, so that only changed ones are rendered.

A campaign's key hashes its records' places (each file by name and the sha256 of its complete lines, and where each
record lies in it), the problems its folder has, the times of the folders its prediction files are named in, the other files of its folder that its
bundle copies (by name, size and times), its notes and sheets and its stamp. None
of this needs a nested record: an unchanged campaign's records are never read, and what the shared pages need of it
(its row on the index, its sizing rows, its variants) comes from its summary, kept in the build state.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import posixpath
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from iteralab.store.reading import RecordTable
from iteralab.store.views import CampaignView, problems_by_campaign

if TYPE_CHECKING:
    import numpy as np

STATE_FORMAT = 4  # of the build state file; a state of another format is ignored (every campaign is rendered again)


def groups(table: RecordTable) -> dict[str, np.ndarray]:
    """Map each campaign, in name order, to the positions of its rows in reading order."""
    import numpy as np  # numpy is imported when a build has work, not by every command that starts

    codes, names = table.frame["campaign"].factorize(sort=True)
    order = np.argsort(codes, kind="stable")
    split = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1) if len(order) else []
    return {str(names[codes[group[0]]]): group for group in split}


def records_keys(table: RecordTable, positions: dict[str, np.ndarray]) -> dict[str, str]:
    """Hash where each campaign's records lie: file names, the files' content hashes, and each record's offset."""
    import numpy as np

    files, offsets = table.frame["file"].to_numpy(), table.frame["offset"].to_numpy()
    keys = {}
    for name, rows in positions.items():
        used, relative = np.unique(files[rows], return_inverse=True)
        digest = hashlib.sha256("\n".join(f"{table.shown[i]}\0{table.digests[i]}" for i in used).encode("utf-8", "surrogateescape"))
        digest.update(relative.astype(np.int32).tobytes())
        digest.update(offsets[rows].astype(np.int64).tobytes())
        keys[name] = digest.hexdigest()
    return keys


def newest_records(table: RecordTable, positions: dict[str, np.ndarray]) -> dict[str, str | None]:
    """Return, per campaign, the time of its newest record of any kind (None when it has none).

    Rentals, deliverables, exclusions, withdrawals and expenses are records too: a footer that said "records up to" the
    last trial named 11:33 where the newest record was 13:57 (#37).
    """
    created = table.frame["created_at"].to_numpy(dtype=object)
    return {name: (max(created[rows]) if len(rows) else None) for name, rows in positions.items()}


def prediction_folders(table: RecordTable, positions: dict[str, np.ndarray]) -> dict[str, frozenset[str]]:
    """Return, per campaign, the folders (relative, normal) its trials' prediction files are named in.

    A folder's times stand for the names it holds, as in the no-change digest: a campaign's key hashes its folders'
    times instead of which of its files are present, so no build lists 100,000 prediction files to key 1,000 campaigns.
    """
    import numpy as np

    frame = table.frame
    paths = frame["predictions_path"]
    # A path as the runner writes it (its campaign's folder, then a plain name) needs no normpath: told apart by Arrow's
    # string functions over the whole column (100,000 paths one by one in Python took 0.2 s).
    folder = paths.str.replace(r"/[^/]*$", "", regex=True)
    plain = ((folder == frame["campaign"] + "/predictions") & ~paths.str.endswith(("/", "/.", "/.."))).fillna(False).to_numpy(bool)
    own = set(frame["campaign"][plain].unique())
    found = {name: {f"{name}/predictions"} if name in own else set() for name in positions}
    odd = np.flatnonzero(paths.notna().to_numpy(bool) & ~plain)
    for name, path in zip(frame["campaign"].iloc[odd], paths.iloc[odd], strict=True):
        found[name].add(posixpath.dirname(posixpath.normpath(path)))
    return {name: frozenset(folders) for name, folders in found.items()}


def folder_stamps(runs: Path, folders, listed: dict) -> dict[str, str]:
    """Return each of FOLDERS' times and inode ('-' where it cannot be read); LISTED: the folders the listing stat-ed."""
    stamps = {}
    for folder in folders:
        if folder.startswith(("/", "../")) or folder == "..":
            stamps[folder] = "-"  # outside the runs folder: nothing there is ever present
            continue
        try:
            info = listed[folder].stat() if folder in listed else os.stat(os.path.join(runs, folder))
            stamps[folder] = f"{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"
        except (OSError, ValueError):  # missing, not a folder's name, or a name no system takes (a NUL, too long)
            stamps[folder] = "-"
    return stamps


def present_predictions(table: RecordTable, positions: dict[str, np.ndarray], runs: Path) -> dict[str, frozenset]:
    """Return, per campaign of POSITIONS, its trials' prediction files (normal paths) that are in the runs folder.

    Present as the full listing of RUNS would say: a file, reached through folders that are not links.
    """
    paths = table.frame["predictions_path"].to_numpy(dtype=object)
    listings: dict[str, frozenset] = {}
    return {name: present_among(paths[rows], runs, listings) for name, rows in positions.items()}


def present_among(paths, runs: Path, listings: dict | None = None) -> frozenset:
    """Return the prediction files among PATHS (a campaign's column of them: a path or nothing per record), normal, that
    are in the runs folder (``present_predictions``). LISTINGS: the folders listed already, by their path."""
    listings = {} if listings is None else listings
    present = set()
    for path in paths:
        if isinstance(path, str):
            normal = posixpath.normpath(path)
            folder, _, file = normal.rpartition("/")
            if folder not in listings:
                listings[folder] = _files_in(runs, folder)
            if file in listings[folder]:
                present.add(normal)
    return frozenset(present)


def _files_in(runs: Path, folder: str) -> frozenset:
    """Return the names of the files in FOLDER under RUNS that the runs folder's listing holds (none outside it)."""
    if folder.startswith(("/", "../")) or folder in (".", ".."):
        return frozenset()
    try:
        where = str(runs)
        for part in folder.split("/") if folder else ():
            where = os.path.join(where, part)
            if not stat.S_ISDIR(os.lstat(where).st_mode):  # the listing enters no linked folder
                return frozenset()
        with os.scandir(where) as entries:
            return frozenset(entry.name for entry in entries if not entry.is_dir(follow_symlinks=False) and entry.is_file())
    except (OSError, ValueError):
        return frozenset()


def other_files(runs_files: list) -> dict[str, str]:
    """Hash, per campaign folder, the files its bundle may copy besides records and predictions (corpus copies, receipts,
    documents): their names, sizes and times, as the no-change check reads them (RUNS_FILES: the runs folder's sorted
    listing)."""
    found: dict[str, list[str]] = {}
    index, count = 0, len(runs_files)
    while index < count:
        relative, entry = runs_files[index]
        campaign, _, rest = relative.partition("/")
        folder, _, below = rest.partition("/")
        if (below or relative.endswith("/")) and folder in ("records", "predictions"):  # "/": a summarised folder
            # The listing is sorted: the folder's files lie together, up to the first name past "FOLDER/" ("0" follows
            # "/"). Stepping over them spares a look at each of 100,000 prediction files.
            index = bisect.bisect_left(runs_files, (f"{campaign}/{folder}0",), lo=index)
            continue
        if rest:
            info = entry.stat()  # kept by the listing's entry: the no-change check asked for it already
            found.setdefault(campaign, []).append(f"{relative}\0{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}")
        index += 1
    return {name: hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest() for name, lines in found.items()}


def campaign_keys(table: RecordTable, positions: dict, shared: str, problems: list[str], folders: dict, notes: dict,
                  sheets: dict, stamps: dict, others: dict | None = None) -> dict[str, str]:
    """Hash, per campaign, everything its pages are made from (see the module's docstring); OTHERS: other_files();
    FOLDERS: per campaign, its prediction folders' stamps as one text."""
    records = records_keys(table, positions)
    own = problems_by_campaign(problems, positions)
    keys = {}
    for name in positions:
        digest = hashlib.sha256(f"{shared}\0{records[name]}\0{(others or {}).get(name, '')}".encode())
        digest.update(json.dumps(own[name]).encode("utf-8", "surrogateescape"))
        digest.update(folders[name].encode("utf-8", "surrogateescape"))
        # A note's file is copied whole into the bundle: a change to an aside the page never shows renders it again.
        digest.update(json.dumps([(n.slug, n.source, n.sha256, n.meta, n.html) for n in notes.get(name, ())],
                                 sort_keys=True).encode())
        # A sheet's outcome shows on the campaign and qualification pages: a changed sheet renders them again.
        digest.update(repr([(s.source, s.outcome, s.criteria, s.total, s.configuration) for s in sheets.get(name, ())]).encode())
        keys[name] = digest.hexdigest() + stamps[name]
    return keys


def summary(view: CampaignView, sizing: list[dict], figures: str | None = None, revision: dict | None = None) -> dict:
    """Return what the index, sizing and note pages show of a campaign: plain data, kept in the build state.

    FIGURES: the digest of its decision's figures, which a note drafted from it records (``text.figures_digest``).
    REVISION: its answer and figures per configuration, which its question's page and the feed show
    (``questions.revision_figures``).
    """
    corpus = view.corpus
    ran = bool(view.manifests or view.trials)
    return {"name": view.name, "title": view.title, "kinds": list(view.kinds),
            "corpus": {key: corpus.get(key) for key in ("source_name", "path", "entries", "split", "fingerprint")} if corpus else None,
            "first_at": view.first_at if ran else None, "last_at": view.last_at if ran else None,
            "trials_ok": sum(trial["status"] == "ok" for trial in view.trials), "trials_failed": len(view.failures),
            "variants": {variant.name: f"variant-{variant.key}" for variant in reversed(view.variants)}, "sizing": sizing,
            "figures": figures, "revision": revision}
