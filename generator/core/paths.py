"""Where the user's files are, when a command is not told: one rule for every command."""

from __future__ import annotations

from pathlib import Path

DEFAULT_RUNS = Path("runs")


def notes_folder(runs: Path | str, notes: Path | str | None = None) -> Path:
    """Return the decision notes folder: NOTES when given, else notes/ beside the runs folder."""
    return Path(notes) if notes else Path(runs).parent / "notes"


def sheets_folder(runs: Path | str, sheets: Path | str | None = None) -> Path:
    """Return the qualification sheets folder: SHEETS when given, else qualification/ beside the runs folder."""
    return Path(sheets) if sheets else Path(runs).parent / "qualification"
