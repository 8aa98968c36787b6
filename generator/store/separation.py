"""Whether the repetitions separate two configurations: raw durations, never a test of significance."""

from __future__ import annotations

from iteralab.core.language import Figure, Joined, Text

# The protocol's repetitions (SPEC: five complete trials per variant): fewer can show a gap, never establish one.
SEPARATING_REPETITIONS = 5


def separate(first, second) -> dict:
    """Compare two variants' raw durations: separated only when ranges do not overlap and spread < gap."""
    if len(first.seconds) < 2 or len(second.seconds) < 2:
        caused = [Text("{label} has {left} left, {count} excluded", label=s.label, left=len(s.seconds), count=s.excluded_successes)
                  for s in (first, second) if len(s.seconds) < 2 and s.excluded_successes]
        text = Text("{first} and {second}: cannot be compared, fewer than two successful trials for at least one of them.",
                    first=first.label, second=second.label)
        if caused:
            text = Joined(" ", [text, Text("Exclusions caused it: {causes}.", causes=Joined("; ", caused))])
        return {"pair": (first.label, second.label), "separated": None, "text": text}
    gap = abs(first.median - second.median)
    spread = max(first.maximum - first.minimum, second.maximum - second.minimum)
    overlap = max(first.minimum, second.minimum) <= min(first.maximum, second.maximum)
    values = {"first": first.label, "second": second.label, "spread": Figure(spread, 3, grouped=False),
              "gap": Figure(gap, 3, grouped=False)}
    if overlap or spread >= gap:
        return {"pair": (first.label, second.label), "separated": False,
                "text": (Text("{first} and {second}: the series has not separated them. The spread of the repetitions "
                              "({spread} s) is comparable to the difference between medians ({gap} s) and their ranges "
                              "overlap.", **values) if overlap else
                         Text("{first} and {second}: the series has not separated them. The spread of the repetitions "
                              "({spread} s) is comparable to the difference between medians ({gap} s).", **values))}
    fast, slow = (first, second) if first.median < second.median else (second, first)
    shortest = min(len(first.seconds), len(second.seconds))
    if shortest < SEPARATING_REPETITIONS:
        return {"pair": (first.label, second.label), "separated": None,
                "text": Text("{first} and {second}: the series is too short to separate them, {count} successful "
                             "repetitions for at least one of them where the protocol asks for {needed}; their ranges do "
                             "not overlap (medians {fast_median} s for {fast} and {slow_median} s for {slow}) but so few "
                             "repetitions cannot say it holds.", count=shortest, needed=SEPARATING_REPETITIONS,
                             fast=fast.label, slow=slow.label, fast_median=Figure(fast.median, 3, grouped=False),
                             slow_median=Figure(slow.median, 3, grouped=False), **values)}
    return {"pair": (first.label, second.label), "separated": True,
            "text": Text("{fast} was faster than {slow} in every repetition: slowest {slowest} s against fastest {fastest} s; "
                         "medians {fast_median} s and {slow_median} s ({percent}% less time).", fast=fast.label, slow=slow.label,
                         slowest=Figure(fast.maximum, 3, grouped=False), fastest=Figure(slow.minimum, 3, grouped=False),
                         fast_median=Figure(fast.median, 3, grouped=False), slow_median=Figure(slow.median, 3, grouped=False),
                         percent=Figure((slow.median - fast.median) / slow.median * 100, 0, grouped=False))}

