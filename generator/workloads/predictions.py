"""A trial's predictions file: every entry's id, label and score, written once, hashed, read back for agreement."""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path

from iteralab.core.files import writing


def read_predictions(path: Path) -> dict[str, str]:
    """Return each id's label from a predictions file."""
    with open(path, encoding="utf-8", newline="") as handle:
        return {row["id"]: row["label"] for row in csv.DictReader(handle)}


def write_predictions(runs_dir: Path, campaign: str, trial_id: str, predictions) -> dict:
    """Write a trial's predictions to their own file, synced to disk; return its path, sha256 and format."""
    relative = f"{campaign}/predictions/{trial_id}.csv"
    path = runs_dir / relative
    with writing(path, "the predictions file"), open(path, "x", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["id", "label", "score"])
        writer.writerows((entry_id, label, repr(score)) for entry_id, label, score in predictions)
        handle.flush()
        os.fsync(handle.fileno())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"path": relative, "sha256": digest, "format": "csv: id,label,score (score = softmax probability of the label)"}
