"""The ``iteralab`` command line: a few lines per command over one library call each."""

from __future__ import annotations

import json
import sys

import click

from iteralab import __version__
from iteralab.cli import evidence, machine, planning, work
from iteralab.core.errors import UsageError, UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iteralab", message="%(prog)s %(version)s")
def cli():
    """Benchmark rented GPUs offline and publish the evidence as a static site."""


for command in (*machine.COMMANDS, *planning.COMMANDS, *work.COMMANDS, *evidence.COMMANDS):
    cli.add_command(command)


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
    """Run one iteralab command; user mistakes give a one-line message (one JSON object with --json), not a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    words = [word for word in args if not word.startswith("-")]
    name = words[0] if words else ""
    if isinstance(cli.commands.get(name), click.Group) and len(words) > 1:
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
