"""iteralab schedule: measure a rental window and the packages that cover it."""

from __future__ import annotations

import click

from iteralab.cli.options import catalog_option, emit, json_option
from iteralab.money import catalog as prices
from iteralab.money import schedule


@click.command("schedule")
@click.option("--start", required=True, help="window start, e.g. '2026-09-28 09:00' (an offset like +07:00 is kept)")
@click.option("--end", required=True, help="window end")
@click.option("--tz", help="IANA time zone of times without an offset, e.g. Europe/Berlin (default UTC)")
@click.option("--gpu", help="also price each package for this GPU")
@click.option("--lots", type=click.IntRange(min=1), default=1, help="lots to price with --gpu (default 1)")
@catalog_option
@json_option
def schedule_command(start, end, tz, gpu, lots, catalog, as_json):
    """Measure a rental window in real elapsed hours and show which packages cover it."""
    window = schedule.plan_window(start=start, end=end, tz=tz, catalog=prices.load_catalog(catalog) if gpu else None,
                                  gpu=gpu, lots=lots)
    emit(as_json, schedule.window_data(window), schedule.describe_window(window))
