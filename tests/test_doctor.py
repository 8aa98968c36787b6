"""GPU facts read from the vendors' tools, and `iteralab doctor` (#44), without a GPU.

The tools are the hardware, not the code under test: each test puts a fake executable of the tool's name on PATH that
prints a recorded output from tests/fixtures/smi/, so the product runs it as a real subprocess, as on a rented machine.
"""

from __future__ import annotations

import json
import shlex
import sys
import types
from pathlib import Path

import pytest

from iteralab.cli import main
from iteralab.machine import facts as machine
from iteralab.machine import smi
from iteralab.run import doctor
from tests.conftest import ROOT
from tests.test_devices import TwoCards

FIXTURES = ROOT / "tests" / "fixtures" / "smi"
MIB = 1024**2


def cat(name: str) -> str:
    return f"/bin/cat {shlex.quote(str(FIXTURES / name))}"


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """Only the fake tools written with the returned function are on PATH; NVML is not installed."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(smi, "ROCM_INFO", tmp_path / "no-rocm" / "version")
    monkeypatch.setattr(smi, "OS_RELEASE", FIXTURES / "os-release-ubuntu-22.04")

    def write(name: str, cases: dict[str, str]) -> None:
        """CASES: a shell pattern of the arguments -> the command that answers them."""
        body = "".join(f"  {pattern}) {command} ;;\n" for pattern, command in cases.items())
        path = folder / name
        path.write_text(f'#!/bin/sh\ncase "$*" in\n{body}  *) echo "unexpected: $*" >&2; exit 2 ;;\nesac\n')
        path.chmod(0o755)

    return write


def test_nvidia_smi_gives_the_driver_and_each_gpus_name_architecture_and_memory(tools):
    tools("nvidia-smi", {"*compute_cap*": cat("nvidia-smi-query-h100x2.csv")})
    facts = smi.nvidia_facts()
    assert (facts["driver_version"], facts["driver_source"], facts["driver_version_reason"]) == (
        "550.54.15", "nvidia-smi", None)
    assert facts["driver_gpus"] == [
        {"index": index, "name": "NVIDIA H100 80GB HBM3", "driver_version": "550.54.15",
         "total_memory_bytes": 81559 * MIB, "architecture": "sm_90"} for index in (0, 1)]


def test_an_older_nvidia_smi_without_compute_cap_still_gives_the_driver(tools):
    tools("nvidia-smi", {"*compute_cap*": f"{cat('nvidia-smi-old-driver-stderr.txt')}; exit 2",
                         "*memory.total*": cat("nvidia-smi-query-v100-no-compute-cap.csv")})
    facts = smi.nvidia_facts()
    assert (facts["driver_version"], facts["driver_source"]) == ("470.199.02", "nvidia-smi")
    assert facts["driver_gpus"][0]["architecture"] is None
    assert facts["driver_gpus"][0]["total_memory_bytes"] == 16160 * MIB


def test_nvml_is_read_first_when_nvidia_ml_py_is_installed(tools, monkeypatch):
    nvml = types.SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                                 nvmlSystemGetDriverVersion=lambda: b"570.86.15")
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    facts = smi.nvidia_facts()  # nvidia-smi is missing: NVML alone answers
    assert (facts["driver_version"], facts["driver_source"], facts["driver_version_reason"]) == ("570.86.15", "nvml", None)


def test_amd_smi_gives_driver_rocm_version_and_each_gpus_gfx_architecture(tools):
    tools("amd-smi", {"version": cat("amd-smi-version-mi300x.txt"), "'static --json'": cat("amd-smi-static-mi300x.json")})
    facts = smi.amd_facts()
    assert (facts["driver_version"], facts["driver_source"]) == ("6.8.5", "amd-smi")
    assert (facts["rocm_version"], facts["rocm_version_source"], facts["rocm_version_reason"]) == ("6.2.4", "amd-smi", None)
    assert [(gpu["index"], gpu["name"], gpu["architecture"], gpu["total_memory_bytes"]) for gpu in facts["driver_gpus"]] == [
        (index, "AMD Instinct MI300X", "gfx942", 196592 * MIB) for index in (0, 1)]


def test_an_older_amd_smi_gives_the_driver_from_its_static_list(tools):
    tools("amd-smi", {"version": cat("amd-smi-version-no-driver.txt"), "'static --json'": cat("amd-smi-static-older.json")})
    facts = smi.amd_facts()
    assert (facts["driver_version"], facts["driver_source"], facts["rocm_version"]) == ("6.3.6", "amd-smi", "6.1.0")
    assert (facts["driver_gpus"][0]["architecture"], facts["driver_gpus"][0]["total_memory_bytes"]) == ("gfx90a", 65520 * MIB)


def test_without_amd_smi_rocm_smi_gives_the_driver_and_opt_rocm_the_rocm_version(tools, monkeypatch):
    tools("rocm-smi", {"'--showdriverversion --json'": cat("rocm-smi-driver.json")})
    monkeypatch.setattr(smi, "ROCM_INFO", FIXTURES / "rocm-info-version")
    facts = smi.amd_facts()
    assert (facts["driver_version"], facts["driver_source"]) == ("6.7.0", "rocm-smi")
    assert (facts["rocm_version"], facts["rocm_version_source"]) == ("6.2.4-120", str(FIXTURES / "rocm-info-version"))


def test_a_machine_without_any_tool_records_each_reason(tools):
    facts = machine.machine_facts()
    assert facts["driver_version"] is None and facts["driver_source"] is None
    for reason in ("nvidia-ml-py is not installed", "nvidia-smi is not installed", "amd-smi is not installed",
                   "rocm-smi is not installed"):
        assert reason in facts["driver_version_reason"]
    assert facts["rocm_version"] is None and "no ROCm user space there" in facts["rocm_version_reason"]
    assert facts["os"] == {"name": "Ubuntu", "version": "22.04", "reason": None}


@pytest.mark.parametrize(("answer", "reason"), [
    ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
     "failed (exit status 9): NVIDIA-SMI has failed because it could not communicate"),
    ("echo '<html>not a table</html>'", "nvidia-smi printed something unreadable: '<html>not a table</html>'"),
    ("/bin/sleep 5", "did not answer within 0.5 s"),
])
def test_a_failing_odd_or_hanging_nvidia_smi_gives_a_reason_not_a_traceback(tools, monkeypatch, answer, reason):
    monkeypatch.setattr(smi, "TIMEOUT_S", 0.5)
    tools("nvidia-smi", {"*": answer})
    facts = smi.nvidia_facts()
    assert facts["driver_version"] is None and reason in facts["driver_version_reason"]


def test_odd_amd_outputs_give_reasons_not_tracebacks(tools):
    tools("amd-smi", {"version": "echo 'AMDSMI Tool: 24.6.3'", "'static --json'": "echo '{not json'"})
    tools("rocm-smi", {"*": "echo '[1, 2]'"})
    facts = smi.amd_facts()
    assert facts["driver_version"] is None
    for reason in ("amd-smi version names no amdgpu version", "amd-smi static --json printed something unreadable",
                   "rocm-smi --showdriverversion --json printed something unreadable"):
        assert reason in facts["driver_version_reason"]


def test_os_release_and_its_reason():
    assert smi.os_release(FIXTURES / "os-release-ubuntu-22.04") == {"name": "Ubuntu", "version": "22.04", "reason": None}
    assert "cannot be read" in smi.os_release(FIXTURES / "absent")["reason"]


class FakeProperties:
    def __init__(self, name, memory, gcn=None):
        self.name, self.total_memory = name, memory
        if gcn:
            self.gcnArchName = gcn


def fake_torch(hip: str | None, properties: FakeProperties, capability=(9, 0)):
    """Stands in for torch on a one-GPU machine: the hardware, not the code under test."""
    cuda = types.SimpleNamespace(device_count=lambda: 1, get_device_properties=lambda index: properties,
                                 get_device_capability=lambda index: capability)
    return types.SimpleNamespace(version=types.SimpleNamespace(hip=hip), cuda=cuda)


def test_each_gpu_torch_sees_records_its_architecture():
    cuda = machine.gpu_list(fake_torch(None, FakeProperties("NVIDIA H100 80GB HBM3", 85520809984)))
    assert cuda == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_memory_bytes": 85520809984,
                     "architecture": "sm_90", "architecture_reason": None}]
    rocm = machine.gpu_list(fake_torch("6.2.41133", FakeProperties("AMD Instinct MI300X", 206141652992,
                                                                   "gfx942:sramecc+:xnack-")))
    assert (rocm[0]["architecture"], rocm[0]["gcn_arch_name"]) == ("gfx942", "gfx942:sramecc+:xnack-")


def test_a_rocm_torch_reads_amds_tools(tools, monkeypatch):
    tools("amd-smi", {"version": cat("amd-smi-version-mi300x.txt"), "'static --json'": cat("amd-smi-static-mi300x.json")})
    tools("nvidia-smi", {"*": "exit 3"})  # never asked on a ROCm build
    assert machine.gpu_stack(hip=True)["driver_source"] == "amd-smi"
    assert machine.gpu_stack(hip=False)["driver_source"] == "amd-smi"  # a CPU build on an AMD machine: still read


def test_doctor_on_a_machine_without_gpu_says_so_in_one_screen_and_exits_0(tools, capsys, tmp_path):
    assert main(["doctor", "--runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "GPUs:        none: no GPU that torch can use here" in out and "Nothing missing." in out
    assert "nvidia-smi is not installed" in out and "Ubuntu 22.04" in out and "free under" in out
    assert len(out.splitlines()) <= 24
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["environment"]["gpus"] is None and data["free_disk_bytes"] > 0
    # The compatibility matrices' verdict, as check and the qualification sheet give it: none to give without a GPU.
    assert data["compatibility"]["status"] == "no-gpu" and "Matrix:      no GPU: " in out


def test_doctor_gives_the_matrix_verdict_of_the_stack_it_reads(tools, capsys, monkeypatch):
    """A machine whose driver is too old for its CUDA family is named before any model loads (#44)."""
    from iteralab.run import doctor

    old = json.loads((Path(__file__).parent / "fixtures" / "compatibility" / "nvidia-driver-old.json").read_text())
    monkeypatch.setattr(doctor, "machine_facts", lambda: old)
    data = doctor.diagnose()
    assert data["compatibility"]["status"] == "exclude" and "470.82.01" in data["compatibility_said"]
    assert "Matrix:      exclude: driver 470.82.01 is older" in doctor.describe(data)


def with_device(path: Path, device: str) -> Path:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("batch_size = 1\n", f'batch_size = 1\ndevice = "{device}"\n', 1), encoding="utf-8")
    return path


def test_doctor_names_a_missing_device_and_exits_1(tools, tiny_campaign, capsys):
    campaign = with_device(tiny_campaign(), "cuda:0")
    assert main(["doctor", str(campaign)]) == 1
    out = capsys.readouterr().out
    assert "b1: cuda:0 MISSING" in out and "b4: cpu found" in out
    assert "Missing:     " in out and "variant b1 asks for cuda:0, but torch sees no CUDA device here" in out
    assert main(["doctor", str(campaign), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["campaign"]["devices"][0] == {
        "variant": "b1", "device": "cuda:0", "found": False, "problem": data["missing"][0]}


def test_doctor_finds_the_device_there_and_checks_determinism(tools, tiny_campaign):
    campaign = with_device(tiny_campaign(), "cuda:1")
    found = doctor.diagnose(campaign_file=campaign, cuda=TwoCards(), environ={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    assert found["ok"] and [finding["found"] for finding in found["campaign"]["devices"]] == [True, True, True]
    three = doctor.diagnose(campaign_file=with_device(tiny_campaign(), "cuda:3"), cuda=TwoCards(), environ={})
    assert "this machine has 2 CUDA device(s): cuda:0 (NVIDIA B200), cuda:1 (NVIDIA B200)" in three["missing"][0]
    assert three["campaign"]["deterministic"] and "CUBLAS_WORKSPACE_CONFIG is not set" in three["missing"][1]
