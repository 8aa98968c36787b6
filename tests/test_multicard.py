"""Lots with several cards (#44): the label says the cards used, the planner plans only those, old names still find them."""

from __future__ import annotations

from decimal import Decimal

from iteralab.decision import qualification
from iteralab.decision.report import decide
from iteralab.decision.text import report_dict
from iteralab.ledger import costs, rental_checks
from iteralab.money.catalog import load_catalog
from iteralab.store import reading, records
from iteralab.store.views import campaign_views
from tests import factory

TWO_4090 = factory.machine("NVIDIA GeForce RTX 4090", count=2, cuda="12.8", driver="570.86", torch="2.13.0+cu128")
TWO_B200 = factory.machine("NVIDIA B200", count=2, cuda="12.8", driver="570.86", torch="2.13.0+cu128")
QUESTION = {"corpora": 1, "entries": None, "window_start": None, "window_end": None, "time_zone": None,
            "window_hours": "72", "deadline": None, "deadline_hours": None, "budget": None}
OLD_4090 = "b8 · 2× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"
NEW_4090 = "b8 · 1 of 2× NVIDIA GeForce RTX 4090 · torch 2.13.0+cu128"


def write_run(folder, run_id, environment, devices, *, campaign="cards"):
    """Write a run of five b8 trials; DEVICES is what each trial says it used (None: a record written before #44)."""
    manifest = factory.manifest(campaign, run_id, environment=environment, decision=QUESTION)
    records.append(folder, manifest)
    for repetition in range(1, 6):
        trial = factory.trial(manifest, "b8", seconds=30.0, repetition=repetition, sequence=repetition, gpu=True,
                              batch_size=8)
        if devices is not None:
            trial["memory"]["devices_used"] = devices
        records.append(folder, trial)


def report_of(runs):
    (view,) = campaign_views(reading.load(runs))
    return decide(view, load_catalog())


def rows_of(runs):
    return {row.label: row for row in report_of(runs).rows}


def test_one_card_of_two_is_said_in_the_label_and_only_that_card_is_planned(tmp_path):
    write_run(tmp_path, "run-one", TWO_4090, ["cuda:0"])
    (row,) = rows_of(tmp_path).values()
    assert row.label == NEW_4090 and row.summary.configuration.cards == 1
    # The machine's two cards would have planned 2 lots (94.28 USD); the trial used one, so one 1-card lot.
    assert (row.lots, row.plan.lots, row.plan.total) == (1, 1, Decimal("47.14"))
    assert row.plan.describe().endswith("; planned for the 1 card(s) the trials used, not the measured machine's 2: a card "
                                        "that was not used is never counted as adding throughput")
    (ranked,) = report_dict(report_of(tmp_path))["ranked"]
    assert ranked["label"] == NEW_4090 and (ranked["planned"]["cards_used"], ranked["planned"]["machine_cards"]) == (1, 2)


def test_records_that_name_no_device_keep_the_machine_label_key_and_lots_and_every_card_keeps_the_label(tmp_path):
    write_run(tmp_path / "old", "run-old", TWO_4090, None)
    write_run(tmp_path / "all", "run-all", TWO_4090, ["cuda:0", "cuda:1"])
    (old,) = rows_of(tmp_path / "old").values()
    (both,) = rows_of(tmp_path / "all").values()
    assert old.label == both.label == OLD_4090 and old.key[:-8] == both.key[:-8] and old.key != both.key
    # Both cards named: one model across them, kept apart from trials that named none; the old key still finds it.
    assert both.summary.configuration.aliases == (old.key,)
    assert (old.lots, old.plan.total, old.plan.cards_used) == (2, Decimal("94.28"), None)
    assert "planned for" not in old.plan.describe()
    assert "cards_used" not in report_dict(report_of(tmp_path / "old"))["ranked"][0]["planned"]


def test_a_two_card_lot_measured_on_one_card_is_one_lot_at_its_price_never_multiplied_by_its_cards(tmp_path):
    write_run(tmp_path, "run-b200", TWO_B200, ["cuda:1"])
    (row,) = rows_of(tmp_path).values()
    assert row.label == "b8 · 1 of 2× NVIDIA B200 · torch 2.13.0+cu128"
    assert (row.plan.card.slug, row.plan.card.cards_per_lot, row.plan.lots, row.plan.total) == ("b200", 2, 1,
                                                                                               Decimal("2071.00"))


def test_the_old_name_still_finds_the_configuration_and_check_says_the_new_name_once(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "run-old", TWO_4090, None)  # an earlier run: its trials name no device, so it keeps "2×"
    write_run(runs, "run-new", TWO_4090, ["cuda:0"])
    rows = rows_of(runs)
    new, old = rows[NEW_4090], rows[OLD_4090]
    assert old.key in new.summary.configuration.aliases and OLD_4090 in new.summary.configuration.aliases
    # A name that is a configuration's own today means that one, never the one it is an alias of.
    record = costs.add_expense(runs_dir=runs, campaign="cards", amount="3.00", currency="USD", justification="storage",
                               configurations=[OLD_4090])
    assert record["applies_to"] == [old.key]
    sheets = tmp_path / "qualification"
    sheets.mkdir()
    (sheets / "new.toml").write_text(f'candidate = "new"\ncampaign = "cards"\nvariant = "b8"\ngpu = "rtx-4090"\nlots = 1\n'
                                     f'days = 3\nconfiguration = "{NEW_4090}"\n', encoding="utf-8")
    assert rental_checks.check_folder(runs).notices == []
    # Alone, the new run's configuration is the only one: its old name (and old key) find it, and check says so once.
    only = tmp_path / "only" / "runs"
    write_run(only, "run-new", TWO_4090, ["cuda:0"])
    (summary,) = campaign_views(reading.load(only))[0].variants
    old_key = summary.configuration.aliases[0]
    record = costs.add_expense(runs_dir=only, campaign="cards", amount="3.00", currency="USD", justification="storage",
                               configurations=[old_key])
    assert record["applies_to"] == [summary.key] and record["configuration_labels"] == [NEW_4090]
    sheet = tmp_path / "only" / "qualification" / "old.toml"
    sheet.parent.mkdir()
    sheet.write_text(f'candidate = "old"\ncampaign = "cards"\nvariant = "b8"\ngpu = "rtx-4090"\nlots = 1\ndays = 3\n'
                     f'configuration = "{OLD_4090}"\n', encoding="utf-8")
    settled = qualification.qualify_sheet(sheet, reading.load(only), load_catalog())
    assert settled.configuration == NEW_4090
    checked = rental_checks.check_folder(only)
    assert checked.problems == [] and checked.notices == [
        f"{sheet}: configuration {OLD_4090!r} is the name it had before its trials named the cards they used; it is now "
        f"{NEW_4090!r} (id {summary.key}); it still finds that configuration (write the new name to stop this notice)"]
    text = rental_checks.describe_check(checked)
    assert text.count(NEW_4090) == 1 and rental_checks.check_data(checked)["renamed"] == checked.notices


def test_a_model_placed_across_two_cards_is_planned_only_on_a_lot_that_holds_both(tmp_path):
    write_run(tmp_path / "b200", "run-b200", TWO_B200, ["cuda:0", "cuda:1"])
    (b200,) = rows_of(tmp_path / "b200").values()
    assert b200.label == "b8 · 2× NVIDIA B200 · torch 2.13.0+cu128" and b200.summary.configuration.across
    assert (b200.plan.lots, b200.plan.total, b200.plan.cards_used) == (1, Decimal("2071.00"), None)
    # Two 1-card lots are two machines: one model's parts cannot be split over them.
    write_run(tmp_path / "4090", "run-4090", TWO_4090, ["cuda:0", "cuda:1"])
    (pair,) = rows_of(tmp_path / "4090").values()
    assert pair.plan is None and pair.plan_reason == ("no plan: the model was placed across 2 cards of one machine, and a "
                                                      "lot of RTX 4090 in catalog 2026-09-24 has 1 card(s)")
    # The key tells it from trials of the same machine that named no device (one card each, planned as two lots).
    write_run(tmp_path / "4090", "run-old", TWO_4090, None)
    assert len({row.key for row in rows_of(tmp_path / "4090").values()}) == 2


def test_the_decision_page_names_the_card_used_and_the_lots_planned_for_it(tmp_path, cli):
    from bs4 import BeautifulSoup

    write_run(tmp_path / "runs", "run-one", TWO_4090, ["cuda:0"])
    assert cli("build", "--runs", tmp_path / "runs", "--out", tmp_path / "site")[0] == 0
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "cards" / "decision.html").read_text(encoding="utf-8"),
                         "html.parser")
    (row,) = page.select("#feasible table.decision tbody tr")
    assert "1 of 2× NVIDIA GeForce RTX 4090" in row.get_text(" ", strip=True)
    assert "planned for the 1 card(s) the trials used, not the measured machine's 2" in row.select_one("td.plan").get_text()
