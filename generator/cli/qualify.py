"""iteralab qualify: settle each candidate's criteria from evidence and sheets."""

from __future__ import annotations

from pathlib import Path

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option, runs_option
from iteralab.decision import qualification


@click.command()
@click.argument("sheets", type=FOLDER, default=Path("qualification"), required=False)
@runs_option("runs folder with the campaigns' evidence (default: runs)")
@catalog_option
@json_option
def qualify(sheets, runs, catalog, as_json):
    """Settle each candidate's six criteria from evidence and sheets; rank the selected ones."""
    settled = qualification.qualify_folder(sheets=sheets, runs=runs, catalog=catalog)
    emit(as_json, qualification.sheets_data(settled), qualification.describe_sheets(settled) or f"no *.toml sheet in {sheets}")
