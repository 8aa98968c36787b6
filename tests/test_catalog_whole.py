"""The price catalog's outputs asserted whole: every key and value of `cost --json`, every line of `cost`, every field
of a quote, every listing and refusal; a renamed key, a changed word or a wrong amount fails here (#48)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from iteralab.core.errors import UserError
from iteralab.money import catalog as prices
from tests import factory

HEADER = factory.CATALOG_HEADER
UNDEFINED = "undefined: no result was accepted, so the spend buys no validated corpus"
NOT_GIVEN = "the number of accepted results was not given"


def _cost(cli, *args) -> tuple[dict, str]:
    """Run `cost` with ARGS as JSON and as text; return both outputs."""
    code, out, err = cli("cost", *args, "--json")
    assert (code, err) == (0, "")
    code, text, err = cli("cost", *args)
    assert (code, err) == (0, "")
    return json.loads(out), text


def _quote_json(**changed) -> dict:
    """The whole `cost --json` of two 7-day RTX 4090 lots with no accepted count, with CHANGED keys."""
    whole = {"catalog_version": "2026-09-24", "gpu": "rtx-4090", "gpu_name": "RTX 4090", "days": 7, "lots": 2,
             "cards_per_lot": 1, "gpus": 2, "price_per_lot": "110.00", "total": "220.00", "currency": "USD",
             "accepted_results": None, "cost_per_validated_corpus": None, "cost_per_validated_corpus_note": None}
    return {**whole, **changed}


def test_cost_json_gives_every_key_with_its_value():
    """Regression for #48: any key of `cost --json` renamed, or a value changed, fails this whole comparison."""
    catalog = prices.load_catalog()
    data = prices.quote_data(prices.quote(catalog, gpu="RTX 4090", days=7, lots=2))
    assert data == _quote_json()
    assert list(data) == list(_quote_json())  # the keys in their documented order


@pytest.mark.parametrize(("accepted", "changed"), [
    ("3", {"accepted_results": 3, "cost_per_validated_corpus": "73.33"}),
    ("1", {"accepted_results": 1, "cost_per_validated_corpus": "220.00"}),
    ("0", {"accepted_results": 0, "cost_per_validated_corpus_note": UNDEFINED}),
])
def test_cost_json_with_an_accepted_count_gives_the_cost_per_validated_corpus_or_null_with_the_reason(cli, accepted, changed):
    """Regression for #48: an undefined cost per validated corpus is JSON null, never the string "None"."""
    data, _ = _cost(cli, "--gpu", "RTX 4090", "--days", "7", "--lots", "2", "--accepted-results", accepted)
    assert data == _quote_json(**changed)


def test_cost_of_one_b200_lot_counts_two_cards_and_one_price(cli):
    data, text = _cost(cli, "--gpu", "b200", "--days", "7", "--lots", "1")
    assert data == _quote_json(gpu="b200", gpu_name="B200", lots=1, cards_per_lot=2, gpus=2, price_per_lot="2071.00",
                               total="2071.00")
    assert text == ("2071.00 USD for 2 GPUs: 1 lot of B200 x 7 days at 2071.00 USD per lot (2 cards per lot, catalog "
                    "2026-09-24)\nThe whole package is paid even if part of the period stays unused.\n")


@pytest.mark.parametrize(("accepted", "last"), [
    (None, None),
    ("0", f"Cost per validated corpus: {UNDEFINED}; the spend of 47.14 USD stands."),
    ("1", "Cost per validated corpus: 47.14 USD (47.14 / 1 accepted result)"),
    ("3", "Cost per validated corpus: 15.71 USD (47.14 / 3 accepted results)"),
])
def test_cost_in_words_says_every_line(cli, accepted, last):
    args = ("--gpu", "rtx-4090", "--days", "3", "--lots", "1") + (("--accepted-results", accepted) if accepted else ())
    _, text = _cost(cli, *args)
    lines = ["47.14 USD for 1 GPU: 1 lot of RTX 4090 x 3 days at 47.14 USD per lot (1 card per lot, catalog 2026-09-24)",
             "The whole package is paid even if part of the period stays unused."]
    assert text == "\n".join([*lines, *([last] if last else [])]) + "\n"


def test_a_quote_holds_every_field_and_counts_cards_by_lot():
    catalog = prices.parse_catalog(HEADER + "v3,duo,Duo Card,2,80,3,10.05,IDR\n", "duo.csv")
    result = prices.quote(catalog, gpu="DUO", days=3, lots=3, accepted_results=4)
    price = catalog.price("duo", 3)
    assert result == prices.Quote("v3", price, 3, Decimal("30.15"), 4, Decimal("7.54"), None)
    assert result.gpus == 6
    assert prices.quote(catalog, gpu="duo", days=3, lots=1) == prices.Quote("v3", price, 1, Decimal("10.05"), None, None,
                                                                             NOT_GIVEN)
    assert prices.describe_quote(result) == (
        "30.15 IDR for 6 GPUs: 3 lots of Duo Card x 3 days at 10.05 IDR per lot (2 cards per lot, catalog v3)\n"
        "The whole package is paid even if part of the period stays unused.\n"
        "Cost per validated corpus: 7.54 IDR (30.15 / 4 accepted results)")
    assert prices.quote_data(result) == {
        "catalog_version": "v3", "gpu": "duo", "gpu_name": "Duo Card", "days": 3, "lots": 3, "cards_per_lot": 2, "gpus": 6,
        "price_per_lot": "10.05", "total": "30.15", "currency": "IDR", "accepted_results": 4,
        "cost_per_validated_corpus": "7.54", "cost_per_validated_corpus_note": None}


def test_lots_price_and_money_round_half_up_to_cents():
    assert prices.lots_price(Decimal("47.14"), 2) == Decimal("94.28")
    assert prices.lots_price(Decimal("0.005"), 1) == Decimal("0.01")
    assert str(prices.lots_price(Decimal("110"), 2)) == "220.00"
    assert prices.money(Decimal("2.675")) == Decimal("2.68") and prices.money(Decimal("-2.675")) == Decimal("-2.68")
    assert (str(prices.money(Decimal("0.125"))), str(prices.money(Decimal(1)))) == ("0.13", "1.00")
    assert (prices.PACKAGE_DAYS, prices.GIB, prices.DEFAULT_CATALOG) == ((3, 7, 30), 2**30, "catalog-2026-09-24.csv")


def test_listed_packages_go_cheapest_first_and_the_cheapest_covering_lasts_long_enough():
    catalog = prices.parse_catalog(HEADER + "v1,x,X,1,,30,90.00,USD\nv1,x,X,1,,3,10.00,USD\nv1,x,X,1,,7,20.00,USD\n"
                                   "v1,y,Y,1,,3,1.00,USD\n", "l.csv")
    assert [(p.days, p.price_per_lot) for p in catalog.listed("x")] == [(3, Decimal("10.00")), (7, Decimal("20.00")),
                                                                       (30, Decimal("90.00"))]
    assert [p.days for p in catalog.listed("y")] == [3] and catalog.listed("z") == []
    assert catalog.cheapest_covering("x", None).days == 3
    assert catalog.cheapest_covering("x", 72).days == 3  # 3 days are exactly 72 h
    assert catalog.cheapest_covering("x", 73).days == 7
    assert catalog.cheapest_covering("x", 168).days == 7
    assert catalog.cheapest_covering("x", 169).days == 30
    assert catalog.cheapest_covering("x", 721) is None
    assert catalog.options("x") == ("3 days at 10.00 USD per lot, 7 days at 20.00 USD per lot, 30 days at 90.00 USD per "
                                    "lot")


def test_unknown_cards_and_unlisted_packages_are_refused_in_whole_sentences():
    catalog = prices.load_catalog()
    with pytest.raises(UserError) as error:
        catalog.gpu("H100")
    assert str(error.value) == ("GPU 'H100' is not in catalog 2026-09-24 (catalog-2026-09-24.csv); it lists: b200, rtx-4090, "
                                "rtx-6000-ada")
    with pytest.raises(UserError) as error:
        catalog.price("RTX 4090", 30)
    assert str(error.value) == ("catalog 2026-09-24 does not list a 30-day package for RTX 4090; it lists: 3 days at 47.14 "
                                "USD per lot, 7 days at 110.00 USD per lot")


@pytest.mark.parametrize(("lots", "accepted", "message"), [
    (0, None, "lots must be a whole number of at least 1, not 0"),
    (True, None, "lots must be a whole number of at least 1, not True"),
    (1.0, None, "lots must be a whole number of at least 1, not 1.0"),
    (1, -1, "accepted results must be a whole number of at least 0, not -1"),
    (1, False, "accepted results must be a whole number of at least 0, not False"),
    (1, 2.0, "accepted results must be a whole number of at least 0, not 2.0"),
])
def test_a_quote_refuses_counts_in_whole_sentences(lots, accepted, message):
    with pytest.raises(UserError) as error:
        prices.quote(prices.load_catalog(), gpu="rtx-4090", days=3, lots=lots, accepted_results=accepted)
    assert str(error.value) == message


def test_a_catalog_is_read_whole_gpu_by_gpu_and_price_by_price():
    text = HEADER + "v2,RTX 4090,,1,24.5,3,47.1,USD\nv2,b200,B200,2,,7,2071,USD\n"
    catalog = prices.parse_catalog(text, "whole.csv")
    card, pair = prices.Gpu("rtx-4090", "RTX 4090", 1, Decimal("24.5")), prices.Gpu("b200", "B200", 2, None)
    assert catalog == prices.Catalog("v2", "whole.csv", {"rtx-4090": card, "b200": pair}, {
        ("rtx-4090", 3): prices.Price(card, 3, Decimal("47.10"), "USD", 2),
        ("b200", 7): prices.Price(pair, 7, Decimal("2071.00"), "USD", 3)})
    assert str(catalog.prices[("b200", 7)].price_per_lot) == "2071.00"


@pytest.mark.parametrize(("body", "expected"), [
    ("v1,x,X,1,,3,10.00,USD\nv1,y,Y,1,,3,10.00,EUR\n",
     "p.csv:3: currency EUR differs from USD at line 2; a catalog holds one currency: convert the prices, or keep one "
     "catalog per currency"),
    ("v1,x,X,1,,3,10.00,USD\nv1,x,X,1,,3,11.00,USD\n", "p.csv:3: duplicate row for X 3 days (first at line 2)"),
    ("v1,x,X,0,,3,10.00,USD\n", "p.csv:2: cards_per_lot must be at least 1"),
    ("v1,x,X,-1,,3,10.00,USD\n", "p.csv:2: cards_per_lot must be at least 1"),
    ("v1,x,X,1,-2,3,10.00,USD\n", "p.csv:2: memory_per_card_gb must be positive or empty (not stated)"),
    ("v1,x,X,1,Infinity,3,10.00,USD\n", "p.csv:2: memory_per_card_gb 'Infinity' is not a finite number"),
    ("v1,x,X,1,,3,1 000.00,USD\n", "p.csv:2: price_per_lot '1 000.00' is not a price; write digits with at most two "
     "decimals and no thousands separator, e.g. 2071.00"),
    ("v1,x,X,1,,3,10.00,USDX\n", "p.csv:2: currency 'USDX' must be a three-letter code such as USD"),
    ("v1,x,X,1,,-3,10.00,USD\n", "p.csv:2: days -3 is not a package length; use one of 3, 7, 30"),
    ("v1,x,X,1,,3,10.00,USD\nv1,x,Y,1,,7,10.00,USD\n",
     "p.csv:3: Y is described differently on an earlier line (name, cards or memory)"),
    ("v1,x,X,1,24,3,10.00,USD\nv1,x,X,1,48,7,10.00,USD\n",
     "p.csv:3: X is described differently on an earlier line (name, cards or memory)"),
])
def test_more_catalog_refusals_are_whole_sentences(body, expected):
    with pytest.raises(UserError) as error:
        prices.parse_catalog(HEADER + body, "p.csv")
    assert str(error.value) == expected


def test_one_gpu_on_several_lines_is_the_same_card_and_a_price_may_be_zero_or_one_digit():
    catalog = prices.parse_catalog(HEADER + "v1,x,X,1,24,3,0,USD\nv1,x,X,1,24,7,1.5,USD\nv1,x,X,1,24,30,3,USD\n", "p.csv")
    assert [str(p.price_per_lot) for p in catalog.listed("x")] == ["0.00", "1.50", "3.00"]
    assert len(catalog.gpus) == 1 and catalog.gpus["x"].memory_per_card_gb == Decimal("24")


def test_a_catalog_file_with_a_byte_order_mark_is_read_as_its_rows(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + "v1,x,X,1,,3,10.00,USD\n").encode("utf-8"))
    catalog = prices.load_catalog(path)
    assert (catalog.version, catalog.source, list(catalog.prices)) == ("v1", str(path), [("x", 3)])
    shipped = prices.load_catalog()
    assert shipped == prices.load_catalog(None) and shipped.source == "catalog-2026-09-24.csv"
    assert shipped.snapshot()["rows"][0] == {"gpu": "b200", "gpu_name": "B200", "cards_per_lot": 2,
                                             "memory_per_card_gb": None, "days": 7, "price_per_lot": "2071.00",
                                             "currency": "USD"}


@pytest.mark.parametrize("end", ["\r", "\r\n", "\n"])
def test_a_catalog_saved_with_any_line_ending_is_read_row_by_row(end):
    """A spreadsheet's "CSV (Macintosh)" ends lines with a lone carriage return: still one row a line, no csv error."""
    text = (HEADER + "v1,x,X,1,24,3,10.00,USD\nv1,x,X,1,24,7,20.00,USD\n").replace("\n", end)
    catalog = prices.parse_catalog(text, "ends.csv")
    assert [(p.days, str(p.price_per_lot), p.line) for p in catalog.listed("x")] == [(3, "10.00", 2), (7, "20.00", 3)]
    assert catalog.gpus == {"x": prices.Gpu("x", "X", 1, Decimal("24"))}
