"""Compatibility matrices as versioned data: AMD's ROCm matrix and NVIDIA's minimum driver per CUDA runtime.

Each matrix is a CSV file under ``data/compatibility/`` beside a TOML file naming its source and the date it was read
(``rocm-2026-12-05.csv`` and ``rocm-2026-12-05.toml``). A newer matrix is a new pair of files, never an edit of an old
one; the newest of each kind is used unless a version is named. ``verdict`` compares the combination a run's manifest
recorded with it: *acceptable* when the matrix lists it, *to-confirm* when the matrix does not know it or a fact is not
recorded (named), *exclude* when the matrix says unsupported; each names the matrix row, or why there is none, and the
matrix version. A manifest without a GPU has no GPU combination to check (``no-gpu``), which is not a failure.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from iteralab.core.errors import UserError
from iteralab.core.language import Joined, Text

KINDS = ("rocm", "cuda-drivers")
COLUMNS = {"rocm": ("matrix_version", "rocm", "os", "os_version", "architecture", "pytorch", "status", "note"),
           "cuda-drivers": ("matrix_version", "cuda", "release", "min_driver_linux", "min_driver_windows", "source")}
ROW_STATUSES = ("supported", "unsupported", "conditional")
ORDER = {"acceptable": 0, "no-gpu": 0, "to-confirm": 1, "exclude": 2}
# The driver a CUDA major family needs under minor version compatibility (Linux, Windows), from NVIDIA's
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html (read 2026-12-05): CUDA 11.x
# >= 450.80.02 (452.39), 12.x >= 525.60.13 (527.41), 13.x >= 580.
FAMILY_MINIMUM = {"11": ("450.80.02", "452.39"), "12": ("525.60.13", "527.41"), "13": ("580", "580")}
# What /etc/os-release or platform calls a system, in the matrix's words (lower case, without "GNU/Linux", "Server").
OS_ALIASES = {"red hat enterprise linux": "rhel", "rhel": "rhel", "suse linux enterprise server": "sles", "sles": "sles",
              "oracle linux": "oracle linux", "debian": "debian", "centos": "centos", "centos linux": "centos",
              "ubuntu": "ubuntu", "azure linux": "azure linux", "microsoft azure linux": "azure linux"}


@dataclass(frozen=True)
class Matrix:
    """One matrix file: its kind, version, file name, where it comes from and its rows (each with its CSV line)."""

    kind: str
    version: str
    file: str
    source: str
    read_on: str
    rows: tuple[dict, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.version}"


@dataclass(frozen=True)
class Verdict:
    """A run's combination against a matrix: its status, the row (or why none), the reason and the matrix version."""

    status: str  # acceptable, to-confirm, exclude, or no-gpu
    reason: str
    row: str | None = None
    matrix: str | None = None
    missing: tuple[str, ...] = field(default=())
    quote: str | None = None  # the matrix's own words for the row (AMD's footnote, in English), said after the reason

    @property
    def said(self) -> Text:
        """The verdict in one sentence: status, reason, row and matrix."""
        where = self.row if self.row else Text("no row")
        if self.quote:
            return Text("{status}: {reason}: {quote} ({row}; matrix {matrix})", status=STATUS_WORDS[self.status],
                        reason=self.reason, quote=self.quote, row=where, matrix=self.matrix)
        if self.matrix is None:
            return Text("{status}: {reason}", status=STATUS_WORDS[self.status], reason=self.reason)
        return Text("{status}: {reason} ({row}; matrix {matrix})", status=STATUS_WORDS[self.status], reason=self.reason,
                    row=where, matrix=self.matrix)

    def data(self) -> dict:
        return {"status": self.status, "reason": self.reason, "quote": self.quote, "row": self.row, "matrix": self.matrix,
                "missing": list(self.missing)}


STATUS_WORDS = {"acceptable": Text("acceptable"), "to-confirm": Text("to confirm"), "exclude": Text("exclude"),
                "no-gpu": Text("no GPU")}
ROW_WORDS = {"supported": Text("supported"), "unsupported": Text("unsupported"), "conditional": Text("conditional")}


def _folder():
    return resources.files("iteralab") / "data" / "compatibility"


def versions(kind: str) -> list[str]:
    """Return the versions of KIND shipped, oldest first (a version is the date its file was read)."""
    names = [entry.name for entry in _folder().iterdir() if entry.name.startswith(f"{kind}-") and entry.name.endswith(".csv")]
    return sorted(name[len(kind) + 1:-4] for name in names)


@functools.cache
def load_matrix(kind: str, version: str | None = None) -> Matrix:
    """Read the shipped matrix of KIND at VERSION, the newest when VERSION is None."""
    if kind not in KINDS:
        raise UserError(f"no compatibility matrix of kind {kind!r}; the kinds are {', '.join(KINDS)}")
    known = versions(kind)
    version = version or (known[-1] if known else None)
    if version not in known:
        raise UserError(f"no {kind} matrix {version!r}; shipped: {', '.join(known) or 'none'}")
    stem = f"{kind}-{version}"
    text = (_folder() / f"{stem}.csv").read_text(encoding="utf-8")
    about = tomllib.loads((_folder() / f"{stem}.toml").read_text(encoding="utf-8"))
    source = about.get("url") or f"{about['repository']} at {about['commit']} ({', '.join(about['paths'])})"
    return Matrix(kind, version, f"{stem}.csv", source, about["read_on"], parse_rows(text, kind, f"{stem}.csv"))


def parse_rows(text: str, kind: str, source: str) -> tuple[dict, ...]:
    """Parse a matrix CSV; refuse a missing column or an unknown status with file and line."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [column for column in COLUMNS[kind] if column not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{source}:1: missing column(s) {', '.join(missing)}")
    rows = []
    for row in reader:
        if kind == "rocm" and row["status"] not in ROW_STATUSES:
            raise UserError(f"{source}:{reader.line_num}: status {row['status']!r} is not one of {', '.join(ROW_STATUSES)}")
        rows.append({**row, "line": reader.line_num})
    return tuple(rows)


def _numbers(text: str | None) -> tuple[int, ...] | None:
    found = re.match(r"\s*(\d+(?:\.\d+)*)", text or "")
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def _minor(text: str | None) -> str | None:
    numbers = _numbers(text)
    return ".".join(map(str, numbers[:2])) if numbers and len(numbers) >= 2 else None


def vendor(environment: dict) -> str | None:
    """Return 'amd', 'nvidia' or None from what the manifest recorded (runtime, architecture, card name)."""
    gpus = environment.get("gpus") or []
    said = " ".join(f"{g.get('name') or ''} {g.get('architecture') or ''}" for g in gpus).lower()
    if environment.get("hip_version") or environment.get("rocm_version") or "gfx" in said or re.search(r"\b(amd|instinct|radeon)\b", said):
        return "amd"
    if environment.get("cuda_version") or "sm_" in said or "nvidia" in said:
        return "nvidia"
    return None


def verdict(manifest: dict, rocm: Matrix | None = None, cuda: Matrix | None = None) -> Verdict:
    """Compare the GPU combination MANIFEST recorded with the matrices (the newest shipped, unless given)."""
    environment = manifest.get("environment") or {}
    if not environment.get("gpus"):
        return Verdict("no-gpu", Text("no GPU recorded: there is no GPU combination to check"))
    found = vendor(environment)
    if found == "amd":
        return rocm_verdict(environment, rocm or load_matrix("rocm"))
    if found == "nvidia":
        return cuda_verdict(environment, cuda or load_matrix("cuda-drivers"))
    return Verdict("to-confirm", Text("the manifest records neither a CUDA nor a ROCm/HIP runtime, nor a GPU architecture: "
                                      "no matrix applies"), missing=("environment.cuda_version", "environment.rocm_version"))


def worst(verdicts: list[Verdict]) -> Verdict | None:
    """Return the weakest of VERDICTS (exclude before to-confirm before acceptable), or None when there are none."""
    return max(verdicts, key=lambda v: ORDER[v.status]) if verdicts else None


def _missing(environment: dict) -> list[str]:
    missing = [] if environment.get("rocm_version") or environment.get("hip_version") else ["environment.rocm_version"]
    missing += [f"environment.gpus[{index}].architecture" for index, gpu in enumerate(environment["gpus"])
                if not gpu.get("architecture")]
    system = environment.get("os") or {}
    missing += [f"environment.os.{key}" for key in ("name", "version") if not system.get(key)]
    if not (environment.get("libraries") or {}).get("torch"):
        missing.append("environment.libraries.torch")
    return missing


def _os_matches(row: dict, name: str, version: str) -> bool:
    """An OS matches a row by name (aliases) and version; a version recorded without its point release ('22.04') matches
    the row's ('22.04.5')."""
    wanted = OS_ALIASES.get(re.sub(r"\s*(gnu/linux|server)\s*", " ", name.lower()).strip(), name.lower())
    if OS_ALIASES.get(row["os"].lower(), row["os"].lower()) != wanted:
        return False
    recorded, listed = version.replace("-", " ").split(), row["os_version"].split()
    recorded_numbers, listed_numbers = recorded[0].split("."), listed[0].split(".")
    return recorded[1:] == listed[1:] and listed_numbers[:len(recorded_numbers)] == recorded_numbers


def rocm_row(row: dict, matrix: Matrix) -> Text:
    """Name one ROCm matrix row: file, line and its values."""
    return Text("{file} line {line}: ROCm {rocm}, {os} {os_version}, {architecture}, PyTorch {pytorch}, {status}",
                file=matrix.file, line=row["line"], rocm=row["rocm"], os=row["os"], os_version=row["os_version"],
                architecture=row["architecture"], pytorch=row["pytorch"].replace(";", "/"), status=ROW_WORDS[row["status"]])


def _releases(environment: dict, matrix: Matrix) -> tuple[list[str], str | None]:
    """The ROCm releases to look up: the one that ran. torch.version.hip is the HIP runtime the torch build bundles (a pip
    ROCm wheel brings its own) and names only major.minor; the system's tools give the point release, used where it is
    the same minor (#63). The second item says which minor ran where it is not the system's."""
    system = environment.get("rocm_version")
    system = ".".join(map(str, ((_numbers(system) or ()) + (0, 0, 0))[:3])) if system else None
    ran = _minor(environment.get("hip_version"))
    if system and (ran is None or _minor(system) == ran):
        return [system], None
    listed = sorted({row["rocm"] for row in matrix.rows if _minor(row["rocm"]) == ran}, key=_numbers)
    return listed or [f"{ran}.0"], ran


def rocm_verdict(environment: dict, matrix: Matrix) -> Verdict:
    """Settle an AMD manifest: ROCm version x OS x each GPU's architecture x PyTorch, the weakest GPU's verdict (over the
    point releases of the minor that ran, where only torch.version.hip names it)."""
    missing = _missing(environment)
    if missing:
        return Verdict("to-confirm", Text("the manifest does not record {facts}: record them to check the combination in "
                                          "AMD's matrix", facts=", ".join(missing)), None, matrix.label, tuple(missing))
    releases, ran = _releases(environment, matrix)
    found = worst([_release_verdict(environment, rocm, matrix) for rocm in releases])
    if ran is None:
        return found
    return dataclasses.replace(found, reason=Text(
        "{reason}; ROCm {ran} is the HIP runtime this torch build bundles and ran with (torch.version.hip {hip}), the system's "
        "tools say {system}", reason=found.reason, ran=ran, hip=environment.get("hip_version"),
        system=environment.get("rocm_version") or Text("nothing")))


def _release_verdict(environment: dict, rocm: str, matrix: Matrix) -> Verdict:
    system = environment["os"]
    torch = _minor(environment["libraries"]["torch"])
    release = [row for row in matrix.rows if row["rocm"] == rocm]
    if not release:
        listed = sorted({row["rocm"] for row in matrix.rows}, key=_numbers)
        return Verdict("to-confirm", Text("ROCm {rocm} is not in the matrix, which lists {first} to {last}", rocm=rocm,
                                          first=listed[0], last=listed[-1]), None, matrix.label)
    on_os = [row for row in release if _os_matches(row, system["name"], system["version"])]
    if not on_os:
        return Verdict("to-confirm", Text("the matrix lists no {os} {version} for ROCm {rocm}", os=system["name"],
                                          version=system["version"], rocm=rocm), None, matrix.label)
    return worst([_architecture(on_os, gpu["architecture"], torch, rocm, matrix) for gpu in environment["gpus"]])


def _architecture(rows: list[dict], architecture: str, torch: str | None, rocm: str, matrix: Matrix) -> Verdict:
    target = architecture.split(":")[0].strip().lower()  # 'gfx90a:sramecc+:xnack-' names the target gfx90a
    severity = {"supported": 0, "conditional": 1, "unsupported": 2}  # an OS version without its point release: the weakest
    row = max((r for r in rows if r["architecture"] == target), key=lambda r: severity[r["status"]], default=None)
    if row is None:
        return Verdict("to-confirm", Text("the matrix lists no {architecture} for ROCm {rocm} on this OS", architecture=target,
                                          rocm=rocm), None, matrix.label)
    named = rocm_row(row, matrix)
    if row["status"] == "unsupported":
        return Verdict("exclude", Text("the matrix says unsupported"), named, matrix.label, quote=row["note"])
    if row["status"] == "conditional":
        return Verdict("to-confirm", Text("the matrix makes it conditional"), named, matrix.label, quote=row["note"])
    if torch not in row["pytorch"].split(";"):
        return Verdict("to-confirm", Text("PyTorch {torch} is not listed for ROCm {rocm} (listed: {listed})", torch=torch,
                                          rocm=rocm, listed=row["pytorch"].replace(";", ", ")), named, matrix.label)
    return Verdict("acceptable", Text("the matrix lists this combination"), named, matrix.label)


def cuda_row(row: dict, matrix: Matrix, column: str) -> Text:
    return Text("{file} line {line}: {release}, driver >= {driver}", file=matrix.file, line=row["line"],
                release=row["release"], driver=row[column])


def _unlisted(recorded: str, driver: tuple, cuda: str, windows: bool, matrix: Matrix) -> Verdict:
    """A CUDA release the table does not list: a driver under its major family's minimum cannot run it at all (#63)."""
    listed = sorted({row["cuda"] for row in matrix.rows}, key=_numbers)
    family = FAMILY_MINIMUM.get(cuda.split(".")[0])
    if family and driver < _numbers(family[1 if windows else 0]):
        return Verdict("exclude", Text("driver {driver} is older than {family}, the minimum of the CUDA {major}.x family "
                                       "(NVIDIA's minor version compatibility), so it cannot run CUDA {cuda}; CUDA {cuda} "
                                       "is not in the table, which lists {first} to {last}", driver=recorded,
                                       family=family[1 if windows else 0], major=cuda.split(".")[0], cuda=cuda,
                                       first=listed[0], last=listed[-1]), None, matrix.label)
    return Verdict("to-confirm", Text("CUDA {cuda} is not in the table, which lists {first} to {last}", cuda=cuda,
                                      first=listed[0], last=listed[-1]), None, matrix.label)


def cuda_verdict(environment: dict, matrix: Matrix) -> Verdict:
    """Settle an NVIDIA manifest: the driver against the minimum of its CUDA runtime's releases."""
    missing = [f"environment.{key}" for key in ("cuda_version", "driver_version") if not environment.get(key)]
    if missing:
        return Verdict("to-confirm", Text("the manifest does not record {facts}: record them to check the driver against "
                                          "NVIDIA's table", facts=", ".join(missing)), None, matrix.label, tuple(missing))
    cuda, driver = _minor(environment["cuda_version"]), _numbers(environment["driver_version"])
    windows = "windows" in ((environment.get("os") or {}).get("name") or "").lower()
    column = "min_driver_windows" if windows else "min_driver_linux"
    # A release without a minimum for this system (NVIDIA gives no Windows driver for CUDA 13.x) is not a row for it.
    rows = sorted((row for row in matrix.rows if row["cuda"] == cuda and _numbers(row[column])),
                  key=lambda row: _numbers(row[column]))
    if driver is None:
        return Verdict("to-confirm", Text("driver version {driver} cannot be read as a number",
                                          driver=environment["driver_version"]), None, matrix.label)
    if not rows:
        return _unlisted(environment["driver_version"], driver, cuda, windows, matrix)
    lowest, highest = rows[0], rows[-1]
    recorded = environment["driver_version"]
    family = FAMILY_MINIMUM.get(cuda.split(".")[0])
    if driver < _numbers(lowest[column]) and family and driver >= _numbers(family[1 if windows else 0]):
        # NVIDIA's minor version compatibility: a CUDA 11+ runtime runs on its major family's driver, feature-limited.
        return Verdict("to-confirm", Text("driver {driver} is older than every CUDA {cuda} release's own minimum but within "
                                          "the CUDA {major}.x family (>= {family}): it runs under minor version "
                                          "compatibility with a limited feature set (no PTX JIT); confirm the workload "
                                          "runs", driver=recorded, cuda=cuda, major=cuda.split(".")[0],
                                          family=family[1 if windows else 0]),
                       cuda_row(lowest, matrix, column), matrix.label)
    if driver < _numbers(lowest[column]):
        return Verdict("exclude", Text("driver {driver} is older than the minimum of every CUDA {cuda} release",
                                       driver=recorded, cuda=cuda), cuda_row(lowest, matrix, column), matrix.label)
    if driver >= _numbers(highest[column]):
        return Verdict("acceptable", Text("driver {driver} meets the minimum of every CUDA {cuda} release", driver=recorded,
                                          cuda=cuda), cuda_row(highest, matrix, column), matrix.label)
    met = [row for row in rows if driver >= _numbers(row[column])][-1]
    return Verdict("to-confirm", Text("driver {driver} meets {met} but not {release}: the runtime's update is not recorded",
                                      driver=recorded, met=met["release"], release=highest["release"]),
                   cuda_row(highest, matrix, column), matrix.label)


# What PyPI's Linux x86_64 torch wheels bundle, read from their metadata: torch 2.13.0 depends on cuda-toolkit 13.0.3
# (CUDA 13.0, which needs the 580 driver family), torch 2.9.1 on nvidia-cuda-runtime-cu12 12.8.90 (CUDA 12.8).
TORCH_CUDA13, TORCH_CUDA12 = "torch==2.13.0", "torch==2.9.1"


def torch_advice(environment: dict) -> Text | None:
    """Which torch to install for the NVIDIA driver this machine has (#63), or None where no NVIDIA driver is recorded."""
    if vendor(environment) == "amd" or environment.get("driver_source") not in ("nvml", "nvidia-smi"):
        return None
    recorded = environment.get("driver_version")
    driver = _numbers(recorded)
    if driver is None:
        return None
    if driver >= _numbers(FAMILY_MINIMUM["13"][0]):
        return Text("driver {driver} is of the 580 family or newer: it runs CUDA 13.0, so {torch} (PyPI's default Linux "
                    "wheel is its CUDA 13.0 build) fits", driver=recorded, torch=TORCH_CUDA13)
    if driver >= _numbers(FAMILY_MINIMUM["12"][0]):
        return Text("driver {driver} is older than the 580 family that CUDA 13.0 needs, so {newer} cannot start on it: install "
                    "{torch} (PyPI's Linux wheel is its CUDA 12.8 build, which needs driver 570.26 or newer, or 525.60.13 "
                    "under minor version compatibility)", driver=recorded, newer=TORCH_CUDA13, torch=TORCH_CUDA12)
    return Text("driver {driver} is older than 525.60.13, the minimum of the CUDA 12.x family: no CUDA build of torch 2.9 or "
                "later runs on it; upgrade the driver (580 or newer for {torch})", driver=recorded, torch=TORCH_CUDA13)


def run_verdicts(manifests: list[dict]) -> list[dict]:
    """Return each run's verdict as data, with its line as check prints it (an exclude is a warning)."""
    found = []
    for manifest in manifests:
        settled = verdict(manifest)
        line = Text("run {run} of campaign {campaign}: {verdict}", run=manifest["run_id"], campaign=manifest["campaign"],
                    verdict=settled.said)
        if settled.status == "exclude":
            line = Text("warning: {line}", line=line)
        found.append({"run_id": manifest["run_id"], "campaign": manifest["campaign"], **settled.data(), "line": line})
    return found


def describe_matrices() -> Joined:
    """Name the matrices in use: kind, version, source and the date read."""
    return Joined("; ", [Text("{label} from {source}, read {read_on}", label=m.label, source=m.source, read_on=m.read_on)
                         for m in (load_matrix(kind) for kind in KINDS)])


def runs_verdict(manifests: list[dict], run_ids) -> tuple[dict | None, Verdict | None]:
    """Return the weakest verdict among the runs RUN_IDS (by their MANIFESTS) that recorded a GPU, with its manifest."""
    wanted, seen, found = set(run_ids), set(), []
    for manifest in manifests:
        if manifest["run_id"] in wanted and manifest["run_id"] not in seen:
            seen.add(manifest["run_id"])
            settled = verdict(manifest)
            if settled.status != "no-gpu":
                found.append((manifest, settled))
    return max(found, key=lambda pair: ORDER[pair[1].status]) if found else (None, None)


def configuration_verdicts(view) -> list[dict]:
    """Return each configuration of a campaign VIEW (its variants' summaries) with the verdict of its runs."""
    rows = []
    for summary in view.variants:
        manifest, settled = runs_verdict(list(view.manifests), {trial["run_id"] for trial in summary.trials})
        rows.append({"label": summary.label, "key": summary.key, "run": manifest["run_id"] if manifest else None,
                     "verdict": settled or Verdict("no-gpu", Text("no GPU recorded: there is no GPU combination to check"))})
    return rows
