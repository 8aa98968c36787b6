"""Devices and determinism checked before any model loads (#44): what a rented GPU machine lacks is refused first."""

from __future__ import annotations

import weakref

import pytest
from bs4 import BeautifulSoup

from iteralab.core.errors import UserError
from iteralab.machine import devices
from iteralab.run import runner
from iteralab.run.campaign import load_campaign
from iteralab.workloads import classify


class TwoCards:
    """Stands in for torch.cuda on a machine with two B200s: the hardware, not the code under test."""

    def is_available(self):
        return True

    def device_count(self):
        return 2

    def get_device_name(self, index):
        return "NVIDIA B200"


class NoCard(TwoCards):
    def is_available(self):
        return False

    def device_count(self):
        return 0


def with_device(path, device: str):
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('batch_size = 1\n', f'batch_size = 1\ndevice = "{device}"\n', 1), encoding="utf-8")
    return load_campaign(path)


def test_a_device_the_machine_lacks_is_refused_with_the_devices_there_are(tiny_campaign):
    campaign = with_device(tiny_campaign(), "cuda:3")
    with pytest.raises(UserError) as caught:
        devices.check_devices(campaign, TwoCards())
    assert ("variant b1 asks for cuda:3, but this machine has 2 CUDA device(s): cuda:0 (NVIDIA B200), cuda:1 (NVIDIA "
            "B200); set device to one of them (nothing was timed)") in str(caught.value)
    devices.check_devices(with_device(tiny_campaign(), "cuda:1"), TwoCards())  # there: no refusal
    with pytest.raises(UserError, match="torch sees no CUDA device here"):
        devices.check_devices(with_device(tiny_campaign(), "cuda"), NoCard())


def test_deterministic_on_cuda_needs_the_cublas_workspace_and_says_what_to_set(tiny_campaign):
    campaign = with_device(tiny_campaign(), "cuda:0")
    with pytest.raises(UserError) as caught:
        devices.check_determinism(campaign, {})
    assert "CUBLAS_WORKSPACE_CONFIG is not set" in str(caught.value) and "CUBLAS_WORKSPACE_CONFIG=:4096:8" in str(caught.value)
    devices.check_determinism(campaign, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    devices.check_determinism(load_campaign(tiny_campaign()), {})  # a CPU campaign needs no cuBLAS setting


def test_on_this_machine_a_cuda_variant_is_refused_before_any_model_loads(tiny_campaign, tmp_path, cli, monkeypatch):
    loads = []
    monkeypatch.setattr(classify, "check_model", lambda *args: loads.append(args))
    path = tiny_campaign()
    with_device(path, "cuda:0")
    code, _, err = cli("run", path, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 1 and "asks for cuda:0, but torch sees no CUDA device here" in err and loads == []


@pytest.mark.slow
def test_the_manifest_says_determinism_as_it_is_and_the_model_is_gone_before_memory_is_released(
        tiny_campaign, tmp_path, monkeypatch):
    """Regression for #44: release() emptied the CUDA cache while the trial's model was still referenced."""
    loaded, alive_at_release = [], []
    real_load, real_release = classify.load_model, runner.release

    def load(model_dir, variant, protocol):
        tokenizer, model = real_load(model_dir, variant, protocol)
        loaded.append(weakref.ref(model))
        return tokenizer, model

    def release(device):
        alive_at_release.append(loaded[-1]() is not None)
        real_release(device)

    monkeypatch.setattr(classify, "load_model", load)
    monkeypatch.setattr(runner, "release", release)
    result = runner.run_campaign(campaign_file=tiny_campaign(repetitions=1, batch_sizes=(1, 4)), runs_dir=tmp_path / "runs",
                                 quiet=True, stages=False)
    assert [t["status"] for t in result.trials] == ["ok", "ok"] and alive_at_release == [False, False]
    said = result.manifest["determinism"]
    assert said["requested"] is True and said["guaranteed"] is False and "warn_only=True" in said["how"]
    assert said["float32_matmul_precision"] in ("highest", "high", "medium")


def test_a_run_freezes_the_heap_for_its_trials_and_thaws_only_what_it_froze(tiny_campaign, tmp_path, monkeypatch):
    """Regression for #50: a run thawed a heap its caller had frozen (the test workers freeze theirs after each test), so
    every later collection walked torch's and transformers' objects again."""
    import gc

    frozen_at_release, real_release = [], runner.release
    monkeypatch.setattr(runner, "release", lambda device: (frozen_at_release.append(gc.get_freeze_count() > 0),
                                                            real_release(device)))
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1,))
    gc.freeze()
    runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "frozen", quiet=True, stages=False)
    assert gc.get_freeze_count() > 0  # the caller's frozen heap stays frozen
    gc.unfreeze()
    runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "thawed", quiet=True, stages=False)
    assert gc.get_freeze_count() == 0  # what the run froze itself is thawed at its end
    assert frozen_at_release == [True, True]  # each trial ran and was released over a frozen heap


def test_the_campaign_page_says_determinism_is_requested_not_guaranteed(tmp_path, cli):
    from iteralab.store import records
    from tests import factory

    runs = tmp_path / "runs"
    manifest = factory.manifest("plain")
    records.append(runs, manifest)
    records.append(runs, factory.trial(manifest))
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "plain" / "index.html").read_text(), "html.parser")
    seed = next(dt for dt in page.select("dt") if dt.get_text() == "Seed").find_next_sibling("dd").get_text()
    assert "deterministic algorithms requested" in seed and "not guaranteed" in seed and " on" not in seed


class RecordingCuda:
    """Stands in for torch.cuda: every call the clock makes to the device is written down in order."""

    OutOfMemoryError = MemoryError

    def __init__(self, events):
        self.events = events

    def synchronize(self, device):
        self.events.append(f"synchronize {device}")

    def reset_peak_memory_stats(self, device):
        self.events.append("reset peaks")

    def max_memory_allocated(self, device):
        self.events.append("read allocated")
        return 100

    def max_memory_reserved(self, device):
        self.events.append("read reserved")
        return 200


def test_a_cuda_phase_synchronises_before_each_timer_read_and_resets_then_reads_its_peaks(monkeypatch):
    """#44: synchronise → timer → work → synchronise → timer, the peaks reset before and read after, on the phase's device."""
    from types import SimpleNamespace

    from iteralab.machine import phases as trial

    events = []
    monkeypatch.setattr(trial, "_torch", lambda: SimpleNamespace(cuda=RecordingCuda(events)))
    clock_values = iter([1_000, 5_000])

    def timer():
        events.append("timer")
        return next(clock_values)

    monkeypatch.setattr(trial.time, "perf_counter_ns", timer)
    clock = trial.PhaseClock("cuda:1")
    with clock.phase("measured_window"):
        events.append("work")
    assert events == ["synchronize cuda:1", "reset peaks", "timer", "work", "synchronize cuda:1", "timer",
                      "read allocated", "read reserved"]
    measured = clock.phases["measured_window"]
    assert (measured["duration_ns"], measured["gpu_peak_allocated_bytes"], measured["gpu_peak_reserved_bytes"]) == (4_000, 100, 200)


class InitialisingCuda:
    """Stands in for torch.cuda on a two-GPU machine: records what initialising it does, in order."""

    def __init__(self, events, initialised=False):
        self.events, self.initialised = events, initialised

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialised

    def init(self):
        self.events.append("init")

    def device_count(self):
        return 2

    def synchronize(self, device):
        self.events.append(f"synchronize {device}")


def test_cuda_initialisation_is_timed_once_on_the_devices_the_variants_use(tiny_campaign):
    """#44: CUDA's initialisation was paid while the manifest read the GPUs, outside every timed phase."""
    path = tiny_campaign(batch_sizes=(1, 4))
    path.write_text(path.read_text().replace('batch_size = 4\n', 'batch_size = 4\ndevice = "cuda:1"\n')
                    .replace('batch_size = 1\n', 'batch_size = 1\ndevice = "cuda"\n'))
    campaign = load_campaign(path)
    events, ticks = [], iter([10_000, 250_000])

    def clock():
        events.append("timer")
        return next(ticks)

    found = devices.initialise_devices(campaign, InitialisingCuda(events), clock)
    assert events == ["timer", "init", "synchronize cuda:0", "synchronize cuda:1", "timer"]
    assert (found["duration_ns"], found["devices"]) == (240_000, ["cuda:0", "cuda:1"]) and "once per process" in found["what"]
    again = devices.initialise_devices(campaign, InitialisingCuda([], initialised=True), clock)
    assert again["duration_ns"] is None and "initialised earlier in this process" in again["reason"]
    on_cpu = devices.initialise_devices(load_campaign(tiny_campaign()), InitialisingCuda([]), clock)
    assert on_cpu == {"duration_ns": None, "devices": [], "reason": "no variant runs on a GPU"}


@pytest.mark.slow
def test_a_cpu_run_says_why_no_device_initialisation_was_timed(tiny_campaign, tmp_path):
    result = runner.run_campaign(campaign_file=tiny_campaign(repetitions=1, batch_sizes=(1,)), runs_dir=tmp_path / "runs",
                                 quiet=True, stages=False)
    assert result.manifest["device_initialisation"] == {"duration_ns": None, "devices": [], "reason": "no variant runs on a GPU"}
