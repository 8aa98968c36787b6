"""iteralab run: run a benchmark campaign (or print its plan with --dry-run)."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option, runs_option
from iteralab.run import runner, summary


@click.command()
@click.argument("campaign", type=FOLDER)
@runs_option("runs folder to append records to (default: runs)")
@click.option("--dry-run", is_flag=True, help="validate everything (the model is loaded once to check it does the task) and print the plan; nothing is timed or recorded")
@click.option("--rental", "rental_id", metavar="RENTAL_ID",
              help="tie the run to a rental recorded with rental add; refused on a machine without its card")
@click.option("--resume", is_flag=True, help="continue the latest unfinished run of this campaign instead of starting one; "
              "an interrupted repetition runs again as a new trial naming the one it replaces")
@click.option("--no-retry", is_flag=True, help="with --resume: run only the trials that never started, not the interrupted ones")
@click.option("--rerun-disturbed", is_flag=True, help="with --resume: measure again each repetition whose latest trial "
              "was marked disturbed (kept as evidence), in the planned order, until its clean trial is recorded")
@click.option("--no-stages", is_flag=True, help="time the variants without first running each one's validation stages "
              "(shortest entries at batch 1, typical ones, the longest at its batch); recorded in the manifest")
@click.option("--quiet", is_flag=True, help="no progress bar")
@json_option
def run(campaign, runs, dry_run, rental_id, resume, no_retry, rerun_disturbed, no_stages, quiet, as_json):
    """Run a benchmark campaign: protocol fixed first, rotated trials, every outcome recorded."""
    if no_retry and not resume:
        raise click.UsageError("--no-retry goes with --resume")
    if rerun_disturbed and not resume:
        raise click.UsageError("--rerun-disturbed goes with --resume")
    if dry_run:
        prepared = runner.prepare(campaign, runs, rental_id=rental_id, resume=resume, retry=not no_retry,
                                  rerun_disturbed=rerun_disturbed)
        emit(as_json, summary.plan_data(prepared), summary.describe_plan(prepared))
        return 0
    result = runner.run_campaign(campaign_file=campaign, runs_dir=runs, quiet=quiet or as_json, rental_id=rental_id,
                                 resume=resume, retry=not no_retry, stages=not no_stages, rerun_disturbed=rerun_disturbed,
                                 warn=lambda message: click.echo(message, err=True))
    emit(as_json, summary.run_data(result), summary.describe_run(result))
    return 130 if result.interrupted else 0
