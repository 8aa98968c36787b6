"""Price catalog and package cost: the seed figures, exact money, malformed catalogs."""

from decimal import Decimal

import pytest

from generator.catalog import load_catalog, parse_catalog, quote
from generator.errors import UserError
from tests import factory

HEADER = factory.CATALOG_HEADER


def test_shipped_catalog_holds_exactly_the_seed_rows():
    catalog = load_catalog()
    assert catalog.version == "2026-09-24"
    rows = {(p.gpu.slug, p.days): (p.price_per_lot, p.gpu.cards_per_lot, p.gpu.memory_per_card_gb)
            for p in catalog.prices.values()}
    assert rows == {
        ("rtx-4090", 3): (Decimal("47.14"), 1, Decimal("24")),
        ("rtx-4090", 7): (Decimal("110.00"), 1, Decimal("24")),
        ("rtx-6000-ada", 3): (Decimal("55.71"), 1, Decimal("48")),
        ("b200", 7): (Decimal("2071.00"), 2, None),
    }


def test_cost_two_lots_rtx_4090_seven_days(cli):
    code, out, _ = cli("cost", "--gpu", "rtx-4090", "--days", "7", "--lots", "2")
    assert code == 0
    assert out.startswith("220.00 USD for 2 GPUs")
    assert "per validated corpus" not in out


def test_cost_b200_lot_price_is_never_multiplied_by_its_cards(cli):
    code, out, _ = cli("cost", "--gpu", "b200", "--days", "7", "--lots", "1")
    assert code == 0
    assert out.startswith("2071.00 USD for 2 GPUs")
    assert "4142" not in out


def test_cost_json_uses_exact_decimal_strings(cli):
    import json

    code, out, _ = cli("cost", "--gpu", "RTX 4090", "--days", "7", "--lots", "2", "--accepted-results", "3", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["total"] == "220.00" and data["gpus"] == 2
    assert data["cost_per_validated_corpus"] == "73.33"


def test_cost_with_no_accepted_result_is_undefined_and_keeps_the_spend(cli):
    code, out, _ = cli("cost", "--gpu", "rtx-4090", "--days", "3", "--lots", "1", "--accepted-results", "0")
    assert code == 0
    assert "undefined" in out and "47.14 USD" in out
    assert "0.00" not in out


@pytest.mark.parametrize("bad", ["-1", "1.5", "two"])
def test_cost_rejects_a_bad_accepted_count_as_usage_error(cli, bad):
    code, _, err = cli("cost", "--gpu", "rtx-4090", "--days", "3", "--lots", "1", "--accepted-results", bad)
    assert code == 2
    assert "--accepted-results" in err and "Traceback" not in err


def test_cost_of_an_unlisted_package_lists_what_the_catalog_has(cli):
    code, _, err = cli("cost", "--gpu", "rtx-4090", "--days", "30", "--lots", "1")
    assert code == 1
    assert "3 days at 47.14 USD" in err and "7 days at 110.00 USD" in err
    assert len(err.strip().splitlines()) == 1


def test_cost_of_an_unknown_gpu_names_the_known_ones(cli):
    code, _, err = cli("cost", "--gpu", "h100", "--days", "7", "--lots", "1")
    assert code == 1 and "b200, rtx-4090, rtx-6000-ada" in err


def test_money_rounds_half_up():
    catalog = parse_catalog(HEADER + "v1,x,X,1,,3,0.01,USD\n", "half.csv")
    result = quote(catalog, gpu="x", days=3, lots=1, accepted_results=2)
    assert result.cost_per_validated_corpus == Decimal("0.01")  # 0.005 rounds up, not to even


@pytest.mark.parametrize(("body", "expected"), [
    ("v1,x,X,1,,3,10.00\n", "missing column(s) currency"),
    ("v1,x,X,1,,3,10.00,USD\nv1,x,X,1,,3,11.00,USD\n", ":3: duplicate row for X 3 days (first at line 2)"),
    ("v1,x,X,1,,3,-5.00,USD\n", ":2: price_per_lot -5.00 is negative"),
    ("v1,x,X,1,,3,ten,USD\n", ":2: price_per_lot 'ten' is not a price"),
    ("v1,x,X,1,,3,\"2,071.00\",USD\n", ":2: price_per_lot '2,071.00' is not a price"),
    ("v1,x,X,1,,5,10.00,USD\n", ":2: days 5 is not a package length"),
    ("v1,x,X,0,,3,10.00,USD\n", ":2: cards_per_lot must be at least 1"),
    ("v1,x,X,1,,3,10.00,USD\nv2,y,Y,1,,3,10.00,USD\n", "mix catalog versions"),
])
def test_malformed_catalogs_are_refused_with_file_line_and_reason(tmp_path, cli, body, expected):
    path = tmp_path / "prices.csv"
    header = HEADER if "currency" not in expected else HEADER.replace(",currency", "")
    path.write_text(header + body, encoding="utf-8")
    with pytest.raises(UserError, match=expected.replace("(", r"\(").replace(")", r"\)")) as error:
        load_catalog(path)
    assert str(path) in str(error.value)
    code, _, err = cli("cost", "--gpu", "x", "--days", "3", "--lots", "1", "--catalog", path)
    assert code == 1 and str(path) in err and "Traceback" not in err


def test_missing_catalog_file_is_a_clear_error(cli, tmp_path):
    code, _, err = cli("cost", "--gpu", "x", "--days", "3", "--lots", "1", "--catalog", tmp_path / "nope.csv")
    assert code == 1 and "does not exist" in err


@pytest.mark.parametrize("lots", [0, -2, True, 1.0, "2"])
def test_quote_refuses_lots_that_are_not_a_whole_number_of_at_least_one(lots):
    catalog = parse_catalog(HEADER + "v1,x,X,1,,3,10.00,USD\n", "lots.csv")
    with pytest.raises(UserError, match=r"^lots must be a whole number of at least 1, not "):
        quote(catalog, gpu="x", days=3, lots=lots)


@pytest.mark.parametrize("accepted", [-1, True, 1.0, "2"])
def test_quote_refuses_an_accepted_count_that_is_not_a_whole_number(accepted):
    catalog = parse_catalog(HEADER + "v1,x,X,1,,3,10.00,USD\n", "accepted.csv")
    with pytest.raises(UserError, match=r"^accepted results must be a whole number of at least 0, not "):
        quote(catalog, gpu="x", days=3, lots=1, accepted_results=accepted)
    assert quote(catalog, gpu="x", days=3, lots=2, accepted_results=0).cost_per_validated_corpus is None
    assert quote(catalog, gpu="x", days=3, lots=2, accepted_results=4).cost_per_validated_corpus == Decimal("5.00")


def test_options_list_a_gpus_packages_shortest_first():
    catalog = parse_catalog(HEADER + "v1,x,X,1,,7,20.00,USD\nv1,x,X,1,,3,10.00,USD\nv1,y,Y,1,,3,9.00,USD\n", "options.csv")
    assert catalog.options("x") == "3 days at 10.00 USD per lot, 7 days at 20.00 USD per lot"


def test_gigabytes_convert_to_gibibytes_to_two_places():
    from generator.catalog import gb_to_gib

    assert gb_to_gib(Decimal("24")) == Decimal("22.35")  # 24e9 / 2**30 = 22.3517...
    assert gb_to_gib(Decimal("80")) == Decimal("74.51")
    assert gb_to_gib(Decimal("1.073741824")) == Decimal("1.00")


def test_snapshot_gives_every_row_as_plain_strings_sorted_by_gpu_and_days():
    catalog = parse_catalog(HEADER + "v1,y,Y,2,,7,2071.00,USD\nv1,x,X,1,24,7,20.00,USD\nv1,x,X,1,24,3,10.00,USD\n", "snap.csv")
    assert catalog.snapshot() == {"version": "v1", "source": "snap.csv", "rows": [
        {"gpu": "x", "gpu_name": "X", "cards_per_lot": 1, "memory_per_card_gb": "24", "days": 3, "price_per_lot": "10.00",
         "currency": "USD"},
        {"gpu": "x", "gpu_name": "X", "cards_per_lot": 1, "memory_per_card_gb": "24", "days": 7, "price_per_lot": "20.00",
         "currency": "USD"},
        {"gpu": "y", "gpu_name": "Y", "cards_per_lot": 2, "memory_per_card_gb": None, "days": 7, "price_per_lot": "2071.00",
         "currency": "USD"}]}


def test_cost_per_validated_corpus_says_why_it_is_undefined():
    from generator.catalog import cost_per_validated_corpus

    assert cost_per_validated_corpus(Decimal("94.28"), None) == (None, "the number of accepted results was not given")
    assert cost_per_validated_corpus(Decimal("94.28"), 0) == (
        None, "undefined: no result was accepted, so the spend buys no validated corpus")
    assert cost_per_validated_corpus(Decimal("94.28"), 3) == (Decimal("31.43"), None)
