"""Errors that reach the user as one line, never as a traceback."""

from __future__ import annotations

import contextlib
import errno
import traceback
from pathlib import Path


class UserError(Exception):
    """Bad input from the user: the message says what is wrong and what to do."""


class UsageError(UserError):
    """A command-line option with an invalid value (exit status 2)."""


class WriteError(UserError):
    """A file could not be written: a full disk, no permission, a read-only file system, something in the way."""


# What to do about the operating system's refusals people meet; any other is named by its own words.
ADVICE = {
    errno.ENOSPC: "the disk is full: free space and run the command again",
    errno.EDQUOT: "the disk quota is used up: free space and run the command again",
    errno.EFBIG: "the file is larger than this system lets a process write (a file-size limit or a full disk): "
                 "raise the limit or free space, and run the command again",
    errno.EACCES: "permission denied: fix the folder's permissions or write somewhere else",
    errno.EPERM: "permission denied: fix the folder's permissions or write somewhere else",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.EISDIR: "a folder is where the file should be: move it away",
    errno.ENOTDIR: "a file is where a folder should be: move it away",
    errno.EEXIST: "a file or folder is in the way: move it away",
}


def write_error(error: OSError, path: Path | str, what: str) -> WriteError:
    """Return the one-line error for WHAT, written to PATH, that the system refused with ERROR."""
    advice = ADVICE.get(error.errno) or f"{error.strerror or error}: fix it and run the command again"
    return WriteError(f"could not write {what} {path}: {advice}; nothing recorded was lost "
                      "(records already written are untouched, and nothing half-written was left behind)")


def failure_reason(error: BaseException) -> str:
    """Describe an unexpected error in one line: its type, its message and the line of iteralab that raised it."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if "iteralab" in frame.filename
              or "/generator/" in frame.filename or frame.filename.endswith(".html")]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    message = " ".join(str(error).split())
    message = message if len(message) <= 200 else message[:197] + "..."
    return f"{type(error).__name__}: {message}{where}"


class CampaignFailed(UserError):
    """One campaign's records could not be turned into its views, decision or pages: reported for it alone."""

    def __init__(self, campaign: str, reason: str):
        super().__init__(campaign, reason)  # both in args, so the error crosses a worker process intact
        self.campaign, self.reason = campaign, reason

    def __str__(self) -> str:
        return (f"campaign {self.campaign} could not be read: {self.reason}; run iteralab check for the problems in its "
                "records, and report this line if it lists none")


@contextlib.contextmanager
def within_campaign(campaign: str):
    """Turn any failure inside the block into CampaignFailed for CAMPAIGN; a refused write concerns the whole command."""
    try:
        yield
    except (WriteError, CampaignFailed):
        raise
    except UserError as error:
        raise CampaignFailed(campaign, str(error)) from error
    except Exception as error:  # the boundary: one campaign's failure never takes the others down
        raise CampaignFailed(campaign, failure_reason(error)) from error
