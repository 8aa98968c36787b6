"""The ``iteralab`` command line: a few lines per command over one library call each.

Each command lives in a module of this folder that imports only what that command uses, named in COMMANDS below with
its summary; the group imports a command's module when the command runs (lazy.LazyGroup), so ``iteralab --help``,
``--version`` and one command's run pay for no other command's libraries.
"""

from __future__ import annotations

import json
import sys

import click

from iteralab import __version__
from iteralab.cli.lazy import Entry, LazyGroup
from iteralab.core.errors import UsageError, UserError

# Every command: where it lives and its summary, the first paragraph of its docstring, which --help lists without
# importing it. tests/test_cli_startup.py fails when a summary differs from the docstring, or a command is missing here.
COMMANDS = {
    # on the rented machine
    "doctor": Entry("iteralab.cli.doctor:doctor", "Show in seconds what the runner will record on this machine and whether the campaign's devices are there."),
    "lab": Entry("iteralab.cli.lab:lab", "Print the lab exercise: the runner's instruments on a small network it builds itself, nothing downloaded."),
    "notebook": Entry("iteralab.cli.lab:notebook", "Copy the lab notebook into FOLDER as lab.ipynb (FOLDER made if missing); an existing file is never overwritten."),
    # before renting
    "cost": Entry("iteralab.cli.cost:cost", "Price a rental package: lot price x lots, never multiplied again by cards per lot."),
    "schedule": Entry("iteralab.cli.schedule:schedule_command", "Measure a rental window in real elapsed hours and show which packages cover it."),
    "size": Entry("iteralab.cli.size:size", "Estimate memory per GPU: weights, your reserve and KV cache, against the catalog's cards."),
    "qualify": Entry("iteralab.cli.qualify:qualify", "Settle each candidate's six criteria from evidence and sheets; rank the selected ones."),
    # campaigns and their runs
    "init": Entry("iteralab.cli.starter:init", "Write a commented starter campaign OUT (e.g. campaigns/tickets.toml), then check it as run --dry-run does."),
    "run": Entry("iteralab.cli.run:run", "Run a benchmark campaign: protocol fixed first, rotated trials, every outcome recorded."),
    "runs": Entry("iteralab.cli.listing:runs_command", "List a campaign's runs: the ids rental add --run takes, and which are unfinished (run --resume)."),
    "trials": Entry("iteralab.cli.listing:trials", "List a campaign's trials: the ids deliver and exclude take, with configuration, status and window."),
    "check": Entry("iteralab.cli.check:check", "Validate every record under the runs folder and every rental's runs; list each problem with where it is."),
    "demo": Entry("iteralab.cli.demo:demo", "Run the embedded demo campaign: 1,000 real reviews, a real fine-tuned encoder, offline."),
    # the decision and its publication
    "decide": Entry("iteralab.cli.decide:decide", "Answer which configuration gets the campaign's result for the lowest planned spend, and why."),
    "compare": Entry("iteralab.cli.compare:compare", "Set two revisions of a question side by side: what changed, each configuration's figures, whether the answer did."),
    "note": Entry("iteralab.cli.note:note", "Draft decision notes (Markdown) for the team to edit before publishing."),
    "build": Entry("iteralab.cli.build:build", "Render the records, the catalog and decision notes into a static site, in English, Indonesian or both."),
    "serve": Entry("iteralab.cli.serve:serve_command", "Preview the built site on http://127.0.0.1:PORT/ (localhost only)."),
    "bundle": Entry("iteralab.cli.bundle:bundle_command", "Write a campaign's evidence bundle: a deterministic zipped BagIt bag with checksums, signed with --sign-key."),
    "verify": Entry("iteralab.cli.verify:verify", "Check an evidence bundle: safe entries, every file present, every checksum right, nothing extra, its signature."),
    # evidence recorded beside the runs
    "rental": Entry("iteralab.cli.rental:rental", "Record a GPU package bought (catalog price and receipt kept), or list the rentals of a campaign."),
    "deliver": Entry("iteralab.cli.rental:deliver", "Record a distinct validated corpus as delivered; repetitions never count twice."),
    "expense": Entry("iteralab.cli.expense:expense", "Record another project cost with its justification (never package spend), or list a campaign's."),
    "exclude": Entry("iteralab.cli.exclude:exclude", "Set trials aside under a documented rule applied to every configuration; they stay in the records and on the site."),
    "withdraw": Entry("iteralab.cli.exclude:withdraw", "Withdraw an exclusion, with the reason: its trials count again, and both records stay."),
    "void": Entry("iteralab.cli.void:void", "Void a rental, deliverable or expense recorded by mistake (or withdraw an exclusion): it stays, struck through."),
}


@click.group(cls=LazyGroup, table=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iteralab", message="%(prog)s %(version)s")
def cli():
    """Benchmark rented GPUs offline and publish the evidence as a static site."""


def commands() -> dict[str, click.Command]:
    """Return every command by its full name ('rental add'), groups' subcommands included (each module imported)."""
    found = {}

    def walk(group: click.Group, prefix: str) -> None:
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            if isinstance(command, click.Group):
                walk(command, f"{prefix}{name} ")
            else:
                found[f"{prefix}{name}"] = command

    walk(cli, "")
    return found


def main(argv: list[str] | None = None) -> int:
    """Run one iteralab command; user mistakes give a one-line message (one JSON object with --json), not a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    words = [word for word in args if not word.startswith("-")]
    name = words[0] if words else ""
    if len(words) > 1 and isinstance(cli.get_command(None, name), click.Group):  # imports that command's module alone
        name += f" {words[1]}"
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args

    def refuse(message: str, status: int) -> int:
        if as_json:  # what a script reads: the same words, as one object
            print(json.dumps({"command": name, "error": message, "exit_status": status}, ensure_ascii=False), file=sys.stderr)
        else:
            print(f"iteralab {name}: error: {message}", file=sys.stderr)
        return status

    try:
        status = cli.main(args=args, prog_name="iteralab", standalone_mode=False)
    except click.exceptions.Exit as exit_:  # --help, --version
        return exit_.exit_code
    except click.UsageError as error:  # a missing, unknown or malformed option: click names it
        return refuse(error.format_message(), 2)
    except UsageError as error:
        return refuse(str(error), 2)
    except UserError as error:
        return refuse(str(error), 1)
    except OSError as error:  # a read or write the system refused where no caller named it better: still one line
        where = f" {error.filename}" if error.filename else ""
        return refuse(f"the system refused to read or write{where}: {error.strerror or error}; nothing recorded was changed", 1)
    except (KeyboardInterrupt, click.Abort):
        print(f"iteralab {name}: interrupted", file=sys.stderr)
        return 130
    return status if isinstance(status, int) else 0
