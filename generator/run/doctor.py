"""What the runner will record on this machine, and the campaign's devices found or missing, before any model loads.

On a freshly rented machine `iteralab doctor` answers in seconds: a wrong image (a CPU build of torch, a missing driver,
fewer cards than the campaign names) is found in the first minute, not after an hour of paid time.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from iteralab.core.paths import DEFAULT_RUNS
from iteralab.machine.devices import determinism_problem, device_findings
from iteralab.machine.facts import machine_facts
from iteralab.machine.interference import busy_warnings
from iteralab.money import compatibility
from iteralab.run.campaign import load_campaign
from iteralab.workloads import WORKLOADS


def _free_disk(runs_dir: Path) -> tuple[int | None, str | None]:
    folder = runs_dir.resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free, None
    except OSError as error:
        return None, f"{folder} cannot be measured ({error.strerror or error})"


def _warnings(environment: dict) -> list[str]:
    """What is there but not usable: GPUs the driver lists that torch does not see."""
    listed, seen = environment.get("driver_gpus") or [], environment.get("gpus") or []
    if listed and not seen:
        torch = (environment.get("libraries") or {}).get("torch")
        return [f"the driver ({environment.get('driver_source')}) lists {len(listed)} GPU(s) but torch {torch} sees none: "
                "install the torch build for this machine's CUDA or ROCm before running"]
    return []


def _devices(environment: dict) -> list[str]:
    """The GPUs torch sees here, as devices: doctor warns when another process already runs on one (#49)."""
    return [f"cuda:{gpu['index']}" for gpu in environment.get("gpus") or []]


def _campaign(campaign_file: Path | str, cuda, environ, which) -> dict:
    campaign = load_campaign(campaign_file)
    return {"file": str(campaign_file), "name": campaign.name, "devices": device_findings(campaign, cuda),
            "deterministic": campaign.protocol["deterministic"],
            "determinism_problem": determinism_problem(campaign, environ),
            "compiler_problems": _compilers(campaign, environ, which) + _tools(campaign)}


def _tools(campaign) -> list[str]:
    """A kind of work that needs a tool of its own (a serving campaign's load generator, #64) says whether it is there."""
    check = getattr(WORKLOADS[campaign.kind], "unusable", None)
    said = check(campaign.protocol) if check else None
    return [f"{campaign.source}: {said}"] if said else []


def _compilers(campaign, environ, which) -> list[str]:
    """A compile = true variant needs a compiler: Triton builds its launchers with a C compiler on a GPU, inductor's CPU
    kernels need a C++ one (#63)."""
    problems = []
    for variant in (variant for variant in campaign.variants if variant.compile):
        gpu = variant.device.startswith("cuda")
        names = (environ.get("CC"), "cc", "gcc", "clang") if gpu else (environ.get("CXX"), "c++", "g++", "clang++")
        if not any(name and which(name) for name in names):
            kind, tools = ("C", "cc, gcc or clang") if gpu else ("C++", "c++, g++ or clang++")
            problems.append(f"{campaign.source}: variant {variant.name} has compile = true, but no {kind} compiler ({tools}) "
                            f"is on PATH: torch.compile needs one to build its kernels on {variant.device}; install one "
                            "(apt-get install -y build-essential) or set compile = false")
    return problems


def python_problem(version=None) -> str | None:
    """Why this Python cannot run iteralab (3.11 or newer), or None."""
    version = version or sys.version_info
    if tuple(version[:2]) >= (3, 11):
        return None
    return (f"Python {version[0]}.{version[1]} is older than 3.11, iteralab's minimum: install python3.11 (on Ubuntu 22.04: "
            "apt-get install -y python3.11 python3.11-venv) and make the venv with it")


def diagnose(*, campaign_file: Path | str | None = None, runs_dir: Path | str = DEFAULT_RUNS, cuda=None,
             environ=None, which=shutil.which) -> dict:
    """Describe this machine as the runner records it, and check CAMPAIGN_FILE's devices and determinism against it.

    Nothing is loaded, timed or written. `missing` lists each device the campaign names that this machine lacks and a
    determinism setting that cannot hold; `ok` is true when it is empty. CUDA and ENVIRON stand in for tests.
    """
    environment = machine_facts()
    free, free_reason = _free_disk(Path(runs_dir))
    campaign = _campaign(campaign_file, cuda, os.environ if environ is None else environ, which) if campaign_file is not None else None
    missing = [problem for problem in [python_problem()] if problem]
    if campaign:
        missing += [finding["problem"] for finding in campaign["devices"] if finding["problem"]]
        missing += [campaign["determinism_problem"]] if campaign["determinism_problem"] else []
        missing += campaign["compiler_problems"]
    # The same verdict check, the qualification sheet and the campaign page give, before anything is paid for.
    matrix = compatibility.verdict({"environment": environment})
    return {"environment": environment, "compatibility": matrix.data(), "compatibility_said": str(matrix.said),
            "runs_dir": str(runs_dir), "free_disk_bytes": free,
            "free_disk_reason": free_reason, "cublas_workspace_config": (os.environ if environ is None else environ).get(
                "CUBLAS_WORKSPACE_CONFIG"), "campaign": campaign, "warnings": _warnings(environment) + busy_warnings(_devices(environment)),
            "missing": missing, "ok": not missing, "torch_advice": compatibility.torch_advice(environment)}


def _gib(size: int | None) -> str:
    return f"{size / 1024**3:.1f} GiB" if size is not None else "unknown"


def _value(value, reason, suffix: str = "") -> str:
    return f"{value}{suffix}" if value is not None else f"none ({reason})"


def _gpu_lines(environment: dict) -> list[str]:
    if not environment.get("gpus"):
        lines = [f"GPUs:        none: no GPU that torch can use here ({environment.get('gpus_reason')})"]
        lines += [f"             the driver lists {gpu.get('index')}: {gpu.get('name')} · "
                  f"{gpu.get('architecture') or 'architecture unknown'} · {_gib(gpu.get('total_memory_bytes'))}"
                  for gpu in environment.get("driver_gpus") or []]
        return lines
    return [f"{'GPUs:' if position == 0 else '':<13}cuda:{gpu['index']} {gpu['name']} · "
            f"{gpu.get('architecture') or 'architecture unknown'} · {_gib(gpu.get('total_memory_bytes'))}"
            for position, gpu in enumerate(environment["gpus"])]


def _machine_lines(data: dict) -> list[str]:
    env = data["environment"]
    libraries, cpu, threads = env.get("libraries") or {}, env.get("cpu") or {}, env.get("threads") or {}
    system = env.get("os") or {}
    source = f" (read by {env['driver_source']})" if env.get("driver_source") else ""
    rocm, free = env.get("rocm_version"), data["free_disk_bytes"]
    rocm_source = f" ({env.get('rocm_version_source')})" if rocm else ""
    return [
        *_gpu_lines(env),
        f"Driver:      {_value(env.get('driver_version'), env.get('driver_version_reason'), source)}",
        f"CUDA:        {_value(env.get('cuda_version'), env.get('cuda_version_reason'))} · cuDNN "
        f"{_value(env.get('cudnn_version'), env.get('cudnn_version_reason'))}",
        f"ROCm/HIP:    {_value(env.get('hip_version'), env.get('hip_version_reason'))} · ROCm user space "
        f"{_value(rocm, env.get('rocm_version_reason'), rocm_source)}",
        f"Software:    torch {libraries.get('torch')} · transformers {libraries.get('transformers')} · "
        f"Python {env.get('python')}",
        f"OS:          {_value(system.get('name'), system.get('reason'))} {system.get('version') or ''}".rstrip(),
        f"CPU:         {cpu.get('model')} · {cpu.get('usable_cores')} usable of {cpu.get('logical_cores')} logical "
        f"cores · torch threads {threads.get('torch_intra_op')} intra-op, {threads.get('torch_inter_op')} inter-op · "
        f"{_gib(env.get('ram_bytes'))} RAM",
        f"Disk:        {_value(_gib(free) if free is not None else None, data['free_disk_reason'], ' free')} under "
        f"{data['runs_dir']}",
    ]


def describe(data: dict) -> str:
    """One screen: the machine as the runner will record it, the campaign's devices, what is missing."""
    lines = ["What the runner will record on this machine (no model loaded, nothing written):", *_machine_lines(data)]
    lines.append(f"Matrix:      {data['compatibility_said']}")
    if data.get("torch_advice"):
        lines.append(f"Torch:       {data['torch_advice']}")
    lines += [f"Warning:     {warning}" for warning in data["warnings"]]
    campaign = data["campaign"]
    if campaign:
        lines.append(f"Campaign:    {campaign['name']} ({campaign['file']})")
        lines += [f"  {finding['variant']}: {finding['device']} "
                  f"{'found' if finding['found'] else 'MISSING'}" for finding in campaign["devices"]]
        requested = "requested" if campaign["deterministic"] else "not requested"
        workspace = data["cublas_workspace_config"] or "not set"
        lines.append(f"Determinism: {requested}; CUBLAS_WORKSPACE_CONFIG {workspace}; "
                     f"{'cannot hold, see below' if campaign['determinism_problem'] else 'no problem found'}")
    if data["missing"]:
        lines += [f"Missing:     {problem}" for problem in data["missing"]]
    else:
        lines.append("Nothing missing." + ("" if campaign else " Give the campaign file to check its devices too."))
    return "\n".join(lines)
