"""Compatibility matrices (#44): AMD's ROCm matrix and NVIDIA's minimum driver per CUDA runtime, shipped as versioned data;
check, the qualification sheet and the campaign page give each run's verdict, naming the matrix row and version.

The fixtures in tests/fixtures/compatibility/ are manifests' environments as the runner records them on a rented machine
(machine facts: rocm_version, hip_version, driver_version and driver_source, each GPU's architecture, os): three AMD machines
(a combination the matrix lists, one it does not know, one it says unsupported) and two NVIDIA ones (a driver new enough
for the CUDA runtime, one too old).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from iteralab.money import compatibility
from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory

FIXTURES = Path(__file__).parent / "fixtures" / "compatibility"
ROCM, CUDA = "rocm-2026-12-07", "cuda-drivers-2026-12-07"
# fixture: (verdict, the row it names, the matrix)
EXPECTED = {
    "amd-listed": ("acceptable", "rocm-2026-12-07.csv line 773: ROCm 6.3.3, Ubuntu 22.04.5, gfx942, PyTorch 2.4/2.3/2.2/1.13, "
                   "supported", ROCM),
    "amd-unknown": ("to-confirm", "rocm-2026-12-07.csv line 633: ROCm 6.4.1, Ubuntu 24.04.2, gfx942, PyTorch 2.6/2.5/2.4/2.3, "
                    "supported", ROCM),
    "amd-unsupported": ("exclude", "rocm-2026-12-07.csv line 804: ROCm 6.3.3, Oracle Linux 8.10, gfx90a, PyTorch "
                        "2.4/2.3/2.2/1.13, unsupported", ROCM),
    "nvidia-driver-ok": ("acceptable", "cuda-drivers-2026-12-07.csv line 16: CUDA 12.4 Update 1, driver >= 550.54.15", CUDA),
    "nvidia-driver-old": ("exclude", "cuda-drivers-2026-12-07.csv line 17: CUDA 12.4 GA, driver >= 550.54.14", CUDA),
}
CARDS = {"amd-listed": "mi300x", "amd-unknown": "mi300x", "amd-unsupported": "mi250x", "nvidia-driver-ok": "h100",
         "nvidia-driver-old": "h100"}
CATALOG = factory.CATALOG_HEADER + "".join(f"2026-12-05,{slug},{name},1,{memory},3,100.00,USD\n" for slug, name, memory in (
    ("mi300x", "MI300X", 192), ("mi250x", "MI250X", 128), ("h100", "H100", 80)))


def environment(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture
def runs(tmp_path):
    """One campaign per fixture, each with one GPU trial of variant fp16-b8; and a CPU campaign."""
    folder = tmp_path / "runs"
    for name in EXPECTED:
        manifest = factory.manifest(name, f"run-{name}", environment=environment(name))
        records.append(folder, manifest)
        records.append(folder, factory.trial(manifest, "fp16-b8", gpu=True))
    cpu = factory.manifest("on-cpu", "run-cpu")
    records.append(folder, cpu)
    records.append(folder, factory.trial(cpu, "fp16-b8"))
    return folder


def sheet(folder: Path, name: str, extra: str = "") -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.toml").write_text(f'candidate = "{name}"\ncampaign = "{name}"\nvariant = "fp16-b8"\n'
                                         f'gpu = "{CARDS[name]}"\nlots = 1\ndays = 3\n{extra}', encoding="utf-8")


def test_the_newest_matrices_are_shipped_with_their_source_and_date():
    rocm, cuda = compatibility.load_matrix("rocm"), compatibility.load_matrix("cuda-drivers")
    assert (rocm.label, cuda.label) == (ROCM, CUDA)
    assert "github.com/ROCm/ROCm" in rocm.source and "0057200cf168b3be6f0b84de67199ff760272f12" in rocm.source
    assert rocm.read_on == cuda.read_on == "2026-12-07"
    assert cuda.source == "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
    # ROCm version x PyTorch x GPU architecture x OS: every release of the historical matrix, 6.0.0 to 7.1.0 (#63).
    assert {row["rocm"] for row in rocm.rows} >= {"6.0.0", "6.1.2", "6.2.4", "6.3.3", "6.4.3", "7.0.0", "7.0.1", "7.1.0"}
    assert {row["cuda"] for row in cuda.rows} >= {"12.8", "12.9", "13.0"}
    folder = resources.files("iteralab") / "data" / "compatibility"
    assert {f"{ROCM}.csv", f"{ROCM}.toml", f"{CUDA}.csv", f"{CUDA}.toml"} <= {entry.name for entry in folder.iterdir()}


def test_a_newer_matrix_file_is_used_and_an_older_one_can_be_named(tmp_path, monkeypatch):
    shipped = resources.files("iteralab") / "data" / "compatibility"
    for entry in shipped.iterdir():
        if entry.name.startswith(CUDA):
            (tmp_path / entry.name).write_bytes(entry.read_bytes())
    newer = tmp_path / "cuda-drivers-2027-01-10.csv"
    newer.write_text("matrix_version,cuda,release,min_driver_linux,min_driver_windows,source\n"
                     "2027-01-10,12.4,CUDA 12.4 GA,560.00,561.00,test\n", encoding="utf-8")
    (tmp_path / "cuda-drivers-2027-01-10.toml").write_text('read_on = "2027-01-10"\nurl = "test"\n', encoding="utf-8")
    monkeypatch.setattr(compatibility, "_folder", lambda: tmp_path)
    compatibility.load_matrix.cache_clear()
    try:
        manifest = {"environment": environment("nvidia-driver-ok")}
        assert compatibility.verdict(manifest).matrix == "cuda-drivers-2027-01-10"
        # 550.90.07 < 560.00 in the newer table, but within the CUDA 12.x family: minor version compatibility
        assert compatibility.verdict(manifest).status == "to-confirm"
        assert compatibility.verdict(manifest, cuda=compatibility.load_matrix("cuda-drivers", "2026-12-07")).status == "acceptable"
    finally:
        compatibility.load_matrix.cache_clear()


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_fixture_gets_its_verdict_naming_its_row_and_matrix(name):
    found = compatibility.verdict({"environment": environment(name)})
    status, row, matrix = EXPECTED[name]
    assert (found.status, found.row, found.matrix) == (status, row, matrix)
    if name == "amd-unknown":
        assert found.reason == "PyTorch 2.7 is not listed for ROCm 6.4.1 (listed: 2.6, 2.5, 2.4, 2.3)"


def test_an_old_manifest_is_to_confirm_naming_the_facts_it_lacks_and_a_cpu_run_has_nothing_to_check():
    old = environment("amd-listed")
    for key in ("rocm_version", "hip_version", "os"):  # torch.version.hip names the ROCm that ran (#63)
        del old[key]
    del old["gpus"][0]["architecture"]
    found = compatibility.verdict({"environment": old})
    assert found.status == "to-confirm" and found.row is None and found.matrix == ROCM
    assert found.missing == ("environment.rocm_version", "environment.gpus[0].architecture", "environment.os.name",
                             "environment.os.version")
    nvidia = environment("nvidia-driver-ok")
    nvidia["driver_version"] = None
    assert compatibility.verdict({"environment": nvidia}).missing == ("environment.driver_version",)
    cpu = compatibility.verdict(factory.manifest())
    assert cpu.status == "no-gpu" and cpu.said == "no GPU: no GPU recorded: there is no GPU combination to check"


def test_check_reports_each_runs_verdict_and_warns_on_an_exclude(cli, runs):
    code, out, _ = cli("check", runs, "--json")
    assert code == 0  # verdicts are information: an exclude is a warning, not a record problem
    found = {entry["run_id"]: entry for entry in json.loads(out)["compatibility"]}
    for name, (status, row, matrix) in EXPECTED.items():
        assert (found[f"run-{name}"]["status"], found[f"run-{name}"]["row"], found[f"run-{name}"]["matrix"]) == (status, row, matrix)
    assert found["run-cpu"]["status"] == "no-gpu"
    code, out, _ = cli("check", runs)
    lines = out.splitlines()
    warned = [line for line in lines if line.startswith("warning: ")]
    assert len(warned) == 2 and all("exclude: " in line for line in warned)
    assert any(line.startswith("warning: run run-amd-unsupported of campaign amd-unsupported: exclude: the matrix says "
                               "unsupported: Oracle Linux supported only on AMD Instinct MI300X") and "line 804" in line
               for line in warned)
    assert found["run-amd-unsupported"]["quote"] == "Oracle Linux supported only on AMD Instinct MI300X (footnote mi300x)"
    assert lines[-1].endswith("; compatibility of 6 run(s) against the matrices: 2 acceptable, 1 to-confirm, 2 exclude, 1 no-gpu")


def test_the_qualification_sheet_settles_compatibility_from_the_matrix(cli, runs, tmp_path):
    folder, catalog = tmp_path / "sheets", tmp_path / "catalog.csv"
    catalog.write_text(CATALOG, encoding="utf-8")
    for name in EXPECTED:
        sheet(folder, name)
    code, out, err = cli("qualify", folder, "--runs", runs, "--catalog", catalog, "--json")
    assert code == 0, err
    for result in json.loads(out)["sheets"]:
        criterion = next(c for c in result["criteria"] if c["name"] == "compatibility")
        status, row, matrix = EXPECTED[result["candidate"]]
        assert (criterion["status"], criterion["derived"]) == (status, True)
        assert criterion["document"] == f"run run-{result['candidate']}: {row or 'no row'}; matrix {matrix}"
    outcomes = {s["candidate"]: s["outcome"] for s in json.loads(out)["sheets"]}
    assert outcomes["amd-unsupported"] == outcomes["nvidia-driver-old"] == "excluded"


def test_a_sheets_own_entry_stands_unless_the_matrix_gives_evidence(cli, runs, tmp_path):
    folder, catalog = tmp_path / "sheets", tmp_path / "catalog.csv"
    catalog.write_text(CATALOG, encoding="utf-8")
    entered = '[criteria.compatibility]\nstatus = "acceptable"\ndocument = "provider image page"\n'
    sheet(folder, "amd-unknown", entered)  # the matrix does not list PyTorch 2.7 for ROCm 6.4.1: the sheet's document stands
    sheet(folder, "amd-unsupported", entered)  # the matrix says unsupported: a document read does not prove it runs
    sheet(folder, "nvidia-driver-old", entered + 'override_reason = "the provider installs driver 550 before delivery"\n')
    code, out, err = cli("qualify", folder, "--runs", runs, "--catalog", catalog, "--json")
    assert code == 0, err
    found = {s["candidate"]: next(c for c in s["criteria"] if c["name"] == "compatibility") for s in json.loads(out)["sheets"]}
    assert (found["amd-unknown"]["status"], found["amd-unknown"]["document"]) == ("acceptable", "provider image page")
    assert found["amd-unsupported"]["status"] == "exclude"
    assert found["amd-unsupported"]["note"].endswith("(the sheet said acceptable; to keep it, add override_reason = \"...\" saying why)")
    assert found["nvidia-driver-old"]["status"] == "acceptable"
    assert found["nvidia-driver-old"]["override_reason"].startswith("the provider installs driver 550 before delivery (evidence "
                                                                    "said exclude: driver 470.82.01 is older")


def test_the_campaign_page_shows_each_configurations_verdict(runs, tmp_path):
    build_site(runs=runs, out=tmp_path / "site", languages=["en", "id"])
    for name, (status, row, matrix) in {**EXPECTED, "on-cpu": ("no-gpu", None, None)}.items():
        page = BeautifulSoup((tmp_path / "site" / "campaigns" / name / "index.html").read_text(encoding="utf-8"), "html.parser")
        cells = [cell.get_text(" ", strip=True) for cell in page.select("#compatibility tbody tr")[0].find_all(["th", "td"])]
        assert cells[1] == {"acceptable": "acceptable", "to-confirm": "to confirm", "exclude": "exclude", "no-gpu": "no GPU"}[status]
        assert cells[3] == (row or "— (no matrix row)") or (row is None and "no matrix row" in cells[3])
        assert cells[4] == (matrix or "")
    excluded = BeautifulSoup((tmp_path / "site" / "campaigns" / "amd-unsupported" / "index.html").read_text(), "html.parser")
    assert excluded.select_one("#compatibility tbody td.bad").get_text(strip=True) == "exclude"
    quoted = excluded.select_one("#compatibility tbody q")  # AMD's footnote, in its own words, kept from translation
    assert (quoted.get_text(), quoted["lang"], quoted["translate"]) == (
        "Oracle Linux supported only on AMD Instinct MI300X (footnote mi300x)", "en", "no")
    indonesian = BeautifulSoup((tmp_path / "site" / "id" / "campaigns" / "amd-listed" / "index.html").read_text(),
                               "html.parser")
    assert indonesian.select("#compatibility tbody tr td")[0].get_text(strip=True) == "dapat diterima"


def test_a_driver_within_its_cuda_family_but_under_the_release_is_to_confirm_under_minor_version_compatibility():
    """NVIDIA: a CUDA 12.x runtime runs on any driver >= 525.60.13 with a limited feature set; below that it does not."""
    machine = environment("nvidia-driver-old")
    machine["driver_version"] = "535.104.05"  # CUDA 12.2 Update 2's driver, under 12.4 GA's 550.54.14
    said = compatibility.verdict({"environment": machine})
    assert said.status == "to-confirm" and "minor version compatibility" in said.reason and "525.60.13" in said.reason
    machine["driver_version"] = "525.60.12"
    assert compatibility.verdict({"environment": machine}).status == "exclude"
