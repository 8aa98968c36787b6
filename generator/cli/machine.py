"""The command a renter runs first on a freshly rented machine: doctor; and the lab exercise of its instruments."""

from __future__ import annotations

import click

from iteralab import lab as exercise
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


@click.command()
@click.option("--device", help="device to run the exercise on, e.g. cpu or cuda:0 (default: cuda:0 where there is one)")
def lab(device):
    """Print the lab exercise: the runner's instruments on a small network it builds itself, nothing downloaded.

    The environment check doctor makes, phases timed apart (why the first pass is not the measured window), memory per
    phase, the measured window against batch size with its spread, and the KV cache's estimate beside its measurement
    on CUDA. Each section says what it does not prove: it does not replace a trial of your model.
    """
    click.echo(exercise.report(device=device))


@click.command()
@click.argument("folder", type=FOLDER)
def notebook(folder):
    """Copy the lab notebook into FOLDER as lab.ipynb (FOLDER made if missing); an existing file is never overwritten.

    The notebook runs the lab exercise section by section, then opens a runs folder with iteralab.open_runs, ranks its
    configurations by the decision's rule and draws the site's chart inline. It needs Jupyter: iteralab[notebook].
    """
    click.echo(f"wrote {exercise.copy_notebook(folder=folder)}: open it in Jupyter (pip install 'iteralab[notebook]' "
               "and a Jupyter front end)")


COMMANDS = (doctor, lab, notebook)
