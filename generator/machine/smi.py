"""GPU driver, ROCm and architecture facts read from the vendors' tools (NVML, nvidia-smi, amd-smi, rocm-smi).

Every reader returns its value or None with the reason; a tool that is missing, times out or prints something odd
gives a reason, never a traceback.
"""

from __future__ import annotations

import csv
import importlib
import json
import shutil
import subprocess
from pathlib import Path

TIMEOUT_S = 15
ROCM_INFO = Path("/opt/rocm/.info/version")
OS_RELEASE = Path("/etc/os-release")
NVIDIA_QUERIES = ("index,name,driver_version,memory.total,compute_cap",  # compute_cap: driver 510 and later
                  "index,name,driver_version,memory.total")
UNITS = {"b": 1, "kib": 1024, "kb": 1000, "mib": 1024**2, "mb": 1024**2, "gib": 1024**3, "gb": 1024**3}


def run_tool(argv: list[str], timeout: float | None = None) -> tuple[str | None, str | None]:
    """Run one tool found on PATH; return its output, or None and why not (TIMEOUT_S seconds unless TIMEOUT)."""
    tool, command, timeout = argv[0], " ".join(argv), timeout or TIMEOUT_S
    if shutil.which(tool) is None:
        return None, f"{tool} is not installed"
    try:
        result = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{command} did not answer within {timeout:g} s"
    except OSError as error:
        return None, f"{tool} could not be started: {error.strerror or error}"
    if result.returncode != 0 or not result.stdout.strip():
        said = " ".join((result.stderr.strip() or result.stdout.strip()).split())[:200]
        return None, f"{command} failed (exit status {result.returncode}): {said or 'no output'}"
    return result.stdout, None


def _odd(tool: str, text: str) -> str:
    return f"{tool} printed something unreadable: {' '.join(text.split())[:120]!r}"


def _bytes(amount: str) -> int | None:
    """'81559 MiB' (or a bare number of MiB, as nvidia-smi's nounits prints) in bytes."""
    number, _, unit = amount.strip().partition(" ")
    try:
        return int(float(number) * UNITS.get(unit.strip().lower() or "mib", 0)) or None
    except ValueError:
        return None


def sm_architecture(capability: str | tuple | None) -> str | None:
    """'9.0' or (9, 0) as 'sm_90'."""
    if isinstance(capability, tuple):
        return f"sm_{capability[0]}{capability[1]}"
    major, dot, minor = (capability or "").strip().partition(".")
    return f"sm_{major}{minor}" if dot and major.isdigit() and minor.isdigit() else None


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=index,name,driver_version,memory.total[,compute_cap] --format=csv,noheader`."""
    gpus = []
    for row in csv.reader(text.strip().splitlines(), skipinitialspace=True):
        if len(row) < 4 or not row[0].strip().isdigit():
            continue
        gpus.append({"index": int(row[0]), "name": row[1].strip(), "driver_version": row[2].strip() or None,
                     "total_memory_bytes": _bytes(row[3]),
                     "architecture": sm_architecture(row[4]) if len(row) > 4 else None})
    return gpus


def nvml_driver() -> tuple[str | None, str | None]:
    """The driver version through NVML, when nvidia-ml-py is installed."""
    try:  # optional, never a dependency: the CUDA machine's image may have it, nvidia-smi answers otherwise
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:  # NVMLError and its many subclasses: no driver, no permission, a library missing
        return None, f"NVML failed: {error}"
    return (version.decode() if isinstance(version, bytes) else str(version)), None


def nvidia_facts() -> dict:
    """NVIDIA's driver (NVML first, then nvidia-smi) and the GPUs nvidia-smi lists."""
    facts = {"driver_version": None, "driver_version_reason": None, "driver_source": None, "driver_gpus": None}
    version, nvml_reason = nvml_driver()
    if version:
        facts.update(driver_version=version, driver_source="nvml")
    reasons = [nvml_reason] if nvml_reason else []
    for query in NVIDIA_QUERIES:
        text, reason = run_tool(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"])
        gpus = parse_nvidia_smi(text) if text else []
        if text and not gpus:
            reason = _odd("nvidia-smi", text)
        if gpus:
            facts["driver_gpus"] = gpus
            if not facts["driver_version"] and gpus[0]["driver_version"]:
                facts.update(driver_version=gpus[0]["driver_version"], driver_source="nvidia-smi")
            break
        reasons.append(reason)
        if "compute_cap" not in reason:  # only an older driver's refusal of that field is worth asking again
            break
    if not facts["driver_version"]:
        facts["driver_version_reason"] = "; ".join(reasons)
    return facts


def parse_amd_smi_version(text: str) -> dict:
    """`amd-smi version`: 'AMDSMI Tool: 24.6.3+9578815 | ... | ROCm version: 6.2.4 | amdgpu version: 6.8.5'."""
    found = {}
    for part in text.strip().split("|"):
        key, colon, value = part.partition(":")
        if colon and value.strip() and value.strip().upper() != "N/A":
            found[" ".join(key.lower().split())] = value.strip()
    return {"rocm_version": found.get("rocm version"), "driver_version": found.get("amdgpu version"),
            "tool_version": found.get("amdsmi tool")}


def _amd_memory(vram: dict) -> int | None:
    size = vram.get("size")
    if isinstance(size, dict):  # amd-smi 24.7 and later: {"value": 196592, "unit": "MB"}
        return _bytes(f"{size.get('value')} {size.get('unit') or 'MB'}")
    for key in ("vram_size_mb", "size_mb", "vram_size"):  # earlier releases: a number of MB
        if isinstance(vram.get(key), int | float):
            return _bytes(f"{vram[key]} MB")
    return _bytes(size) if isinstance(size, str) else None


def parse_amd_smi_static(text: str) -> list[dict]:
    """`amd-smi static --json`: a list of GPUs, or {"gpu_data": [...]} in recent releases; ValueError if it is neither."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data") or data.get("gpus")
    if not isinstance(data, list):
        raise ValueError("no list of GPUs")
    gpus = []
    for position, item in enumerate(entry for entry in data if isinstance(entry, dict)):
        asic, driver = item.get("asic") or {}, item.get("driver") or {}
        arch = asic.get("target_graphics_version")
        split = item.get("partition") if isinstance(item.get("partition"), dict) else {}
        gpus.append({"index": item.get("gpu", position), "name": asic.get("market_name"),
                     "driver_version": driver.get("version") or driver.get("driver_version"),
                     "total_memory_bytes": _amd_memory(item.get("vram") or {}),
                     "architecture": arch.split(":")[0] if isinstance(arch, str) and arch.startswith("gfx") else None,
                     "compute_partition": split.get("compute_partition"), "memory_partition": split.get("memory_partition")})
    return gpus


def parse_rocm_smi_driver(text: str) -> str | None:
    """`rocm-smi --showdriverversion --json`: {"system": {"Driver version": "6.7.0"}}; ValueError if not JSON."""
    system = json.loads(text).get("system") or {}
    return system.get("Driver version") or None


def rocm_info_version(path: Path | None = None) -> tuple[str | None, str | None]:
    """The ROCm user-space version as installed under /opt/rocm ('6.2.4-120')."""
    path = path or ROCM_INFO
    try:
        version = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError as error:
        return None, f"{path} cannot be read ({error.strerror or error}): no ROCm user space there"
    return (version[0].strip(), None) if version and version[0].strip() else (None, f"{path} is empty")


def _amd_static(facts: dict, reasons: list[str]) -> None:
    text, reason = run_tool(["amd-smi", "static", "--json"])
    try:
        gpus = parse_amd_smi_static(text) if text else []
    except ValueError:
        gpus, reason = [], _odd("amd-smi static --json", text)
    if gpus:
        facts["driver_gpus"] = gpus
        if not facts["driver_version"] and gpus[0]["driver_version"]:
            facts.update(driver_version=gpus[0]["driver_version"], driver_source="amd-smi")
    elif reason:
        reasons.append(reason)


def amd_facts() -> dict:
    """AMD's driver (amd-smi, then rocm-smi), the ROCm user-space version and the GPUs amd-smi lists."""
    facts = {"driver_version": None, "driver_version_reason": None, "driver_source": None, "driver_gpus": None,
             "rocm_version": None, "rocm_version_reason": None, "rocm_version_source": None}
    text, reason = run_tool(["amd-smi", "version"])
    version = parse_amd_smi_version(text) if text else {}
    reasons = [] if version.get("driver_version") else [reason or "amd-smi version names no amdgpu version"]
    if version.get("driver_version"):
        facts.update(driver_version=version["driver_version"], driver_source="amd-smi")
    if text:
        _amd_static(facts, reasons)
    if not facts["driver_version"]:
        text, reason = run_tool(["rocm-smi", "--showdriverversion", "--json"])
        try:
            driver = parse_rocm_smi_driver(text) if text else None
        except (ValueError, AttributeError):
            driver, reason = None, _odd("rocm-smi --showdriverversion --json", text)
        if driver:
            facts.update(driver_version=driver, driver_source="rocm-smi")
        else:
            facts["driver_version_reason"] = "; ".join([*reasons, reason or "rocm-smi gave no driver version"])
    if version.get("rocm_version"):
        facts.update(rocm_version=version["rocm_version"], rocm_version_source="amd-smi")
    else:
        rocm, rocm_reason = rocm_info_version()
        facts.update(rocm_version=rocm, rocm_version_reason=rocm_reason, rocm_version_source=str(ROCM_INFO) if rocm else None)
    return facts


def os_release(path: Path | None = None) -> dict:
    """The operating system's name and version from /etc/os-release ({"name": "Ubuntu", "version": "22.04"})."""
    path = path or OS_RELEASE
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        return {"name": None, "version": None, "reason": f"{path} cannot be read ({error.strerror or error})"}
    fields = {}
    for line in lines:
        key, equals, value = line.partition("=")
        if equals:
            fields[key.strip()] = value.strip().strip("'\"")
    name, version = fields.get("NAME") or None, fields.get("VERSION_ID") or None
    reason = None if name and version else f"{path} gives no {'NAME' if not name else 'VERSION_ID'}"
    return {"name": name, "version": version, "reason": reason}
