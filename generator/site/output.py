"""Write the site's files, and remember what a build read so that an unchanged input is not rendered again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from importlib import metadata, resources
from pathlib import Path

import orjson

import iteralab
from iteralab.core import language
from iteralab.core.errors import write_error
from iteralab.core.files import write_atomically
from iteralab.site import vendor

# A no-change rebuild imports this module, not the pages' (Jinja, the decision, the catalog): site/changed.py makes the
# stamps and the campaigns' shared key with them. A build of 1,000 campaigns with nothing to do spent longer importing
# them than deciding so.

STATE_FILE = ".iteralab-build.json"
# Of the build state file; a state of another format is ignored (every campaign is rendered again, or copied from the
# store of rendered campaigns). 5: a first line of what a no-change rebuild reads (the inputs' digest, the language,
# the problems said), then the rest (each campaign's key, summary and answer), so that a rebuild with nothing to do
# parses a line, not the megabytes of a thousand campaigns' summaries.
STATE_FORMAT = 5


class Writer:
    """Write files under the output folder, leaving unchanged files untouched."""

    def __init__(self, out: Path, files: list | None = None):
        self.out, self.written, self.kept, self.folders, self.made = out, 0, 0, set(), []
        self.copied = 0  # campaigns written from the machine's store of rendered campaigns
        self.files = files  # when a list: every (relative path, bytes) asked for is added to it, written or unchanged

    def write(self, relative: str, data: str | bytes) -> None:
        """Write DATA to RELATIVE under the output folder; a refused write is a one-line error that leaves nothing half-made."""
        # Plain os calls on strings: a full build writes 100,000 files and pathlib's overhead showed.
        path = f"{self.out}/{relative}"
        payload = data.encode("utf-8") if isinstance(data, str) else data
        if self.files is not None:
            self.files.append((relative, payload))
        exists = True
        try:
            with open(path, "rb") as existing:
                if os.fstat(existing.fileno()).st_size == len(payload) and existing.read() == payload:
                    self.kept += 1
                    return
        except (FileNotFoundError, NotADirectoryError):
            exists = False
        except OSError as error:  # a folder where the file should be, or no permission to read it
            raise write_error(error, path, "the site file") from error
        try:
            self._store(path, payload, exists)
        except OSError as error:
            if not exists:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self.remove_empty_folders()
            raise write_error(error, path, "the site file") from error

    def _store(self, path: str, payload: bytes, exists: bool) -> None:
        folder = os.path.dirname(path)
        if folder not in self.folders:
            missing = folder
            while missing and not os.path.isdir(missing):
                self.made.append(missing)
                missing = os.path.dirname(missing)
            os.makedirs(folder, exist_ok=True)
            self.folders.add(folder)
        self.written += 1
        if not exists:
            # A new file replaces nothing: create it in place (a rename per file cost a fifth of a full build's
            # writes). A build cut short leaves it incomplete, but then no build state is saved and the next
            # build renders the campaign again.
            try:
                with open(path, "xb") as handle:
                    handle.write(payload)
                return
            except FileExistsError:
                pass  # created meanwhile: replace it whole, below
        write_atomically(path, payload)  # readers of a served site never see half of a page they could already open

    def remove_empty_folders(self) -> None:
        """Remove the folders this writer made that are still empty (after a failed write), deepest first."""
        for folder in sorted(self.made, key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def list_files(folder: Path, *, summarised: bool = False) -> list[tuple[str, os.DirEntry]]:
    """Return (relative posix path, entry) of every file under FOLDER, sorted; scandir, as runs/ may hold 100,000s.

    SUMMARISED: a campaign's predictions folder is one entry (its path ending in '/'), not entered: what the inputs'
    digest needs."""
    found, pending = [], [(str(folder), "")]
    while pending:
        current, prefix = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    # Linked folders are not entered, as the record loader's rglob does not enter them either.
                    if entry.is_dir(follow_symlinks=False):
                        if summarised and entry.name == PREDICTIONS and prefix.count("/") == 1:  # CAMPAIGN/predictions/
                            found.append((f"{prefix}{entry.name}/", entry))
                            continue
                        pending.append((entry.path, f"{prefix}{entry.name}/"))
                    elif entry.is_file():
                        found.append((f"{prefix}{entry.name}", entry))
        except OSError:
            continue  # an unreadable folder is reported by the loader, which reads the records
    return sorted(found, key=lambda item: item[0])


PREDICTIONS = "predictions"  # each run's folder of prediction files, named in its trial records with their sha256


def inputs_digest(runs_files: list, notes_dir: Path, sheets_dir: Path, catalog: Path | None, alternates: tuple = ()) -> str:
    """Hash everything a build reads: files of the runs folder by size and times, notes, sheets, catalog, templates, words."""
    digest = hashlib.sha256(f"{iteralab.__version__}|{os.environ.get('SOURCE_DATE_EPOCH')}|{words(alternates)}".encode())
    listing = []  # names, sizes and times, hashed in one call: a no-change rebuild of 100,000 trials stats them all
    for relative, entry in runs_files:
        if relative.endswith(f"/{PREDICTIONS}/"):
            # A prediction file is written once, before its trial record, which holds its sha256: its name stood for it,
            # and a file added, removed or renamed changes its folder's times, which stand for the names (listing
            # 100,000 names took a fifth of a second of a no-change rebuild).
            info = entry.stat()
            listing.append(f"{relative}\0{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}\n")
            continue
        # Records are only appended and other files written once: a size, a modification time and a change time
        # (which no program can set back) stand for the bytes. Any change reads the record table, whose cache checks
        # the records' bytes by sha256 (see store/columns.py).
        info = entry.stat()
        listing.append(f"{relative}\0{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}\n")
    digest.update("".join(listing).encode("utf-8", "surrogateescape"))
    for folder in (notes_dir, sheets_dir):
        if folder.is_dir():
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                digest.update(path.as_posix().encode("utf-8", "surrogateescape") + b"\0" + path.read_bytes())
    for relative, path in _templates_folder():
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0" + _read(path))
    if catalog is not None and catalog.is_file():
        digest.update(catalog.read_bytes())
    return digest.hexdigest()


def _templates_folder() -> list[tuple[str, str]]:
    """Return (relative posix path, path) of every file of the templates' folder, sorted, bytecode left out.

    What the pages are made from, without importing the pages' module (and Jinja): every template, stylesheet and
    script (``pages.render.template_files``), and the package's few other files, which only make the digest change
    more often, never less.
    """
    found, pending = [], [(str(resources.files("iteralab.templates")), "")]
    while pending:
        current, prefix = pending.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                if entry.is_dir():
                    if entry.name != "__pycache__":
                        pending.append((entry.path, f"{prefix}{entry.name}/"))
                elif not entry.name.endswith((".pyc", ".pyo")):
                    found.append((f"{prefix}{entry.name}", entry.path))
    return sorted(found)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def words(alternates: tuple) -> str:
    """Name the build's language, its catalog's bytes and the languages its pages link to."""
    code = language.current()
    return json.dumps([code, language.catalog_digest(code), alternates])


def software() -> str:
    """Name the code that writes the pages and bundles: iteralab's version, and the packages whose output they carry
    (the charts' libraries; the deflate, on which a bundle's bytes depend): another version renders every page again."""
    packages = "|".join(metadata.version(name) for name in ("zlib-ng", "stream-zip"))
    return f"{iteralab.__version__}|{vendor.versions()}|{packages}"


def read_head(path: Path) -> dict:
    """Return the first line of the build state at PATH (the inputs' digest, the language, the campaigns' count, the
    problems said), or nothing when there is no readable state of this format."""
    try:
        with open(path, "rb") as handle:
            head = orjson.loads(handle.readline())
    except (OSError, orjson.JSONDecodeError):  # bytes that are not UTF-8 JSON too
        return {}
    return head if isinstance(head, dict) and head.get("format") == STATE_FORMAT else {}


def read_state(path: Path) -> dict:
    """Return the build state at PATH (its first line, and each campaign's key, summary and answer), or nothing when
    there is no readable state of this format."""
    try:
        with open(path, "rb") as handle:
            head, body = orjson.loads(handle.readline()), orjson.loads(handle.read())
    except (OSError, orjson.JSONDecodeError):  # bytes that are not UTF-8 JSON too
        return {}
    if not (isinstance(head, dict) and head.get("format") == STATE_FORMAT and isinstance(body, dict)):
        return {}
    return {**body, **head}


def state_bytes(head: dict, body: dict) -> bytes:
    """Return the build state as ``read_head`` and ``read_state`` read it: HEAD on the first line, BODY on the second."""
    option = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    return orjson.dumps({**head, "format": STATE_FORMAT}, option=option) + orjson.dumps(body, option=option)
