"""iteralab void: a record made by mistake, struck through and kept."""

from __future__ import annotations

import click

from iteralab.cli.options import emit, json_option, runs_option
from iteralab.ledger import corrections


@click.command()
@click.argument("record_id", metavar="RECORD_ID")
@click.option("--reason", required=True, help="why the record is withdrawn, e.g. 'the same receipt was recorded twice'")
@runs_option()
@json_option
def void(record_id, reason, runs, as_json):
    """Void a rental, deliverable or expense recorded by mistake (or withdraw an exclusion): it stays, struck through."""
    record = corrections.void_record(runs_dir=runs, record_id=record_id, reason=reason)
    emit(as_json, record, corrections.describe_void(record))
