"""Serving trial figures (#64): quantile intervals, TPOT, the objective, goodput, capacity, cost, agreement."""

from decimal import Decimal
from fractions import Fraction
from math import comb

import pytest

from iteralab.money.rates import rate
from iteralab.serving import figures as served
from iteralab.serving.figures import (
    agreement,
    capacity,
    cost,
    level_figures,
    meets,
    per_token,
    quantile,
    requests_needed,
    time_per_output_token_ms,
)

OBJECTIVE = {"ttft_ms": 200, "tpot_ms": 50}
MS = 1_000_000  # ns


def _row(entry_id, *, ttft_ms=100, tokens=10, tpot_ms=40, status="ok", chunks=None, text="answer", accepted=None):
    """Build a request row: first token TTFT after sending, then TOKENS - 1 gaps of TPOT each."""
    failed = status != "ok"
    first = None if failed or ttft_ms is None else ttft_ms * MS
    end = (first or 0) + ((tokens or 1) - 1) * tpot_ms * MS
    row = {"id": entry_id, "level": 4, "arrival": "concurrency", "sent_ns": 0, "first_token_ns": first, "end_ns": end,
           "ttft_ms": None if failed else ttft_ms, "latency_ms": end / MS, "chunk_tokens": chunks, "prompt_tokens": 12,
           "output_tokens": None if failed else tokens, "output_text": "" if failed else text, "status": status,
           "error": "HTTP 500" if failed else None, "empty_output": not failed and not text}
    if accepted is not None:
        row["accepted"] = accepted
    return row


def _binomial_ranks(n, q, confidence):
    """Find the interval ranks by brute force over every rank, from the exact binomial probabilities."""
    q, alpha = Fraction(q), 1 - Fraction(confidence)
    pmf = [comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]  # P(B = k), B ~ Binomial(n, q)
    low = max(rank for rank in range(1, n + 1) if sum(pmf[:rank]) <= alpha / 2)  # P(B < rank) ≤ α/2
    high = min(rank for rank in range(1, n + 1) if sum(pmf[rank:]) <= alpha / 2)  # P(B ≥ rank) ≤ α/2
    return low, high, sum(pmf[low:high])  # coverage: P(low ≤ B ≤ high - 1)


@pytest.mark.parametrize(("q", "value", "ranks"), [("0.5", 50, (40, 61)), ("0.9", 90, (84, 96))])
def test_quantile_interval_ranks_are_the_exact_binomial_ones(q, value, ranks):
    """Quantile interval: ranks l, u with P(B < l) ≤ α/2 and P(B ≥ u) ≤ α/2, l largest and u smallest, B ~ Bin(n, q)."""
    found = quantile(list(range(100, 0, -1)), q)
    low, high, coverage = _binomial_ranks(100, q, "0.95")
    assert (low, high) == ranks  # 40 and 61 for the median: Le Boudec, Performance Evaluation, table A.1
    assert (found["low_rank"], found["high_rank"]) == ranks
    assert (found["value"], found["low"], found["high"]) == (value, low, high)  # the values 1..100 are their ranks
    assert coverage >= Fraction(95, 100)
    assert found["requests"] == 100 and found["method"] == "order statistics" and found["reason"] is None


def test_quantile_p99_of_100_requests_has_no_interval_and_says_how_many_it_needs():
    """Quantile interval: when n is too small, the value stays and the reason names the requests the interval needs."""
    found = quantile(range(1, 101), 0.99)
    assert found["value"] == 99
    assert found["low"] is found["high"] is found["low_rank"] is None
    # X(n) lies above the 0.99 quantile with probability 0.99^n: it must fall to 0.025, first at n = 368
    assert Fraction(99, 100) ** 367 > Fraction(1, 40) >= Fraction(99, 100) ** 368
    assert requests_needed(0.99) == 368
    assert found["reason"] == "a 95% interval of the 0.99 quantile needs at least 368 requests; 100 measured"


def test_quantile_median_interval_starts_at_six_requests():
    """Quantile interval: the median's needs 0.5^n ≤ 0.025, so 5 requests give none and 6 give [X(1), X(6)]."""
    assert Fraction(1, 2) ** 5 > Fraction(1, 40) >= Fraction(1, 2) ** 6
    five, six = quantile([5, 1, 4, 2, 3], 0.5), quantile([6, 5, 1, 4, 2, 3], 0.5)
    assert five["low"] is None and "needs at least 6 requests; 5 measured" in five["reason"]
    assert (six["low_rank"], six["high_rank"], six["low"], six["high"]) == (1, 6, 1, 6)
    assert requests_needed(0.5, 0.99) == 8  # 0.5^7 = 0.0078 > 0.005 ≥ 0.5^8 = 0.0039


def test_quantile_tails_of_exactly_half_alpha_are_accepted():
    """Quantile interval: a tail exactly α/2 is allowed; 3 requests at 75 % have tails 1/8 each, coverage 3/4 exactly."""
    found = quantile([3, 1, 2], 0.5, confidence=0.75)
    assert _binomial_ranks(3, "0.5", "0.75") == (1, 3, Fraction(3, 4))
    assert (found["low_rank"], found["high_rank"], found["low"], found["high"]) == (1, 3, 1, 3)
    assert requests_needed(0.5, 0.75) == 3  # 0.5^3 = 1/8, exactly α/2


def test_quantile_value_is_the_nearest_rank():
    """Quantile value: the smallest observed value with at least q of the requests at or under it, never interpolated."""
    assert quantile([10, 20], 0.5)["value"] == 10
    assert quantile([30, 10, 20], 0.5)["value"] == 20
    assert quantile(range(1, 11), 0.9)["value"] == 9  # 0.9 × 10 is 9 exactly, not the float 9.000000000000002


def test_quantile_of_no_request_is_none_with_a_reason():
    """Quantile: an empty population gives no value, with its reason, never 0."""
    found = quantile([], 0.5)
    assert found["value"] is None and found["requests"] == 0 and found["reason"] == "no request was measured"
    with pytest.raises(ValueError):
        quantile([1], 1)


def test_tpot_is_the_decode_time_over_the_tokens_after_the_first():
    """TPOT: (end - first token) / (output tokens - 1) in ms; None for one token, an unknown count or a failure."""
    row = _row("a", ttft_ms=100, tokens=11, tpot_ms=50)
    assert (row["end_ns"] - row["first_token_ns"]) == 500 * MS
    assert time_per_output_token_ms(row) == 50.0
    assert time_per_output_token_ms(_row("b", tokens=1)) is None
    assert time_per_output_token_ms({**row, "output_tokens": None}) is None
    assert time_per_output_token_ms({**row, "status": "error"}) is None


def test_per_token_only_when_every_chunk_holds_one_token():
    """Per token: every row's chunk_tokens known and all 1; one chunk of 2, one unknown row or no row gives per chunk."""
    assert per_token([_row("a", chunks=[1, 1, 1]), _row("b", chunks=[1])]) is True
    assert per_token([_row("a", chunks=[1, 1, 1]), _row("b", chunks=[1, 2])]) is False
    assert per_token([_row("a", chunks=[1, 1]), _row("b", chunks=None)]) is False
    assert per_token([]) is False


def test_meets_at_or_under_both_limits():
    """Objective: TTFT and TPOT met at or under the limits; a failed or empty answer or an unknown count never meets."""
    assert meets(_row("a", ttft_ms=200, tpot_ms=50), OBJECTIVE)
    assert not meets(_row("a", ttft_ms=201, tpot_ms=50), OBJECTIVE)
    assert not meets(_row("a", ttft_ms=200, tpot_ms=51), OBJECTIVE)
    assert not meets({**_row("a"), "status": "error"}, OBJECTIVE)
    assert not meets(_row("a", text=""), OBJECTIVE)
    assert not meets({**_row("a"), "output_tokens": None}, OBJECTIVE)


def test_one_token_is_judged_on_ttft_alone():
    """Objective: one output token has no TPOT, so TTFT alone judges it, however late the stream ended."""
    row = {**_row("a", ttft_ms=150, tokens=1), "end_ns": 10_000 * MS}
    assert meets(row, OBJECTIVE)
    assert not meets({**row, "ttft_ms": 250}, OBJECTIVE)


def _level_rows():
    """Ten requests worked by hand: 7 meet (6 + a one-token one), one slow TTFT, one slow TPOT, one failure."""
    rows = [_row(f"m{i}", accepted=i < 4) for i in range(6)]  # m0..m3 accepted, m4, m5 not
    rows += [_row("one", ttft_ms=150, tokens=1), _row("slow-ttft", ttft_ms=300, accepted=True),
             _row("slow-tpot", tpot_ms=60), _row("failed", status="error")]
    return rows


def test_level_figures_worked_by_hand():
    """Level figures: counts, rates over the duration, goodput of the rows meeting, the client's cores and share."""
    found = level_figures(_level_rows(), objective=OBJECTIVE, share=0.7, client_cpu_s=9.0, duration_s=10.0, cpus=4)
    assert (found["requests"], found["ok"], found["failed"], found["meeting"]) == (10, 9, 1, 7)
    assert found["output_tokens"] == 6 * 10 + 1 + 10 + 10
    assert found["requests_per_s"] == 0.9 and found["output_tokens_per_s"] == 8.1
    assert found["goodput_requests_per_s"] == 0.7 and found["share_meeting"] == 0.7
    # meeting and accepted: m0..m3, 10 tokens each; slow-ttft was accepted but missed the objective
    assert (found["accepted_requests"], found["accepted_output_tokens"]) == (4, 40)
    assert found["ttft_ms"]["p50"]["value"] == 100 and found["ttft_ms"]["p90"]["value"] == 300
    assert found["ttft_ms"]["p50"]["requests"] == 9 and found["ttft_ms"]["p90"]["low"] is None  # p90 needs 36
    assert found["tpot_ms"]["p50"]["requests"] == 8  # the one-token answer has none
    assert found["tpot_unmeasured"] == {"requests": 1, "reasons": {"one output token or none: no time between tokens": 1}}
    assert found["client_cores"] == 0.9 and found["client_cpu_share"] == 0.225
    assert found["per_token"] is False and found["gaps"] == "per chunk" and found["reasons"] == {}


def test_failures_count_against_the_share_meeting():
    """Level figures: share meeting = meeting / every request sent, failures included, compared exactly with the share."""
    rows = _level_rows()
    at = level_figures(rows, objective=OBJECTIVE, share=0.7, client_cpu_s=1.0, duration_s=10.0, cpus=4)
    above = level_figures(rows, objective=OBJECTIVE, share=0.75, client_cpu_s=1.0, duration_s=10.0, cpus=4)
    assert at["meets_share"] is True  # 7 of 10 meets a declared 0.7
    assert above["meets_share"] is False  # 7 of 9 answered would be 0.78 ≥ 0.75: the failure must count


def test_client_bound_from_nine_tenths_of_a_core():
    """Client bound: the load generator's CPU seconds over the duration at or above CLIENT_BOUND_CORES (0.9)."""
    assert served.CLIENT_BOUND_CORES == 0.9
    rows = _level_rows()
    bound = level_figures(rows, objective=OBJECTIVE, share=0.7, client_cpu_s=9.0, duration_s=10.0, cpus=16)
    free = level_figures(rows, objective=OBJECTIVE, share=0.7, client_cpu_s=8.9, duration_s=10.0, cpus=1)
    assert bound["client_bound"] is True and free["client_bound"] is False  # cores, not the machine's share, decide
    unmeasured = level_figures(rows, objective=OBJECTIVE, share=0.7, client_cpu_s=None, duration_s=10.0, cpus=4)
    assert unmeasured["client_bound"] is None and unmeasured["client_cpu_share"] is None
    assert unmeasured["reasons"]["client_bound"] == "the load generator's CPU time was not measured"


def test_unknown_counts_give_none_with_the_reason():
    """Level figures: an answered row without the server's count makes the token sum None with its reason, not 0."""
    rows = [{**row, "output_tokens": None} if row["id"] == "slow-ttft" else row for row in _level_rows()]
    found = level_figures(rows, objective=OBJECTIVE, share=0.7, client_cpu_s=1.0, duration_s=10.0, cpus=4)
    assert found["output_tokens"] is None and found["output_tokens_per_s"] is None
    assert found["reasons"]["output_tokens"] == "1 of 9 answered requests lack the server's output token count"
    unchecked = [{key: value for key, value in row.items() if key != "accepted"} for row in _level_rows()]
    found = level_figures(unchecked, objective=OBJECTIVE, share=0.7, client_cpu_s=1.0, duration_s=10.0, cpus=4)
    assert found["accepted_requests"] is None and found["accepted_output_tokens"] is None
    assert "agreement() was not run" in found["reasons"]["accepted_output_tokens"]


def _figures(level, meets_share, share_meeting, client_bound=False):
    return {"level": level, "meets_share": meets_share, "share_meeting": share_meeting, "share": 0.9,
            "client_bound": client_bound, "client_cores": 0.95 if client_bound else 0.2}


def test_capacity_is_the_highest_level_meeting_with_lower_failures_as_caveats():
    """Capacity: the highest declared level meeting the share, even above a failing level, which is named."""
    levels = [_figures(8, False, 0.5, client_bound=True), _figures(2, False, 0.85), _figures(4, True, 0.92),
              _figures(1, True, 0.99)]
    found = capacity(levels)
    assert found["level"] == 4 and found["figures"] is levels[2] and found["reason"] is None
    assert found["lower_levels_failing"] == [2]
    assert any("lower level(s) 2" in caveat for caveat in found["caveats"])
    assert any("bottleneck at level(s) 8" in caveat for caveat in found["caveats"])


def test_capacity_none_when_no_level_meets():
    """Capacity: None when no level meets, with the reason and the nearest level; none run, its own reason."""
    found = capacity([_figures(1, False, 0.8), _figures(2, False, 0.6)])
    assert found["level"] is None and found["figures"] is None
    assert found["reason"] == "no level meets the objective; the most was 80.0% at level 1, against the declared 90%"
    assert capacity([])["reason"] == "no level was run"


def _capacity_level(duration_s, tokens, requests):
    return {"duration_s": duration_s, "accepted_output_tokens": tokens, "accepted_requests": requests, "reasons": {}}


def test_cost_per_million_tokens_and_thousand_requests_in_exact_cents():
    """Cost: price/h ÷ accepted units per hour × a million (tokens) or 1,000 (requests), exact Decimal, cents half up."""
    # 10,000 tokens in 10 s = 1,000 tokens/s = 3.6 M/h: 2.50 / 3.6 = 0.6944… per million; 20 requests = 7,200/h
    found = cost(price_per_hour=Decimal("2.50"), level_figures=_capacity_level(10.0, 10_000, 20))
    assert found["per_million_accepted_output_tokens"] == Decimal("0.69")
    assert str(found["per_million_accepted_output_tokens"]) == "0.69"
    assert found["per_thousand_accepted_requests"] == Decimal("0.35")  # 2.50 / 7.2 = 0.3472…
    assert found["reasons"] == {}
    # 0.45/h, 1,000 requests and 1 M tokens in 1,000 s: exactly 0.125 each way, half up to 0.13 (half even says 0.12)
    half = cost(price_per_hour=Decimal("0.45"), level_figures=_capacity_level(1000, 1_000_000, 1000))
    assert half["per_million_accepted_output_tokens"] == half["per_thousand_accepted_requests"] == Decimal("0.13")
    with pytest.raises(TypeError):
        cost(price_per_hour=2.5, level_figures=_capacity_level(10.0, 10_000, 20))


def test_cost_under_half_a_cent_keeps_two_significant_digits():
    """A cost per 1,000 requests under half a cent is not said 0.00, as if free: two significant digits, half up."""
    # 1.00/h, 100 requests in 1 s = 360,000/h: 1.00 / 360 = 0.0027777… per 1,000; 10⁶ tokens/s: 0.00027777… per million
    cheap = cost(price_per_hour=Decimal("1.00"), level_figures=_capacity_level(1.0, 1_000_000, 100))
    assert cheap["per_thousand_accepted_requests"] == Decimal("0.0028")
    assert str(cheap["per_thousand_accepted_requests"]) == "0.0028"
    assert str(cheap["per_million_accepted_output_tokens"]) == "0.00028"
    # 0.005 exactly is a cent, half up, as prices are stated; 0.0049 stays below it
    assert str(rate(Decimal("0.005"))) == "0.01"
    assert str(rate(Decimal("0.00495"))) == "0.0050"
    assert str(rate(Decimal("0.0049"))) == "0.0049"
    assert str(rate(Decimal("0.00125"))) == "0.0013"  # half up, as prices are stated (half even says 0.0012)
    assert str(rate(Decimal("0"))) == "0.00"
    assert str(rate(Decimal("12.345"))) == "12.35"


def test_cost_undefined_cases_say_why():
    """Cost: None with the reason when no level meets, no accepted token or request, or an unknown count."""
    none = cost(price_per_hour=Decimal("2.50"), level_figures=None)
    assert none["per_million_accepted_output_tokens"] is None and none["per_thousand_accepted_requests"] is None
    assert set(none["reasons"].values()) == {"no level meets the objective"}
    zero = cost(price_per_hour=Decimal("2.50"), level_figures=_capacity_level(10.0, 0, 0))
    assert zero["per_million_accepted_output_tokens"] is None
    assert zero["reasons"] == {"per_million_accepted_output_tokens": "no accepted output token at the objective",
                               "per_thousand_accepted_requests": "no accepted request at the objective"}
    unknown = {**_capacity_level(10.0, None, 3), "reasons": {"accepted_output_tokens": "1 of 3 accepted requests lack…"}}
    found = cost(price_per_hour=Decimal("2.50"), level_figures=unknown)
    assert found["reasons"]["per_million_accepted_output_tokens"] == "1 of 3 accepted requests lack…"
    assert found["per_thousand_accepted_requests"] == Decimal("2.31")  # 2.50 × 10 × 1000 / (3 × 3600) = 2.3148…


def test_agreement_trims_edges_and_counts_missing_ids():
    """Agreement: answered rows compared by text with edges trimmed; ids the reference lacks and failures not compared."""
    rows = [_row("a", text="  Paris\n"), _row("b", text="Pa ris"), _row("c", text="Rome"), _row("d", status="error")]
    found = agreement(rows, {"a": "Paris", "b": "Paris", "d": "Oslo"})
    assert (found["compared"], found["agreeing"], found["disagreeing"]) == (2, 1, 1)
    assert (found["not_in_reference"], found["not_ok"], found["share"]) == (1, 1, 0.5)
    assert found["method"] == "text, edges trimmed" and found["disagreeing_ids"] == ["b"]
    assert [row["accepted"] for row in rows] == [True, False, False, False]
    many = agreement([_row(f"r{i}", text="x") for i in range(25)], {f"r{i}": "y" for i in range(25)})
    assert many["disagreeing_ids"] == [f"r{i}" for i in range(20)] and many["disagreeing"] == 25
    assert agreement([_row("c")], {})["share"] is None


def test_rows_to_cost_end_to_end():
    """Whole chain: agreement marks rows, level figures count the accepted ones meeting, capacity and cost follow."""
    reference = {f"m{i}": "answer" if i < 4 else "other" for i in range(6)} | {"one": "answer"}
    levels = []
    for level, ttft in ((1, 100), (2, 400)):
        rows = [_row(f"m{i}", ttft_ms=ttft) for i in range(6)] + [_row("one", ttft_ms=ttft, tokens=1)]
        agreement(rows, reference)
        figures = level_figures(rows, objective=OBJECTIVE, share=0.9, client_cpu_s=1.0, duration_s=3.6, cpus=2)
        levels.append({**figures, "level": level})
    found = capacity(levels)
    assert found["level"] == 1
    assert (found["figures"]["accepted_requests"], found["figures"]["accepted_output_tokens"]) == (5, 41)
    priced = cost(price_per_hour=Decimal("3.00"), level_figures=found["figures"])
    # 41 tokens in 3.6 s = 41,000 per hour: 3.00 / 41,000 × 1e6 = 73.17…; 5 requests = 5,000/h: 0.60 per 1,000
    assert priced["per_million_accepted_output_tokens"] == Decimal("73.17")
    assert priced["per_thousand_accepted_requests"] == Decimal("0.60")
