"""Rental windows in real elapsed hours against the 72, 168 and 720 hour packages."""

import json
from decimal import Decimal

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


def test_package_hours_boundaries_zone_and_messages_exactly():
    """Survivors of make mutation in schedule.plan_window, each pinned (#13)."""
    from iteralab.core.errors import UserError
    from iteralab.money.catalog import load_catalog
    from iteralab.money.schedule import plan_window

    exact = plan_window(start="2026-09-28 09:00", end="2026-10-01 09:00")  # 72 h: the 3-day package covers it exactly
    assert [(f.days, f.hours, f.covers, f.periods_needed) for f in exact.fits] == [(3, 72, True, 1), (7, 168, True, 1),
                                                                                   (30, 720, True, 1)]
    assert exact.zone == "UTC" and plan_window(start="2026-10-23 09:00", end="2026-10-27 09:00", tz="Europe/Berlin").zone == \
        "Europe/Berlin"
    one_second = plan_window(start="2026-09-28T09:00:00", end="2026-09-28T09:00:01")
    assert one_second.hours > 0  # one second is a window; only zero or less is refused
    mixed = plan_window(start="2026-09-28T09:00+07:00", end="2026-09-28T09:00+00:00")  # offsets differ: 7 real hours
    assert mixed.hours == 7
    priced = plan_window(start="2026-09-28 09:00", end="2026-10-01 09:00", catalog=load_catalog(), gpu="rtx-4090")
    assert priced.fits[0].price_per_period == Decimal("47.14")  # one lot unless told otherwise
    unpriced = plan_window(start="2026-09-28 09:00", end="2026-10-01 09:00", catalog=load_catalog())
    assert all(f.price_per_period is None and f.price_note is None for f in unpriced.fits)  # no GPU named, nothing priced
    for start, end, message in (("2026-09-28 09:00", "2026-09-28 09:00", "--end 2026-09-28 09:00 is not after --start 2026-09-28 09:00"),
                                ("soon", "2026-09-28 09:00", "--start 'soon' is not a date-time"),
                                ("2026-09-28 09:00", "later", "--end 'later' is not a date-time")):
        with pytest.raises(UserError) as error:
            plan_window(start=start, end=end)
        assert str(error.value).startswith(message)


def test_naive_times_are_utc_and_elapsed_hours_are_exact():
    """Survivors of make mutation in parse_time and elapsed_hours (#13)."""
    import datetime as dt

    from iteralab.money.schedule import elapsed_hours, parse_time

    assert parse_time("2026-09-28 09:00", None, "start").tzinfo is dt.UTC
    begin = parse_time("2026-09-28T09:00+07:00", None, "start")
    assert elapsed_hours(begin, begin + dt.timedelta(hours=96, seconds=1800)) == Decimal("96.5")
    assert elapsed_hours(begin, begin + dt.timedelta(seconds=3600)) == 1


@pytest.mark.parametrize(("hours", "text"), [("0", "0"), ("0.001", "0"), ("96", "96"), ("95.5", "95.5"), ("100", "100"),
                                             ("10.10", "10.1"), ("71.9056", "71.91")])
def test_hours_are_written_without_trailing_zeros(hours, text):
    from iteralab.money.schedule import format_hours

    assert format_hours(Decimal(hours)) == text


def test_the_schedule_text_and_data_word_for_word(cli):
    """The words and figures of `iteralab schedule`, since #18 written by the library: covered, not covered, not listed."""
    args = ("--start", "2026-09-28 09:00", "--end", "2026-10-02 09:00", "--tz", "Asia/Jakarta", "--gpu", "rtx-6000-ada")
    code, out, _ = cli("schedule", *args, "--lots", "2")
    assert code == 0
    assert out == (
        "Window 2026-09-28T09:00:00+07:00 to 2026-10-02T09:00:00+07:00 (Asia/Jakarta): 96 h elapsed\n"
        "  3-day package (72 h): does not cover it; it would take 2 consecutive periods bought explicitly (no automatic "
        "extension); 2 x 111.42 = 222.84 USD for 2 lots\n"
        "  7-day package (168 h): covers the window (72 h to spare); price not listed in catalog 2026-09-24\n"
        "  30-day package (720 h): covers the window (624 h to spare); price not listed in catalog 2026-09-24\n"
        "Covering a window does not prove the work finishes in it: measure the processing time.\n")
    code, out, _ = cli("schedule", "--start", "2026-09-28 09:00", "--end", "2026-09-29 09:00", "--gpu", "rtx-4090")
    assert out.splitlines()[1] == "  3-day package (72 h): covers the window (48 h to spare); 47.14 USD for 1 lot"
    code, data, _ = schedule(cli, *args)
    assert data == {
        "start": "2026-09-28T09:00:00+07:00", "end": "2026-10-02T09:00:00+07:00", "time_zone": "Asia/Jakarta",
        "elapsed_hours": "96", "catalog_version": "2026-09-24", "gpu": "rtx-6000-ada", "lots": 1,
        "packages": [
            {"days": 3, "hours": 72, "covers": False, "periods_needed": 2, "price_per_period": "55.71",
             "total_for_periods": "111.42", "price_note": None},
            {"days": 7, "hours": 168, "covers": True, "periods_needed": 1, "price_per_period": None,
             "total_for_periods": None, "price_note": "not listed in catalog 2026-09-24"},
            {"days": 30, "hours": 720, "covers": True, "periods_needed": 1, "price_per_period": None,
             "total_for_periods": None, "price_note": "not listed in catalog 2026-09-24"}]}
    code, data, _ = schedule(cli, "--start", "2026-09-28 09:00", "--end", "2026-10-02 09:00")
    assert (data["gpu"], data["lots"], data["catalog_version"]) == (None, None, None)  # unpriced: no GPU, lots or catalog


def test_hours_round_half_up_like_money_and_a_gpu_without_a_catalog_prices_nothing():
    """Regression for #18: hours and money state one rounding rule (half up), where hours used to round half to even."""
    from iteralab.money.schedule import format_hours, plan_window

    assert format_hours(Decimal("0.125")) == "0.13" and format_hours(Decimal("0.135")) == "0.14"  # 450 s and 486 s
    window = plan_window(start="2026-09-28 09:00", end="2026-09-29 09:00", gpu="rtx-4090", catalog=None)
    assert (window.gpu, window.catalog_version, window.fits[0].price_per_period) == (None, None, None)
