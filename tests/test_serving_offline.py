"""A served model must answer what the model answers (#64): served outputs set against an offline generation campaign
of the same model files, prompts and greedy decoding, found in the runs folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from iteralab.serving import offline

FIXTURE = Path(__file__).parent / "fixtures" / "generate-runs"


def _manifest(runs: Path) -> dict:
    path = next((runs / "tiny-generate" / "records").glob("*.jsonl"))
    return next(record for record in map(json.loads, path.read_text().split("\n")[:-1]) if record["kind"] == "manifest")


def test_the_offline_generation_of_the_same_question_is_found_and_set_against_by_id(tmp_path):
    """Regression for #64: where an offline generate campaign of the same model and decoding exists, the served outputs
    are compared with it as well; another template, length or model is another question and is never used."""
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    manifest = _manifest(runs)
    settings = {"prompt_template": manifest["protocol"]["generation"]["prompt_template"],
                "max_tokens": manifest["protocol"]["generation"]["max_new_tokens"]}
    found = offline.find(runs, settings, manifest["model"])
    assert found["campaign"] == "tiny-generate" and set(found["outputs"]) == {f"doc-{n:03d}" for n in range(12)}
    rows = [{"id": "doc-000", "status": "ok", "output_text": f" {found['outputs']['doc-000']} "},
            {"id": "doc-001", "status": "ok", "output_text": "something else"},
            {"id": "doc-002", "status": "error", "output_text": None},
            {"id": "not-in-the-corpus", "status": "ok", "output_text": ""}]
    said = offline.compared(rows, found)
    assert (said["compared"], said["agreeing"], said["share"]) == (2, 1, 0.5)
    assert offline.find(runs, {**settings, "max_tokens": 5}, manifest["model"]) is None
    assert offline.find(runs, {**settings, "prompt_template": "{text}"}, manifest["model"]) is None
    other = {**manifest["model"], "files_sha256": {**manifest["model"]["files_sha256"], "model.safetensors": "0" * 64}}
    assert offline.find(runs, settings, other) is None
    assert offline.compared(rows, None)["reason"] and offline.compared(rows, None)["share"] is None
