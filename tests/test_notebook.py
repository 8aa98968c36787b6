"""The lab notebook and its script (#50): the notebook runs top to bottom with a real Jupyter kernel, a raising cell
fails it, the shipped copy has no outputs, `iteralab notebook DIR` copies it without overwriting, and the script prints
every section with no GPU figure invented on a CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iteralab.lab import NOTEBOOK
from tests.conftest import ROOT

SHIPPED = ROOT / "generator" / "data" / "notebook" / NOTEBOOK
FIXTURE = ROOT / "tests" / "fixtures" / "demo-runs"  # the demo's checked-in records, three configurations
SECTIONS = ["== Environment (what iteralab doctor checks) ==", "== Phases timed apart (PhaseClock on cpu, 1 torch thread) ==",
            "== Memory per phase ==", "== The measured window against batch size ==",
            "== KV cache: estimate and measurement =="]


def _execute(notebook, folder: Path, monkeypatch):
    """Run NOTEBOOK in a real kernel with FOLDER as its working folder; return it with its outputs."""
    from nbclient import NotebookClient

    # jupyter_core warns (DeprecationWarning, an error under pytest's filter) unless told to use platformdirs' paths.
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def _read():
    import nbformat

    return nbformat.read(SHIPPED, as_version=4)


def _text(cell) -> str:
    """Everything a code cell showed: printed streams and each display's plain text."""
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_with_a_real_kernel(tmp_path, monkeypatch, cli):
    shutil.copytree(FIXTURE, tmp_path / "runs")  # RUNS = "runs", read from the kernel's working folder
    cells = {cell.id: cell for cell in _execute(_read(), tmp_path, monkeypatch).cells if cell.cell_type == "code"}
    assert all(output.get("output_type") != "error" for cell in cells.values() for output in cell.outputs)
    phases = _text(cells["phases"])
    assert "== Phases timed apart" in phases
    for phase in ("build", "to_device", "first_pass", "measured_window"):
        assert phase in phases
    assert "First pass" in phases and "does not replace a trial of your model" in phases
    assert "GPU cells empty: no CUDA device" in _text(cells["memory"]) or "cuda" in _text(cells["setup"])
    assert "median_s" in _text(cells["batch"]) and "spread" in _text(cells["batch"])
    ranking = _text(cells["ranking"])
    # The decision's order over the fixture's three configurations, as `iteralab decide --json` ranks them.
    code, out, err = cli("decide", "demo-rotten-tomatoes", "--runs", FIXTURE, "--json")
    assert code == 0, err
    decided = json.loads(out)
    order = [entry["configuration"] for entry in decided["ranked"]]
    assert len(order) == 3 and all(name in ranking for name in order)
    assert [ranking.index(name) for name in order] == sorted(ranking.index(name) for name in order)
    chart = cells["chart"].outputs[0]["data"]
    assert "text/html" in chart or "application/vnd.vegalite.v5+json" in chart or any("vegalite" in k for k in chart)


@pytest.mark.slow
def test_the_records_section_is_skipped_without_records_and_a_cell_that_raises_fails_the_run(tmp_path, monkeypatch):
    """One kernel for both (a kernel's start is most of each): the setup cell and the records section alone (the lab
    sections have their own test above), then a cell that raises, which must fail the run after the others ran."""
    import nbformat
    from nbclient.exceptions import CellExecutionError

    notebook = _read()
    keep = {"setup", "records-md", "open", "ranking", "chart"}
    notebook.cells = [cell for cell in notebook.cells if cell.id in keep]
    notebook.cells.append(nbformat.v4.new_code_cell('raise RuntimeError("a cell of the lab notebook failed")'))
    with pytest.raises(CellExecutionError, match="a cell of the lab notebook failed"):
        _execute(notebook, tmp_path, monkeypatch)
    # The client fills each cell's outputs as it runs it: the ones before the raising cell ran and are kept.
    cells = {cell.id: cell for cell in notebook.cells if cell.cell_type == "code"}
    assert "No records in 'runs': this section is skipped" in _text(cells["open"])
    assert cells["ranking"].outputs == [] and cells["chart"].outputs == []
    assert cells["setup"].outputs is not None and cells["setup"].execution_count is not None


def test_the_repository_notebook_is_stored_without_outputs():
    """Its diffs stay readable: no outputs, no execution counts, valid nbformat 4."""
    import nbformat

    stored = json.loads(SHIPPED.read_text(encoding="utf-8"))
    nbformat.validate(nbformat.reads(SHIPPED.read_text(encoding="utf-8"), as_version=4))
    code = [cell for cell in stored["cells"] if cell["cell_type"] == "code"]
    assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
    # Each section's heading says what it does not prove.
    headings = [("".join(cell["source"])) for cell in stored["cells"] if cell["cell_type"] == "markdown"]
    assert all("does not prove" in heading.lower() for heading in headings)


def test_iteralab_notebook_copies_it_and_never_overwrites(tmp_path, cli):
    folder = tmp_path / "new" / "lab"
    code, out, _ = cli("notebook", folder)
    assert code == 0 and str(folder / NOTEBOOK) in out
    assert (folder / NOTEBOOK).read_bytes() == SHIPPED.read_bytes()
    (folder / NOTEBOOK).write_text("my edited notebook", encoding="utf-8")
    code, out, err = cli("notebook", folder)
    assert code == 1 and out == ""
    assert "already exists: nothing was copied" in err
    assert (folder / NOTEBOOK).read_text(encoding="utf-8") == "my edited notebook"


@pytest.mark.slow
def test_the_script_prints_every_section_and_no_gpu_figure_on_a_cpu(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}  # a CPU run, even on a machine with a GPU
    result = subprocess.run([sys.executable, "-m", "iteralab.lab"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert [line for line in out.splitlines() if line.startswith("== ")] == SECTIONS
    assert out.count("Does not prove:") == len(SECTIONS)
    assert out.count("it does not replace a trial of your model") >= 4
    memory = out.split("== Memory per phase ==")[1].split("\n== ")[0]
    rows = [line.split() for line in memory.splitlines() if line.split()[:1] and line.split()[0] in
            ("build", "to_device", "first_pass", "measured_window")]
    assert len(rows) == 4
    # Each row: phase, host RSS above baseline (a figure in MiB), then the two GPU cells, empty, never 0.
    assert all(row[-2:] == ["—", "—"] and row[2] == "MiB" for row in rows)
    assert "GPU cells empty: no CUDA device" in memory
    assert "Measured: 192,512 bytes" in out  # the cache generate returned: 47 of the 48 tokens (#63)
    assert "Allocator peak: empty: not measured on cpu" in out
    assert "Estimate: " in out and "196,608 bytes" in out  # 2 × 2 layers × 4 heads × 16 × 48 tokens × 4 sequences × 4


def test_the_kv_estimate_is_the_size_of_the_cache_the_network_really_holds():
    """The estimate the lab prints (size's formula) counts the bytes of the key and value tensors a forward pass over
    prompt and new tokens keeps; the measurement is the cache generate returned; on a CPU the allocator's peak is empty
    with the reason, never 0."""
    import torch

    from iteralab import lab

    model = lab.build_network()
    kv = lab.kv_cache(model=model, device="cpu", batch_size=3, prompt_tokens=20, new_tokens=5)
    ids = torch.zeros((3, 25), dtype=torch.long)
    with torch.inference_mode():
        output = model(input_ids=ids, use_cache=True)
    cache = output.get("cache") or output.get("past_key_values")  # transformers 5 names it cache
    assert kv["estimate_bytes"] == sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    # Measured as the runner measures it, on any device: the cache generate returned holds every token but the last
    # generated one (#63); the allocator's peak is CUDA's alone.
    assert kv["measured_bytes"] == kv["estimate_bytes"] * 24 // 25
    assert kv["allocator_peak_bytes"] is None and "not measured on cpu" in kv["allocator_peak_reason"]
