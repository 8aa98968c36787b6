"""iteralab lab and notebook: the lab exercise of the runner's instruments, printed or as a notebook."""

from __future__ import annotations

import click

from iteralab import lab as exercise
from iteralab.cli.options import FOLDER


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
