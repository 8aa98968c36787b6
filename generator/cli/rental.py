"""iteralab rental and deliver: the packages bought and the validated corpora delivered, recorded beside the runs."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option, runs_option
from iteralab.ledger import rentals


@click.group()
def rental():
    """Record a GPU package bought (catalog price and receipt kept), or list the rentals of a campaign."""


@rental.command("add")
@click.option("--campaign", required=True, help="campaign the rental paid for")
@click.option("--gpu", required=True, help="GPU as the catalog names it")
@click.option("--lots", required=True, type=click.IntRange(min=1), help="number of lots")
@click.option("--days", required=True, type=int, help="package length in days: 3, 7 or 30")
@click.option("--start", required=True, help="start of the rental, e.g. 2026-09-28T09:00+07:00")
@click.option("--end", help="end of the rental; refused when longer than the package")
@click.option("--receipt", type=FOLDER, metavar="FILE", help="receipt (PDF, image, any file up to 50 MiB) copied beside the records")
@click.option("--note", help="free text kept with the rental")
@click.option("--run", "paid_runs", multiple=True, metavar="RUN_ID",
              help="a run this package paid for (repeatable); its manifest must show the rented GPU")
@click.option("--tz", help="IANA time zone of --start/--end without an offset (default: the campaign's declared time zone)")
@click.option("--new-campaign", is_flag=True, help="the campaign has no records yet (a rental bought before its first run)")
@runs_option()
@catalog_option
@json_option
def rental_add(campaign, gpu, lots, days, start, end, receipt, note, paid_runs, tz, new_campaign, runs, catalog, as_json):
    """Record a GPU package bought, priced from the catalog, with its receipt kept beside the records."""
    record = rentals.add_rental(runs_dir=runs, campaign=campaign, gpu=gpu, lots=lots, days=days, start=start, end=end,
                                receipt=receipt, catalog=catalog, note=note, paid_runs=paid_runs, tz=tz,
                                new_campaign=new_campaign)
    emit(as_json, record, rentals.describe_rental(record))


@rental.command("list")
@click.option("--campaign", required=True, help="campaign whose rentals to list")
@runs_option()
@json_option
def rental_list(campaign, runs, as_json):
    """List the rentals recorded for a campaign."""
    found = rentals.list_rentals(runs_dir=runs, campaign=campaign)
    emit(as_json, {"rentals": found}, rentals.describe_rentals(found, campaign))


@click.command()
@click.option("--campaign", required=True, help="campaign of the trial")
@click.option("--trial", "trial_id", required=True, metavar="TRIAL_ID",
              help="an accepted trial whose predictions are the deliverable")
@click.option("--name", help="what was delivered, e.g. 'October reviews, classified'")
@runs_option()
@json_option
def deliver(campaign, trial_id, name, runs, as_json):
    """Record a distinct validated corpus as delivered; repetitions never count twice."""
    record = rentals.deliver(runs_dir=runs, campaign=campaign, trial_id=trial_id, name=name)
    emit(as_json, record, rentals.describe_deliverable(record))
