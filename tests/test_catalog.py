"""Price catalog and package cost: the seed figures, exact money, malformed catalogs."""

from decimal import Decimal

import pytest

from iteralab.core.errors import UserError
from iteralab.money.catalog import load_catalog, parse_catalog, quote
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
    from iteralab.money.catalog import gb_to_gib

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
    from iteralab.money.catalog import cost_per_validated_corpus

    assert cost_per_validated_corpus(Decimal("94.28"), None) == (None, "the number of accepted results was not given")
    assert cost_per_validated_corpus(Decimal("94.28"), 0) == (
        None, "undefined: no result was accepted, so the spend buys no validated corpus")
    assert cost_per_validated_corpus(Decimal("94.28"), 3) == (Decimal("31.43"), None)


@pytest.mark.parametrize(("body", "expected"), [
    ("v1,x,X,1,,3\n", "p.csv:2: wrong number of fields; expected 8"),
    ("v1,x,X,1,,3,10.00,USD,extra\n", "p.csv:2: wrong number of fields; expected 8"),
    (" ,x,X,1,,3,10.00,USD\n", "p.csv:2: catalog_version is empty"),
    ("v1, - ,X,1,,3,10.00,USD\n", "p.csv:2: gpu is empty"),
    ("v1,x,X,1,abc,3,10.00,USD\n", "p.csv:2: memory_per_card_gb 'abc' is not a number"),
    ("v1,x,X,1,NaN,3,10.00,USD\n", "p.csv:2: memory_per_card_gb 'NaN' is not a finite number"),
    ("v1,x,X,1,0,3,10.00,USD\n", "p.csv:2: memory_per_card_gb must be positive or empty (not stated)"),
    ("v1,x,X,one,,3,10.00,USD\n", "p.csv:2: cards_per_lot 'one' is not a whole number"),
    ("v1,x,X,1,,3,10.00,USD\nv1,x,X,2,,7,20.00,USD\n",
     "p.csv:3: X is described differently on an earlier line (name, cards or memory)"),
    ("v1,x,X,1,,3 days,10.00,USD\n", "p.csv:2: days '3 days' is not a whole number"),
    ("v1,x,X,1,,5,10.00,USD\n", "p.csv:2: days 5 is not a package length; use one of 3, 7, 30"),
    ("v1,x,X,1,,3,10.00,usd\n", "p.csv:2: currency 'usd' must be a three-letter code such as USD"),
    ("v1,x,X,1,,3,10.00,\n", "p.csv:2: currency '' must be a three-letter code such as USD"),
    ("v1,x,X,1,,3,10.005,USD\n", "p.csv:2: price_per_lot '10.005' is not a price; write digits with at most two "
     "decimals and no thousands separator, e.g. 2071.00"),
    ("v1,x,X,1,,3,-5,USD\n", "p.csv:2: price_per_lot -5 is negative"),
    # A mutant's survivor: -0 was read as a price and every total of the lot shown as -0.00.
    ("v1,x,X,1,,3,-0,USD\n", "p.csv:2: price_per_lot -0 is zero written with a minus sign; write 0.00"),
    ("v1,x,X,1,,3,-0.00,USD\n", "p.csv:2: price_per_lot -0.00 is zero written with a minus sign; write 0.00"),
    ("", "p.csv: the catalog has no price rows"),
    ("v2,x,X,1,,3,10.00,USD\nv1,x,X,1,,7,10.00,USD\n", "p.csv: rows mix catalog versions v1, v2; keep one version per file"),
])
def test_every_catalog_refusal_names_the_file_line_and_what_to_write(body, expected):
    with pytest.raises(UserError) as error:
        parse_catalog(HEADER + body, "p.csv")
    assert str(error.value) == expected


def test_a_catalog_missing_columns_names_them_all_and_the_expected_header():
    with pytest.raises(UserError) as error:
        parse_catalog("gpu,days\n", "p.csv")
    assert str(error.value) == ("p.csv:1: missing column(s) catalog_version, gpu_name, cards_per_lot, memory_per_card_gb, "
                                "price_per_lot, currency; expected " + HEADER.strip().replace(",", ", "))


def test_catalog_rows_are_read_trimmed_with_their_gpu_and_line(tmp_path):
    path = tmp_path / "p.csv"
    body = " v1 , RTX_4090 , , 2 , 24 , 7 , 12.5 , USD \nv1,RTX_4090,,2,24.0,3,6,USD\n"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + body).encode())  # a spreadsheet's UTF-8 with BOM
    catalog = load_catalog(path)
    assert catalog.version == "v1" and catalog.source == str(path)
    gpu = catalog.gpu("RTX 4090")
    assert gpu == catalog.gpus["rtx-4090"]
    assert (gpu.slug, gpu.name, gpu.cards_per_lot, gpu.memory_per_card_gb) == ("rtx-4090", "RTX_4090", 2, Decimal(24))
    seven, three = catalog.price("rtx 4090", 7), catalog.price("rtx-4090", 3)
    assert (seven.price_per_lot, seven.currency, seven.line, seven.days) == (Decimal("12.50"), "USD", 2, 7)
    assert (three.price_per_lot, three.line) == (Decimal("6.00"), 3)
    assert str(three.price_per_lot) == "6.00"
    small = parse_catalog(HEADER + "v1,tiny,Tiny,1,0.5,30,0,USD\n", "p.csv").price("tiny", 30)
    assert (small.gpu.memory_per_card_gb, small.price_per_lot) == (Decimal("0.5"), Decimal("0.00"))  # both allowed


@pytest.mark.parametrize(("name", "slug"), [
    ("RTX 4090", "rtx-4090"), ("rtx_4090", "rtx-4090"), ("  H100 SXM5 80GB ", "h100-sxm5-80gb"), ("--A100--", "a100"),
    ("RTX 6000 Ada", "rtx-6000-ada"), ("", "")])
def test_gpu_names_become_catalog_slugs(name, slug):
    from iteralab.money.catalog import gpu_slug

    assert gpu_slug(name) == slug


def test_a_catalog_file_that_cannot_be_read_says_what_to_do(tmp_path):
    latin = tmp_path / "latin.csv"
    latin.write_bytes((HEADER + "v1,x,Café,1,,3,10.00,USD\n").encode("latin-1"))
    with pytest.raises(UserError) as error:
        load_catalog(latin)
    assert str(error.value) == f"{latin}: not UTF-8 text; save the catalog as UTF-8 CSV"
    with pytest.raises(UserError) as error:
        load_catalog(tmp_path / "nope.csv")
    assert str(error.value) == f"catalog file {tmp_path / 'nope.csv'} does not exist"
    with pytest.raises(UserError) as error:
        load_catalog(tmp_path)
    assert str(error.value) == f"cannot read catalog {tmp_path}: Is a directory"
    assert load_catalog().source == "catalog-2026-09-24.csv" and load_catalog().version == "2026-09-24"
