"""The first hour on a rented GPU (#63): what the CUDA and ROCm path got wrong, each checked without a GPU.

As in tests/test_disturbed_gpu.py, the hardware is stood in for: torch.cuda by small classes, NVML by the values its calls
return, nvidia-smi and amd-smi by fake executables on PATH that print recorded outputs. Each test fails on the code as
the issue found it: PIDs from another PID namespace, a UUID in CUDA_VISIBLE_DEVICES, power capping counted as a
disturbance, CUDA's driver initialisation left untimed, TF32 set through torch's new API before the run reads it.
"""

from __future__ import annotations

import json
import os
import types

import pytest
import torch

from iteralab.machine import devices, facts, gpu_identity, gpu_watch, numerics
from iteralab.machine.disturbance import DEFAULTS, OPTIONAL, judge, rule_of
from iteralab.money import compatibility
from iteralab.run import doctor
from iteralab.run.campaign import load_campaign
from iteralab.store import records
from tests import factory
from tests.conftest import ROOT
from tests.test_devices import InitialisingCuda, with_device
from tests.test_doctor import cat
from tests.test_doctor import tools as tools  # the fixture that puts the fake tools on PATH

QUIET_HOST = {"other_cpu_share": 0.0, "waited_share": 0.0}
HOST_PID = 912345  # this runner as the driver numbers it from outside the container's PID namespace
UUID = "8f6c1b2a-3d4e-5f60-7182-93a4b5c6d7e8"
MIB = 1024**2
COMPATIBILITY = ROOT / "tests" / "fixtures" / "compatibility"


@pytest.fixture(autouse=True)
def fresh_cards():
    gpu_identity.forget()
    yield
    gpu_identity.forget()


class Card:
    """torch.cuda on a one-card machine whose driver lists host PIDs: the caching allocator's counters, and the memory
    the driver reports for each listed process (this runner's grows by what it allocates)."""

    def __init__(self, others=()):
        self.reserved, self.allocated, self.blocks = 300 * MIB, 200 * MIB, {}
        self.listed = {HOST_PID: 900 * MIB, **{pid: 4096 * MIB for pid in others}}

    def is_initialized(self):
        return True

    def memory_reserved(self, device):
        return self.reserved

    def memory_allocated(self, device):
        return self.allocated

    def caching_allocator_alloc(self, size, device):
        self.blocks[id(size)] = size
        self.reserved += size
        self.listed[HOST_PID] += size
        return id(size)

    def caching_allocator_delete(self, pointer):
        self.reserved -= self.blocks.pop(pointer)  # back to the driver only on empty_cache; the tool's figure stays

    def synchronize(self, device):
        pass

    def get_device_properties(self, index):
        return types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid=UUID, total_memory=80 * 1024**3)

    def device_count(self):
        return 1


def nvml_reading(card: Card, mask: int = 0, violation: dict | None = None):
    """What NVML answers for the card: its processes as the driver lists them (host PIDs)."""
    def values(selector, mig=False):
        assert selector == f"GPU-{UUID}"  # the card found by its UUID, never by torch's index
        return {"clocks_event_reasons": mask, "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980,
                "violation": dict(violation or {}),
                "processes": [{"pid": pid, "used_memory_bytes": used} for pid, used in card.listed.items()]}
    return values


def standing_in(monkeypatch, card: Card, hip=None):
    torch_like = types.SimpleNamespace(cuda=card, version=types.SimpleNamespace(hip=hip, cuda="13.0"))
    monkeypatch.setattr(gpu_watch, "_torch", lambda: torch_like)
    return torch_like


def test_inside_a_container_the_runner_is_recognised_by_its_memory_not_counted_as_another_tenant(monkeypatch):
    """1: the driver lists host PIDs, so os.getpid() is never among them; the runner's own context was 'another process'."""
    card = Card()
    standing_in(monkeypatch, card)
    monkeypatch.setattr(gpu_watch, "_nvml_values", nvml_reading(card))
    assert os.getpid() != HOST_PID
    start, end = gpu_watch.sample("cuda:0"), gpu_watch.sample("cuda:0")
    window = gpu_watch.figures(start, end)
    assert window["other_processes"] == [] and window["own_processes"] == [HOST_PID]
    assert "recognised by its memory" in window["own_recognised_by"]
    assert judge(QUIET_HOST, window, rule_of({})) == []  # the default rule: not disturbed by itself
    assert card.reserved == 300 * MIB  # the probe's block went back to the allocator


def test_a_real_other_tenant_is_still_named_beside_the_recognised_runner(monkeypatch):
    card = Card(others=(48213,))
    standing_in(monkeypatch, card)
    monkeypatch.setattr(gpu_watch, "_nvml_values", nvml_reading(card))
    window = gpu_watch.figures(gpu_watch.sample("cuda:0"), gpu_watch.sample("cuda:0"))
    assert [process["pid"] for process in window["other_processes"]] == [48213]
    assert [c["what"] for c in judge(QUIET_HOST, window, rule_of({}))] == ["other_gpu_processes"]


def test_a_runner_that_cannot_be_recognised_is_not_judged_disturbed_by_itself(monkeypatch):
    card = Card()
    card.caching_allocator_alloc = lambda size, device: (_ for _ in ()).throw(RuntimeError("CUDA out of memory"))
    standing_in(monkeypatch, card)
    monkeypatch.setattr(gpu_watch, "_nvml_values", nvml_reading(card))
    window = gpu_watch.figures(gpu_watch.sample("cuda:0"), gpu_watch.sample("cuda:0"))
    assert window["other_processes"] is None and f"pid {HOST_PID}" in window["processes_reason"]
    assert judge(QUIET_HOST, window, rule_of({})) == []


def test_power_capping_is_recorded_with_its_figures_but_a_thermal_slowdown_still_counts(monkeypatch):
    """1: sw_power_cap under full load is normal power management on an H100: never a default disturbance."""
    card = Card()
    standing_in(monkeypatch, card)
    capped = {"power": 0}
    monkeypatch.setattr(gpu_watch, "_nvml_values", lambda selector, mig=False: nvml_reading(card, 0x4, capped)(selector))
    start = gpu_watch.sample("cuda:0")
    capped["power"] = 7_000_000_000
    window = gpu_watch.figures(start, gpu_watch.sample("cuda:0"))
    assert window["power_capping"] == ["power", "sw_power_cap"] and window["violation_delta"] == {"power": 7_000_000_000}
    assert window["throttle_reasons"] == [] and OPTIONAL["power_capping"] is False and "power_capping" not in DEFAULTS
    assert judge(QUIET_HOST, window, rule_of({})) == []
    hot = gpu_watch.figures(start, gpu_watch.from_nvml({"clocks_event_reasons": 0x40 | 0x4, "processes": []}),
                            own_pid=HOST_PID)
    assert hot["throttle_reasons"] == ["hw_thermal_slowdown"]
    assert [c["what"] for c in judge(QUIET_HOST, hot, rule_of({}))] == ["throttling"]


def test_power_capping_in_the_rule_is_read_only_where_declared_so_older_protocols_keep_their_fingerprint(tiny_campaign):
    plain = tiny_campaign(name="plain", disturbance="throttling = true")
    assert "power_capping" not in load_campaign(plain).protocol["disturbance"]
    assert "disturbance" not in load_campaign(tiny_campaign(name="none", disturbance=None)).protocol
    declared = tiny_campaign(name="declared", disturbance="power_capping = true")
    assert load_campaign(declared).protocol["disturbance"]["power_capping"] is True


def test_a_uuid_in_cuda_visible_devices_reads_that_card_by_its_uuid(tools, monkeypatch):
    """2: torch's device 0 is host card 3 here; its index (or the old 'not read') named another tenant's card or none."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"GPU-{UUID}")
    standing_in(monkeypatch, Card())
    tools("nvidia-smi", {f"*GPU-{UUID}*clocks_event_reasons*": cat("nvidia-smi-clocks-quiet.csv"),
                         f"*GPU-{UUID}*query-compute-apps*": cat("nvidia-smi-apps-none.csv")})
    found = gpu_watch.sample("cuda:0")
    assert found["reason"] is None and found["source"] == "nvidia-smi"
    assert found["card"] == {"selector": f"GPU-{UUID}", "by": "uuid", "mig": False}


def test_rocm_visibility_variables_are_applied_in_order_and_amd_smi_is_asked_by_hip_id():
    assert gpu_identity.physical_index(0, {"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"}, hip=True) == (3, None)
    assert gpu_identity.physical_index(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == (6, None)
    assert gpu_identity.physical_index(0, {"CUDA_VISIBLE_DEVICES": "MIG-abc"})[0] is None


def test_inside_an_amd_container_the_card_is_found_by_hip_id_or_not_read(tools, tmp_path):
    """2: amd-smi lists every card of the host inside a container; device 0 is not amd-smi's card 0."""
    rocm = types.SimpleNamespace(cuda=types.SimpleNamespace(device_count=lambda: 1, get_device_properties=lambda i: 1 / 0),
                                 version=types.SimpleNamespace(hip="6.4.43483"))
    listed = [{"gpu": index, "bdf": f"0000:{index:02x}:00.0", "uuid": f"uuid-{index}", "hip_id": index} for index in range(8)]
    path = tmp_path / "amd-smi-list.json"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(listed, handle)
    tools("amd-smi", {"'list --json'": f"/bin/cat {path}"})
    found = gpu_identity.locate("cuda:0", rocm, {"ROCR_VISIBLE_DEVICES": "5"})
    assert (found["selector"], found["by"]) == ("5", "hip_id")
    gpu_identity.forget()
    for entry in listed:
        del entry["hip_id"]  # amd-smi before ROCm 6.4: no HIP id
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(listed, handle)
    unknown = gpu_identity.locate("cuda:0", rocm, {})
    assert unknown["selector"] is None and "amd-smi lists 8 GPUs and torch sees 1" in unknown["reason"]


def test_cuda_start_up_is_timed_from_the_call_that_initialises_the_driver(tiny_campaign):
    """7: torch.cuda.is_available() initialises the driver; it ran before the clock started."""
    campaign = with_device(tiny_campaign(), "cuda:0")
    events, ticks = [], iter([1_000, 9_000])

    class Cuda(InitialisingCuda):
        def is_available(self):
            events.append("is_available")
            return True

    def clock():
        events.append("timer")
        return next(ticks)

    found = devices.initialise_devices(campaign, Cuda(events), clock)
    assert events[:3] == ["timer", "is_available", "init"] and found["duration_ns"] == 8_000
    assert found["what"].startswith("torch.cuda.is_available() (which initialises the driver)")


@pytest.fixture
def numerics_restored():
    saved = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled(),
             torch.backends.fp32_precision, torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.fp32_precision)
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[0], saved[1]
    torch.use_deterministic_algorithms(saved[2])
    torch.backends.fp32_precision = saved[3]
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.fp32_precision = saved[4], saved[5]


def test_a_run_after_a_deterministic_one_records_cudnn_as_it_is(numerics_restored):
    """8: cuDNN stayed deterministic after a deterministic campaign while the next run's record said it was not."""
    devices.apply_determinism({"seed": 1, "deterministic": True})
    said = devices.applied_determinism({"seed": 1, "deterministic": False})
    assert said["cudnn_deterministic"] is torch.backends.cudnn.deterministic is False
    assert said["deterministic_algorithms"] is False


def test_tf32_set_through_the_new_api_is_read_and_recorded_not_raised(numerics_restored):
    """8: transformers' enable_tf32 sets torch.backends.fp32_precision on torch >= 2.9; the legacy read then raised."""
    before = devices.determinism({"deterministic": True})
    torch.backends.fp32_precision = "tf32"
    said = devices.determinism({"deterministic": True})
    assert said["tf32_matmul"] is True and said["tf32_cudnn"] is True and said["fp32_precision"]["generic"] == "tf32"
    assert said["numerics_fingerprint"] != before["numerics_fingerprint"]  # a flag that changes results
    assert said["float32_matmul_precision"] is None and "legacy and the fp32_precision APIs" in said["flags_reasons"][
        "float32_matmul_precision"]


def test_the_manifest_records_the_flags_it_did_not_before_and_the_allocator_setting(monkeypatch, numerics_restored):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    said = devices.determinism({"deterministic": True})
    assert said["allocator_config"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert said["bf16_reduced_precision_reduction"] is torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    assert set(said["sdp_backends"]) == {"flash", "mem_efficient", "math", "cudnn"}
    assert said["fill_uninitialized_memory"] in (True, False)
    unchanged = numerics.fingerprint({**said, "allocator_config": {"PYTORCH_CUDA_ALLOC_CONF": None}})
    assert unchanged == said["numerics_fingerprint"]  # memory, not results
    manifest = factory.manifest("flags")
    assert records.validate(json.loads(json.dumps({**manifest, "determinism": said}))) == []
    assert records.validate({**manifest, "determinism": {**said, "numerics_fingerprint": "md5:1"}}) != []


def test_rocm_is_not_asked_for_cublas_workspace_config(tiny_campaign):
    campaign = with_device(tiny_campaign(), "cuda:0")
    assert "CUBLAS_WORKSPACE_CONFIG" in devices.determinism_problem(campaign, {}, hip=False)
    assert devices.determinism_problem(campaign, {}, hip=True) is None


def test_rocm_records_miopen_as_miopen_and_a_mig_slice_as_a_partition():
    """9: the manifest called MIOpen's version cudnn_version; an H100 MIG slice was a whole H100 by its name."""
    rocm = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.4.43483"),
                                 backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(is_available=lambda: True,
                                                                                            version=lambda: 3004000)))
    found = facts.dnn_versions(rocm)
    assert (found["cudnn_version"], found["miopen_version"]) == (None, 3004000) and "MIOpen" in found["cudnn_version_reason"]
    properties = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", total_memory=40 * 1024**3, uuid="")
    mig = types.SimpleNamespace(version=types.SimpleNamespace(hip=None), cuda=types.SimpleNamespace(
        device_count=lambda: 1, get_device_properties=lambda index: properties, get_device_capability=lambda index: (9, 0)))
    (gpu,) = facts.gpu_list(mig)
    assert gpu["partition"] == {"kind": "mig", "profile": "3g.40gb", "whole_card": False, "source": "torch's device name"}
    amd = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.4"), cuda=types.SimpleNamespace(
        device_count=lambda: 1, get_device_properties=lambda index: types.SimpleNamespace(
            name="AMD Instinct MI300X", total_memory=24 * 1024**3, gcnArchName="gfx942:sramecc+:xnack-")))
    (split,) = facts.gpu_list(amd, {"compute": "CPX", "memory": "NPS4"})
    assert (split["partition"]["kind"], split["partition"]["profile"], split["partition"]["memory"]) == (
        "compute_partition", "CPX", "NPS4")


def test_the_rocm_that_ran_is_torch_version_hip_not_the_system_tools(monkeypatch):
    """9: a pip ROCm wheel bundles its own runtime: the matrix is read for it, and the verdict says so."""
    environment = json.loads((COMPATIBILITY / "amd-listed.json").read_text(encoding="utf-8"))
    environment["hip_version"] = "6.4.43483-a187df25c"  # the system's tools say 6.3.3
    environment["libraries"]["torch"] = "2.6.0+rocm6.4"
    found = compatibility.verdict({"environment": environment})
    assert "ROCm 6.4" in found.row and "6.4 is the HIP runtime this torch build bundles" in found.reason


def test_cuda_13_on_a_570_driver_is_excluded_and_on_a_580_driver_acceptable():
    """10: the table stopped at 12.8, and a release it lacks skipped the family's minimum."""
    environment = json.loads((COMPATIBILITY / "nvidia-driver-ok.json").read_text(encoding="utf-8"))
    environment.update(cuda_version="13.0", driver_version="570.86.15")  # what PyPI's torch 2.13.0 bundles, on driver 570
    found = compatibility.verdict({"environment": environment})
    assert found.status == "exclude" and found.row.startswith("cuda-drivers-2026-12-07.csv")
    environment["driver_version"] = "580.95.05"
    assert compatibility.verdict({"environment": environment}).status == "acceptable"
    environment.update(cuda_version="13.9", driver_version="570.86.15")  # a release newer than the table: the family
    found = compatibility.verdict({"environment": environment})
    assert found.status == "exclude" and "the minimum of the CUDA 13.x family" in found.reason
    environment["driver_version"] = "590.44.01"
    assert compatibility.verdict({"environment": environment}).status == "to-confirm"


def test_doctor_says_which_torch_fits_the_driver_and_checks_the_compiler_and_python(tiny_campaign, monkeypatch, tools):
    """10: doctor names torch 2.9.1 (CUDA 12.8) below the 580 family, a missing C compiler before compile = true."""
    said = compatibility.torch_advice({"driver_version": "570.86.15", "driver_source": "nvml", "cuda_version": "12.8"})
    assert "torch==2.9.1" in said and "CUDA 12.8" in said
    assert "torch==2.13.0" in compatibility.torch_advice({"driver_version": "580.65.06", "driver_source": "nvidia-smi"})
    assert compatibility.torch_advice({"driver_version": "6.10.5", "driver_source": "amd-smi", "hip_version": "6.4"}) is None
    path = tiny_campaign()
    path.write_text(path.read_text().replace("batch_size = 1\n", 'batch_size = 1\ncompile = true\n', 1), encoding="utf-8")
    data = doctor.diagnose(campaign_file=path, environ={}, which=lambda name: None)
    assert not data["ok"] and any("has compile = true, but no C++ compiler" in problem for problem in data["missing"])
    assert doctor.diagnose(campaign_file=path, environ={}, which=lambda name: "/usr/bin/" + name)["ok"]
    assert "older than 3.11" in doctor.python_problem((3, 10, 12)) and doctor.python_problem((3, 11, 0)) is None
