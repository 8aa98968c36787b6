"""Commands that record evidence beside the runs: rental, expense, deliver, exclude, withdraw, void."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option, runs_option
from iteralab.decision import corrections, costs, exclusions, rentals


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


@click.group()
def expense():
    """Record another project cost with its justification (never package spend), or list a campaign's."""


@expense.command("add")
@click.option("--campaign", required=True, help="campaign the cost belongs to")
@click.option("--amount", required=True, help="exact amount, e.g. 12.50 (at most two decimals)")
@click.option("--currency", required=True, help="ISO 4217 code, e.g. USD; mixed currencies are never summed")
@click.option("--justification", required=True, help="why this cost really applies")
@click.option("--configuration", "configurations", multiple=True, metavar="LABEL",
              help="a configuration (label or id) the cost applies to (repeat it)")
@click.option("--all-configurations", is_flag=True, help="the cost applies to every configuration of the campaign")
@click.option("--receipt", type=FOLDER, metavar="FILE", help="receipt copied beside the records with its sha256")
@click.option("--date", help="day the cost was incurred, e.g. 2026-09-28 (default: today, UTC)")
@runs_option()
@json_option
def expense_add(campaign, amount, currency, justification, configurations, all_configurations, receipt, date, runs, as_json):
    """Record another project cost that really applies, with its justification and receipt."""
    record = costs.add_expense(runs_dir=runs, campaign=campaign, amount=amount, currency=currency, justification=justification,
                               configurations=configurations, all_configurations=all_configurations, receipt=receipt,
                               date=date)
    emit(as_json, record, costs.describe_expense(record))


@expense.command("list")
@click.option("--campaign", required=True, help="campaign whose expenses to list")
@runs_option()
@json_option
def expense_list(campaign, runs, as_json):
    """List the expenses recorded for a campaign."""
    found = costs.list_expenses(runs_dir=runs, campaign=campaign)
    emit(as_json, {"expenses": found}, costs.describe_expenses(found, campaign))



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


@click.command()
@click.option("--campaign", required=True, help="campaign of the trials")
@click.option("--rule", required=True, help="the outside cause, stated so that anyone can apply it to every trial")
@click.option("--trial", "trial_ids", required=True, multiple=True, metavar="TRIAL_ID", help="a trial the rule sets aside (repeat)")
@click.option("--document", required=True, metavar="FILE_OR_TEXT",
              help="the evidence: a file (kept beside the records with its sha256) or a sentence")
@click.option("--checked", multiple=True, metavar="CONFIGURATION",
              help="a configuration (label or id) whose trials were checked against the rule (repeat; default: every one)")
@runs_option()
@json_option
def exclude(campaign, rule, trial_ids, document, checked, runs, as_json):
    """Set trials aside under a documented rule applied to every configuration; they stay in the records and on the site."""
    record = exclusions.add_exclusion(runs_dir=runs, campaign=campaign, rule=rule, trials=trial_ids, document=document,
                                      checked=checked)
    emit(as_json, record, exclusions.describe_exclusion(record))


@click.command()
@click.option("--campaign", required=True, help="campaign of the exclusion")
@click.option("--exclusion", "exclusion_id", required=True, metavar="EXCLUSION_ID", help="the exclusion to take back")
@click.option("--reason", required=True, help="why it no longer applies")
@runs_option()
@json_option
def withdraw(campaign, exclusion_id, reason, runs, as_json):
    """Withdraw an exclusion, with the reason: its trials count again, and both records stay."""
    record = exclusions.withdraw_exclusion(runs_dir=runs, campaign=campaign, exclusion_id=exclusion_id, reason=reason)
    emit(as_json, record, exclusions.describe_withdrawal(record))



@click.command()
@click.argument("record_id", metavar="RECORD_ID")
@click.option("--reason", required=True, help="why the record is withdrawn, e.g. 'the same receipt was recorded twice'")
@runs_option()
@json_option
def void(record_id, reason, runs, as_json):
    """Void a rental, deliverable or expense recorded by mistake (or withdraw an exclusion): it stays, struck through."""
    record = corrections.void_record(runs_dir=runs, record_id=record_id, reason=reason)
    emit(as_json, record, corrections.describe_void(record))


COMMANDS = (rental, expense, deliver, exclude, withdraw, void)
