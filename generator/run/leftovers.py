"""What a killed trial leaves behind: its files that no record refers to, and a records line its kill cut off.

A trial writes its predictions file, and an adaptation its exported model, just before its trial record. A process
that ends between the two (a kill, a power cut) leaves a whole predictions file, an export folder that looks whole, or
the export's ``.partial`` folder, for a trial whose record is written later by ``run --resume`` as interrupted, naming
no file. Nothing reads them. ``check`` lists them as safe to remove; ``run --resume`` moves its run's own into
``CAMPAIGN/set-aside/RESUMPTION_ID/``, named in its resumption record, so that nothing is deleted without a word.

A record append cut off by a kill leaves the file's last line without its newline. The resumption record names that
fragment (file, line, bytes, sha256) and closes it in the same write (``records.append`` starts on a new line and never
touches the fragment's bytes): ``check`` then tells the fragment from damage.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from iteralab.store import records

OUTPUT_FOLDERS = ("predictions", "models")  # where a trial writes its files, under its campaign's folder
PARTIAL = ".partial"  # an export folder before its rename (workloads.adapted)
SET_ASIDE = "set-aside"
_WHERE = re.compile(r"^(?P<file>[^\n]+?\.jsonl):(?P<line>\d+): ")
TORN = "incomplete last line"  # the reader's words for a line a write left without its newline (store.columns.TORN)


@dataclass
class Leftover:
    """A file or folder under a campaign's predictions/ or models/ that no record refers to."""

    path: str  # posix, under the runs folder
    trial_id: str
    bytes: int
    reason: str
    safe: bool = True  # False: a damaged line names its trial, and may be the record that refers to it

    def data(self) -> dict:
        return {"path": self.path, "trial_id": self.trial_id, "bytes": self.bytes, "reason": self.reason, "safe": self.safe}


def trial_of(name: str) -> str:
    """Return the trial id a predictions file or an export folder is named by (ids hold no dot)."""
    return name.split(".", 1)[0]


def torn_tail(runs_dir: Path, path: Path) -> dict | None:
    """Name the last line of records file PATH when a write was cut off in it: its file, line, bytes and sha256."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    complete = data.rfind(b"\n") + 1
    fragment = data[complete:]
    if not fragment:
        return None
    return {"file": Path(path).relative_to(runs_dir).as_posix(), "line": data.count(b"\n", 0, complete) + 1,
            "bytes": len(fragment), "sha256": hashlib.sha256(fragment).hexdigest()}


def paths_of(trial: dict) -> list[str]:
    """Return the paths, under the runs folder, of the predictions file and export folder a trial record names."""
    adaptation = trial.get("adaptation")
    found = []
    for holder in (trial.get("predictions"), adaptation.get("export") if isinstance(adaptation, dict) else None):
        path = holder.get("path") if isinstance(holder, dict) else None
        if records.safe_relative_path(path):
            found.append(posixpath.normpath(path))
    return found


def referenced(trials) -> set[str]:
    """Return the paths, under the runs folder, of every predictions file and export folder a trial record names."""
    return {path for trial in trials for path in paths_of(trial)}


def outputs(runs_dir: Path, campaign: str) -> list[tuple[str, Path]]:
    """Return (posix path under the runs folder, path) of each entry of CAMPAIGN's predictions/ and models/ folders."""
    found = []
    for folder in OUTPUT_FOLDERS:
        try:
            with os.scandir(Path(runs_dir) / campaign / folder) as entries:
                found += [(f"{campaign}/{folder}/{entry.name}", Path(entry.path)) for entry in entries
                          if not entry.is_symlink()]  # the runner writes none: a link is someone's own, never moved
        except OSError:  # no such folder (most campaigns have no models/), or one that cannot be listed
            continue
    return sorted(found)


def size(path: Path) -> int:
    """Return the bytes of a file, or of every file under a folder (0 for what cannot be read)."""
    try:
        if not path.is_dir():
            return path.stat().st_size
        return sum(os.lstat(os.path.join(folder, name)).st_size for folder, _, names in os.walk(path) for name in names)
    except OSError:
        return 0


def unreferenced(runs_dir: Path, loaded) -> list[Leftover]:
    """Return every file and folder under a campaign's predictions/ and models/ that no record of LOADED refers to.

    One whose trial a damaged line names (that line may be its record), or whose trial's record names a file of its name
    elsewhere (a campaign folder copied or renamed), is listed as not known to be safe to remove.
    """
    runs_dir = Path(runs_dir)
    trials = loaded.of_kind("trial")
    named, recorded = referenced(trials), {trial["record_id"]: trial for trial in trials}
    started = {start["trial_id"] for start in loaded.of_kind("start")}
    found = []
    with os.scandir(runs_dir) as entries:
        campaigns = sorted(entry.name for entry in entries if entry.is_dir(follow_symlinks=False))
    for campaign in campaigns:
        left = [(relative, path) for relative, path in outputs(runs_dir, campaign) if relative not in named]
        damaged = _damaged_lines(runs_dir, campaign, loaded.problems) if left else {}
        for relative, path in left:
            trial_id = trial_of(path.name)
            naming = next((where for where, raw in damaged.items() if trial_id.encode() in raw), None)
            elsewhere = [named_path for named_path in paths_of(recorded.get(trial_id) or {})
                         if posixpath.basename(named_path) == path.name]
            if naming is not None:
                reason, safe = f"no valid record refers to it, but {naming}, which is damaged, names trial {trial_id}", False
            elif elsewhere:  # a campaign folder renamed or copied: the record names the file where it was written
                reason, safe = f"trial {trial_id}'s record names {elsewhere[0]}, not this copy of it", False
            else:
                reason, safe = _why(path.name, trial_id, recorded.get(trial_id), trial_id in started), True
            found.append(Leftover(relative, trial_id, size(path), reason, safe))
    return found


def _why(name: str, trial_id: str, trial: dict | None, started: bool) -> str:
    if name.endswith(PARTIAL):
        return f"the export of trial {trial_id} stopped before it was whole"
    if trial is not None:
        return f"trial {trial_id} is recorded as {trial['status']}, naming no such file"
    if started:
        return (f"trial {trial_id} has a start record and no trial record: its process ended before writing it "
                "(or is running it now)")
    return f"no record names trial {trial_id}"


def _damaged_lines(runs_dir: Path, campaign: str, problems: list[str]) -> dict[str, bytes]:
    """Return 'file:line' -> its bytes, of each line of CAMPAIGN's records files that a problem names (not a torn tail)."""
    wanted: dict[str, set[int]] = {}
    for problem in problems:
        found = _WHERE.match(problem)
        if found and found["file"].startswith(f"{campaign}/") and TORN not in problem:
            wanted.setdefault(found["file"], set()).add(int(found["line"]))
    lines = {}
    for relative, numbers in wanted.items():
        try:
            with open(runs_dir / relative, "rb") as handle:
                for number, raw in enumerate(handle, start=1):
                    if number in numbers:
                        lines[f"{relative}:{number}"] = raw
        except OSError:
            continue
    return lines


def own(runs_dir: Path, campaign: str, existing: list[dict], run_id: str) -> list[tuple[str, Path]]:
    """Return the entries of CAMPAIGN's predictions/ and models/ that belong to trials of run RUN_ID and that no record of
    EXISTING refers to: what its trials left when they were interrupted, or in flight when the process ended."""
    trials = {r["trial_id"] for r in existing if r["kind"] == "start" and r["run_id"] == run_id}
    trials |= {r["record_id"] for r in existing if r["kind"] == "trial" and r["run_id"] == run_id}
    named = referenced(r for r in existing if r["kind"] == "trial")
    return [(relative, path) for relative, path in outputs(runs_dir, campaign)
            if relative not in named and trial_of(path.name) in trials]


def set_aside(runs_dir: Path, campaign: str, folder_name: str, entries: list[tuple[str, Path]]) -> tuple[dict | None, list[str]]:
    """Move ENTRIES into CAMPAIGN/set-aside/FOLDER_NAME/, each under its own folder's name (predictions/, models/).

    Return what moved (the folder and each entry's path, trial and bytes; None when nothing did) and a line per entry that
    could not be moved (it stays where it was, and check still names it).
    """
    folder = f"{campaign}/{SET_ASIDE}/{folder_name}"
    moved, failed = [], []
    for relative, path in entries:
        target = Path(runs_dir) / folder / relative.split("/", 2)[1] / path.name
        try:
            bytes_ = size(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, target)  # the same file system: the whole entry moves at once, or not at all
        except OSError as error:
            failed.append(f"{relative} could not be set aside ({error.strerror or error}); it stays where it was")
            continue
        moved.append({"path": relative, "trial_id": trial_of(path.name), "bytes": bytes_})
    return ({"folder": folder, "entries": moved} if moved else None), failed


def said(moved: dict) -> str:
    """Say what run --resume set aside, and where."""
    total = sum(entry["bytes"] for entry in moved["entries"])
    return (f"set aside {len(moved['entries'])} file(s) and folder(s) ({total:,} bytes) that interrupted trials left and "
            f"no record refers to: they are in {moved['folder']}/ under the runs folder; nothing reads them, remove "
            "that folder when you no longer want them")


def describe(found: list[Leftover]) -> list[str]:
    """Return check's lines for the leftovers FOUND: one each, then one summing them (none when there are none)."""
    if not found:
        return []
    lines = [f"{left.path}: {left.reason}; " + ("nothing reads it: safe to remove" if left.safe else
                                                 "not known to be safe to remove")
             for left in found]
    safe = [left for left in found if left.safe]
    lines.append(f"{len(safe)} file(s) and folder(s) ({sum(left.bytes for left in safe):,} bytes) that no record refers "
                 "to, listed above: safe to remove; run --resume moves those of the run it resumes into "
                 "CAMPAIGN/set-aside/")
    return lines
