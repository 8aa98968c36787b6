"""Disturbed trials in the records (#49): which ones the decision sets aside, which run --resume --rerun-disturbed
measures again, and a variant whose spread says its result is unstable.

A trial is disturbed when its record's interference object says so (the runner judged it against the protocol's rule
before writing it). A record written before interference was read is not measured: never disturbed, never clean.
"""

from __future__ import annotations

import statistics

from iteralab.core.language import Figure, Joined, Text

# The rule a protocol without [protocol.disturbance] runs under (the runner's defaults: iteralab.machine.disturbance).
DEFAULTS = {"other_cpu_share": 0.10, "throttling": True, "other_gpu_processes": True, "use_disturbed": False,
            "unstable_ratio": 1.5}
# Keys a rule holds only where the campaign file declares them, so that every rule written before keeps its dict (and its
# protocol's fingerprint). power_capping: sw_power_cap, NVML's power violation time and AMD's ppt are what an H100 or
# MI300X does under any full load: recorded with their figures, a disturbance only where declared true (#63). Thermal and
# hardware slowdowns are "throttling".
OPTIONAL = {"power_capping": False}


def rule_of(protocol: dict | None) -> dict:
    """Return the disturbance rule a protocol holds, or the defaults where it declares none."""
    return {**DEFAULTS, **((protocol or {}).get("disturbance") or {})}


def is_disturbed(trial: dict) -> bool:
    """Tell whether the runner marked TRIAL disturbed (False where it was not measured: see ``measured``)."""
    return (trial.get("interference") or {}).get("disturbed") is True


def measured(trial: dict) -> bool:
    return isinstance(trial.get("interference"), dict)


def disturbance_cells(trial: dict) -> dict:
    """The trial table's cells: disturbed (None where not measured) and what crossed the rule, in words."""
    found = trial.get("interference")
    if not isinstance(found, dict):
        return {"disturbed": None, "disturbance": None}
    return {"disturbed": found.get("disturbed"), "disturbance": "; ".join(c["text"] for c in found.get("crossed") or []) or None}


def set_aside(trials, manifests: dict) -> dict[str, str]:
    """Map each disturbed trial whose protocol does not let the decision use it to 'disturbed'."""
    return {t["record_id"]: "disturbed" for t in trials if is_disturbed(t)
            and not rule_of((manifests.get(t.get("manifest_id")) or {}).get("protocol"))["use_disturbed"]}


def set_aside_in(view) -> dict[str, str]:
    """Map each disturbed trial of a campaign VIEW that the decision sets aside to 'disturbed' (as set_aside)."""
    return set_aside(view.trials, {manifest["record_id"]: manifest for manifest in view.manifests})


def rerun_targets(manifest: dict, trials, superseded: set[str]) -> dict[int, str]:
    """Sequence -> trial id, for each repetition of MANIFEST's run whose latest attempt ended ok but disturbed."""
    latest: dict[int, dict] = {}
    for trial in sorted(trials, key=lambda t: t["created_at"]):
        if trial["record_id"] not in superseded:
            latest[trial["sequence"]] = trial
    return {sequence: trial["record_id"] for sequence, trial in latest.items()
            if trial["status"] == "ok" and is_disturbed(trial)}


def unstable(summary, protocol: dict | None, excluded=frozenset()) -> Text | None:
    """Say that SUMMARY's spread is unstable: its slowest successful repetition (disturbed ones too, those an exclusion
    record sets aside not) is above the protocol's ratio times their median. Name its disturbed trials, or say none was
    measured as disturbed; None when the spread is within the ratio."""
    ok = [t for t in summary.trials if t["status"] == "ok" and t["record_id"] not in excluded]
    ratio = spread_ratio([t["phases"]["measured_window"]["duration_ns"] / 1e9 for t in ok])
    rule = rule_of(protocol)
    if ratio is None or ratio <= rule["unstable_ratio"]:
        return None
    disturbed = [t["record_id"] for t in ok if is_disturbed(t)]
    unmeasured = sum(1 for t in ok if not measured(t))
    said = Text("{label}: the result may be unstable. Its slowest repetition is {ratio} times the median of its "
                "repetitions, above the protocol's {limit}.", label=summary.label, ratio=Figure(ratio, 1, grouped=False),
                limit=Figure(rule["unstable_ratio"], 2, grouped=False))
    if disturbed:
        cause = (Text("Trials measured as disturbed: {trials}; the decision sets them aside (the protocol's use_disturbed "
                      "is off).", trials=", ".join(disturbed)) if not rule["use_disturbed"] else
                 Text("Trials measured as disturbed: {trials}; the protocol lets the decision use them.",
                      trials=", ".join(disturbed)))
    elif unmeasured:
        cause = Text("None was measured as disturbed; {count} of its trials were recorded before disturbance was "
                     "measured.", count=unmeasured)
    else:
        cause = Text("None of its trials was measured as disturbed: something the runner does not read (memory, disk, "
                     "another virtual machine on the host) may have slowed it.")
    return Joined(" ", [said, cause, Text("Run on a quiet machine and measure the slow repetitions again "
                                          "(iteralab run --resume --rerun-disturbed).")])


def unstable_statements(view) -> list[Text]:
    """Return the unstable-spread statement of every variant of a campaign view that has one."""
    return [found for summary in view.variants if (found := unstable(summary, view.protocol, view.excluded)) is not None]


def spread_ratio(seconds: list[float]) -> float | None:
    """Slowest over median of SECONDS, or None with fewer than two."""
    return max(seconds) / statistics.median(seconds) if len(seconds) >= 2 and statistics.median(seconds) else None
