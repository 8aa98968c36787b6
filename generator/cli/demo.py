"""iteralab demo: run the embedded demo campaign and build its site."""

from __future__ import annotations

from pathlib import Path

import click

from iteralab.cli.options import FOLDER, runs_option
from iteralab.demos import whole as embedded


@click.command()
@runs_option("runs folder to append records to (default: runs)")
@click.option("--out", type=FOLDER, default=Path("site"), help="where to build the site afterwards (default: site)")
@click.option("--again", is_flag=True, help="run the campaign again even if it already has trials (appends a new run)")
@click.option("--quiet", is_flag=True, help="no progress bar")
def demo(runs, out, again, quiet):
    """Run the embedded demo campaign: 1,000 real reviews, a real fine-tuned encoder, offline."""
    def log(message):
        click.echo(message, err=True)

    result = embedded.run_demo(runs_dir=runs, out=out, again=again, quiet=quiet, log=None if quiet else log)
    click.echo(embedded.describe_result(result, runs))
    return 130 if result["interrupted"] else 0
