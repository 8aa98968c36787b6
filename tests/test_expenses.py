"""Other project costs (#19): recorded apart from package spend, summed per configuration, exported as FOCUS 1.2."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import zipfile
from decimal import Decimal

import pytest
from bs4 import BeautifulSoup

from iteralab.store import reading, records
from tests import factory
from tests.test_exclusions import A1, A8, CPU1, machines  # noqa: F401 - the merged two-machine fixture

SETUP = "two setup hours paid on the RTX 4090 machine only"
STORAGE = "storage for the corpus and predictions"
FOCUS_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
FOCUS_FREQUENCIES = {"One-Time", "Recurring", "Usage-Based"}
FOCUS_MOMENT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


@pytest.fixture
def costed(machines):  # noqa: F811 - pytest's fixture by name
    """The merged machines with a rental for the RTX 4090 run, a deliverable, and two expenses: one for A8 only."""
    runs, written = machines
    records.append(runs, factory.rental("merged", runs=["run-4090"]))
    records.append(runs, factory.deliverable("merged", written["run-4090"]["b8"][0]))
    return runs, written


def _add(cli, runs, *args):
    code, out, err = cli("expense", "add", "--campaign", "merged", "--currency", "USD", "--date", "2026-09-29", *args,
                         "--runs", runs, "--json")
    assert code == 0, err
    return json.loads(out)


def test_other_costs_sit_beside_package_spend_and_unequal_items_are_named(costed, cli, tmp_path):
    runs, _ = costed
    setup = _add(cli, runs, "--amount", "12.5", "--justification", SETUP, "--configuration", A8)
    _add(cli, runs, "--amount", "3", "--justification", STORAGE, "--all-configurations")
    assert setup["amount"] == "12.50" and setup["applies_to"] != "all" and setup["configuration_labels"] == [A8]
    data = json.loads(cli("decide", "merged", "--runs", runs, "--json")[1])
    rows = {row["label"]: row for row in data["ranked"] + data["infeasible"]}
    # A8: package 47.14 planned and observed; other costs 12.50 + 3.00; one deliverable.
    assert rows[A8]["planned"]["total"] == "47.14" and rows[A8]["observed"]["spend"] == "47.14"
    assert rows[A8]["other_costs"]["total"] == "15.50"
    assert rows[A8]["planned_total"] == {"total": "62.64", "includes": "package spend 47.14 USD and other costs 15.50 USD (2 items)"}
    assert rows[A8]["observed_total"]["total"] == "62.64"
    assert rows[A8]["observed"]["cost_per_validated_corpus"] == "62.64"
    assert rows[A8]["observed"]["cost_includes"] == "package spend 47.14 USD and other costs 15.50 USD (2 items)"
    # A1: the storage only; no deliverable, so no cost per corpus.
    assert rows[A1]["other_costs"]["total"] == "3.00" and rows[A1]["planned_total"]["total"] == "50.14"
    assert rows[A1]["observed"]["cost_per_validated_corpus"] is None
    assert rows[A1]["observed"]["cost_reason"] == "undefined: no accepted deliverable"
    # CPU1: no catalog price, so no planned total; its other costs still show.
    assert rows[CPU1]["other_costs"]["total"] == "3.00" and rows[CPU1]["planned_total"]["total"] is None
    assert rows[CPU1]["planned_total"]["includes"] == "no planned package (not in the catalog: CPU)"
    # The setup hours are carried by A8 only: named, and the ranking by package spend says so.
    (item,) = data["unequal_items"]
    assert item["justification"] == SETUP and item["without"] == [A1, CPU1]
    assert [row["label"] for row in data["ranked"]] == [A8, A1, CPU1]  # equal packages, A8 faster; the CPU buys none (#45)
    assert data["unequal_note"] == (
        "The ranking orders by planned package spend, the items every configuration carries alike; other costs that "
        "only some configurations carry are shown beside it and never decide the order. "
        f"Counted in, they would put {A1} first: compare the items before deciding.")
    text = cli("decide", "merged", "--runs", runs)[1]
    assert f"  - {SETUP} (12.50 USD, {setup['record_id']}): not carried by {A1}; {CPU1}" in text
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    campaign = tmp_path / "site" / "campaigns" / "merged"
    decision = BeautifulSoup((campaign / "decision.html").read_text(), "html.parser").select_one("#other-costs")
    assert SETUP in decision.select_one(".warning").get_text()
    cells = {tr.th.get_text(): [td.get_text(" ", strip=True) for td in tr.find_all("td")] for tr in decision.select("tbody tr")}
    assert cells[A8][:5] == ["47.14 USD", "47.14 USD", "15.50 USD", "62.64 USD", "62.64 USD"]
    page = BeautifulSoup((campaign / "index.html").read_text(), "html.parser")
    assert page.select_one("#other-costs").get_text() == "15.50 USD"
    # Per configuration only (#21): A8 has its own rental and deliverable; A1 shares the rental but delivered nothing.
    assert page.select_one("#cost-per-corpus").get_text() == (
        f"{A8}: 62.64 USD (package spend 47.14 USD and other costs 15.50 USD (2 items), by its 1 accepted deliverable)")


def test_the_bundle_carries_every_rental_and_expense_as_focus_rows(costed, cli, tmp_path):
    runs, _ = costed
    setup = _add(cli, runs, "--amount", "12.50", "--justification", SETUP, "--configuration", A8)
    assert cli("bundle", "merged", "--runs", runs, "-o", tmp_path / "e.zip")[0] == 0
    with zipfile.ZipFile(tmp_path / "e.zip") as bundle:
        text = bundle.read("merged-evidence/data/costs.focus.csv").decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.split("\n", 1)[0].split(",")
    assert header[:7] == ["BilledCost", "BillingCurrency", "ChargeCategory", "ChargeFrequency", "ChargePeriodStart",
                          "ChargePeriodEnd", "ChargeDescription"]
    assert all(column.startswith("x_") for column in header[7:])  # FOCUS: custom columns carry the x_ prefix
    for row in rows:
        assert row["ChargeCategory"] in FOCUS_CATEGORIES and row["ChargeFrequency"] in FOCUS_FREQUENCIES
        assert not (row["ChargeCategory"] == "Purchase" and row["ChargeFrequency"] == "Usage-Based")
        assert FOCUS_MOMENT.match(row["ChargePeriodStart"]) and FOCUS_MOMENT.match(row["ChargePeriodEnd"])
        assert row["ChargePeriodStart"] < row["ChargePeriodEnd"]  # the end is exclusive, after the start
        assert re.fullmatch(r"\d+\.\d{2}", row["BilledCost"]) and re.fullmatch(r"[A-Z]{3}", row["BillingCurrency"])
    rental, expense = rows
    (recorded,) = reading.load(runs).of_kind("rental")
    start = dt.datetime.fromisoformat(recorded["start"]).astimezone(dt.UTC)
    assert (rental["ChargeCategory"], rental["BilledCost"], rental["ChargePeriodStart"], rental["ChargePeriodEnd"]) == (
        "Purchase", "47.14", f"{start:%Y-%m-%dT%H:%M:%S}Z",
        f"{start + dt.timedelta(days=3):%Y-%m-%dT%H:%M:%S}Z")  # 3 days from the start, end exclusive
    assert rental["x_Configuration"] == f"{A1}; {A8}"
    assert (expense["ChargeCategory"], expense["BilledCost"], expense["x_RecordId"], expense["x_Configuration"]) == (
        "Usage", "12.50", setup["record_id"], A8)
    assert (expense["ChargePeriodStart"], expense["ChargePeriodEnd"]) == ("2026-09-29T00:00:00Z", "2026-09-30T00:00:00Z")
    assert expense["x_Justification"] == SETUP


def test_mixed_currencies_are_never_summed(costed, cli):
    runs, _ = costed
    _add(cli, runs, "--amount", "12.50", "--justification", SETUP, "--configuration", A8)
    code, _, err = cli("expense", "add", "--campaign", "merged", "--amount", "5", "--currency", "EUR", "--justification",
                       "a power adapter bought in Europe", "--configuration", A8, "--runs", runs)
    assert code == 0, err
    row = next(r for r in json.loads(cli("decide", "merged", "--runs", runs, "--json")[1])["ranked"] if r["label"] == A8)
    assert row["other_costs"] == {"total": None, "currency": None, "reason": "other costs mix currencies (EUR, USD); never summed",
                                  "expenses": row["other_costs"]["expenses"]}
    assert row["planned_total"]["total"] is None and row["observed"]["cost_per_validated_corpus"] is None


@pytest.mark.parametrize(("args", "message"), [
    (("--amount", "12.5", "--currency", "USD", "--configuration", "b8 on a TPU"),
     f"--configuration 'b8 on a TPU' is not a configuration of campaign merged (its configurations: {A1}; {A8}; {CPU1})"),
    (("--amount", "1,50", "--currency", "USD", "--all-configurations"), "--amount '1,50' is not an amount such as 12.50"),
    (("--amount", "-3", "--currency", "USD", "--all-configurations"), "--amount '-3' is not an amount such as 12.50"),
    (("--amount", "3", "--currency", "usd", "--all-configurations"), "--currency 'usd' is not an ISO 4217 code"),
    (("--amount", "3", "--currency", "USD"), "name the configurations the expense applies to"),
    (("--amount", "3", "--currency", "USD", "--all-configurations", "--configuration", A8),
     "name the configurations the expense applies to"),
])
def test_a_wrong_expense_is_refused_and_nothing_is_written(costed, cli, args, message):
    runs, _ = costed
    before = {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()}
    code, out, err = cli("expense", "add", "--campaign", "merged", "--justification", SETUP, *args, "--runs", runs)
    assert code == 1 and out == "" and message in err and err.count("\n") == 1
    assert {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()} == before


def test_expenses_are_listed_and_validated(costed, cli):
    runs, _ = costed
    expense = _add(cli, runs, "--amount", "12.50", "--justification", SETUP, "--configuration", A8)
    code, out, _ = cli("expense", "list", "--campaign", "merged", "--runs", runs)
    assert code == 0 and out == f"{expense['record_id']}: 12.50 USD on 2026-09-29 for {A8}: {SETUP}\n"
    assert records.validate({**expense, "amount": "12.505"}) == ["amount: '12.505' does not match '^\\\\d{1,15}(\\\\.\\\\d{1,2})?$'"]
    assert records.validate({**expense, "applies_to": []})[0].startswith("applies_to: ")


def test_a_merged_campaign_with_one_exclusion_and_one_expense_for_one_configuration(costed, cli):
    """The issue's fixture: two machines merged, one trial excluded under a rule, one expense for A8 only; by hand."""
    runs, written = costed
    fastest = written["run-4090"]["b8"][0]["record_id"]
    assert cli("exclude", "--campaign", "merged", "--rule", "the provider's log shows thermal throttling", "--trial", fastest,
               "--document", "ticket 4711", "--runs", runs)[0] == 0
    _add(cli, runs, "--amount", "12.50", "--justification", SETUP, "--configuration", A8)
    data = json.loads(cli("decide", "merged", "--runs", runs, "--json")[1])
    rows = {row["label"]: row for row in data["ranked"] + data["infeasible"]}
    a8 = rows[A8]
    assert a8["measured_window_s"] == [31, 32, 33, 34] and a8["median_s"] == 32.5 and a8["excluded_trials"] == [fastest]
    assert (a8["planned"]["total"], a8["other_costs"]["total"], a8["planned_total"]["total"], a8["observed_total"]["total"]) == (
        "47.14", "12.50", "59.64", "59.64")
    assert a8["observed"]["cost_per_validated_corpus"] == "59.64"  # one corpus delivered; the exclusion is about timing
    assert rows[A1]["other_costs"]["total"] is None and rows[A1]["other_costs"]["reason"] == "no other cost recorded"
    assert rows[A1]["planned_total"]["total"] == "47.14"
    (exclusion,) = data["exclusions"]
    assert {row["label"]: row["trials"] for row in exclusion["configurations"]} == {A1: [], A8: [fastest], CPU1: []}
    assert [item["without"] for item in data["unequal_items"]] == [[A1, CPU1]]
    assert [row["label"] for row in data["ranked"]] == [A8, A1, CPU1]
    assert data["unequal_note"].endswith(f"Counted in, they would put {A1} first: compare the items before deciding.")


def test_an_expense_naming_a_configuration_the_campaign_lacks_is_a_named_problem(costed):
    from iteralab.store import reading
    from iteralab.store.views import campaign_views

    runs, _ = costed
    stray = records.make_record("expense", campaign="merged", run_id="run-hand", amount="9.00", currency="USD",
                                justification="a card we never rented", applies_to=["b1-h100-0000abcd"],
                                configuration_labels=["b1 · H100"], incurred_on="2026-09-29", receipt=None)
    records.append(runs, stray)
    (view,) = campaign_views(reading.load(runs))
    assert f"expense {stray['record_id']} names configuration b1-h100-0000abcd, which campaign merged lacks; it is added to none" \
        in view.problems
    assert view.cost()["other"] == Decimal("9.00")  # still the campaign's cost, listed with its justification
