"""Mistakes at rental add are refused before they are written; those written anyway are voided, never rewritten.

Regression for #20, on the real demo records of tests/fixtures/demo-runs (a rental with receipt, a deliverable, an
exclusion and an expense, all made with the CLI).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from iteralab.store import reading
from iteralab.store.views import campaign_views

FIXTURE = Path(__file__).parent / "fixtures" / "demo-runs"
CAMPAIGN = "demo-rotten-tomatoes"
RENTAL = "rental-20261203T085833Z-8f6a0a6bf228"
DELIVERABLE = "deliverable-20261203T085834Z-8f321ffcd1c9"
EXPENSE = "expense-20261203T102348Z-bdd42f2e4e8e"
RECEIPT = FIXTURE / CAMPAIGN / "receipts" / "6afd9c1cbf495f92" / "receipt.pdf"


@pytest.fixture
def runs(tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(FIXTURE, copy)
    return copy


def snapshot(folder: Path) -> dict:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def view_of(runs: Path):
    (view,) = campaign_views(reading.load(runs))
    return view


def rental_add(cli, runs, *extra, campaign=CAMPAIGN, start="2026-12-04T09:00+07:00"):
    return cli("rental", "add", "--campaign", campaign, "--gpu", "rtx-4090", "--lots", "1", "--days", "3", "--start", start,
               "--runs", runs, "--json", *extra)


def test_an_unknown_campaign_is_refused_with_the_closest_names_and_new_campaign_records_it(runs, cli):
    before = snapshot(runs)
    code, _, err = rental_add(cli, runs, campaign="demo-rotten-tomato")
    assert code == 1 and "campaign demo-rotten-tomato has no records in" in err
    assert "did you mean demo-rotten-tomatoes?" in err and "add --new-campaign" in err
    assert snapshot(runs) == before  # nothing written, no new campaign folder
    code, out, _ = rental_add(cli, runs, "--new-campaign", campaign="october-reviews")
    assert code == 0 and json.loads(out)["campaign"] == "october-reviews"


def test_a_receipt_already_recorded_is_refused_naming_the_earlier_rental_until_it_is_voided(runs, cli, tmp_path):
    renamed = tmp_path / "scan of the same receipt.pdf"  # another name, the same bytes
    shutil.copy(RECEIPT, renamed)
    before = snapshot(runs)
    code, _, err = rental_add(cli, runs, "--receipt", renamed)
    assert code == 1 and f"is already recorded for {CAMPAIGN} by rental {RENTAL} (47.14 USD from 2026-12-01T09:00:00+07:00)" in err
    assert f"iteralab void {RENTAL}" in err and snapshot(runs) == before
    assert str(view_of(runs).cost()["spend"]) == "47.14"
    # Voided, the first rental no longer counts: the receipt can carry the corrected rental.
    code, out, _ = cli("void", RENTAL, "--reason", "wrong start day", "--runs", runs, "--json")
    assert code == 0 and json.loads(out)["voided_kind"] == "rental"
    code, out, _ = rental_add(cli, runs, "--receipt", renamed)
    assert code == 0
    view = view_of(runs)
    assert [r["record_id"] for r in view.rentals] == [json.loads(out)["record_id"]]
    assert str(view.cost()["spend"]) == "47.14"  # one package, not 94.28


def test_times_without_an_offset_take_tz_else_the_campaigns_declared_zone_else_are_refused(runs, cli):
    code, out, _ = rental_add(cli, runs, start="2026-09-28T09:00")  # the demo declares Asia/Jakarta
    assert code == 0 and json.loads(out)["start"] == "2026-09-28T09:00:00+07:00"
    code, out, _ = rental_add(cli, runs, "--tz", "Europe/Berlin", start="2026-09-28T09:00")
    assert code == 0 and json.loads(out)["start"] == "2026-09-28T09:00:00+02:00"
    code, out, _ = rental_add(cli, runs, start="2026-09-28T09:00Z")
    assert code == 0 and json.loads(out)["start"] == "2026-09-28T09:00:00+00:00"
    code, _, err = rental_add(cli, runs, "--new-campaign", campaign="undeclared", start="2026-09-28T09:00")
    assert code == 1 and "has no UTC offset and campaign undeclared declares no time zone" in err
    assert not (runs / "undeclared").exists()
    code, _, err = rental_add(cli, runs, "--tz", "Mars/Olympus", start="2026-09-28T09:00")
    assert code == 1 and "--tz 'Mars/Olympus' is not a known time zone" in err


def test_void_keeps_the_record_and_every_figure_leaves_it_out(runs, cli, tmp_path):
    before = snapshot(runs)
    for record_id, reason in ((RENTAL, "recorded for the wrong campaign"), (DELIVERABLE, "delivered the wrong file"),
                              (EXPENSE, "refunded")):
        code, out, _ = cli("void", record_id, "--reason", reason, "--runs", runs)
        assert code == 0 and f"{record_id} voided ({reason!r}); it stays in the evidence" in out
    after = snapshot(runs)
    assert all(after[name] == data for name, data in before.items())  # nothing written before was changed
    view = view_of(runs)
    assert (view.rentals, view.deliverables, view.expenses) == ((), (), ())
    assert sorted(r["record_id"] for r in view.voided) == sorted([RENTAL, DELIVERABLE, EXPENSE])
    cost = view.cost()
    assert (cost["spend"], cost["deliverables"], cost["other"]) == (None, 0, None)
    code, out, _ = cli("decide", CAMPAIGN, "--runs", runs, "--json")
    assert code == 0 and "47.14" not in json.dumps(json.loads(out)["ranked"])
    code, out, _ = cli("check", runs)
    assert code == 0, out
    # The campaign page shows each voided record struck through, with its reason and void.
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / CAMPAIGN / "index.html").read_text(encoding="utf-8"), "html.parser")
    rows = page.select("#voided tbody tr")
    assert len(rows) == 3 and all(row.find("del") for row in rows)
    assert "recorded for the wrong campaign" in page.select_one("#voided").get_text()
    # The bundle keeps the voided records and names them; its FOCUS cost rows leave them out.
    assert cli("bundle", CAMPAIGN, "-o", tmp_path / "b.zip", "--runs", runs)[0] == 0
    import zipfile

    with zipfile.ZipFile(tmp_path / "b.zip") as bundle:
        names = bundle.namelist()
        index = next(bundle.read(n).decode() for n in names if n.endswith("/index.html") or n == "index.html")
        focus = next(bundle.read(n).decode() for n in names if n.endswith("costs.focus.csv"))
        kept = b"".join(bundle.read(n) for n in names if "/records/" in n)
    assert RENTAL.encode() in kept and f"<del>rental <code>{RENTAL}</code></del>" in index and RENTAL not in focus
    # The corpus of the voided deliverable can be delivered again.
    trial = json.loads((FIXTURE / CAMPAIGN / "records" / "run-deliver-20261203T085834Z-421145402366.jsonl").read_text())["trial_id"]
    assert cli("deliver", "--campaign", CAMPAIGN, "--trial", trial, "--runs", runs)[0] == 0
    assert cli("check", runs)[0] == 0


@pytest.mark.parametrize(("record_id", "message"), [
    ("rental-20990101T000000Z-000000000000", "is not a record in"),
    ("not a record id", "is not a valid name"),
])
def test_void_of_an_unknown_record_is_refused_and_writes_nothing(runs, cli, record_id, message):
    before = snapshot(runs)
    code, _, err = cli("void", record_id, "--reason", "typo", "--runs", runs)
    assert code == 1 and message in err and snapshot(runs) == before


def test_void_refuses_trials_manifests_corrections_and_a_second_void(runs, cli):
    view = view_of(runs)
    trial, manifest = view.trials[0]["record_id"], view.manifests[0]["record_id"]
    assert "set it aside with iteralab exclude" in cli("void", trial, "--reason", "slow", "--runs", runs)[2]
    assert "manifest is never voided" in cli("void", manifest, "--reason", "x", "--runs", runs)[2]
    code, out, _ = cli("void", EXPENSE, "--reason", "refunded", "--runs", runs, "--json")
    void_id = json.loads(out)["record_id"]
    before = snapshot(runs)
    code, _, err = cli("void", EXPENSE, "--reason", "again", "--runs", runs)
    assert code == 1 and f"expense {EXPENSE} was already voided by {void_id} ('refunded')" in err
    code, _, err = cli("void", void_id, "--reason", "undo", "--runs", runs)
    assert code == 1 and "itself a correction" in err
    code, _, err = cli("void", RENTAL, "--reason", "  ", "--runs", runs)
    assert code == 1 and "--reason is empty" in err
    assert snapshot(runs) == before


def test_void_of_an_exclusion_withdraws_it(runs, cli):
    (exclusion,) = view_of(runs).exclusions
    code, out, _ = cli("void", exclusion["record_id"], "--reason", "the cause was ours", "--runs", runs)
    assert code == 0 and "withdrawn" in out
    assert view_of(runs).excluded == {}


def test_check_names_a_void_of_an_unknown_record_and_a_record_voided_twice_after_a_merge(runs, cli, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(runs, other)
    assert cli("void", RENTAL, "--reason", "duplicate", "--runs", runs)[0] == 0
    assert cli("void", RENTAL, "--reason", "duplicate too", "--runs", other)[0] == 0
    assert cli("void", EXPENSE, "--reason", "refunded", "--runs", other)[0] == 0
    shutil.copytree(other, runs, dirs_exist_ok=True)
    # A void whose expense is not in this folder (the expense's own file was left behind).
    (runs / CAMPAIGN / "records" / "run-expense-20261203T102348Z-8640dfc62c11.jsonl").unlink()
    code, out, _ = cli("check", runs)
    assert code == 1
    assert f"voids rental {RENTAL} again (first by" in out and "the first one stands" in out
    assert f"names expense {EXPENSE}, which is not an expense of campaign {CAMPAIGN}" in out


@pytest.mark.parametrize("where", ["runs", "runs/site", "runs/demo-rotten-tomatoes/pages", "."])
def test_build_refuses_a_site_inside_the_runs_folder_or_around_it_and_writes_nothing(runs, cli, where):
    """Regression for #20: `build --out runs` wrote the site among the evidence."""
    before = snapshot(runs.parent)
    out = runs.parent / where
    code, _, err = cli("build", "--runs", runs, "--out", out)
    assert code == 1 and ("is inside the runs folder" in err or "is inside --out" in err) and "nothing was written" in err
    assert snapshot(runs.parent) == before


def test_decide_on_the_demo_prices_cards_to_measure_in_explicit_periods_beside_the_single_package(cli):
    """Regression for #20: the demo's 96 h window; by hand, RTX 6000 Ada 2 × 55.71 = 111.42 (only 3-day packages are
    listed), RTX 4090 2 × 47.14 = 94.28 against one 7-day package at 110.00."""
    code, out, _ = cli("decide", CAMPAIGN, "--runs", FIXTURE, "--json")
    assert code == 0
    cards = {card["gpu"]: card for card in json.loads(out)["to_measure"]}
    assert (cards["rtx-6000-ada"]["price_for_window"], cards["rtx-6000-ada"]["periods"], cards["rtx-6000-ada"]["days"],
            cards["rtx-6000-ada"]["single_package"]) == ("111.42", 2, 3, None)
    assert (cards["rtx-4090"]["price_for_window"], cards["rtx-4090"]["periods"], cards["rtx-4090"]["package"]) == (
        "94.28", 2, "2 consecutive 3-day periods, bought explicitly; no automatic extension")
    assert cards["rtx-4090"]["single_package"] == {"days": 7, "periods": 1, "package": "one 7-day package",
                                                   "price_for_window": "110.00", "currency": "USD"}
    code, text, _ = cli("decide", CAMPAIGN, "--runs", FIXTURE)
    assert "RTX 4090: 94.28 USD for one lot in 2 consecutive 3-day periods, bought explicitly; no automatic extension " \
           "(one 7-day package: 110.00 USD, no second setup)" in text


def test_expense_add_refuses_a_receipt_a_rental_or_expense_already_holds(runs, cli, tmp_path):
    """The rental's receipt given again as an expense would count one payment twice."""
    copy = tmp_path / "again.pdf"
    shutil.copy(RECEIPT, copy)
    before = snapshot(runs)
    code, _, err = cli("expense", "add", "--campaign", CAMPAIGN, "--amount", "5", "--currency", "USD", "--justification",
                       "storage", "--all-configurations", "--receipt", copy, "--runs", runs)
    assert code == 1 and f"is already recorded for {CAMPAIGN} by rental {RENTAL}; one receipt is one cost" in err
    assert snapshot(runs) == before
    assert cli("void", RENTAL, "--reason", "refunded", "--runs", runs)[0] == 0
    code, _, err = cli("expense", "add", "--campaign", CAMPAIGN, "--amount", "5", "--currency", "USD", "--justification",
                       "storage", "--all-configurations", "--receipt", copy, "--runs", runs)
    assert code == 0, err
