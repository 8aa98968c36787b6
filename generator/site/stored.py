"""A machine's store of rendered campaigns: a build into another or an empty folder copies what an earlier one rendered.

An entry holds every file a campaign's rendering wrote (its pages, trials.csv, manifests and evidence bundle) and what
the build state keeps of it (its answer and summary). Its key hashes the campaign's key, which covers everything the
pages are made from (see incremental.py: the records, problems, prediction files, the folder's other files, notes,
sheets and stamp, with the code's version, the templates, the catalog and the language), and the runs and notes folders the bundle copies files
from. An entry is checked against its own sha256 when read: one cut short, flipped, of another format or unreadable
is ignored, and the campaign is rendered again and stored anew. Entries are written whole under a name of their own,
so two builds at once never leave a mix. The evidence bundle lies beside its entry (KEY.zip), a hard link of the site's
file where one can be made, checked against the sha256 the entry names. The least recently used go when the store
outgrows its limit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import cache_root, read_sealed, replacing, write_sealed

FORMAT = 2  # of an entry; another format is ignored (rendered again). 2: the bundle linked, not copied
MAGIC = b"iteralab-campaign\n"
LIMIT_SETTING = "ITERALAB_CAMPAIGN_STORE_MB"
DEFAULT_LIMIT_MB = 2048


def limit_bytes() -> int:
    """Return the store's size limit from ITERALAB_CAMPAIGN_STORE_MB (0 turns the store off), 2 GiB by default."""
    value = os.environ.get(LIMIT_SETTING, "").strip()
    if not value:
        return DEFAULT_LIMIT_MB * 2**20
    try:
        megabytes = int(value)
    except ValueError:
        megabytes = -1
    if megabytes < 0:
        raise UserError(f"{LIMIT_SETTING}={value!r} is not a whole number of megabytes: set it to 0 to keep no rendered "
                        f"campaigns, or to the most the store may hold (default {DEFAULT_LIMIT_MB}); nothing was written")
    return megabytes * 2**20


def folder() -> Path:
    """Return where the entries lie."""
    return cache_root() / "campaigns"


def entry_key(campaign_key: str, runs: Path, notes: Path) -> str:
    """Return the key of a campaign's entry: its campaign key and the folders its bundle copies files from."""
    places = f"{os.path.abspath(runs)}\0{os.path.abspath(notes)}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(campaign_key.encode() + b"\0" + places).hexdigest()


def _path(key: str) -> Path:
    return folder() / key[:2] / f"{key}.bin"


def _codec():
    """Return the compressor of pages: zstd through pyarrow (a fifth of zlib's time for about half its size)."""
    import pyarrow as pa

    return pa.Codec("zstd", compression_level=1)


def load(key: str) -> tuple[list[tuple[str, bytes]], dict] | None:
    """Return the files and the result stored under KEY, or None when there is no entry that can be trusted as written."""
    import pyarrow as pa

    path = _path(key)
    sealed = read_sealed(path, MAGIC, "body")
    if sealed is None:
        return None
    header, body = sealed
    try:
        if header.get("format") != FORMAT or header.get("key") != key:
            return None
        codec, files, at, linked = _codec(), [], 0, header["linked"]
        for relative, size, unpacked in header["files"]:
            if relative in linked:  # the bundle, a link of the site's file: checked against the sha256 it had
                data = _linked(path).read_bytes()
                if hashlib.sha256(data).hexdigest() != linked[relative]:
                    return None
            else:
                data = body[at:at + size]
                data = codec.decompress(data, decompressed_size=unpacked, asbytes=True) if unpacked is not None else bytes(data)
                at += size
            files.append((relative, data))
        if at != len(body):
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to go when the store is pruned
        return files, header["result"]
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None  # of another layout, or its bundle gone: rendered again


def _linked(path: Path) -> Path:
    return path.with_suffix(".zip")


def save(key: str, files: list[tuple[str, bytes]], result: dict, out: Path | str | None = None) -> None:
    """Store FILES (relative path, bytes) and RESULT under KEY; a store that cannot be written only costs rendering again.

    OUT: the site folder FILES were written to. The evidence bundle is then linked from there, not written again: it is
    most of an entry's bytes, and a cold build wrote 1.9 GB of bundles twice at 1,000 campaigns. A site's file is only
    ever replaced by a build, never rewritten in place, so the link keeps the bytes stored; a bundle changed anyway is
    told by its sha256 when read. Where no link can be made (another file system), the bundle is stored as it is.
    """
    import pyarrow as pa

    try:
        codec = _codec()
    except (ValueError, pa.ArrowException):  # a pyarrow built without zstd: nothing is stored, every build renders
        return
    parts, listed, linked = [], [], {}
    for relative, data in files:
        if relative.endswith(".zip") and not linked and out is not None and _link(f"{out}/{relative}", _linked(_path(key))):
            linked[relative] = hashlib.sha256(data).hexdigest()
            listed.append((relative, 0, None))
        elif relative.endswith(".zip"):  # a bundle is compressed already
            parts.append(data)
            listed.append((relative, len(data), None))
        else:  # pages shrink about twentyfold
            part = codec.compress(data, asbytes=True)
            parts.append(part)
            listed.append((relative, len(part), len(data)))
    # A full disk, or a value JSON cannot hold, only means this campaign is rendered again next time.
    with contextlib.suppress(OSError, TypeError):
        write_sealed(_path(key), MAGIC, {"format": FORMAT, "key": key, "files": listed, "linked": linked, "result": result},
                     b"".join(parts), "body")


def _link(source: str, target: Path) -> bool:
    """Link SOURCE as TARGET (replacing it whole); False when no link can be made."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with replacing(target) as temporary:
            os.link(source, temporary)
    except OSError:
        return False
    return True


def prune(limit: int) -> None:
    """Remove the least recently used entries (each with its linked bundle) until the store holds at most LIMIT bytes."""
    entries, bundles = [], {}
    with contextlib.suppress(OSError):
        for group in os.scandir(folder()):
            if group.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError), os.scandir(group.path) as found:
                    for entry in found:
                        if entry.name.endswith(".bin") and entry.is_file(follow_symlinks=False):
                            info = entry.stat()
                            entries.append((info.st_mtime_ns, info.st_size, entry.path))
                        elif entry.name.endswith(".zip") and entry.is_file(follow_symlinks=False):
                            bundles[entry.path[:-4]] = entry.stat().st_size
    for orphan in set(bundles) - {path[:-4] for _, _, path in entries}:  # its entry was never written: no use
        with contextlib.suppress(OSError):
            os.unlink(f"{orphan}.zip")
    # A linked bundle counts in full, though the site's copy is the same bytes on disk: the site may be removed.
    entries = [(at, size + bundles.get(path[:-4], 0), path) for at, size, path in entries]
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            total -= size
        with contextlib.suppress(OSError):
            os.unlink(f"{path[:-4]}.zip")
