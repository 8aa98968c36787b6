"""iteralab check: validate every record under a runs folder."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.ledger import rental_checks
from iteralab.store import reading


@click.command()
@click.argument("runs", type=FOLDER, default=DEFAULT_RUNS, required=False)
@json_option
def check(runs, as_json):
    """Validate every record under the runs folder and every rental's runs; list each problem with where it is."""
    loaded = rental_checks.check_folder(runs)
    data = reading.check_data(loaded)
    emit(as_json, data, reading.describe_check(loaded, data))
    return 1 if loaded.problems else 0
