"""Rules of money/schedule.py that the mutation run (#62) found no selected test holding."""

import datetime as dt

from iteralab.money.schedule import rental_period


def test_a_rental_recorded_without_an_offset_is_read_as_utc_and_lasts_its_packages_days():
    """Regression for #62: a rental's start written before offsets were required is UTC, and without an end it lasts
    its package's days from there (never extended)."""
    start, end = rental_period({"start": "2026-09-28T09:00:00", "days": 3})
    assert start == dt.datetime(2026, 9, 28, 9, tzinfo=dt.UTC) and start.utcoffset() == dt.timedelta(0)
    assert end == dt.datetime(2026, 10, 1, 9, tzinfo=dt.UTC)
    # an aware start keeps its own offset
    start, end = rental_period({"start": "2026-09-28T09:00:00+07:00", "days": 7, "end": None})
    assert start.utcoffset() == dt.timedelta(hours=7) and end - start == dt.timedelta(days=7)


def test_a_rentals_recorded_end_is_its_end_read_as_utc_without_an_offset():
    """Regression for #62: a recorded end ends the period whatever the package's days; without an offset it is UTC, and
    with one it keeps it."""
    start, end = rental_period({"start": "2026-09-28T09:00:00+00:00", "days": 30, "end": "2026-09-29T10:30:00"})
    assert end == dt.datetime(2026, 9, 29, 10, 30, tzinfo=dt.UTC) and end.tzinfo is dt.UTC
    start, end = rental_period({"start": "2026-09-28T09:00:00", "days": 30, "end": "2026-09-29T10:30:00+07:00"})
    assert end.utcoffset() == dt.timedelta(hours=7) and end - start == dt.timedelta(hours=18, minutes=30)
