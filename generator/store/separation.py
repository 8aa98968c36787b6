"""Whether the repetitions separate two configurations: raw durations, never a test of significance."""

from __future__ import annotations


def separate(first, second) -> dict:
    """Compare two variants' raw durations: separated only when ranges do not overlap and spread < gap."""
    names = f"{first.label} and {second.label}"
    if len(first.seconds) < 2 or len(second.seconds) < 2:
        caused = [f"{s.label} has {len(s.seconds)} left, {s.excluded_successes} excluded" for s in (first, second)
                  if len(s.seconds) < 2 and s.excluded_successes]
        because = f" Exclusions caused it: {'; '.join(caused)}." if caused else ""
        return {"pair": (first.label, second.label), "separated": None,
                "text": f"{names}: cannot be compared, fewer than two successful trials for at least one of them.{because}"}
    gap = abs(first.median - second.median)
    spread = max(first.maximum - first.minimum, second.maximum - second.minimum)
    overlap = max(first.minimum, second.minimum) <= min(first.maximum, second.maximum)
    if overlap or spread >= gap:
        return {"pair": (first.label, second.label), "separated": False,
                "text": (f"{names}: the series has not separated them. The spread of the repetitions "
                         f"({spread:.3f} s) is comparable to the difference between medians ({gap:.3f} s)"
                         + (" and their ranges overlap." if overlap else "."))}
    fast, slow = (first, second) if first.median < second.median else (second, first)
    return {"pair": (first.label, second.label), "separated": True,
            "text": (f"{fast.label} was faster than {slow.label} in every repetition: slowest {fast.maximum:.3f} s "
                     f"against fastest {slow.minimum:.3f} s; medians {fast.median:.3f} s and {slow.median:.3f} s "
                     f"({(slow.median - fast.median) / slow.median:.0%} less time).")}

