"""iteralab expense: the project's other costs, recorded beside the runs with their justification."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option, runs_option
from iteralab.ledger import costs


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
