"""Files written whole or not at all, sealed cache files, file hashes, and iteralab's cache folder."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

from iteralab.core.errors import write_error


def cache_root() -> Path:
    """Return iteralab's cache folder: ITERALAB_CACHE_DIR, else the user cache dir."""
    if os.environ.get("ITERALAB_CACHE_DIR"):
        return Path(os.environ["ITERALAB_CACHE_DIR"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("iteralab"))


def sha256_file(path: Path | str) -> str:
    """Return the hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def temporary_name(target: Path | str) -> str:
    """Return a name beside TARGET that no other process or thread picks (pid and a random token)."""
    return f"{target}.{os.getpid()}.{secrets.token_hex(4)}.partial"


@contextlib.contextmanager
def replacing(target: Path | str):
    """Yield a temporary path beside TARGET; on success it replaces TARGET whole, on failure it is removed."""
    temporary = temporary_name(target)
    try:
        yield temporary
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_atomically(target: Path | str, data: bytes | str) -> None:
    """Write DATA to TARGET so that readers see the old file or the new one, never half of it."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(target) as temporary, open(temporary, "wb") as handle:
        handle.write(payload)


def write_sealed(target: Path | str, magic: bytes, header: dict, body: bytes, checksum: str) -> None:
    """Write MAGIC, HEADER as one JSON line (with the sha256 of BODY under CHECKSUM), then BODY, whole or not at all.

    The caches' format: read back by read_sealed, which tells one cut short, flipped or of another kind. Written whole
    under a name of its own, so two writers at once each leave a complete file, never a mix.
    """
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    sealed = {**header, checksum: hashlib.sha256(body).hexdigest()}
    write_atomically(target, magic + json.dumps(sealed).encode() + b"\n" + body)


def read_sealed(path: Path | str, magic: bytes, checksum: str) -> tuple[dict, memoryview] | None:
    """Return the header and body write_sealed wrote to PATH, or None when they cannot be trusted as written.

    None for a file missing or unreadable, of another kind (not MAGIC), whose header is no JSON object, or whose body
    is not the one the header's sha256 (under CHECKSUM) names: cut short, flipped or rewritten.
    """
    try:
        with open(path, "rb") as handle:
            blob = handle.read()
        if not blob.startswith(magic):
            return None
        end = blob.index(b"\n", len(magic))
        header = json.loads(blob[len(magic):end])
    except (OSError, ValueError):
        return None
    body = memoryview(blob)[end + 1:]
    if not isinstance(header, dict) or hashlib.sha256(body).hexdigest() != header.get(checksum):
        return None
    return header, body


def copy_atomically(source: Path | str, target: Path | str) -> None:
    """Copy SOURCE to TARGET whole or not at all."""
    with replacing(target) as temporary:
        shutil.copyfile(source, temporary)


@contextlib.contextmanager
def writing(path: Path | str, what: str, *, remove_new_file: bool = True):
    """Create PATH's missing folders for the block; if it fails, remove what it created and raise a one-line error.

    A file at PATH that did not exist before is removed (unless REMOVE_NEW_FILE is false: the block cleans up itself);
    one that did is left to the block (an atomic replace keeps it).
    """
    path = Path(path)
    keep_file = os.path.lexists(path) or not remove_new_file
    created, folder = [], path.parent
    while not folder.exists() and folder != folder.parent:
        created.append(folder)
        folder = folder.parent
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield path
    except BaseException as error:
        if not keep_file:
            with contextlib.suppress(OSError):
                os.unlink(path)
        for made in created:  # deepest first; a folder something else filled meanwhile stays
            with contextlib.suppress(OSError):
                made.rmdir()
        if isinstance(error, OSError):
            raise write_error(error, path, what) from error
        raise
