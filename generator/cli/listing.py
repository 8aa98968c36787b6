"""iteralab runs and trials: list a campaign's runs and trials, with the ids other commands take."""

from __future__ import annotations

import click

from iteralab.cli.options import emit, json_option, runs_option
from iteralab.store import listing


@click.command("runs")
@click.argument("campaign")
@runs_option()
@json_option
def runs_command(campaign, runs, as_json):
    """List a campaign's runs: the ids rental add --run takes, and which are unfinished (run --resume)."""
    view = listing.campaign_view_of(runs, campaign)
    rows = listing.run_rows(view)
    # The text only where it is printed: --json never depends on it (#62: a row the text could not say broke --json too).
    emit(as_json, {"campaign": campaign, "runs": rows}, "" if as_json else listing.describe_runs(view, rows))


@click.command()
@click.argument("campaign")
@click.option("--accepted", is_flag=True, help="only trials whose corpus was accepted (what deliver takes)")
@click.option("--run", "run_id", metavar="RUN_ID", help="only the trials of this run")
@runs_option()
@json_option
def trials(campaign, accepted, run_id, runs, as_json):
    """List a campaign's trials: the ids deliver and exclude take, with configuration, status and window."""
    view = listing.campaign_view_of(runs, campaign)
    rows = listing.trial_rows(view, accepted=accepted, run_id=run_id)
    emit(as_json, {"campaign": campaign, "trials": rows}, "" if as_json else listing.describe_trials(view, rows))
