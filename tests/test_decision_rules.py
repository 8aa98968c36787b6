"""The decision report's small rules one by one: the question, its wording, spans, ranking, catalog cards."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from iteralab.decision import answer
from iteralab.decision import plan as planning
from iteralab.decision import question as questions
from iteralab.decision import report as decision
from iteralab.money.catalog import load_catalog, parse_catalog
from iteralab.store import reading
from iteralab.store.configuration import card_matches, catalog_card, manifest_gpus
from tests import factory

HEADER = factory.CATALOG_HEADER


def _view(protocol):
    return SimpleNamespace(protocol=protocol)


def test_a_campaign_without_a_decision_table_asks_about_one_corpus_and_says_so():
    for protocol in (None, {}, {"decision": None}, {"decision": {}}):
        question = questions.question_of(_view(protocol))
        assert question == questions.Question(False, 1, None, None, None, None, None, None, None, None)
        assert question.missing == ["the whole [decision] table (workload, access window, deadline, budget): one corpus "
                                    "assumed, no window"]


def test_a_stated_question_keeps_every_field_and_reads_numbers_as_decimals():
    stated = {"corpora": 20, "entries": None, "window_hours": "96", "window_start": "2026-09-28T09:00:00+07:00",
              "window_end": "2026-10-02T09:00:00+07:00", "time_zone": "Asia/Jakarta", "deadline": "2026-10-01T09:00:00+07:00",
              "deadline_hours": 72, "budget": "150.00"}
    question = questions.question_of(_view({"decision": stated}))
    assert question == questions.Question(True, 20, None, Decimal("96"), "2026-09-28T09:00:00+07:00",
                                         "2026-10-02T09:00:00+07:00", "Asia/Jakarta", "2026-10-01T09:00:00+07:00",
                                         Decimal("72"), Decimal("150.00"))
    assert question.missing == [] and question.limit_hours == Decimal("72")
    bare = questions.question_of(_view({"decision": {"corpora": 3}}))
    assert bare.declared is True and bare.window_hours is None and bare.limit_hours is None
    assert bare.missing == ["the access window (window_start and window_end, or window_hours)", "a deadline (optional)",
                            "a budget ceiling (optional)"]


def test_the_workload_in_words():
    question = questions.Question(True, 1, None, None, None, None, None, None, None, None)
    assert question.workload(100) == "1 corpus like the campaign's"
    assert questions.Question(True, 2, *[None] * 8).workload(100) == "2 independent corpora like the campaign's"
    stream = questions.Question(True, None, 150_000, *[None] * 7)
    assert stream.workload(1000) == "150,000 entries (150.00 × the campaign's corpus), processed as one stream"
    assert stream.workload(None) == "150,000 entries, processed as one stream"
    assert stream.workload(0) == "150,000 entries, processed as one stream"


@pytest.mark.parametrize(("hours", "text"), [(0.5, "30.0 min"), (0.999, "59.9 min"), (1.0, "1.00 h"), (1.5, "1.50 h"),
                                             (96.125, "96.12 h")])
def test_spans_read_in_minutes_under_an_hour_and_hours_from_one(hours, text):
    assert planning.span(hours) == text


def test_span_range_gives_the_fastest_and_slowest_projection():
    assert planning.span_range((0.5, 1.25, 2.0)) == "30.0 min to 2.00 h"
    # Part of #21: under a minute in seconds ("0.1 min to 0.1 min" said little); 60 s is a minute.
    assert planning.span_range((5.004 / 3600, 0, 59.96 / 3600)) == "5.0 s to 60.0 s"
    assert (planning.span(60 / 3600), planning.span(59.9 / 3600)) == ("1.0 min", "59.9 s")
    assert planning.span_range(()) == "no projection: no successful trial"
    assert planning.span_range(None) == "no projection: no successful trial"


def _row(label, total=None, statuses=None, hours=None):
    return SimpleNamespace(label=label, plan=SimpleNamespace(total=Decimal(total)) if total is not None else None,
                           statuses=statuses or {"ok": 5}, hours=hours)


def test_ranking_orders_by_spend_then_failures_then_median_projection_then_label():
    rows = [
        _row("unpriced", None, hours=(0.1, 0.1, 0.1)),
        _row("dearer", "60.00", hours=(0.1, 0.1, 0.1)),
        _row("failing", "47.14", statuses={"ok": 4, "oom": 1}, hours=(1, 1, 1)),
        _row("slower", "47.14", statuses={"ok": 5}, hours=(1, 3, 5)),
        _row("b-faster", "47.14", statuses={"ok": 6}, hours=(2, 2, 9)),
        _row("a-faster", "47.14", statuses={"ok": 5}, hours=(2, 2, 9)),
    ]  # only feasible configurations are ranked: each has a successful trial, so a projection
    ranked = sorted(rows, key=decision._rank_key)
    assert [row.label for row in ranked] == ["a-faster", "b-faster", "slower", "failing", "dearer", "unpriced"]


def test_catalog_words_must_all_be_in_the_gpu_name_letters_included():
    catalog = parse_catalog(HEADER + "v1,h100-nvl,H100 NVL,1,94,3,10.00,USD\nv1,rtx-6000,RTX 6000,1,24,3,9.00,USD\n"
                            "v1,rtx-6000-ada,RTX 6000 Ada,1,48,3,12.00,USD\nv1,rtx-4090,RTX 4090,1,24,3,5.00,USD\n", "cards.csv")
    cards = {card.slug: card for card in catalog.gpus.values()}
    assert card_matches(cards["h100-nvl"], "NVIDIA H100 NVL")
    assert not card_matches(cards["h100-nvl"], "NVIDIA H100 PCIe")  # the same digits, another card
    assert card_matches(cards["rtx-4090"], "RTX 4090")  # the very same words
    assert not card_matches(cards["rtx-4090"], "") and not card_matches(cards["rtx-4090"], None)
    # Both RTX 6000 rows match an Ada's name; the more specific one names it.

    def on(name, device="gpu"):
        return SimpleNamespace(device=device, gpu_name=name, partition=None)

    assert catalog_card(catalog, on("NVIDIA RTX 6000 Ada Generation")).slug == "rtx-6000-ada"
    assert catalog_card(catalog, on("Quadro RTX 6000")).slug == "rtx-6000"
    assert catalog_card(catalog, on("NVIDIA A100-SXM4-80GB")) is None
    assert catalog_card(catalog, on("RTX 4090", device="cpu")) is None


def test_manifest_gpus_lists_names_and_blank_for_a_nameless_card():
    assert manifest_gpus({"environment": {"gpus": [{"name": "NVIDIA H100"}, {"index": 1}]}}) == ["NVIDIA H100", ""]
    assert manifest_gpus({"environment": {"gpus": None}}) == [] and manifest_gpus({}) == []


CATALOG = parse_catalog(HEADER + "v9,rtx-4090,RTX 4090,1,24,3,47.14,USD\nv9,rtx-4090,RTX 4090,1,24,7,110.00,USD\n"
                        "v9,b200,B200,2,,7,2071.00,USD\n", "plan.csv")


def _configuration(device="gpu", gpu_name="NVIDIA GeForce RTX 4090", gpu_count=1):
    from iteralab.store.configuration import Configuration

    return Configuration("b1", (), device, gpu_name if device == "gpu" else None, gpu_count if device == "gpu" else 0,
                         "Test CPU", 2, "2.13.0", None, None, "no manifest" if device == "unknown" else None)


def _plan_row(configuration, window=(3600.0, 3600.0, 3600.0), one_time=(0.0, 0.0)):
    row = decision.Row(SimpleNamespace(configuration=configuration, label="b1", key="b1"), {"ok": 5}, window, one_time)
    return row


def _question(**stated):
    fields = {"declared": True, "corpora": 1, "entries": None, "window_hours": None, "window_start": None, "window_end": None,
              "time_zone": None, "deadline": None, "deadline_hours": None, "budget": None}
    fields.update(stated)
    return questions.Question(**fields)


@pytest.mark.parametrize(("configuration", "reason"), [
    (_configuration("cpu"), "not in the catalog: CPU"),
    (_configuration(gpu_name="NVIDIA A100-SXM4-80GB"), "not in the catalog: NVIDIA A100-SXM4-80GB"),
    (_configuration("unknown"), "no plan: unknown hardware (no manifest)")])
def test_hardware_the_catalog_does_not_price_is_projected_on_one_machine_without_a_plan(configuration, reason):
    row = _plan_row(configuration, window=(1800.0, 3600.0, 7200.0), one_time=(36.0, 72.0))
    row = planning.plan_row(row, _question(corpora=4), 100, CATALOG)
    assert (row.plan, row.plan_reason, row.lots) == (None, reason, 1)
    assert row.hours == pytest.approx(((1800 * 4 + 36) / 3600, (3600 * 4 + 54) / 3600, (7200 * 4 + 72) / 3600))


def test_the_plan_names_the_cheapest_covering_package_and_what_is_spare():
    row = _plan_row(_configuration(), window=(3600.0, 3600.0, 3600.0), one_time=(0.0, 0.0))
    row = planning.plan_row(row, _question(corpora=10, window_hours=Decimal("72")), 100, CATALOG)
    assert row.plan == planning.Plan(CATALOG.gpus["rtx-4090"], 3, 1, Decimal("47.14"), Decimal("47.14"), "USD", "v9", 72,
                                     Decimal("62"))
    assert (row.lots, row.capacity_bytes, row.capacity_reason) == (1, 24 * 10**9, None)
    # 73 projected hours do not fit a 3-day package. Two consecutive 3-day periods (2 × 47.14 = 94.28, 144 h, 71 h spare)
    # beat the 7-day package (110.00, 95 h spare); the plan keeps the single package beside them and says the risk.
    long = _plan_row(_configuration(), window=(3600.0 * 73, 3600.0 * 73, 3600.0 * 73))
    long = planning.plan_row(long, _question(), 100, CATALOG)
    assert (long.plan.days, long.plan.periods, long.plan.total, long.plan.package_hours, long.plan.spare_hours) == (
        3, 2, Decimal("94.28"), 144, Decimal("71"))
    assert (long.plan.single.days, long.plan.single.periods, long.plan.single.total, long.plan.single.spare_hours) == (
        7, 1, Decimal("110.00"), Decimal("95"))
    assert long.plan.package == "2 consecutive 3-day periods, bought explicitly; no automatic extension"
    assert long.plan.choice() == (
        f"The ranking uses the 2 consecutive 3-day periods (94.28 USD): {planning.SECOND_PERIOD_RISK}; one 7-day package "
        "would cost 110.00 USD without that risk.")
    assert long.plan.describe() == ("1 lot × 2 consecutive 3-day periods of RTX 4090, bought explicitly (no automatic "
                                    "extension), at 47.14 USD per lot and period, catalog v9, 71 h of the periods spare "
                                    "after the work")
    # No window stated: the projection alone sets what must be covered.
    short = _plan_row(_configuration(), window=(60.0, 60.0, 60.0))
    short = planning.plan_row(short, _question(), 100, CATALOG)
    assert (short.plan.days, short.plan.package_hours) == (3, 72)


def test_lots_follow_the_cards_of_the_machine_and_the_cards_of_a_lot():
    three = _plan_row(_configuration(gpu_name="NVIDIA B200", gpu_count=3), window=(60.0, 60.0, 60.0))
    three = planning.plan_row(three, _question(), 100, CATALOG)
    assert three.lots == 2 and three.plan.total == Decimal("4142.00")  # 3 cards need 2 lots of 2; never × cards
    assert three.capacity_bytes is None and three.capacity_reason == "the catalog does not state B200's memory"
    two = _plan_row(_configuration(gpu_count=2), window=(60.0, 60.0, 60.0))
    two = planning.plan_row(two, _question(), 100, CATALOG)
    assert two.lots == 2 and two.plan.total == Decimal("94.28")


def test_more_lots_only_for_independent_corpora_that_would_miss_the_limit():
    # 4 corpora × 10 h = 40 h on one lot; a 24 h deadline needs 2 lots (20 h); exactly 20 h is within a 20 h limit.
    row = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    row = planning.plan_row(row, _question(corpora=4, deadline_hours=Decimal("20")), 100, CATALOG)
    assert row.lots == 2 and row.hours[2] == 20.0
    three = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    three = planning.plan_row(three, _question(corpora=3, deadline_hours=Decimal("20")), 100, CATALOG)
    assert three.lots == 2  # ceil(3 / 2) = 2 corpora per lot, 20 h
    lone = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    lone = planning.plan_row(lone, _question(corpora=1, deadline_hours=Decimal("5")), 100, CATALOG)
    assert lone.lots == 1  # one corpus is never split across lots
    stream = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    stream = planning.plan_row(stream, _question(corpora=None, entries=400, deadline_hours=Decimal("20")), 100, CATALOG)
    assert stream.lots == 1 and stream.hours[2] == 40.0  # one stream: lots do not divide it
    missed = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    missed = planning.plan_row(missed, _question(corpora=2, deadline_hours=Decimal("1")), 100, CATALOG)
    assert missed.lots == 1  # no number of lots fits: the fewest, and the condition will say so
    unlimited = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    unlimited = planning.plan_row(unlimited, _question(corpora=4), 100, CATALOG)
    assert unlimited.lots == 1 and unlimited.hours[2] == 40.0
    pair = _plan_row(_configuration(), window=(36000.0, 36000.0, 36000.0))
    pair = planning.plan_row(pair, _question(corpora=2, deadline_hours=Decimal("10")), 100, CATALOG)
    assert pair.lots == 2 and pair.hours[2] == 10.0  # two corpora are already enough to divide


def test_a_stream_on_unpriced_hardware_is_still_projected_from_the_corpus_it_ran():
    row = _plan_row(_configuration("cpu"), window=(1800.0, 3600.0, 7200.0))
    row = planning.plan_row(row, _question(corpora=None, entries=400), 100, CATALOG)
    assert row.plan_reason == "not in the catalog: CPU" and row.hours == pytest.approx((2.0, 4.0, 8.0))


def test_without_a_covering_package_consecutive_periods_bought_explicitly_are_the_plan():
    """Regression for #20: no single package covers, so the fewest consecutive periods of the cheapest length are planned."""
    row = _plan_row(_configuration(gpu_count=2), window=(3600.0, 3600.0, 3600.0))
    row = planning.plan_row(row, _question(window_hours=Decimal("200")), 100, CATALOG)
    # 200 h: 3 periods of 72 h × 2 lots × 47.14 = 282.84; 2 periods of 168 h × 2 lots × 110.00 = 440.00.
    assert (row.plan.days, row.plan.periods, row.plan.lots, row.plan.total, row.plan.package_hours, row.plan.single) == (
        3, 3, 2, Decimal("282.84"), 216, None)
    assert row.plan.choice().endswith("; no single listed package is long enough.")
    # 217 h: 4 periods of 72 h (188.56 USD), not 3; 2 periods of 168 h would cost 220.00.
    odd = _plan_row(_configuration(), window=(3600.0, 3600.0, 3600.0))
    odd = planning.plan_row(odd, _question(window_hours=Decimal("217")), 100, CATALOG)
    assert (odd.plan.days, odd.plan.periods, odd.plan.total) == (3, 4, Decimal("188.56"))
    # Equal totals (12 × 5.00 and 5 × 12.00 for 800 h): the fewer periods win, since each one is a setup again.
    tied = parse_catalog(HEADER + "v1,rtx-4090,RTX 4090,1,24,3,5.00,USD\nv1,rtx-4090,RTX 4090,1,24,7,12.00,USD\n", "t.csv")
    even = _plan_row(_configuration(), window=(3600.0, 3600.0, 3600.0))
    even = planning.plan_row(even, _question(window_hours=Decimal("800")), 100, tied)
    assert (even.plan.days, even.plan.periods, even.plan.total) == (7, 5, Decimal("60.00"))
    one = _plan_row(_configuration(), window=(3600.0, 3600.0, 3600.0))
    one = planning.plan_row(one, _question(window_hours=Decimal("200")), 100, CATALOG)
    assert (one.plan.periods, one.plan.total) == (3, Decimal("141.42"))  # cheaper than 2 × 7 days (220.00)
    unmeasured = _plan_row(_configuration(), window=(None, None, None), one_time=(None, None))
    unmeasured = planning.plan_row(unmeasured, _question(), 100, CATALOG)
    assert (unmeasured.plan, unmeasured.plan_reason, unmeasured.hours) == (None, "no successful trial to project from", None)


def test_the_shipped_catalog_plans_the_demo_window_and_a_week_long_stream_in_explicit_periods():
    """Regression for #20, figures by hand from catalog 2026-09-24: RTX 6000 Ada is listed for 3 days only, at 55.71."""
    shipped = load_catalog()
    ada = _configuration(gpu_name="NVIDIA RTX 6000 Ada Generation")
    window = planning.plan_row(_plan_row(ada, window=(60.0, 60.0, 60.0)), _question(window_hours=Decimal("96")), 100, shipped)
    assert (window.plan.periods, window.plan.days, window.plan.total, window.plan.single) == (2, 3, Decimal("111.42"), None)
    # A stream of 16,800 entries at 3,600 s per 100: 168 h (7 days), one lot; ceil(168 / 72) = 3 periods = 167.13 USD.
    stream = planning.plan_row(_plan_row(ada, window=(3600.0, 3600.0, 3600.0)),
                               _question(corpora=None, entries=16_800), 100, shipped)
    assert (stream.lots, stream.hours[2], stream.plan.periods, stream.plan.total) == (1, 168.0, 3, Decimal("167.13"))
    # The RTX 4090 over the same 96 h: 2 × 47.14 = 94.28 against one 7-day package at 110.00; the ranking uses 94.28.
    cards = {c["card"].slug: c for c in decision._to_measure([], _question(window_hours=Decimal("96")), shipped)}
    assert (cards["rtx-4090"]["plan"].total, cards["rtx-4090"]["single"].total) == (Decimal("94.28"), Decimal("110.00"))
    assert answer.measure_price(cards["rtx-4090"]) == (
        "94.28 USD for one lot in 2 consecutive 3-day periods, bought explicitly; no automatic extension "
        "(one 7-day package: 110.00 USD, no second setup)")
    assert answer.measure_price(cards["rtx-6000-ada"]) == (
        "111.42 USD for one lot in 2 consecutive 3-day periods, bought explicitly; no automatic extension")


def test_projection_adds_the_one_time_phases_to_the_windows_per_lot():
    row = _plan_row(None, window=(10.0, 20.0, 40.0), one_time=(3.0, 9.0))
    assert planning.project(row, _question(corpora=5), 100, 2) == pytest.approx(
        ((10 * 3 + 3) / 3600, (20 * 3 + 6) / 3600, (40 * 3 + 9) / 3600))
    assert planning.project(row, _question(corpora=None), 100, 1) == pytest.approx((13 / 3600, 26 / 3600, 49 / 3600))
    stream = _question(corpora=None, entries=250)
    assert planning.project(row, stream, 100, 4) == pytest.approx(((25 + 3) / 3600, (50 + 6) / 3600, (100 + 9) / 3600))
    assert planning.project(row, stream, None, 1) is None
    assert planning.decimal_hours(1.23456789) == Decimal("1.2346") and planning.decimal_hours(2.0) == Decimal("2.0")


def test_trial_table_and_figures_per_configuration(tmp_path):
    from iteralab.store import reading, records
    from iteralab.store.trials import trial_table
    from iteralab.store.views import campaign_views

    manifest = factory.manifest()
    trials = [factory.trial(manifest, "b1", seconds=s, repetition=n, sequence=n) for n, s in enumerate((2.0, 4.0, 3.0), 1)]
    trials[1]["phases"]["compilation"] = {"duration_ns": None, "reason": "torch.compile is off for this variant"}
    trials[2]["corpus_accepted"] = False
    trials[2]["id_check"]["ids_match"] = False
    del trials[2]["phases"]["warmup"]  # a hand-written record may leave a one-time phase out
    failed = factory.trial(manifest, "b1", status="oom", failed_phase="measured_window", sequence=4, repetition=4)
    broken = factory.trial(manifest, "b8", status="error", failed_phase="model_load", sequence=5, batch_size=8)
    for record in (manifest, *trials, failed, broken):
        records.append(tmp_path, record)
    (view,) = campaign_views(reading.load(tmp_path))
    table = trial_table(view)
    picked = ["configuration_key", "run_id", "status", "accepted", "ids_match", "window_s", "one_time_s"]
    b1, b8 = view.variants[0].key, view.variants[1].key
    assert table[picked].to_dict("records")[:4] == [
        {"configuration_key": b1, "run_id": "run-1", "status": "ok", "accepted": True, "ids_match": True, "window_s": 2.0,
         "one_time_s": 0.004},  # four one-time phases of 1 ms, in seconds exactly
        {"configuration_key": b1, "run_id": "run-1", "status": "ok", "accepted": True, "ids_match": True, "window_s": 4.0,
         "one_time_s": 0.003},  # no compilation phase: nothing added for it
        {"configuration_key": b1, "run_id": "run-1", "status": "ok", "accepted": False, "ids_match": False, "window_s": 3.0,
         "one_time_s": 0.003},
        {"configuration_key": b1, "run_id": "run-1", "status": "oom", "accepted": False, "ids_match": None,
         "window_s": pytest.approx(float("nan"), nan_ok=True), "one_time_s": pytest.approx(float("nan"), nan_ok=True)}]
    assert str(table["window_s"].dtype) == "float64" and str(table["one_time_s"].dtype) == "float64"
    figures = decision._figures(table)
    assert figures[b1] == {"statuses": {"ok": 3, "oom": 1}, "window": (2.0, 3.0, 4.0),
                           "one_time": (pytest.approx(0.003), pytest.approx(0.004))}
    assert figures[b8] == {"statuses": {"error": 1}, "window": (None, None, None), "one_time": (None, None)}
    assert decision._figures(trial_table(SimpleNamespace(variants=[], trials=[], exclusions=(), excluded={}))) == {}


def _rental(record_id, total, created_at, currency="USD"):
    return {"record_id": record_id, "total": total, "currency": currency, "created_at": created_at}


def test_observed_spend_sums_each_linked_rental_once_and_divides_by_distinct_corpora():
    trials = [{"run_id": "run-a"}, {"run_id": "run-b"}, {"run_id": "run-a"}]
    row = decision.Row(SimpleNamespace(trials=trials, key="k1", label="b1"), {}, (None,) * 3, (None,) * 2, deliverables=3)
    later, earlier = _rental("r2", "52.86", "2026-10-02T00:00:00Z"), _rental("r1", "47.14", "2026-10-01T00:00:00Z")
    row = decision._observed(row, {"run-a": [later, earlier], "run-b": [earlier]}, {"run-a": {"k1"}, "run-b": {"k1", "k2"}})
    assert [r["record_id"] for r in row.observed_rentals] == ["r1", "r2"]  # in the order they were rented
    assert (row.observed_spend, row.observed_currency, row.observed_reason) == (Decimal("100.00"), "USD", None)
    assert (row.cost_per_corpus, row.cost_reason, row.shared_with) == (Decimal("33.33"), None, 1)
    none = decision.Row(SimpleNamespace(trials=trials, key="k1", label="b1"), {}, (None,) * 3, (None,) * 2, deliverables=2)
    none = decision._observed(none, {}, {})
    assert (none.observed_spend, none.observed_reason, none.cost_reason, none.shared_with) == (
        None, "no rental linked to its runs", "undefined: no rental linked to its runs", 0)
    mixed = decision.Row(SimpleNamespace(trials=trials, key="k1", label="b1"), {}, (None,) * 3, (None,) * 2)
    mixed = decision._observed(mixed, {"run-a": [earlier, _rental("r3", "10.00", "2026-10-03T00:00:00Z", "EUR")]}, {"run-a": {"k1"}})
    assert (mixed.observed_spend, mixed.observed_reason) == (None, "rentals mix currencies (EUR, USD)")
    undelivered = decision.Row(SimpleNamespace(trials=trials, key="k1", label="b1"), {}, (None,) * 3, (None,) * 2)
    undelivered = decision._observed(undelivered, {"run-a": [earlier]}, {"run-a": {"k1"}})
    assert (undelivered.observed_spend, undelivered.cost_per_corpus) == (Decimal("47.14"), None)
    assert undelivered.cost_reason == "undefined: no accepted deliverable" and undelivered.shared_with == 0


def _verdict(value, passed):
    return {"metric": "accuracy", "value": value, "threshold": 0.7, "passed": passed}


def _conditions_row(trials, hours=(1.0, 2.0, 3.0), plan_total=None, plan_reason=None):
    return decision.Row(SimpleNamespace(trials=trials, counted=trials, excluded_successes=0, left_out_counts=lambda successes=False: {}, key="k", label="b1"), {}, (None,) * 3, (None,) * 2, hours=hours,
                        plan=SimpleNamespace(total=Decimal(plan_total)) if plan_total else None, plan_reason=plan_reason)


def test_conditions_name_each_failed_rule_and_limits_are_inclusive():
    good = {"status": "ok", "corpus_accepted": True, "id_check": {"ids_match": True}, "quality": {"verdicts": []}}
    rejected = {"status": "ok", "corpus_accepted": False, "id_check": {"ids_match": False},
                "quality": {"verdicts": [_verdict(0.612, False), _verdict(None, False)]}}
    question = _question(window_hours=Decimal("3"), deadline_hours=Decimal("3"), budget=Decimal("47.14"))
    assert decision._conditions(_conditions_row([good, good], plan_total="47.14"), question) == []  # all exactly at the limit
    assert decision._conditions(_conditions_row([good, rejected], hours=(1, 2, 3.00006), plan_total="47.15"), question) == [
        "quality: 1 of 2 successful trials not accepted (accuracy 0.612 < 0.7)",
        "ids: 1 of 2 successful trials did not return every id exactly once",
        "window: projected up to 3.00 h, longer than the 3 h access window",
        "deadline: projected up to 3.00 h, later than the 3 h until the deadline",
        "budget: planned 47.15 exceeds the ceiling 47.14"]
    no_misses = dict(rejected, id_check={"ids_match": True}, quality={"verdicts": []})
    assert decision._conditions(_conditions_row([no_misses], hours=None), _question()) == [
        "quality: 1 of 1 successful trials not accepted (ids or format)"]
    hand_written = dict(no_misses, quality={})  # quality is a free object in the schema: no verdicts is readable
    assert decision._conditions(_conditions_row([hand_written], hours=None), _question()) == [
        "quality: 1 of 1 successful trials not accepted (ids or format)"]
    f1 = {"metric": "macro_f1", "value": 0.5, "threshold": 0.6, "passed": False}
    two_misses = dict(no_misses, quality={"verdicts": [f1, _verdict(0.612, False), _verdict(0.9, True)]})
    assert decision._conditions(_conditions_row([two_misses, rejected], hours=None), _question()) == [
        "quality: 2 of 2 successful trials not accepted (accuracy 0.612 < 0.7; macro_f1 0.500 < 0.6)",
        "ids: 1 of 2 successful trials did not return every id exactly once"]
    failed = {"status": "oom"}
    assert decision._conditions(_conditions_row([failed], hours=None, plan_reason="not in the catalog: CPU"),
                                _question(budget=Decimal("10"))) == [
        "quality: no successful trial", "budget: cannot be checked (not in the catalog: CPU)"]


def test_cards_to_measure_are_priced_for_the_window_in_one_package_or_explicit_periods():
    measured = [decision.Row(SimpleNamespace(configuration=_configuration(), trials=[]), {}, (None,) * 3, (None,) * 2)]
    cards = decision._to_measure(measured, _question(window_hours=Decimal("72")), CATALOG)
    assert [(c["card"].slug, c["plan"].price.days, c["plan"].periods, c["plan"].total, c["single"]) for c in cards] == [
        ("b200", 7, 1, Decimal("2071.00"), None)]
    exact = decision._to_measure([], _question(window_hours=Decimal("168")), CATALOG)
    # 168 h: 3 periods of 3 days (141.42) cost more than the 7-day package (110.00), which is planned.
    assert [(c["card"].slug, c["plan"].price.days, c["plan"].total) for c in exact] == [
        ("b200", 7, Decimal("2071.00")), ("rtx-4090", 7, Decimal("110.00"))]
    longer = decision._to_measure([], _question(window_hours=Decimal("169")), CATALOG)
    # 169 h: 3 × 47.14 = 141.42 against 2 × 110.00 = 220.00; no single package covers it.
    assert (longer[1]["plan"].periods, longer[1]["plan"].total, longer[1]["single"], longer[1]["reason"]) == (
        3, Decimal("141.42"), None, None)
    no_window = decision._to_measure([], _question(), CATALOG)
    assert [(c["card"].slug, c["plan"].price.days, c["plan"].periods) for c in no_window] == [("b200", 7, 1), ("rtx-4090", 3, 1)]


def test_decide_counts_distinct_corpora_per_configuration_and_rentals_shared_by_configurations(tmp_path):
    from iteralab.store import records
    from iteralab.store.views import campaign_views

    gpu = factory.machine("NVIDIA GeForce RTX 4090", cuda="12.8", driver="570.86")
    manifest = factory.manifest("camp", "run-1", environment=gpu, title="Camp title")
    b1 = [factory.trial(manifest, "b1", seconds=2.0, repetition=n, sequence=n, gpu=True) for n in (1, 2)]
    b8 = [factory.trial(manifest, "b8", seconds=1.0, repetition=n, sequence=2 + n, gpu=True, batch_size=8) for n in (1, 2)]
    written = [manifest, *b1, *b8, factory.rental("camp", runs=["run-1"]),
               factory.deliverable("camp", b1[0], "c"), factory.deliverable("camp", b1[1], "d")]
    for record in written:
        records.append(tmp_path, record)
    (view,) = campaign_views(reading.load(tmp_path))
    report = decision.decide(view, CATALOG)
    assert (report.campaign, report.title, report.corpus_entries, report.catalog_version) == ("camp", "Camp title", 100, "v9")
    rows = {row.summary.name: row for row in report.rows}
    assert rows["b1"].deliverables == 2 and rows["b8"].deliverables == 0
    assert rows["b1"].cost_per_corpus == Decimal("23.57")  # 47.14 over two distinct corpora
    assert rows["b1"].shared_with == 1 and rows["b8"].shared_with == 1  # one rental paid for both configurations
    alone = tmp_path / "alone"
    for record in (manifest, *b1, factory.rental("camp", runs=["run-1"])):
        records.append(alone, record)
    (single,) = decision.decide(campaign_views(reading.load(alone))[0], CATALOG).rows
    assert single.shared_with == 0 and single.observed_spend == Decimal("47.14")
    stray = factory.deliverable("camp", {"record_id": "trial-from-elsewhere"}, "e")
    records.append(alone, stray)
    report = decision.decide(campaign_views(reading.load(alone))[0], CATALOG)
    assert report.problems == [f"deliverable {stray['record_id']} names trial trial-from-elsewhere, which is not in this "
                               "campaign's records"]
    assert report.rows[0].deliverables == 0


def test_rental_links_that_do_not_hold_are_named_with_the_rental_the_run_and_what_was_seen():

    two_h100 = factory.manifest("camp", "run-h100", environment=factory.machine("NVIDIA H100", count=2))
    cpu = factory.manifest("camp", "run-cpu", environment=factory.machine(None, cpu="EPYC"))
    four = factory.manifest("camp", "run-4x", environment=factory.machine("NVIDIA GeForce RTX 4090", count=4))
    good = factory.manifest("camp", "run-ok", environment=factory.machine("NVIDIA GeForce RTX 4090", count=2))
    rental = factory.rental("camp", lots=2, runs=["run-h100", "run-cpu", "run-4x", "run-gone", "run-ok"])
    view = SimpleNamespace(name="camp", manifests=[two_h100, cpu, four, good], trials=[], rentals=[rental])
    links, problems = decision.check_rentals(view)
    where = f"rental {rental['record_id']} (2 lot(s) rtx-4090)"
    assert problems == [
        f"{where} names run run-h100, whose manifest observed NVIDIA H100, NVIDIA H100: the hardware does not match; it "
        "is not counted for that run's configurations",
        f"{where} names run run-cpu, whose manifest observed no GPU (CPU EPYC): the hardware does not match; it is not "
        "counted for that run's configurations",
        f"{where} covers 2 card(s) but run run-4x observed 4: it is not counted for that run's configurations",
        f"{where} names run run-gone, which has no manifest in campaign camp; copy that run's records here or correct the "
        "rental; it is not counted"]
    assert links == {"run-ok": [rental]}


def _trial(device="cpu", series="batch", **config):
    return {"variant": "b1", "manifest_id": "m-1", "run_id": "run-1",
            "variant_config": {"series": series, "batch_size": 1, **({"device": device} if device else {}), **config}}


def test_configuration_of_a_cpu_variant_names_the_cpu_and_its_threads_and_ignores_the_series():
    from iteralab.store.configuration import Configuration, configuration_of

    environment = {"cpu": {"model": "EPYC", "usable_cores": 8}, "threads": {"torch_intra_op": 4},
                   "gpus": [{"index": 0, "name": "NVIDIA H100"}], "cuda_version": "12.8", "driver_version": "570",
                   "libraries": {"torch": "2.13.0"}}
    found = configuration_of(_trial(), {"environment": environment})
    assert found == Configuration("b1", (("batch_size", 1), ("device", "cpu")), "cpu", None, 0, "EPYC", 4, "2.13.0", None,
                                  None)
    assert configuration_of(_trial(series="precision"), {"environment": environment}) == found
    no_device = configuration_of(_trial(device=None), {"environment": environment})
    assert no_device.device == "cpu" and no_device.settings == (("batch_size", 1),)
    no_threads = configuration_of(_trial(), {"environment": {**environment, "threads": None}})
    assert no_threads.threads == 8 and no_threads.label() == "b1 · CPU EPYC, 8 threads · torch 2.13.0"
    unread = configuration_of(_trial(), {"environment": {"cpu": None}})
    assert unread.label() == "b1 · CPU model not read · torch version not read"


def test_configuration_of_a_gpu_variant_finds_its_card_by_index_and_counts_the_same_cards():
    from iteralab.store.configuration import Configuration, configuration_of

    gpus = [{"index": 0, "name": "NVIDIA H100"}, {"index": 1, "name": "NVIDIA GeForce RTX 4090"},
            {"index": 2, "name": "NVIDIA GeForce RTX 4090"}]
    environment = {"cpu": {"model": "EPYC"}, "threads": {"torch_intra_op": 4}, "gpus": gpus, "hip_version": "6.2",
                   "driver_version": "570", "libraries": {"torch": "2.13.0+rocm6.2"}}
    second = configuration_of(_trial("cuda:1"), {"environment": environment})
    assert (second.device, second.gpu_name, second.gpu_count, second.cpu_model, second.threads) == (
        "gpu", "NVIDIA GeForce RTX 4090", 2, "EPYC", 4)
    assert (second.accelerator_runtime, second.driver, second.torch) == ("HIP 6.2", "570", "2.13.0+rocm6.2")
    assert second.label(detailed=True) == "b1 · 2× NVIDIA GeForce RTX 4090 · torch 2.13.0+rocm6.2 · HIP 6.2 · driver 570"
    first = configuration_of(_trial("cuda"), {"environment": environment})
    assert (first.gpu_name, first.gpu_count) == ("NVIDIA H100", 1)
    unindexed = [{"name": "NVIDIA A"}, {"name": "NVIDIA B"}]  # no index recorded: the position says which
    assert configuration_of(_trial("cuda:1"), {"environment": {"gpus": unindexed}}).gpu_name == "NVIDIA B"
    reordered = [{"index": 1, "name": "NVIDIA B"}, {"index": 0, "name": "NVIDIA A"}]  # listed out of index order
    assert configuration_of(_trial("cuda:0"), {"environment": {"gpus": reordered}}).gpu_name == "NVIDIA A"
    missing = configuration_of(_trial("cuda:2"), {"environment": {**environment, "gpus": unindexed}})
    assert missing == Configuration("b1", (("batch_size", 1), ("device", "cuda:2")), "unknown", None, 0, "EPYC", 4,
                                    "2.13.0+rocm6.2", "HIP 6.2", "570", "the manifest lists no GPU 2 for device cuda:2")
    lost = configuration_of(_trial("cuda:0"), None)
    assert lost == Configuration("b1", (("batch_size", 1), ("device", "cuda:0")), "unknown", None, 0, None, None, None,
                                 None, None, "manifest m-1 of run run-1 is missing")
    assert second.settings == (("batch_size", 1), ("device", "cuda:1"))
    assert configuration_of(_trial("cuda"), {"environment": {"gpus": gpus, "cuda_version": "12.8"}}).accelerator_runtime == \
        "CUDA 12.8"


def test_the_next_step_says_what_to_rent_or_what_to_measure_next_and_why():
    """Part of #21: the answer's first sentence, word for word."""
    window = _question(window_hours=Decimal("96"))
    assert answer._next_step(None, [], [], window) == "Nothing to rent yet: no configuration measured so far meets every condition."
    cards = decision._to_measure([], window, load_catalog())
    # Regression for #37: measuring a two-minute job was priced at the whole 96 h window (94.28 USD); its own rental is
    # the cheapest package, said apart from the window's.
    assert answer._next_step(None, [], cards, window) == (
        "Nothing to rent yet: no configuration measured so far meets every condition. Measure next on RTX 4090, the "
        "cheapest card not measured for this window: measuring takes one 3-day package, 47.14 USD for one lot (94.28 USD "
        "would hold the whole 96 h window); then copy that machine's runs/ folder here and build again.")
    no_window = _question(window_hours=None)
    assert answer._next_step(None, [], decision._to_measure([], no_window, load_catalog()), no_window) == (
        "Nothing to rent yet: no configuration measured so far meets every condition. Measure next on RTX 4090, the "
        "cheapest card not measured for this window (47.14 USD for one lot), then copy that machine's runs/ folder here "
        "and build again.")
