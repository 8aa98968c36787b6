"""The ``iteralab`` command line: a few lines per command over one library call each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from iteralab import __version__
from iteralab import demo as embedded
from iteralab.core.errors import UsageError, UserError
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.decision import costs, exclusions, qualification, rentals, text
from iteralab.decision.report import decision_report
from iteralab.money import catalog as prices
from iteralab.money import schedule, sizing
from iteralab.run import runner, summary
from iteralab.site import bundle, notes, serve
from iteralab.site.build import build_site, describe_build
from iteralab.store import reading

FOLDER = click.Path(path_type=Path)
RUNS_HELP = "runs folder (default: runs)"


def runs_option(help_text: str = RUNS_HELP):
    """The --runs option every command that reads or writes records shares."""
    return click.option("--runs", type=FOLDER, default=DEFAULT_RUNS, show_default=False, help=help_text)


def json_option(function):
    """--json: print the result as JSON instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="print the result as JSON")(function)


def catalog_option(function):
    """--catalog FILE: price from another catalog."""
    return click.option("--catalog", type=FOLDER, metavar="FILE",
                        help="price catalog CSV (default: the shipped 2026-09-24 catalog)")(function)


def emit(as_json: bool, data: dict, human: str) -> None:
    """Print DATA as JSON with --json, else the human text."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) if as_json else human)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iteralab", message="%(prog)s %(version)s")
def cli():
    """Benchmark rented GPUs offline and publish the evidence as a static site."""


@cli.command()
@click.option("--gpu", required=True, help="GPU as the catalog names it, e.g. rtx-4090, rtx-6000-ada, b200")
@click.option("--days", required=True, type=int, help="package length in days: 3, 7 or 30")
@click.option("--lots", required=True, type=click.IntRange(min=1), help="number of lots (a lot may hold several cards)")
@click.option("--accepted-results", type=click.IntRange(min=0), metavar="K",
              help="distinct validated corpora actually accepted; adds cost per validated corpus")
@catalog_option
@json_option
def cost(gpu, days, lots, accepted_results, catalog, as_json):
    """Price a rental package: lot price x lots, never multiplied again by cards per lot."""
    result = prices.quote(prices.load_catalog(catalog), gpu=gpu, days=days, lots=lots, accepted_results=accepted_results)
    emit(as_json, prices.quote_data(result), prices.describe_quote(result))


@cli.command("schedule")
@click.option("--start", required=True, help="window start, e.g. '2026-09-28 09:00' (an offset like +07:00 is kept)")
@click.option("--end", required=True, help="window end")
@click.option("--tz", help="IANA time zone of times without an offset, e.g. Europe/Berlin (default UTC)")
@click.option("--gpu", help="also price each package for this GPU")
@click.option("--lots", type=click.IntRange(min=1), default=1, help="lots to price with --gpu (default 1)")
@catalog_option
@json_option
def schedule_command(start, end, tz, gpu, lots, catalog, as_json):
    """Measure a rental window in real elapsed hours and show which packages cover it."""
    window = schedule.plan_window(start=start, end=end, tz=tz, catalog=prices.load_catalog(catalog) if gpu else None,
                                  gpu=gpu, lots=lots)
    emit(as_json, schedule.window_data(window), schedule.describe_window(window))


@cli.command()
@click.argument("runs", type=FOLDER, default=DEFAULT_RUNS, required=False)
@json_option
def check(runs, as_json):
    """Validate every record under the runs folder and list each problem as file:line: reason."""
    loaded = reading.load(runs)
    emit(as_json, reading.check_data(loaded), reading.describe_check(loaded))
    return 1 if loaded.problems else 0


@cli.command()
@click.argument("campaign", type=FOLDER)
@runs_option("runs folder to append records to (default: runs)")
@click.option("--dry-run", is_flag=True, help="validate everything and print the plan without loading the model")
@click.option("--quiet", is_flag=True, help="no progress bar")
@json_option
def run(campaign, runs, dry_run, quiet, as_json):
    """Run a benchmark campaign: protocol fixed first, rotated trials, every outcome recorded."""
    if dry_run:
        prepared = runner.prepare(campaign, runs)
        emit(as_json, summary.plan_data(prepared), summary.describe_plan(prepared))
        return 0
    result = runner.run_campaign(campaign_file=campaign, runs_dir=runs, quiet=quiet or as_json)
    emit(as_json, summary.run_data(result), summary.describe_run(result))
    return 130 if result.interrupted else 0


@cli.command()
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


@cli.command()
@runs_option("runs folder to read (default: runs)")
@click.option("--out", type=FOLDER, default=Path("site"), help="output folder (default: site)")
@click.option("--notes", type=FOLDER, help="folder of Markdown decision notes (default: notes/ beside the runs folder)")
@click.option("--sheets", type=FOLDER, help="folder of qualification sheets (default: qualification/ beside the runs folder)")
@click.option("--processes", type=click.IntRange(min=1),
              help="render campaigns on this many processes (default: one per core once there are thousands of trials)")
@catalog_option
@json_option
def build(runs, out, notes, sheets, processes, catalog, as_json):
    """Render the records, the catalog and decision notes into a static site."""
    result = build_site(runs=runs, out=out, notes=notes, catalog=catalog, sheets=sheets, processes=processes)
    emit(as_json, {**result, "index": str(result["index"].resolve())}, describe_build(result))
    return 1 if result["failed"] else 0


@cli.command("serve")
@click.option("--out", type=FOLDER, default=Path("site"), help="folder to serve (default: site)")
@click.option("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")
def serve_command(out, port):
    """Preview the built site on http://127.0.0.1:PORT/ (localhost only)."""
    serve.serve(out=out, port=port, announce=lambda message: click.echo(message))


@cli.group()
def rental():
    """Record a GPU package bought (catalog price and receipt kept), or list the rentals of a campaign."""


@rental.command("add")
@click.option("--campaign", required=True, help="campaign the rental paid for")
@click.option("--gpu", required=True, help="GPU as the catalog names it")
@click.option("--lots", required=True, type=click.IntRange(min=1), help="number of lots")
@click.option("--days", required=True, type=int, help="package length in days: 3, 7 or 30")
@click.option("--start", required=True, help="start of the rental, e.g. 2026-09-28T09:00+07:00")
@click.option("--end", help="end of the rental; refused when longer than the package")
@click.option("--receipt", type=FOLDER, metavar="FILE", help="receipt (PDF, image, any file up to 50 MiB) copied beside the records")
@click.option("--note", help="free text kept with the rental")
@click.option("--run", "paid_runs", multiple=True, metavar="RUN_ID",
              help="a run this package paid for (repeatable); its manifest must show the rented GPU")
@runs_option()
@catalog_option
@json_option
def rental_add(campaign, gpu, lots, days, start, end, receipt, note, paid_runs, runs, catalog, as_json):
    """Record a GPU package bought, priced from the catalog, with its receipt kept beside the records."""
    record = rentals.add_rental(runs_dir=runs, campaign=campaign, gpu=gpu, lots=lots, days=days, start=start, end=end,
                                receipt=receipt, catalog=catalog, note=note, paid_runs=paid_runs)
    emit(as_json, record, rentals.describe_rental(record))


@rental.command("list")
@click.option("--campaign", required=True, help="campaign whose rentals to list")
@runs_option()
@json_option
def rental_list(campaign, runs, as_json):
    """List the rentals recorded for a campaign."""
    found = rentals.list_rentals(runs_dir=runs, campaign=campaign)
    emit(as_json, {"rentals": found}, rentals.describe_rentals(found, campaign))


@cli.group()
def expense():
    """Record another project cost with its justification (never package spend), or list a campaign's."""


@expense.command("add")
@click.option("--campaign", required=True, help="campaign the cost belongs to")
@click.option("--amount", required=True, help="exact amount, e.g. 12.50 (at most two decimals)")
@click.option("--currency", required=True, help="ISO 4217 code, e.g. USD; mixed currencies are never summed")
@click.option("--justification", required=True, help="why this cost really applies")
@click.option("--configuration", "configurations", multiple=True, metavar="LABEL",
              help="a configuration (label or id) the cost applies to (repeat it)")
@click.option("--all-configurations", is_flag=True, help="the cost applies to every configuration of the campaign")
@click.option("--receipt", type=FOLDER, metavar="FILE", help="receipt copied beside the records with its sha256")
@click.option("--date", help="day the cost was incurred, e.g. 2026-09-28 (default: today, UTC)")
@runs_option()
@json_option
def expense_add(campaign, amount, currency, justification, configurations, all_configurations, receipt, date, runs, as_json):
    """Record another project cost that really applies, with its justification and receipt."""
    record = costs.add_expense(runs_dir=runs, campaign=campaign, amount=amount, currency=currency, justification=justification,
                               configurations=configurations, all_configurations=all_configurations, receipt=receipt,
                               date=date)
    emit(as_json, record, costs.describe_expense(record))


@expense.command("list")
@click.option("--campaign", required=True, help="campaign whose expenses to list")
@runs_option()
@json_option
def expense_list(campaign, runs, as_json):
    """List the expenses recorded for a campaign."""
    found = costs.list_expenses(runs_dir=runs, campaign=campaign)
    emit(as_json, {"expenses": found}, costs.describe_expenses(found, campaign))


@cli.command()
@click.argument("campaign")
@runs_option()
@catalog_option
@json_option
def decide(campaign, runs, catalog, as_json):
    """Answer which configuration gets the campaign's result for the lowest planned spend, and why."""
    report = decision_report(campaign=campaign, runs=runs, catalog=catalog)
    emit(as_json, text.report_dict(report), text.describe_report(report))


@cli.group()
def note():
    """Draft decision notes (Markdown) for the team to edit before publishing."""


@note.command("new")
@click.argument("campaign")
@runs_option()
@click.option("--notes", "notes_dir", type=FOLDER, help="notes folder (default: notes/ beside the runs folder)")
@click.option("--author", default="to fill in", help="author named in the front matter")
@catalog_option
@json_option
def note_new(campaign, runs, notes_dir, author, catalog, as_json):
    """Draft a decision note (Markdown) from the decision report, for the team to edit before publishing."""
    path = notes.draft_note(campaign=campaign, runs=runs, notes=notes_dir, author=author, catalog=catalog)
    emit(as_json, {"path": str(path)}, f"Drafted {path}: edit it, then iteralab build")


@cli.command()
@click.option("--campaign", required=True, help="campaign of the trial")
@click.option("--trial", "trial_id", required=True, metavar="TRIAL_ID",
              help="an accepted trial whose predictions are the deliverable")
@click.option("--name", help="what was delivered, e.g. 'October reviews, classified'")
@runs_option()
@json_option
def deliver(campaign, trial_id, name, runs, as_json):
    """Record a distinct validated corpus as delivered; repetitions never count twice."""
    record = rentals.deliver(runs_dir=runs, campaign=campaign, trial_id=trial_id, name=name)
    emit(as_json, record, rentals.describe_deliverable(record))


@cli.command()
@click.option("--campaign", required=True, help="campaign of the trials")
@click.option("--rule", required=True, help="the outside cause, stated so that anyone can apply it to every trial")
@click.option("--trial", "trial_ids", required=True, multiple=True, metavar="TRIAL_ID", help="a trial the rule sets aside (repeat)")
@click.option("--document", required=True, metavar="FILE_OR_TEXT",
              help="the evidence: a file (kept beside the records with its sha256) or a sentence")
@click.option("--checked", multiple=True, metavar="CONFIGURATION",
              help="a configuration (label or id) whose trials were checked against the rule (repeat; default: every one)")
@runs_option()
@json_option
def exclude(campaign, rule, trial_ids, document, checked, runs, as_json):
    """Set trials aside under a documented rule applied to every configuration; they stay in the records and on the site."""
    record = exclusions.add_exclusion(runs_dir=runs, campaign=campaign, rule=rule, trials=trial_ids, document=document,
                                      checked=checked)
    emit(as_json, record, exclusions.describe_exclusion(record))


@cli.command()
@click.option("--campaign", required=True, help="campaign of the exclusion")
@click.option("--exclusion", "exclusion_id", required=True, metavar="EXCLUSION_ID", help="the exclusion to take back")
@click.option("--reason", required=True, help="why it no longer applies")
@runs_option()
@json_option
def withdraw(campaign, exclusion_id, reason, runs, as_json):
    """Withdraw an exclusion, with the reason: its trials count again, and both records stay."""
    record = exclusions.withdraw_exclusion(runs_dir=runs, campaign=campaign, exclusion_id=exclusion_id, reason=reason)
    emit(as_json, record, exclusions.describe_withdrawal(record))


@cli.command("bundle")
@click.argument("campaign")
@click.option("-o", "--output", type=FOLDER, required=True, metavar="FILE.zip", help="where to write the bundle")
@runs_option()
@click.option("--notes", "notes_dir", type=FOLDER, help="decision notes folder (default: notes/ beside the runs folder)")
@catalog_option
@json_option
def bundle_command(campaign, output, runs, notes_dir, catalog, as_json):
    """Write a campaign's evidence bundle: a deterministic zipped BagIt bag with checksums."""
    path, digest = bundle.write_bundle(campaign=campaign, out=output, runs=runs, notes=notes_dir, catalog=catalog)
    emit(as_json, {"path": str(path), "sha256": digest}, f"{path}\nsha256 {digest}")


@cli.command()
@click.argument("bundle_file", metavar="BUNDLE", type=FOLDER)
@json_option
def verify(bundle_file, as_json):
    """Check an evidence bundle: safe entries, every file present, every checksum right, nothing extra."""
    problems = bundle.verify_bundle(bundle_file)
    emit(as_json, {"bundle": str(bundle_file), "problems": problems, "valid": not problems},
         "\n".join(problems) if problems else f"{bundle_file}: valid (every file present and matching its sha256)")
    return 1 if problems else 0


@cli.command()
@click.option("--params", help="parameter count, e.g. 7e9 (or read from --model)")
@click.option("--model", type=FOLDER, metavar="DIR",
              help="local model folder: parameters from safetensors headers, architecture from config.json")
@click.option("--bits", type=click.IntRange(min=1), default=16, help="bits per weight (default 16)")
@click.option("--reserve-gib", default="0", metavar="GIB", help="reserve you choose for activations, workspace, fragmentation (GiB)")
@click.option("--table", is_flag=True, help="show the 32, 16, 8 and 4 bit rows with the same reserve")
@click.option("--kv", is_flag=True, help="add the KV cache as its own line")
@click.option("--tokens", type=click.IntRange(min=1), help="tokens per sequence for --kv")
@click.option("--sequences", type=click.IntRange(min=1), help="sequences held at once for --kv")
@click.option("--kv-bits", type=click.IntRange(min=1), default=16, help="bits per cached value (default 16)")
@click.option("--layers", type=click.IntRange(min=1), help="layers, when --model does not give them")
@click.option("--kv-heads", type=click.IntRange(min=1), help="key/value heads, when --model does not give them")
@click.option("--head-dim", type=click.IntRange(min=1), help="head dimension, when --model does not give it")
@click.option("--mode", type=click.Choice(["inference", "training"]), default="inference",
              help="training lists the further items to document")
@catalog_option
@json_option
def size(params, model, bits, reserve_gib, table, kv, tokens, sequences, kv_bits, layers, kv_heads, head_dim, mode, catalog,
         as_json):
    """Estimate memory per GPU: weights, your reserve and KV cache, against the catalog's cards."""
    if (params is None) == (model is None):
        raise UsageError("give either --params or --model")
    kv_cache = {"tokens": tokens, "sequences": sequences, "bits": kv_bits, "layers": layers, "kv_heads": kv_heads,
             "head_dim": head_dim} if kv else None
    result = sizing.estimate(params=params, model=model, bits=bits, reserve_gib=reserve_gib, table=table, kv=kv_cache,
                             training=mode == "training", catalog=prices.load_catalog(catalog))
    emit(as_json, result, sizing.describe(result))


@cli.command()
@click.argument("sheets", type=FOLDER, default=Path("qualification"), required=False)
@runs_option("runs folder with the campaigns' evidence (default: runs)")
@catalog_option
@json_option
def qualify(sheets, runs, catalog, as_json):
    """Settle each candidate's six criteria from evidence and sheets; rank the selected ones."""
    settled = qualification.qualify_folder(sheets=sheets, runs=runs, catalog=catalog)
    emit(as_json, qualification.sheets_data(settled), qualification.describe_sheets(settled) or f"no *.toml sheet in {sheets}")


def commands() -> dict[str, click.Command]:
    """Return every command by its full name ('rental add'), groups' subcommands included."""
    found = {}

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, f"{prefix}{name} ")
            else:
                found[f"{prefix}{name}"] = command

    walk(cli, "")
    return found


def main(argv: list[str] | None = None) -> int:
    """Run one iteralab command; user mistakes give a one-line message, not a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    words = [word for word in args if not word.startswith("-")]
    name = words[0] if words else ""
    if isinstance(cli.commands.get(name), click.Group) and len(words) > 1:
        name += f" {words[1]}"
    try:
        status = cli.main(args=args, prog_name="iteralab", standalone_mode=False)
    except click.exceptions.Exit as exit_:  # --help, --version
        return exit_.exit_code
    except click.UsageError as error:  # a missing, unknown or malformed option: click names it
        print(f"iteralab {name}: error: {error.format_message()}", file=sys.stderr)
        return 2
    except UsageError as error:
        print(f"iteralab {name}: error: {error}", file=sys.stderr)
        return 2
    except UserError as error:
        print(f"iteralab {name}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a read or write the system refused where no caller named it better: still one line
        where = f" {error.filename}" if error.filename else ""
        print(f"iteralab {name}: error: the system refused to read or write{where}: {error.strerror or error}; "
              "nothing recorded was changed", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, click.Abort):
        print(f"iteralab {name}: interrupted", file=sys.stderr)
        return 130
    return status if isinstance(status, int) else 0
