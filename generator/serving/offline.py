"""A served model must answer what the model answers (#64): the outputs of an offline generation campaign of the same
model files, prompts and greedy decoding, found in the runs folder, to set each served output against by id."""

from __future__ import annotations

import json
from pathlib import Path

from iteralab.core.language import Text
from iteralab.store import reading, records

METHOD = Text("the output text, its edges trimmed, equals the offline generation's output for the same id (same model "
              "files, prompt template and greedy decoding, max_new_tokens equal to max_tokens)")


def _same_question(manifest: dict, settings: dict, model: dict) -> bool:
    """Tell whether a generation run decoded the same model files, prompts and length greedily."""
    generation = (manifest.get("protocol") or {}).get("generation") or {}
    recorded = manifest.get("model") or {}
    return (((manifest.get("workload") or {}).get("kind")) == "generate" and generation.get("decoding") == "greedy"
            and generation.get("prompt_template") == settings["prompt_template"]
            and generation.get("max_new_tokens") == settings["max_tokens"]
            and isinstance(recorded.get("files_sha256"), dict) and recorded["files_sha256"] == model.get("files_sha256"))


def find(runs_dir: Path, settings: dict, model: dict) -> dict | None:
    """Return the first offline generation run of the same question with an ok trial: its campaign, trial and outputs by
    id; None when the runs folder holds none."""
    loaded = reading.load(runs_dir) if Path(runs_dir).is_dir() else None
    if loaded is None:
        return None
    manifests = {m["record_id"]: m for m in loaded.of_kind("manifest") if _same_question(m, settings, model)}
    for trial in loaded.of_kind("trial"):
        if trial.get("manifest_id") in manifests and trial.get("status") == "ok" and trial.get("predictions"):
            path = trial["predictions"].get("path")
            if records.safe_relative_path(path) and (Path(runs_dir) / path).is_file():
                return {"campaign": trial["campaign"], "trial_id": trial["record_id"],
                        "outputs": _texts(Path(runs_dir) / path)}
    return None


def _texts(path: Path) -> dict[str, str]:
    """Return each id's output text from a generation trial's outputs file (the first pass: greedy has one)."""
    found: dict[str, str] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for line in handle.read().split("\n"):
            row = json.loads(line) if line.strip() else None
            if isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("text"), str):
                found.setdefault(row["id"], row["text"])
    return found


def compared(rows: list[dict], offline: dict | None) -> dict:
    """Set the served outputs against the offline ones by id: how many were compared and agree, or why none were."""
    if offline is None:
        return {"campaign": None, "compared": 0, "agreeing": 0, "share": None, "method": METHOD,
                "reason": Text("no offline generation campaign of the same model files, prompts and greedy decoding in "
                               "the runs folder")}
    pairs = [(row["output_text"], offline["outputs"][row["id"]]) for row in rows
             if row.get("status") == "ok" and row["id"] in offline["outputs"]]
    agreeing = sum((served or "").strip() == (text or "").strip() for served, text in pairs)
    return {"campaign": offline["campaign"], "trial_id": offline["trial_id"], "compared": len(pairs),
            "agreeing": agreeing, "share": agreeing / len(pairs) if pairs else None, "method": METHOD,
            "reason": None if pairs else Text("no answered request has an offline output of its id")}
