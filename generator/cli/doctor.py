"""iteralab doctor: the command a renter runs first on a freshly rented machine."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option, runs_option
from iteralab.run import doctor as diagnosis


@click.command()
@click.argument("campaign", type=FOLDER, required=False)
@runs_option("runs folder whose free disk is shown (default: runs)")
@json_option
def doctor(campaign, runs, as_json):
    """Show in seconds what the runner will record on this machine and whether the campaign's devices are there.

    GPUs with architecture and memory, driver and where it was read, CUDA or ROCm runtime, torch and transformers, OS,
    free disk under the runs folder, CPU and threads; given CAMPAIGN, each variant's device found or missing and the
    determinism check. No model loads and nothing is written; exit status 1 names what is missing.
    """
    data = diagnosis.diagnose(campaign_file=campaign, runs_dir=runs)
    emit(as_json, data, diagnosis.describe(data))
    return 0 if data["ok"] else 1
