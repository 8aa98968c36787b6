"""A GPU that throttles, or another process on it, marks the trial disturbed, naming the reason (#49), without a GPU.

As in tests/test_doctor.py, the vendor's tool is the hardware: a fake executable of its name on PATH prints a recorded
output (tests/fixtures/smi/), the first call the output before the window, later calls the one after it, and the product
runs it as a real subprocess. NVML's answers are recorded as the values its calls returned.
"""

from __future__ import annotations

import json
import os
import time

from iteralab.machine import gpu_watch
from iteralab.machine.disturbance import judge, rule_of
from iteralab.machine.interference import Watch, busy_warnings
from iteralab.run import doctor
from iteralab.store import records
from tests.test_doctor import FIXTURES, cat
from tests.test_doctor import tools as tools  # the fixture that puts the fake tools on PATH

QUIET_HOST = {"other_cpu_share": 0.0, "waited_share": 0.0}
# Around a real window the host's figures are this machine's (other tests run beside these): the GPU tests set the rule's
# CPU share beyond reach, so only the GPU's figures can cross it.
GPU_ONLY = {"disturbance": {**rule_of({}), "other_cpu_share": 1000.0}}


def before_then_after(tmp_path, before: str, after: str) -> str:
    """A shell command printing BEFORE the first time it runs and AFTER from then on."""
    flag = tmp_path / f"ran-{before}"
    return f'if [ -e {flag} ]; then {cat(after)}; else : > {flag}; {cat(before)}; fi'


def test_nvidia_smi_thermal_slowdown_during_the_window_marks_the_trial_disturbed_naming_it(tools, tmp_path):
    tools("nvidia-smi", {"*clocks_event_reasons*": before_then_after(tmp_path, "nvidia-smi-clocks-quiet.csv",
                                                                     "nvidia-smi-clocks-thermal.csv"),
                         "*query-compute-apps*": cat("nvidia-smi-apps-none.csv")})
    watch = Watch("cuda:0", GPU_ONLY)
    with watch.window():
        time.sleep(0.05)
    record = watch.record
    gpu = record["gpu"]
    assert gpu["source"] == "nvidia-smi" and gpu["reason"] is None
    assert gpu["throttle_reasons"] == ["hw_thermal_slowdown", "sw_thermal_slowdown"], gpu
    assert (gpu["sm_clock_mhz_start"], gpu["sm_clock_mhz_end"], gpu["max_sm_clock_mhz"]) == (1980, 1395, 1980)
    assert gpu["other_processes"] == []  # no row: no compute process on the card
    assert record["disturbed"] is True
    assert [c["what"] for c in record["crossed"]] == ["throttling"]
    assert record["crossed"][0]["text"] == ("the GPU throttled its clocks during the window: hw_thermal_slowdown, "
                                            "sw_thermal_slowdown")
    # The trial record holding it is valid.
    trial = records.make_record("trial", campaign="c", run_id="r", interference=record)
    assert json.loads(json.dumps(trial))["interference"]["disturbed"] is True


def test_another_process_on_the_gpu_is_named_and_can_be_allowed_by_the_protocol(tools, tmp_path):
    tools("nvidia-smi", {"*clocks_event_reasons*": cat("nvidia-smi-clocks-quiet.csv"),
                         "*query-compute-apps*": cat("nvidia-smi-apps-other.csv")})
    watch = Watch("cuda:0", GPU_ONLY)
    with watch.window():
        pass
    assert watch.record["gpu"]["other_processes"] == [{"pid": 48213, "used_memory_bytes": 10240 * 1024**2}]
    assert [c["text"] for c in watch.record["crossed"]] == [
        "other processes computed on the trial's GPU during the window (pid 48213)"]
    allowed = Watch("cuda:0", {"disturbance": {**GPU_ONLY["disturbance"], "other_gpu_processes": False}})
    with allowed.window():
        pass
    assert allowed.record["disturbed"] is False and allowed.record["rule_source"] == "the campaign's [protocol.disturbance]"


def test_nvml_power_violation_time_during_the_window_is_power_capping_not_a_default_disturbance(tmp_path):
    start, end = (gpu_watch.from_nvml(json.loads((FIXTURES / f"nvml-power-{which}.json").read_text()))
                  for which in ("start", "end"))
    figures = gpu_watch.figures(start, end, own_pid=1)
    # gpu_idle at the start is not a disturbance; the power cap at the end and the violation time between are power
    # capping, recorded with its figures apart from the throttle reasons: by default not a disturbance (#63).
    assert figures["reasons_start"] == ["gpu_idle"] and figures["throttle_reasons"] == []
    assert figures["power_capping"] == ["power", "sw_power_cap"] and figures["violation_delta"]["power"] > 0
    crossed = judge(QUIET_HOST, figures, rule_of({}))
    assert [c["what"] for c in crossed] == ["other_gpu_processes"]
    counted = judge(QUIET_HOST, figures, {**rule_of({}), "power_capping": True})
    assert [c["what"] for c in counted] == ["power_capping", "other_gpu_processes"]
    assert "power, sw_power_cap" in counted[0]["text"]
    assert judge(QUIET_HOST, figures, {**rule_of({}), "throttling": False, "other_gpu_processes": False}) == []


def test_amd_smi_package_power_tracking_is_recorded_and_counts_where_the_protocol_says_so(tools, tmp_path):
    tools("amd-smi", {"metric*": before_then_after(tmp_path, "amd-smi-metric-quiet.json", "amd-smi-metric-ppt.json"),
                      "process*": cat("amd-smi-process-other.json")})
    start, end = gpu_watch._amd(0), gpu_watch._amd(0)
    assert (start["reasons"], end["reasons"]) == ([], ["ppt"])
    assert (start["sm_clock_mhz"], end["sm_clock_mhz"], end["max_sm_clock_mhz"]) == (2100, 1650, 2100)
    figures = gpu_watch.figures(start, end, own_pid=1)
    assert figures["throttle_reasons"] == [] and figures["power_capping"] == ["ppt"]  # AMD's power cap: recorded (#63)
    assert figures["other_processes"] == [{"pid": 51877, "used_memory_bytes": 20483 * 1024**2}]
    crossed = judge(QUIET_HOST, figures, {**rule_of({}), "power_capping": True})
    assert [c["text"] for c in crossed] == ["the GPU held its clocks under its power limit during the window: ppt",
                                            "other processes computed on the trial's GPU during the window (pid 51877)"]


def test_a_quiet_amd_window_is_not_disturbed_and_a_missing_tool_is_a_reason(tools, tmp_path):
    tools("amd-smi", {"metric*": cat("amd-smi-metric-quiet.json"), "process*": "true"})
    quiet = gpu_watch._amd(0)
    assert judge(QUIET_HOST, gpu_watch.figures(quiet, quiet, own_pid=1), rule_of({})) == []
    watch = Watch("cuda:0", GPU_ONLY)  # no nvidia-smi on PATH, no NVML: unread, with the reason; never "no throttling"
    with watch.window():
        pass
    gpu = watch.record["gpu"]
    assert gpu["throttle_reasons"] is None and gpu["other_processes"] is None
    assert "nvidia-ml-py is not installed" in gpu["reason"] and "nvidia-smi is not installed" in gpu["reason"]
    assert watch.record["disturbed"] is False


def test_doctor_and_run_warn_before_the_first_trial_when_the_machine_is_already_busy(tools, monkeypatch):
    tools("nvidia-smi", {"*clocks_event_reasons*": cat("nvidia-smi-clocks-quiet.csv"),
                         "*query-compute-apps*": cat("nvidia-smi-apps-other.csv")})
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 3.0, 1.0, 1.0))  # the machine's load, as the kernel says it
    said = []
    warnings = busy_warnings(["cpu", "cuda:0"], said.append)
    assert said == warnings and len(warnings) == 2
    assert warnings[0].startswith(f"the machine is already busy: its load average is {cores + 3.0} for {cores} usable")
    assert warnings[1] == ("cuda:0 already runs other processes (pid 48213): trials on it may be marked disturbed; "
                           "stop them or choose another GPU")
    assert doctor.describe(doctor.diagnose()).count("Warning:     the machine is already busy") == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert busy_warnings(["cpu"]) == []
