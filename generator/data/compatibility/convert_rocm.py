"""Turn AMD's ROCm compatibility matrix (ROCm/ROCm, docs/compatibility/) into one row per ROCm x OS x GPU target.

Run by hand when AMD publishes a newer matrix, into a NEW file (a matrix file is never edited):

    git -C MIRROR show COMMIT:docs/compatibility/compatibility-matrix-historical-6.0.csv > historical.csv
    python convert_rocm.py historical.csv 2026-12-05 > rocm-2026-12-05.csv

A column that names two releases ("7.0.1/7.0.0") gives each its rows. From ROCm 6.4 the footnotes name the cards an
operating system supports, and the operating systems a card is supported on; ``card_status`` reads them (CARD_NOTES,
OS_NOTES): a combination every card of the target has is supported, one some have is conditional (it depends on the card
model, which the manifest does not record), one none has is unsupported.

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
    "6.1.5": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4", "Oracle Linux 8.9"}),
    "6.1.2": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4", "Oracle Linux 8.9"}),
    "6.1.1": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4", "Oracle Linux 8.9"}),
    "6.1.0": ({"Ubuntu 22.04.4", "RHEL 9.4", "RHEL 9.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.4"}),
    "6.0.2": ({"Ubuntu 22.04.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.3"}),
    "6.0.0": ({"Ubuntu 22.04.3", "RHEL 8.9", "SLES 15 SP5"}, {"Ubuntu 22.04.3"}),
}
NAMES = ("Ubuntu", "RHEL", "SLES", "CentOS", "Oracle Linux", "Debian", "Azure Linux", "Rocky Linux")
# The cards of each target, as the footnotes name them (ROCm 6.4 and later).
CARDS = {"gfx950": ("MI355X", "MI350X"), "gfx942": ("MI325X", "MI300X", "MI300A"), "gfx90a": ("MI250X", "MI250", "MI210"),
         "gfx908": ("MI100",), "gfx1201": ("Radeon AI PRO R9700", "RX 9070 XT", "RX 9070 GRE", "RX 9070"),
         "gfx1200": ("RX 9060 XT", "RX 9060"), "gfx1101": ("RX 7800 XT", "RX 7700 XT", "PRO W7700", "PRO V710"),
         "gfx1100": ("gfx1100 cards",), "gfx1030": ("PRO W6800", "PRO V620")}
U3, U2, U22 = "Ubuntu 24.04.3", "Ubuntu 24.04.2", "Ubuntu 22.04.5"
# A target's footnote: the cards it names and the only operating systems they are supported on (None: all listed).
CARD_NOTES = {
    "mi350x-os": (("MI355X", "MI350X"), {U3, U22, "RHEL 9.6", "RHEL 9.4", "Oracle Linux 9"}),
    "RDNA-OS-700": (("Radeon AI PRO R9700", "RX 9070 XT", "RX 9070 GRE", "RX 9070", "RX 9060 XT", "RX 9060", "RX 7800 XT",
                     "RX 7700 XT", "PRO W7700", "PRO W6800", "gfx1100 cards"),
                    {U3, U22, "RHEL 10.0", "RHEL 9.6", "RHEL 9.4", "Oracle Linux 10", "Oracle Linux 9"}),
    "rd-v710": (("PRO V710",), {U3, U22, "RHEL 10.0", "RHEL 9.6", "Azure Linux 3.0"}),
    "rd-v620": (("PRO V620",), {U3, U22}),
    "mi325x-os": (("MI325X",), {U3, U22, "RHEL 9.6", "RHEL 9.4"}),
    "mi300x-os": (("MI300X",), None),
    "mi300A-os": (("MI300A",), {U3, U22, "RHEL 10.0", "RHEL 9.6", "RHEL 9.4", "RHEL 8.10", "SLES 15 SP7", "Debian 12",
                                "Rocky Linux 9"}),
    "mi200x-os": (("MI250X", "MI250", "MI210"), {U3, U22, "RHEL 10.0", "RHEL 9.6", "RHEL 9.4", "RHEL 8.10", "SLES 15 SP7",
                                                  "Debian 12"}),
    "mi100-os": (("MI100",), {U3, U22, "RHEL 10.0", "RHEL 9.6", "RHEL 9.4", "RHEL 8.10"}),
    "RDNA-OS": (("Radeon AI PRO R9700", "RX 9070 XT", "RX 9060 XT", "PRO W7700", "RX 7800 XT"),
                {U2, U22, "RHEL 9.6", "RHEL 9.4"}),
    "7700XT-OS": (("RX 7700 XT",), {U2, "RHEL 9.6"}),
}
INSTINCT = tuple(card for target in ("gfx950", "gfx942", "gfx90a", "gfx908") for card in CARDS[target])
# An operating system's footnote: the only cards it supports (by OS version where the footnote says so).
OS_NOTES = {
    "rhel-10-702": lambda version: tuple(card for cards in CARDS.values() for card in cards if card != "PRO V620"),
    "rhel-94-702": lambda version: INSTINCT,
    "rhel-700": lambda version: ("MI300X", "MI300A", "MI250X", "MI250", "MI210", "MI100"),
    "sles-db-700": lambda version: ("MI300X", "MI300A", "MI250X", "MI250", "MI210"),
    "ol-700-mi300x": lambda version: ("MI300X",) if version == "8" else ("MI355X", "MI350X", "MI300X"),
    "mi300x": lambda version: ("MI300X",),
    "db-mi300x": lambda version: ("MI300X",) if version == "13" else None,
    "single-node": lambda version: ("MI300X",),
    "az-mi300x": lambda version: ("MI300X", "PRO V710"),
    "az-mi300x-630": lambda version: ("MI300X",),
    "rl-700": lambda version: ("MI300X", "MI300A"),
}


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


def _notes(cell: str) -> list[str]:
    return [name.removesuffix("-past-60") for name in re.findall(r"\[#([^\]]*)\]_", cell)]


def _os_notes(cell: str, version: str) -> list[str]:
    """The OS footnotes that apply to VERSION in an OS cell ('RHEL 10.0 [#a]_, 9.6 [#a]_, 9.4 [#b]_'), its own or the
    cell's last one (a footnote after the last version covers them all)."""
    parts = [part.strip() for part in cell.split(",")]
    for part in parts:
        if clean(part).split()[-1] == version and _notes(part):
            return _notes(part)
    return _notes(parts[-1]) if len(parts) == 1 or not any(_notes(part) for part in parts[:-1]) else []


def card_status(os_name: str, os_version: str, target: str, os_cell: str, gpu_cell: str) -> tuple[str, str]:
    """ROCm 6.4 and later: the status from the cards the target's and the OS's footnotes allow (module docstring)."""
    system, notes = f"{os_name} {os_version}", _notes(gpu_cell)
    named = [card for note in notes if note in CARD_NOTES for card in CARD_NOTES[note][0] if card in CARDS[target]]
    cards = named or list(CARDS[target])
    allowed_by_os = None
    for note in _os_notes(os_cell, os_version):
        listed = OS_NOTES[note](os_version) if note in OS_NOTES else None
        allowed_by_os = listed if listed is not None else allowed_by_os
    fine = [card for card in cards if (allowed_by_os is None or card in allowed_by_os) and all(
        CARD_NOTES[note][1] is None or system in CARD_NOTES[note][1] for note in notes
        if note in CARD_NOTES and card in CARD_NOTES[note][0])]
    said = "; ".join(f"footnote {note}" for note in [*_os_notes(os_cell, os_version), *notes])
    if len(fine) == len(cards):
        return "supported", ""
    if fine:
        return "conditional", f"supported on {system} only with {', '.join(fine)} of {target} ({said}): depends on the card"
    return "unsupported", f"{target} ({', '.join(cards)}) is not supported on {system} ({said})"


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
    for column in releases:
        found = per_release[column]
        for release in column.split("/"):  # "7.0.1/7.0.0": one column for two releases
            for cell in found["os"]:
                for name, os_version in systems(cell):
                    for gpu in found["gpu"]:
                        target = clean(gpu)
                        state, note = (card_status(name, os_version, target, cell, gpu) if _numbers(release) >= (6, 4)
                                       else status(release, name, os_version, target, cell))
                        out.append([version, release, name, os_version, target, found["pytorch"], state, note])
    return out


def _numbers(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8", newline="") as handle:
        table = list(csv.reader(handle))
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["matrix_version", "rocm", "os", "os_version", "architecture", "pytorch", "status", "note"])
    writer.writerows(convert(table, sys.argv[2]))
