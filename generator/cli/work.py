"""Commands that run campaigns and publish their evidence: check, run, demo, build, serve, decide, note, bundle, verify."""

from __future__ import annotations

from pathlib import Path

import click

from iteralab.cli.options import (
    FOLDER,
    catalog_option,
    emit,
    json_option,
    language_option,
    runs_option,
    sign_key_options,
)
from iteralab.core import language
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.decision import compared, rental_checks, revisions, text
from iteralab.decision.report import decision_report
from iteralab.demos import whole as embedded
from iteralab.evidence import bundle, verification
from iteralab.pages import notes
from iteralab.run import runner, starter, summary
from iteralab.site import serve
from iteralab.site.build import build_site, describe_build
from iteralab.store import listing, reading
from iteralab.workloads import WORKLOADS


@click.command()
@click.argument("runs", type=FOLDER, default=DEFAULT_RUNS, required=False)
@json_option
def check(runs, as_json):
    """Validate every record under the runs folder and every rental's runs; list each problem with where it is."""
    loaded = rental_checks.check_folder(runs)
    data = reading.check_data(loaded)
    emit(as_json, data, reading.describe_check(loaded, data))
    return 1 if loaded.problems else 0


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


@click.command("init")
@click.argument("out", type=FOLDER)
@click.option("--kind", type=click.Choice(list(WORKLOADS)), default="classify", show_default=True,
              help="the kind of work: classify, generate or adapt")
@click.option("--model", type=FOLDER, metavar="DIR", help="your local model folder: labels (id2label), max_length and "
              "LoRA targets are read from it")
@click.option("--corpus", type=FOLDER, metavar="FILE", help="your corpus (.jsonl or .csv: id, text, label): buckets "
              "and max_length from its token counts")
@click.option("--train", type=FOLDER, metavar="FILE", help="with --kind adapt: your training split")
@click.option("--force", is_flag=True, help="replace OUT if it exists")
@runs_option("runs folder the dry run reads, relative to the working folder (default: runs)")
@json_option
def init(out, kind, model, corpus, train, force, runs, as_json):
    """Write a commented starter campaign OUT (e.g. campaigns/tickets.toml), then check it as run --dry-run does.

    Paths written in the campaign are relative to its own folder (~ is your home); runs/ is relative to where you run
    iteralab. No threshold is guessed: the protocol fixes them before any timing, so you write them.
    """
    data = starter.init_campaign(kind=kind, out=out, runs_dir=runs, model=model, corpus=corpus, train=train, force=force)
    emit(as_json, data, starter.describe_init(data))
    return 0


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


@click.command()
@runs_option("runs folder to read (default: runs)")
@click.option("--out", type=FOLDER, default=Path("site"), help="output folder (default: site)")
@click.option("--notes", type=FOLDER, help="folder of Markdown decision notes (default: notes/ beside the runs folder)")
@click.option("--sheets", type=FOLDER, help="folder of qualification sheets (default: qualification/ beside the runs folder)")
@click.option("--processes", type=click.IntRange(min=1),
              help="render campaigns on this many processes (default: one per core once there are thousands of trials)")
@click.option("--base-url", metavar="URL",
              help="where the site is published, e.g. https://example.org/team/site/ (default: a host's root); "
                   "the 404 page, served at any path, links from there")
@language_option(multiple=True)
@catalog_option
@sign_key_options
@json_option
def build(runs, out, notes, sheets, processes, base_url, languages, catalog, sign_key, quiet, as_json):
    """Render the records, the catalog and decision notes into a static site, in English, Indonesian or both."""
    result = build_site(runs=runs, out=out, notes=notes, catalog=catalog, sheets=sheets, processes=processes,
                        languages=languages, base_url=base_url, sign_key=sign_key, quiet=quiet)
    data = {**result, "index": str(result["index"].resolve()),
            "languages": {code: {**found, "index": str(found["index"].resolve())} for code, found in result["languages"].items()}}
    emit(as_json, data, describe_build(result))
    return 1 if result["failed"] else 0


@click.command("serve")
@click.option("--out", type=FOLDER, default=Path("site"), help="folder to serve (default: site)")
@click.option("--port", type=click.IntRange(0, 65535), default=8000,
              help="port on 127.0.0.1 (default 8000; 0: any free port)")
def serve_command(out, port):
    """Preview the built site on http://127.0.0.1:PORT/ (localhost only)."""
    serve.serve(out=out, port=port, announce=lambda message: click.echo(message))



@click.command()
@click.argument("campaign")
@runs_option()
@language_option(multiple=False)
@catalog_option
@json_option
def decide(campaign, runs, lang, catalog, as_json):
    """Answer which configuration gets the campaign's result for the lowest planned spend, and why."""
    report = decision_report(campaign=campaign, runs=runs, catalog=catalog)
    with language.speaking(lang):
        emit(as_json, text.report_dict(report, said_in=lang), text.describe_report(report))


@click.command()
@click.argument("earlier")
@click.argument("later")
@runs_option()
@language_option(multiple=False)
@catalog_option
@json_option
def compare(earlier, later, runs, lang, catalog, as_json):
    """Set two revisions of a question side by side: what changed, each configuration's figures, whether the answer did."""
    comparison = revisions.compare_campaigns(earlier=earlier, later=later, runs=runs, catalog=catalog)
    with language.speaking(lang):
        emit(as_json, compared.comparison_dict(comparison), compared.describe_comparison(comparison))


@click.group()
def note():
    """Draft decision notes (Markdown) for the team to edit before publishing."""


@note.command("new")
@click.argument("campaign")
@runs_option()
@click.option("--notes", "notes_dir", type=FOLDER, help="notes folder (default: notes/ beside the runs folder)")
@click.option("--author", default="to fill in", help="author named in the front matter")
@click.option("--again", is_flag=True, help="draft anew over an existing note, which moves to superseded/ in the notes folder")
@catalog_option
@json_option
def note_new(campaign, runs, notes_dir, author, again, catalog, as_json):
    """Draft a decision note (Markdown) from the decision report, for the team to edit before publishing."""
    path, earlier = notes.draft_note(campaign=campaign, runs=runs, notes=notes_dir, author=author, catalog=catalog, again=again)
    moved = f" (the earlier note is kept as {earlier}, not published)" if earlier else ""
    emit(as_json, {"path": str(path), "superseded": str(earlier) if earlier else None},
         f"Drafted {path}{moved}: edit it, then iteralab build")



@click.command("bundle")
@click.argument("campaign")
@click.option("-o", "--output", type=FOLDER, required=True, metavar="FILE.zip", help="where to write the bundle")
@runs_option()
@click.option("--notes", "notes_dir", type=FOLDER, help="decision notes folder (default: notes/ beside the runs folder)")
@catalog_option
@sign_key_options
@json_option
def bundle_command(campaign, output, runs, notes_dir, catalog, sign_key, quiet, as_json):
    """Write a campaign's evidence bundle: a deterministic zipped BagIt bag with checksums, signed with --sign-key."""
    path, digest = bundle.write_bundle(campaign=campaign, out=output, runs=runs, notes=notes_dir, catalog=catalog,
                                       sign_key=sign_key, quiet=quiet)
    emit(as_json, {"path": str(path), "sha256": digest}, f"{path}\nsha256 {digest}")


@click.command()
@click.argument("bundle_file", metavar="BUNDLE", type=FOLDER)
@click.option("--allowed-signers", type=FOLDER, metavar="FILE",
              help="OpenSSH allowed signers file (NAME KEY per line): the signature must be by one of its keys")
@click.option("--require-signature", is_flag=True, help="refuse a bundle that is not signed")
@json_option
def verify(bundle_file, allowed_signers, require_signature, as_json):
    """Check an evidence bundle: safe entries, every file present, every checksum right, nothing extra, its signature."""
    report = verification.verify_report(bundle_file, allowed_signers=allowed_signers, require_signature=require_signature)
    emit(as_json, {"bundle": str(bundle_file), **report, "valid": not report["problems"]},
         verification.describe(bundle_file, report))
    return 1 if report["problems"] else 0


@click.command("runs")
@click.argument("campaign")
@runs_option()
@json_option
def runs_command(campaign, runs, as_json):
    """List a campaign's runs: the ids rental add --run takes, and which are unfinished (run --resume)."""
    view = listing.campaign_view_of(runs, campaign)
    rows = listing.run_rows(view)
    emit(as_json, {"campaign": campaign, "runs": rows}, listing.describe_runs(view, rows))


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
    emit(as_json, {"campaign": campaign, "trials": rows}, listing.describe_trials(view, rows))


COMMANDS = (init, runs_command, trials, check, run, demo, build, serve_command, decide, compare, note, bundle_command, verify)
