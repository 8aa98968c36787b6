"""Files written whole or not at all, file hashes, and iteralab's cache folder."""

from __future__ import annotations

import contextlib
import hashlib
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
