"""The protocol's disturbance rule ([protocol.disturbance]) and the judgement of one measured window against it.

The rule is declared before any timing. A campaign file without the table gets DEFAULTS, and its protocol (so its
fingerprint) stays as it was: the table is added to the protocol only when the file declares it.
"""

from __future__ import annotations

from iteralab.core.language import Figure, Text
from iteralab.declared.tables import Table
from iteralab.store import disturbance as store_disturbance

# The rule's defaults live with the records' reader (a lower layer), which judges old records by them too.
DEFAULTS = store_disturbance.DEFAULTS
OPTIONAL = store_disturbance.OPTIONAL
SOURCE_DEFAULT = Text("iteralab's defaults: the campaign file declares no [protocol.disturbance]")
SOURCE_DECLARED = Text("the campaign's [protocol.disturbance]")


def read_rule(table: Table) -> dict:
    """Read [protocol.disturbance]: every key optional, each default as in DEFAULTS."""
    rule = {
        "other_cpu_share": table.get("other_cpu_share", float, default=DEFAULTS["other_cpu_share"], minimum=0),
        "throttling": table.get("throttling", bool, default=DEFAULTS["throttling"]),
        "other_gpu_processes": table.get("other_gpu_processes", bool, default=DEFAULTS["other_gpu_processes"]),
        "use_disturbed": table.get("use_disturbed", bool, default=DEFAULTS["use_disturbed"]),
        "unstable_ratio": table.get("unstable_ratio", float, default=DEFAULTS["unstable_ratio"], minimum=1),
    }
    if "power_capping" in table.data:  # only when declared: a table written before it keeps its fingerprint (#63)
        rule["power_capping"] = table.get("power_capping", bool, default=OPTIONAL["power_capping"])
    table.finish()
    return {key: float(value) if isinstance(DEFAULTS.get(key), float) else value for key, value in rule.items()}


rule_of = store_disturbance.rule_of


def judge(host: dict, gpu: dict, rule: dict) -> list[dict]:
    """Return what crossed the rule in one window's figures: each with its figure, threshold and sentence."""
    crossed = []
    share, waited, limit = host.get("other_cpu_share"), host.get("waited_share"), rule["other_cpu_share"]
    if share is not None and waited is not None and share > limit and waited > limit:
        crossed.append({"what": "other_cpu_share", "value": round(share, 4), "waited_share": round(waited, 4),
                        "threshold": limit, "other_processes": host.get("busiest_others") or [],
                        "text": Text("other processes used {share} of a core on this process's cores, and its threads "
                                     "waited {waited} of the window for a CPU (threshold {threshold})",
                                     share=Figure(share, 2, grouped=False), waited=Figure(waited, 2, grouped=False),
                                     threshold=Figure(limit, 2, grouped=False))})
    if rule["throttling"] and gpu.get("throttle_reasons"):
        reasons = ", ".join(gpu["throttle_reasons"])
        crossed.append({"what": "throttling", "value": gpu["throttle_reasons"], "threshold": None,
                        "text": Text("the GPU throttled its clocks during the window: {reasons}", reasons=reasons)})
    if rule.get("power_capping", OPTIONAL["power_capping"]) and gpu.get("power_capping"):
        crossed.append({"what": "power_capping", "value": gpu["power_capping"], "threshold": None,
                        "violation_delta": gpu.get("violation_delta") or {},
                        "text": Text("the GPU held its clocks under its power limit during the window: {reasons}",
                                     reasons=", ".join(gpu["power_capping"]))})
    others = gpu.get("other_processes")
    if rule["other_gpu_processes"] and others:
        pids = ", ".join(str(process.get("pid")) for process in others)
        crossed.append({"what": "other_gpu_processes", "value": len(others), "threshold": 0,
                        "text": Text("other processes computed on the trial's GPU during the window (pid {pids})", pids=pids)})
    return crossed
