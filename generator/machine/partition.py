"""A card that is part of a card: an NVIDIA MIG slice, an AMD Instinct compute partition (#63).

A slice has the whole card's name in it ("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), so a catalog matched by name would price
it as the whole card. The manifest records the partition beside the name, so that nothing downstream mistakes one for
the other. NVIDIA: torch names a MIG device "... MIG <profile>". AMD: amd-smi static reports each card's compute
partition (SPX is the whole card; DPX, QPX and CPX split it in 2, 4 and 8) and memory partition (NPS1, NPS4).
"""

from __future__ import annotations

import re

WHOLE = {None, "", "SPX", "N/A"}


def of_gpu(name: str, index: int, hip: bool, partitions: dict | None = None) -> dict | None:
    """The partition device INDEX is, or None for a whole card (PARTITIONS: amd_partitions' answer, on ROCm)."""
    if not hip:
        found = re.search(r"\bMIG\s+(\S+)", name or "")
        return {"kind": "mig", "profile": found.group(1), "whole_card": False,
                "source": "torch's device name"} if found else None
    if partitions and partitions.get("compute") not in WHOLE:
        return {"kind": "compute_partition", "profile": partitions["compute"], "memory": partitions.get("memory"),
                "whole_card": False, "source": "amd-smi static (compute_partition, memory_partition)"}
    return None


def amd_partitions(driver_gpus: list[dict] | None) -> dict | None:
    """The compute and memory partition modes amd-smi reported (the first card's that is split, else the first's)."""
    listed = [gpu for gpu in driver_gpus or [] if gpu.get("compute_partition") is not None]
    if not listed:
        return None
    split = next((gpu for gpu in listed if gpu["compute_partition"] not in WHOLE), listed[0])
    return {"compute": split["compute_partition"], "memory": split.get("memory_partition")}
