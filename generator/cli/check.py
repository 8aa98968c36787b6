"""iteralab check: validate every record under a runs folder."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.ledger import rental_checks
from iteralab.run import leftovers


@click.command()
@click.argument("runs", type=FOLDER, default=DEFAULT_RUNS, required=False)
@json_option
def check(runs, as_json):
    """Validate every record under the runs folder and every rental's runs; list each problem with where it is.

    Then, as information: the files no record refers to (safe to remove) and the torn writes a resume closed (not
    problems).
    """
    torn: list[dict] = []
    loaded = rental_checks.check_folder(runs, torn)
    left = leftovers.unreferenced(runs, loaded)
    data = {**rental_checks.check_data(loaded), "torn_writes": [{k: v for k, v in found.items() if k != "said"} for found in torn],
            "unreferenced": [found.data() for found in left]}
    # Information, said before the summary line: check_data has read the notices already, so the list is a new one.
    loaded.notices = [*loaded.notices, *(found["said"] for found in torn), *leftovers.describe(left)]
    emit(as_json, data, rental_checks.describe_check(loaded, data))
    return 1 if loaded.problems else 0
