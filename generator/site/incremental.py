"""Work out, from the record table alone, what each campaign's pages are made from, so that only changed ones are rendered.

A campaign's key hashes its records' places (each file by name and the sha256 of its complete lines, and where each
record lies in it), the problems its folder has, its missing prediction files, the other files of its folder that its
bundle copies (by name, size and times), its notes and sheets and its stamp. None
of this needs a nested record: an unchanged campaign's records are never read, and what the shared pages need of it
(its row on the index, its sizing rows, its variants) comes from its summary, kept in the build state.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import posixpath

import numpy as np

from iteralab.store.reading import RecordTable
from iteralab.store.views import CampaignView, problems_by_campaign

STATE_FORMAT = 4  # of the build state file; a state of another format is ignored (every campaign is rendered again)


def groups(table: RecordTable) -> dict[str, np.ndarray]:
    """Map each campaign, in name order, to the positions of its rows in reading order."""
    codes, names = table.frame["campaign"].factorize(sort=True)
    order = np.argsort(codes, kind="stable")
    split = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1) if len(order) else []
    return {str(names[codes[group[0]]]): group for group in split}


def records_keys(table: RecordTable, positions: dict[str, np.ndarray]) -> dict[str, str]:
    """Hash where each campaign's records lie: file names, the files' content hashes, and each record's offset."""
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


def present_predictions(table: RecordTable, positions: dict[str, np.ndarray], present: set[str]) -> dict[str, frozenset]:
    """Return, per campaign, its trials' prediction files that are in the runs folder (a view names the others)."""
    paths = table.frame["predictions_path"].to_numpy(dtype=object)
    # The listing's paths are normal already: a path found as it is needs no normpath (100,000 calls), and the lookup
    # is made once for the whole table, not once per campaign.
    listed = np.fromiter((path in present for path in paths), dtype=bool, count=len(paths))
    named = np.fromiter((isinstance(path, str) for path in paths), dtype=bool, count=len(paths))
    found = {}
    for name, rows in positions.items():
        others = rows[named[rows] & ~listed[rows]]
        found[name] = frozenset(paths[rows[listed[rows]]]) | (
            {posixpath.normpath(path) for path in paths[others]} & present if len(others) else frozenset())
    return found


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
        if below and folder in ("records", "predictions"):
            # The listing is sorted: the folder's files lie together, up to the first name past "FOLDER/" ("0" follows
            # "/"). Stepping over them spares a look at each of 100,000 prediction files.
            index = bisect.bisect_left(runs_files, (f"{campaign}/{folder}0",), lo=index)
            continue
        if rest:
            info = entry.stat()  # kept by the listing's entry: the no-change check asked for it already
            found.setdefault(campaign, []).append(f"{relative}\0{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}")
        index += 1
    return {name: hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest() for name, lines in found.items()}


def campaign_keys(table: RecordTable, positions: dict, shared: str, problems: list[str], present: dict, notes: dict,
                  sheets: dict, stamps: dict, others: dict | None = None) -> dict[str, str]:
    """Hash, per campaign, everything its pages are made from (see the module's docstring); OTHERS: other_files()."""
    records = records_keys(table, positions)
    own = problems_by_campaign(problems, positions)
    keys = {}
    for name in positions:
        digest = hashlib.sha256(f"{shared}\0{records[name]}\0{(others or {}).get(name, '')}".encode())
        digest.update(json.dumps(own[name]).encode("utf-8", "surrogateescape"))
        digest.update("\0".join(sorted(present[name])).encode("utf-8", "surrogateescape"))  # names hold no NUL
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
