"""Turn AMD's ROCm compatibility matrix (ROCm/ROCm, docs/compatibility/) into one row per ROCm x OS x GPU target.

Run by hand when AMD publishes a newer matrix, into a NEW file (a matrix file is never edited):

    git -C MIRROR show COMMIT:docs/compatibility/compatibility-matrix-historical-6.0.csv > historical.csv
    python convert_rocm.py historical.csv 2026-12-05 > rocm-2026-12-05.csv

Each row: the ROCm release, the OS and its version, the GPU / LLVM target (gfx...), the PyTorch versions the matrix lists
for that release, and a status: supported, unsupported (a footnote of the matrix excludes the combination) or conditional
(a footnote makes it depend on a fact the manifest does not record: the card's model or the kernel), with the footnote.
"""

from __future__ import annotations

import csv
import re
import sys

MI300X_ONLY = "supported only on AMD Instinct MI300X (footnote mi300x)"
SINGLE_NODE = "Debian 12 is supported only on AMD Instinct MI300X for single-node functionality (footnote single-node)"
HWE = ("MI300X (gfx942) is supported on listed operating systems except Ubuntu 22.04.5 [6.8 HWE] and Ubuntu 22.04.4 "
       "[6.5 HWE] (footnote mi300_62x): depends on the kernel")
# ROCm 6.0 and 6.1: the OS on which MI300A and MI300X (both gfx942) are supported, from the footnotes mi300_60x/61x.
MI300 = {
    "6.1.2": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4", "Oracle Linux 8.9"}),
    "6.1.1": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4", "Oracle Linux 8.9"}),
    "6.1.0": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4"}),
    "6.0.2": ({"Ubuntu 22.04.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.3"}),
    "6.0.0": ({"Ubuntu 22.04.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.3"}),
}
NAMES = ("Ubuntu", "RHEL", "SLES", "CentOS", "Oracle Linux", "Debian", "Azure Linux")


def clean(cell: str) -> str:
    return re.sub(r"\s*\[#[^\]]*\]_", "", cell).strip()


def systems(cell: str) -> list[tuple[str, str]]:
    """'RHEL 9.5, 9.4' -> [('RHEL', '9.5'), ('RHEL', '9.4')]; 'SLES 15 SP6, SP5' -> 15 SP6, 15 SP5."""
    text = clean(cell)
    name = next(n for n in NAMES if text.startswith(n))
    versions = [v.strip() for v in text[len(name):].split(",")]
    if name == "SLES":
        versions = [versions[0]] + [f"15 {v}" for v in versions[1:]]
    return [(name, v) for v in versions]


def status(rocm: str, name: str, version: str, target: str, cell_note: str) -> tuple[str, str]:
    if "mi300x" in cell_note or "single-node" in cell_note:
        note = SINGLE_NODE if "single-node" in cell_note else f"{name} {MI300X_ONLY}"
        return ("conditional", note) if target == "gfx942" else ("unsupported", note)
    if target == "gfx942" and rocm.startswith("6.2") and (name, version) in {("Ubuntu", "22.04.5"), ("Ubuntu", "22.04.4")}:
        return "conditional", HWE
    if target == "gfx942" and rocm in MI300:
        mi300a, mi300x = MI300[rocm]
        os_name = f"{name} {version}"
        said = f"ROCm {rocm}: MI300A on {', '.join(sorted(mi300a))}; MI300X only on {', '.join(sorted(mi300x))} (footnote mi300_{rocm.replace('.', '')[:3]})"
        if os_name in mi300a and os_name in mi300x:
            return "supported", said
        if os_name in mi300a or os_name in mi300x:
            return "conditional", f"{said}: depends on the card"
        return "unsupported", said
    return "supported", ""


def convert(rows: list[list[str]], version: str) -> list[list[str]]:
    releases = [c.strip() for c in rows[0][1:]]
    section, per_release = None, {r: {"os": [], "gpu": [], "pytorch": ""} for r in releases}
    for row in rows[1:]:
        stub = row[0]
        if stub.strip():
            section = "os" if "Operating systems" in stub else "gpu" if "LLVM target" in stub else "pytorch" if "PyTorch" in stub else None
        if section is None:
            continue
        for release, cell in zip(releases, row[1:], strict=False):
            if not cell.strip() or cell.strip().startswith(".."):
                continue
            if section == "pytorch":
                per_release[release]["pytorch"] = ";".join(v.strip() for v in cell.split(","))
            else:
                per_release[release][section].append(cell)
        if section == "pytorch":
            section = None
    out = []
    for release in releases:
        found = per_release[release]
        for cell in found["os"]:
            for name, os_version in systems(cell):
                for target in (clean(g) for g in found["gpu"]):
                    state, note = status(release, name, os_version, target, cell)
                    out.append([version, release, name, os_version, target, found["pytorch"], state, note])
    return out


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8", newline="") as handle:
        table = list(csv.reader(handle))
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["matrix_version", "rocm", "os", "os_version", "architecture", "pytorch", "status", "note"])
    writer.writerows(convert(table, sys.argv[2]))
