"""Pure figures of a serving trial (#64): latency quantiles with their intervals, goodput, capacity, cost, agreement."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from iteralab.money.rates import RULE, rate

METHOD = "order statistics"
AGREEMENT_METHOD = "text, edges trimmed"  # transformers serve gives text, not token ids, so text is what can be compared
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
NS_PER_MS = 1_000_000
SECONDS_PER_HOUR = 3600
FIRST_IDS = 20
# The load generator is one Python process whose event loop holds one core at most (one GIL). Busy 0.9 of that core,
# its loop is nearly never idle: requests leave late and token arrivals are stamped late, so the latencies measured may
# be the client's own queue rather than the server's. Below that, the loop still waits on the network most of the time.
CLIENT_BOUND_CORES = 0.9
ROUNDING = RULE


def _share(value, name: str) -> Fraction:
    """Read VALUE exactly as written (0.99 is 99/100, not the nearest binary float); refuse one outside (0, 1)."""
    exact = Fraction(str(value))
    if not 0 < exact < 1:
        raise ValueError(f"{name} must lie strictly between 0 and 1, not {value!r}")
    return exact


def _percent(value) -> str:
    return f"{(Decimal(str(value)) * 100).normalize():f}%"


def requests_needed(q, confidence=0.95) -> int:
    """Return the fewest requests whose extreme order statistics bound the Q-quantile at CONFIDENCE, each tail ≤ α/2."""
    quantile_share, tail = _share(q, "q"), (1 - _share(confidence, "confidence")) / 2
    needed = 1
    # [X(1), X(n)] misses the quantile below with probability (1-q)^n and above with q^n: both must fall to α/2.
    for p in (quantile_share, 1 - quantile_share):
        n = max(1, math.ceil(math.log(tail) / math.log(p)))  # a float guess, then settled exactly both ways
        while p**n > tail:
            n += 1
        while n > 1 and p ** (n - 1) <= tail:
            n -= 1
        needed = max(needed, n)
    return needed


def _ranks(n: int, q: Fraction, confidence: Fraction) -> tuple[int, int]:
    """Return 1-based ranks (l, u): P(B ≤ l-1) ≤ α/2 with l largest, P(B ≥ u) ≤ α/2 with u smallest, B ~ Bin(n, q)."""
    a, c = q.numerator, q.denominator - q.numerator
    alpha = 1 - confidence
    denominator = q.denominator**n
    low_limit = alpha.numerator * denominator  # S/D ≤ α/2  ⇔  2·α_den·S ≤ α_num·D
    high_limit = (2 * alpha.denominator - alpha.numerator) * denominator  # S/D ≥ 1 - α/2
    term, cumulative, low = c**n, 0, 0  # term: comb(n, k)·a^k·c^(n-k), the numerator of P(B = k) over D
    for k in range(n):
        cumulative += term
        if 2 * alpha.denominator * cumulative <= low_limit:
            low = k + 1
        if 2 * alpha.denominator * cumulative >= high_limit:
            return low, k + 1
        term = term * (n - k) * a // ((k + 1) * c)  # exact: the next term is an integer
    return low, n + 1  # not reached once n ≥ requests_needed: q^n ≤ α/2 puts the upper rank at n at most


def quantile(values, q, *, confidence=0.95) -> dict:
    """Return the Q-quantile of the requests (nearest rank) with a distribution-free interval from order statistics."""
    quantile_share, level = _share(q, "q"), _share(confidence, "confidence")
    ordered = sorted(values)
    n = len(ordered)
    found = {"q": q, "value": None, "low": None, "high": None, "low_rank": None, "high_rank": None, "requests": n,
             "confidence": confidence, "method": METHOD, "reason": None}
    if not n:
        found["reason"] = "no request was measured"
        return found
    # Nearest rank, the smallest value with at least q of the requests at or under it: a latency a request really had.
    found["value"] = ordered[max(1, math.ceil(quantile_share * n)) - 1]
    needed = requests_needed(quantile_share, level)
    if n < needed:
        found["reason"] = (f"a {_percent(confidence)} interval of the {q} quantile needs at least {needed} requests; "
                           f"{n} measured")
        return found
    low, high = _ranks(n, quantile_share, level)
    found.update(low=ordered[low - 1], high=ordered[high - 1], low_rank=low, high_rank=high)
    return found


def _tpot_missing(row: dict) -> str | None:
    """Say why ROW has no time per output token, or None when it has one."""
    tokens = row.get("output_tokens")
    if row.get("status") != "ok":
        return "the request failed"
    if tokens is None:
        return "the server gave no output token count"
    if tokens <= 1:
        return "one output token or none: no time between tokens"
    if row.get("first_token_ns") is None or row.get("end_ns") is None:
        return "no first token or end time"
    return None


def time_per_output_token_ms(row: dict) -> float | None:
    """Return (end - first token) / (output tokens - 1) in ms, DistServe's and vLLM's TPOT; None where undefined."""
    if _tpot_missing(row) is not None:
        return None
    return (row["end_ns"] - row["first_token_ns"]) / (row["output_tokens"] - 1) / NS_PER_MS


def per_token(rows) -> bool:
    """Tell whether every row's chunks are known to hold one token each, so gaps between chunks are per token."""
    rows = list(rows)
    return bool(rows) and all(row.get("chunk_tokens") is not None and all(count == 1 for count in row["chunk_tokens"])
                              for row in rows)


def meets(row: dict, objective: dict) -> bool:
    """Judge ROW against OBJECTIVE ({"ttft_ms", "tpot_ms"}, met at or under); one output token is judged on TTFT alone."""
    # A failed or empty answer never meets. One output token has no TPOT: TTFT alone judges it. A longer answer whose
    # token count the server did not give cannot be shown to meet the TPOT, so it does not.
    if row.get("status") != "ok" or row.get("empty_output") or row.get("ttft_ms") is None:
        return False
    if row["ttft_ms"] > objective["ttft_ms"]:
        return False
    tokens = row.get("output_tokens")
    if tokens is not None and tokens <= 1:
        return True
    tpot = time_per_output_token_ms(row)
    return tpot is not None and tpot <= objective["tpot_ms"]


def _token_sum(rows: list[dict], key: str, what: str, reasons: dict) -> int | None:
    """Sum the server's output token counts over ROWS; None, with the reason under KEY, if one count is missing."""
    missing = sum(row.get("output_tokens") is None for row in rows)
    if missing:
        reasons[key] = f"{missing} of {len(rows)} {what} requests lack the server's output token count"
        return None
    return sum(row["output_tokens"] for row in rows)


def _latencies(ok: list[dict]) -> dict:
    """Return TTFT and TPOT quantiles over the answered requests, and why some have no TPOT."""
    ttft = [row["ttft_ms"] for row in ok if row.get("ttft_ms") is not None]
    tpot = [value for value in map(time_per_output_token_ms, ok) if value is not None]
    unmeasured: dict[str, int] = {}
    for reason in filter(None, map(_tpot_missing, ok)):
        unmeasured[reason] = unmeasured.get(reason, 0) + 1
    return {"ttft_ms": {name: quantile(ttft, q) for name, q in QUANTILES},
            "tpot_ms": {name: quantile(tpot, q) for name, q in QUANTILES},
            "tpot_unmeasured": {"requests": sum(unmeasured.values()), "reasons": unmeasured}}


def _client(client_cpu_s, duration_s: float, cpus: int, reasons: dict) -> dict:
    """Return the load generator's CPU in cores and as a share of the machine, and whether it may be the bottleneck."""
    if client_cpu_s is None:
        for key in ("client_cores", "client_cpu_share", "client_bound"):
            reasons[key] = "the load generator's CPU time was not measured"
        return {"client_cpu_s": None, "client_cores": None, "client_cpu_share": None, "client_bound": None}
    cores = client_cpu_s / duration_s
    return {"client_cpu_s": client_cpu_s, "client_cores": cores, "client_cpu_share": client_cpu_s / (duration_s * cpus),
            "client_bound": cores >= CLIENT_BOUND_CORES}


def _accepted(meeting: list[dict], rows: list[dict], reasons: dict) -> tuple[int | None, int | None]:
    """Count requests meeting the objective that the quality check accepted, and their output tokens."""
    if not any("accepted" in row for row in rows):
        for key in ("accepted_requests", "accepted_output_tokens"):
            reasons[key] = "no request carries a quality check's verdict ('accepted'): agreement() was not run"
        return None, None
    accepted = [row for row in meeting if row.get("accepted") is True]  # no verdict counts as not accepted
    return len(accepted), _token_sum(accepted, "accepted_output_tokens", "accepted", reasons)


def level_figures(rows, *, objective: dict, share, client_cpu_s, duration_s: float, cpus: int) -> dict:
    """Sum up one load level: counts, rates, goodput, the share meeting OBJECTIVE, latency quantiles, the client."""
    rows = list(rows)
    if not duration_s or duration_s <= 0:
        raise ValueError(f"the level's duration must be positive seconds, not {duration_s!r}")
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
        raise ValueError(f"cpus must be a whole number of at least 1, not {cpus!r}")
    reasons: dict[str, str] = {}
    ok = [row for row in rows if row.get("status") == "ok"]
    meeting = [row for row in rows if meets(row, objective)]
    output_tokens = _token_sum(ok, "output_tokens", "answered", reasons)
    accepted_requests, accepted_tokens = _accepted(meeting, rows, reasons)
    if output_tokens is None:
        reasons["output_tokens_per_s"] = reasons["output_tokens"]
    share_meeting = len(meeting) / len(rows) if rows else None
    by_token = per_token(rows)
    if not rows:
        reasons["share_meeting"] = "no request was sent at this level"
    return {
        "requests": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
        "empty_outputs": sum(bool(row.get("empty_output")) for row in ok), "meeting": len(meeting),
        "accepted_requests": accepted_requests, "output_tokens": output_tokens, "accepted_output_tokens": accepted_tokens,
        "duration_s": duration_s, "requests_per_s": len(ok) / duration_s,
        "output_tokens_per_s": None if output_tokens is None else output_tokens / duration_s,
        "goodput_requests_per_s": len(meeting) / duration_s,
        "objective": dict(objective), "share": share, "share_meeting": share_meeting,
        # Compared as exact fractions: 7 of 10 meets a declared 0.7 whatever binary floats make of either side.
        "meets_share": bool(rows) and Fraction(len(meeting), len(rows)) >= Fraction(str(share)),
        **_latencies(ok),
        "per_token": by_token, "gaps": "per token" if by_token else "per chunk",
        **_client(client_cpu_s, duration_s, cpus, reasons),
        "reasons": reasons,
    }


def _capacity_caveats(ordered: list[dict], best: dict) -> tuple[list, list[str]]:
    """List the lower levels that failed the objective, and what may make the capacity read too low or too high."""
    failing = [f["level"] for f in ordered if f["level"] < best["level"] and not f["meets_share"]]
    caveats = []
    if failing:
        caveats.append(f"lower level(s) {', '.join(map(str, failing))} did not meet the objective: meeting it is not "
                       "monotonic in the level here, so a repeat of the trial may move the capacity")
    if best.get("client_bound"):
        caveats.append(f"the load generator used {best['client_cores']:.2f} cores at this level: its own delays are "
                       "in the latencies")
    above = [f["level"] for f in ordered if f["level"] > best["level"] and f.get("client_bound")]
    if above:
        caveats.append(f"the load generator may have been the bottleneck at level(s) {', '.join(map(str, above))} "
                       "above it: the server's capacity may be higher")
    return failing, caveats


def capacity(levels: list[dict]) -> dict:
    """Return the highest declared level where at least the declared share of requests meets the objective."""
    # Exactly the rule: a lower level that fails does not lower the capacity; it is reported as a caveat.
    ordered = sorted(levels, key=lambda figures: figures["level"])
    seen = [figures["level"] for figures in ordered]
    if len(set(seen)) != len(seen):
        raise ValueError(f"each level is declared once; these levels repeat: {seen}")
    found = {"level": None, "reason": None, "figures": None, "lower_levels_failing": [], "caveats": []}
    if not ordered:
        found["reason"] = "no level was run"
        return found
    meeting = [figures for figures in ordered if figures["meets_share"]]
    if not meeting:
        measured = [f for f in ordered if f["share_meeting"] is not None]
        nearest = max(measured, key=lambda f: f["share_meeting"], default=None)
        best = (f"; the most was {nearest['share_meeting']:.1%} at level {nearest['level']}, against the declared "
                f"{_percent(nearest['share'])}" if nearest else "")
        found["reason"] = f"no level meets the objective{best}"
        return found
    best = meeting[-1]
    found["lower_levels_failing"], found["caveats"] = _capacity_caveats(ordered, best)
    found.update(level=best["level"], figures=best)
    return found


def cost(*, price_per_hour: Decimal, level_figures: dict | None) -> dict:
    """Return the cost per million accepted output tokens and per 1,000 accepted requests at the capacity level."""
    if not isinstance(price_per_hour, Decimal):
        raise TypeError(f"the price per hour is exact money, a Decimal, not {type(price_per_hour).__name__}")
    found = {"price_per_hour": price_per_hour, "per_million_accepted_output_tokens": None,
             "per_thousand_accepted_requests": None, "accepted_output_tokens": None, "accepted_requests": None,
             "duration_s": None, "rounding": ROUNDING, "reasons": {}}
    reasons = found["reasons"]
    if level_figures is None:
        reasons["per_million_accepted_output_tokens"] = reasons["per_thousand_accepted_requests"] = \
            "no level meets the objective"
        return found
    duration = Decimal(str(level_figures["duration_s"]))  # the seconds as measured, not their binary float
    found["duration_s"] = level_figures["duration_s"]
    for key, count_key, per, none_reason in (
            ("per_million_accepted_output_tokens", "accepted_output_tokens", 10**6,
             "no accepted output token at the objective"),
            ("per_thousand_accepted_requests", "accepted_requests", 1000, "no accepted request at the objective")):
        count = found[count_key] = level_figures[count_key]
        if count is None:
            reasons[key] = level_figures["reasons"].get(count_key, f"the level's {count_key} is unknown")
        elif count == 0:
            reasons[key] = none_reason
        else:
            # price/h ÷ (count/duration × 3600 per hour) × PER, multiplied out so one division is rounded, once
            found[key] = rate(price_per_hour * duration * per / (Decimal(count) * SECONDS_PER_HOUR))
    return found


def _trimmed(text) -> str:
    return (text or "").strip()


def agreement(rows, reference: dict) -> dict:
    """Compare each answered row's text with the reference of its id, edges trimmed; set row["accepted"] on every row."""
    compared = agreeing = not_in_reference = not_ok = 0
    disagreeing_ids = []
    for row in rows:
        row["accepted"] = False
        if row.get("status") != "ok":
            not_ok += 1
        elif row["id"] not in reference:
            not_in_reference += 1
        else:
            compared += 1
            if _trimmed(row.get("output_text")) == _trimmed(reference[row["id"]]):
                agreeing += 1
                row["accepted"] = True
            elif len(disagreeing_ids) < FIRST_IDS:
                disagreeing_ids.append(row["id"])
    return {"compared": compared, "agreeing": agreeing, "disagreeing": compared - agreeing,
            "share": agreeing / compared if compared else None, "method": AGREEMENT_METHOD,
            "disagreeing_ids": disagreeing_ids, "not_in_reference": not_in_reference, "not_ok": not_ok,
            "reason": None if compared else "no answered request has a reference output to compare with"}
