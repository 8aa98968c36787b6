"""The decision report's small rules one by one: the question, its wording, spans, ranking, catalog cards."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from generator import decision
from generator.catalog import parse_catalog
from generator.configuration import card_matches, catalog_card, manifest_gpus

HEADER = "catalog_version,gpu,gpu_name,cards_per_lot,memory_per_card_gb,days,price_per_lot,currency\n"


def _view(protocol):
    return SimpleNamespace(protocol=protocol)


def test_a_campaign_without_a_decision_table_asks_about_one_corpus_and_says_so():
    for protocol in (None, {}, {"decision": None}, {"decision": {}}):
        question = decision.question_of(_view(protocol))
        assert question == decision.Question(False, 1, None, None, None, None, None, None, None, None)
        assert question.missing == ["the whole [decision] table (workload, access window, deadline, budget): one corpus "
                                    "assumed, no window"]


def test_a_stated_question_keeps_every_field_and_reads_numbers_as_decimals():
    stated = {"corpora": 20, "entries": None, "window_hours": "96", "window_start": "2026-09-28T09:00:00+07:00",
              "window_end": "2026-10-02T09:00:00+07:00", "time_zone": "Asia/Jakarta", "deadline": "2026-10-01T09:00:00+07:00",
              "deadline_hours": 72, "budget": "150.00"}
    question = decision.question_of(_view({"decision": stated}))
    assert question == decision.Question(True, 20, None, Decimal("96"), "2026-09-28T09:00:00+07:00",
                                         "2026-10-02T09:00:00+07:00", "Asia/Jakarta", "2026-10-01T09:00:00+07:00",
                                         Decimal("72"), Decimal("150.00"))
    assert question.missing == [] and question.limit_hours == Decimal("72")
    bare = decision.question_of(_view({"decision": {"corpora": 3}}))
    assert bare.declared is True and bare.window_hours is None and bare.limit_hours is None
    assert bare.missing == ["the access window (window_start and window_end, or window_hours)", "a deadline (optional)",
                            "a budget ceiling (optional)"]


def test_the_workload_in_words():
    question = decision.Question(True, 1, None, None, None, None, None, None, None, None)
    assert question.workload(100) == "1 corpus like the campaign's"
    assert decision.Question(True, 2, *[None] * 8).workload(100) == "2 independent corpora like the campaign's"
    stream = decision.Question(True, None, 150_000, *[None] * 7)
    assert stream.workload(1000) == "150,000 entries (150.00 × the campaign's corpus), processed as one stream"
    assert stream.workload(None) == "150,000 entries, processed as one stream"
    assert stream.workload(0) == "150,000 entries, processed as one stream"


@pytest.mark.parametrize(("hours", "text"), [(0.5, "30.0 min"), (0.999, "59.9 min"), (1.0, "1.00 h"), (1.5, "1.50 h"),
                                             (96.125, "96.12 h")])
def test_spans_read_in_minutes_under_an_hour_and_hours_from_one(hours, text):
    assert decision.span(hours) == text


def test_span_range_gives_the_fastest_and_slowest_projection():
    assert decision.span_range((0.5, 1.25, 2.0)) == "30.0 min to 2.00 h"
    assert decision.span_range(()) == "no projection: no successful trial"
    assert decision.span_range(None) == "no projection: no successful trial"


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
        _row("unmeasured", "47.14", statuses={"ok": 0}, hours=None),
    ]
    ranked = sorted(rows, key=decision._rank_key)
    assert [row.label for row in ranked] == ["a-faster", "b-faster", "slower", "unmeasured", "failing", "dearer", "unpriced"]


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
        return SimpleNamespace(device=device, gpu_name=name)

    assert catalog_card(catalog, on("NVIDIA RTX 6000 Ada Generation")).slug == "rtx-6000-ada"
    assert catalog_card(catalog, on("Quadro RTX 6000")).slug == "rtx-6000"
    assert catalog_card(catalog, on("NVIDIA A100-SXM4-80GB")) is None
    assert catalog_card(catalog, on("RTX 4090", device="cpu")) is None


def test_manifest_gpus_lists_names_and_blank_for_a_nameless_card():
    assert manifest_gpus({"environment": {"gpus": [{"name": "NVIDIA H100"}, {"index": 1}]}}) == ["NVIDIA H100", ""]
    assert manifest_gpus({"environment": {"gpus": None}}) == [] and manifest_gpus({}) == []
