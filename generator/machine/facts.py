"""What the manifest says about the machine, software and model files; unknowns carry a reason."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import iteralab
from iteralab.core.errors import UserError
from iteralab.core.files import sha256_file
from iteralab.machine import partition, smi
from iteralab.money.sizing import safetensors_parameters

LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas")
TOKENIZER_FILE_PREFIXES = ("tokenizer", "vocab", "special_tokens_map", "merges", "spiece", "sentencepiece")


def model_config(model_dir: Path) -> dict:
    """The model folder's config.json, read as JSON; refused where it is missing or unreadable."""
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise UserError(f"model folder {model_dir.resolve()} has no config.json: the runner loads local models only "
                        "(HF_HUB_OFFLINE=1, nothing is downloaded); point [model] path at a saved model folder")
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{config_file}: not valid JSON ({error})") from None


def model_files(model_dir: Path, revision: str | None = None) -> dict:
    """Hash every file of a local model folder; the revision is the hash of those hashes unless given."""
    files = {
        path.relative_to(model_dir).as_posix(): sha256_file(path)
        for path in sorted(model_dir.rglob("*"))
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(model_dir).parts)
    }
    listing = "".join(f"{name} {digest}\n" for name, digest in files.items())
    try:
        parameters, parameters_reason = safetensors_parameters(model_dir), None
    except UserError as error:
        parameters, parameters_reason = None, str(error)
    return {
        "parameters": parameters,
        "parameters_reason": parameters_reason,
        "directory_name": model_dir.name,
        "files_sha256": files,
        "tokenizer_files": [name for name in files if name.split("/")[-1].startswith(TOKENIZER_FILE_PREFIXES)],
        "revision": revision or "sha256:" + hashlib.sha256(listing.encode()).hexdigest(),
        "revision_source": "declared in the campaign file" if revision else "sha256 of the model folder's file hashes",
    }


def _with_reason(value, reason: str) -> tuple:
    return (value, None) if value is not None else (None, reason)


def code_version() -> dict:
    """Return the package version and, when run from a git checkout, its commit."""
    folder = Path(iteralab.__file__).resolve().parent.parent
    commit, reason, dirty = None, None, None
    if shutil.which("git") is None:
        reason = "git is not installed"
    else:
        result = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True)
        if result.returncode != 0:
            reason = "the package is not installed from a git checkout"
        else:
            commit = result.stdout.strip()
            status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True)
            dirty = bool(status.stdout.strip())
    return {"package": "iteralab", "version": iteralab.__version__, "git_commit": commit,
            "git_commit_reason": reason, "git_uncommitted_changes": dirty}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_list(torch, partitions: dict | None = None) -> list[dict]:
    """Each GPU torch sees: name, memory in bytes, architecture (sm_XY on CUDA, gfx... from gcnArchName on ROCm), its UUID
    where torch gives one, and the partition it is where it is one (a MIG slice, an MI300X compute partition)."""
    hip = getattr(torch.version, "hip", None)
    gpus = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        gpu = {"index": index, "name": properties.name, "total_memory_bytes": properties.total_memory}
        if hip:
            gcn = getattr(properties, "gcnArchName", None) or None
            gpu.update(gcn_arch_name=gcn, architecture=gcn.split(":")[0] if gcn else None)
        else:
            gpu["architecture"] = smi.sm_architecture(tuple(torch.cuda.get_device_capability(index)))
        gpu["architecture_reason"] = None if gpu["architecture"] else "torch gives no architecture for this device"
        uuid = str(getattr(properties, "uuid", "") or "").strip()
        if uuid.strip("0-"):
            gpu["uuid"] = uuid
        found = partition.of_gpu(properties.name, index, bool(hip), partitions)
        if found:
            gpu["partition"] = found
        gpus.append(gpu)
    return gpus


HIP_SOURCE = ("torch.version.hip: the HIP runtime this torch build bundles and ran with (a pip ROCm wheel brings its own; "
              "rocm_version is the system's, read by its tools)")


def dnn_versions(torch) -> dict:
    """cuDNN's version on a CUDA build; on ROCm torch.backends.cudnn is MIOpen, recorded as miopen_version (#63)."""
    version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if getattr(torch.version, "hip", None):
        return {"cudnn_version": None, "cudnn_version_reason": "a ROCm build: torch.backends.cudnn is MIOpen (miopen_version)",
                "miopen_version": version, "miopen_version_reason": None if version else "MIOpen is not available"}
    return {"cudnn_version": version, "cudnn_version_reason": None if version else "cuDNN is not available to this torch build"}


def gpu_stack(hip: bool) -> dict:
    """The GPU driver and its source, the ROCm user-space version and the GPUs the vendor's tool lists.

    A ROCm build of torch asks AMD's tools; any other build asks NVIDIA's first, then AMD's, so a CPU build of torch on
    a GPU machine (a wrong image) still records the driver there is.
    """
    not_rocm = {"rocm_version": None, "rocm_version_reason": "this torch build has no ROCm/HIP",
                "rocm_version_source": None}
    if hip:
        return smi.amd_facts()
    nvidia = smi.nvidia_facts()
    if nvidia["driver_version"]:
        return {**nvidia, **not_rocm}
    amd = smi.amd_facts()
    if amd["driver_version"]:
        return amd
    return {**amd, "driver_version_reason": f"no GPU driver found: {nvidia['driver_version_reason']}; "
                                           f"{amd['driver_version_reason']}"}


def machine_facts() -> dict:
    """Describe Python, libraries, accelerator stack, GPUs, CPU, memory and threads."""
    import psutil
    import torch

    libraries = {}
    for name in LIBRARIES:
        try:
            libraries[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            libraries[name] = None
    info = {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "libraries": libraries,
    }
    cuda_available = torch.cuda.is_available()
    info["cuda_version"], info["cuda_version_reason"] = _with_reason(torch.version.cuda, "this torch build has no CUDA")
    info.update(dnn_versions(torch))
    info["hip_version"], info["hip_version_reason"] = _with_reason(getattr(torch.version, "hip", None), "this torch build has no ROCm/HIP")
    info.update(gpu_stack(bool(info["hip_version"])))
    if info["hip_version"]:
        info["hip_version_source"] = HIP_SOURCE
    if cuda_available:
        info["gpus"], info["gpus_reason"] = gpu_list(torch, partition.amd_partitions(info.get("driver_gpus"))), None
    else:
        info["gpus"], info["gpus_reason"] = None, "no CUDA device visible to torch"
    info["gpu_count"] = torch.cuda.device_count() if cuda_available else 0
    info["cpu"] = {
        "model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
    info["ram_bytes"] = psutil.virtual_memory().total
    info["threads"] = {
        "torch_intra_op": torch.get_num_threads(),
        "torch_inter_op": torch.get_num_interop_threads(),
        **{name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM")},
    }
    info["os"] = smi.os_release()
    info["hf_hub_offline"] = os.environ.get("HF_HUB_OFFLINE")
    return info
