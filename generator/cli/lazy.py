"""The lazy group: a command's module is imported when that command runs, so each command pays only for its own."""

from __future__ import annotations

import importlib
from gettext import gettext as _
from typing import NamedTuple

import click

# click's own heading, through click's own gettext domain as click writes it; a name, not a literal, so that pybabel
# does not take it for one of iteralab's messages.
CLICK_HEADING = "Commands"


class Entry(NamedTuple):
    """Where a command lives ("iteralab.cli.cost:cost") and its summary: the first paragraph of its docstring."""

    where: str
    summary: str


class LazyGroup(click.Group):
    """A click group whose commands are named in a table and imported at first use (click's documented "lazy group").

    list_commands reads the table; get_command imports the one module asked for. The listing of --help and the shell's
    completion of command names are written from the table's summaries, so neither imports a command; they read as
    click writes them from the commands themselves (tests/test_cli_startup.py compares the two).
    """

    def __init__(self, *args, table: dict[str, Entry], **kwargs):
        super().__init__(*args, **kwargs)
        self.table = table

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.table})

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        """Return the command CMD_NAME, importing its module the first time; None for a name no command has."""
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in self.table:
            return None
        module, attribute = self.table[cmd_name].where.split(":")
        return getattr(importlib.import_module(module), attribute)

    def listed(self, name: str) -> click.Command:
        """Return the command NAME as a list shows it: once loaded itself, else a stand-in holding its summary alone."""
        return self.commands[name] if name in self.commands else click.Command(name, help=self.table[name].summary)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write --help's list of commands from the table, as click.Group writes it from the commands."""
        names = [name for name in self.list_commands(ctx) if not self.listed(name).hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))  # click's room for the summaries
        with formatter.section(_(CLICK_HEADING)):
            formatter.write_dl([(name, self.listed(name).get_short_help_str(limit)) for name in names])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        """Complete a command's name from the table, and the group's own options as click does."""
        from click.shell_completion import CompletionItem  # as click.Group imports it: only when completing

        names = [name for name in self.list_commands(ctx) if name.startswith(incomplete) and not self.listed(name).hidden]
        found = [CompletionItem(name, help=self.listed(name).get_short_help_str()) for name in names]
        return found + click.Command.shell_complete(self, ctx, incomplete)  # the options; click.Group's would import

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """Resolve the command named first in ARGS; for a name no command has, click suggests the close ones it holds."""
        if args and not ctx.resilient_parsing and self.get_command(ctx, args[0]) is None:
            # click's "Did you mean ..." reads the names from self.commands: give it every command (a mistyped
            # name pays for importing them all, as every command did before the table)
            self.commands.update({name: self.get_command(ctx, name) for name in self.table})
        return super().resolve_command(ctx, args)
