"""Rental windows in real elapsed hours against the 72, 168 and 720 hour packages."""

import json

import pytest


def schedule(cli, *args):
    code, out, err = cli("schedule", *args, "--json")
    return code, (json.loads(out) if code == 0 else None), err


def test_monday_to_friday_is_96_hours_and_needs_the_7_day_package(cli):
    code, data, _ = schedule(cli, "--start", "2026-09-28 09:00", "--end", "2026-10-02 09:00")
    assert code == 0 and data["elapsed_hours"] == "96"
    fits = {row["days"]: row for row in data["packages"]}
    assert not fits[3]["covers"] and fits[3]["periods_needed"] == 2
    assert fits[7]["covers"] and fits[30]["covers"]


@pytest.mark.parametrize(("start", "end", "hours"), [
    ("2026-10-23 09:00", "2026-10-27 09:00", "97"),  # clocks go back on 25 October
    ("2026-03-27 09:00", "2026-03-31 09:00", "95"),  # clocks go forward on 29 March
])
def test_daylight_saving_changes_give_real_elapsed_hours(cli, start, end, hours):
    code, data, _ = schedule(cli, "--start", start, "--end", end, "--tz", "Europe/Berlin")
    assert code == 0 and data["elapsed_hours"] == hours


def test_prices_each_package_or_says_not_listed(cli):
    code, data, _ = schedule(cli, "--start", "2026-09-28 09:00", "--end", "2026-10-02 09:00",
                             "--gpu", "rtx-4090", "--lots", "2")
    assert code == 0
    fits = {row["days"]: row for row in data["packages"]}
    assert fits[7]["price_per_period"] == "220.00"
    assert fits[3]["total_for_periods"] == "188.56"  # two explicit 3-day periods, 2 lots each
    assert fits[30]["price_per_period"] is None and "not listed" in fits[30]["price_note"]


@pytest.mark.parametrize(("start", "message"), [
    ("2026-10-25 02:30", "happens twice"),
    ("2026-03-29 02:30", "does not exist"),
    ("next monday", "is not a date-time"),
])
def test_ambiguous_missing_or_unreadable_times_are_refused(cli, start, message):
    code, _, err = schedule(cli, "--start", start, "--end", "2026-11-01 09:00", "--tz", "Europe/Berlin")
    assert code == 1 and message in err


def test_end_before_start_and_unknown_zone_are_refused(cli):
    assert schedule(cli, "--start", "2026-10-02 09:00", "--end", "2026-09-28 09:00")[0] == 1
    code, _, err = schedule(cli, "--start", "2026-10-02 09:00", "--end", "2026-10-03 09:00", "--tz", "Mars/Olympus")
    assert code == 1 and "not a known time zone" in err
