"""The command line starts light (#59): `iteralab --help` and `--version` import no command, and each command imports
its own module of iteralab.cli and the library it calls, no other command's. The table the lazy group lists commands
from says what the commands' docstrings say, and names every command there is."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import click
import pytest

import iteralab.cli
from iteralab.cli import COMMANDS, cli, main
from tests.conftest import ROOT


@pytest.fixture
def unloaded(monkeypatch):
    """The group as a fresh process holds it: no command loaded (a mistyped name loads them all, for click's hint)."""
    monkeypatch.setattr(cli, "commands", {})


def _first_paragraph(command: click.Command) -> str:
    """Return the first paragraph of COMMAND's help (its docstring), whitespace collapsed: what click lists it by."""
    return " ".join((command.help or "").split("\n\n")[0].split())


def _defined_commands() -> dict[str, click.Command]:
    """Return each command defined at the top of a module of iteralab.cli ('iteralab.cli.cost:cost'), groups'
    subcommands left out: what the table must name."""
    found = {}
    for module_info in pkgutil.iter_modules(iteralab.cli.__path__):
        module = importlib.import_module(f"iteralab.cli.{module_info.name}")
        defined = {name: value for name, value in vars(module).items()
                   if isinstance(value, click.Command) and value.callback.__module__ == module.__name__}
        inner = {id(sub) for value in defined.values() if isinstance(value, click.Group) for sub in value.commands.values()}
        found.update({f"{module.__name__}:{name}": value for name, value in defined.items() if id(value) not in inner})
    return found


def test_the_table_names_every_command_defined_and_no_other():
    assert sorted(entry.where for entry in COMMANDS.values()) == sorted(_defined_commands())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_in_the_table_is_the_first_paragraph_of_the_commands_docstring(name):
    command = cli.get_command(None, name)
    assert command is _defined_commands()[COMMANDS[name].where]
    assert command.name == name
    assert COMMANDS[name].summary == _first_paragraph(command), f"iteralab {name}: the table's summary is not its help's"


def test_a_summary_that_drifts_from_the_docstring_is_caught(monkeypatch):
    """The check above is not vacuous: a summary edited in the table alone differs from the command's help."""
    entry = COMMANDS["cost"]
    monkeypatch.setitem(COMMANDS, "cost", entry._replace(summary="Price a package."))
    assert COMMANDS["cost"].summary != _first_paragraph(cli.get_command(None, "cost"))


def test_the_help_lists_the_commands_as_click_writes_them_from_the_commands(unloaded):
    """--help's list from the table reads, to the character, as click.Group writes it with every command imported."""
    context = click.Context(cli, info_name="iteralab")
    lazy, eager = click.HelpFormatter(), click.HelpFormatter()
    cli.format_commands(context, lazy)
    assert cli.commands == {}  # written from the table alone
    click.Group.format_commands(cli, context, eager)
    assert lazy.getvalue() == eager.getvalue()
    assert all(f"\n  {name} " in lazy.getvalue() for name in COMMANDS)


@pytest.mark.parametrize("incomplete", ["", "c", "re", "v", "-"])
def test_completing_a_command_name_offers_what_click_would(unloaded, incomplete):
    context = click.Context(cli, info_name="iteralab")
    lazy = [(item.value, item.help) for item in cli.shell_complete(context, incomplete)]
    assert cli.commands == {}
    eager = [(item.value, item.help) for item in click.Group.shell_complete(cli, context, incomplete)]
    assert lazy == eager and lazy


def test_a_mistyped_command_is_refused_with_the_close_names(unloaded, capsys):
    assert main(["bulid", "--json"]) == 2
    refusal = json.loads(capsys.readouterr().err)
    assert refusal["command"] == "bulid" and "No such command 'bulid'" in refusal["error"]
    if hasattr(click.exceptions, "NoSuchCommand"):  # click 8.4 and later suggest the close names
        assert "Did you mean 'build'?" in refusal["error"]


# Runs main() in a fresh interpreter, its output swallowed; prints its exit status and every module then imported.
WRAPPER = """
import contextlib, io, json, sys
from iteralab.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""
# What no command's --help needs: the runner's and the site's heavy libraries, and what only some commands use.
HEAVY = {"torch", "transformers", "peft", "safetensors", "pandas", "numpy", "pyarrow", "altair", "vl_convert", "jinja2",
         "markdown", "nh3", "babel", "http.server", "feedgenerator", "stream_zip", "bagit"}
RUNNER = {"run", "workloads", "serving", "machine", "declared"}
SITE = {"site", "pages", "evidence", "templates"}
# args: (the command's module of iteralab.cli, the rooms it may import, the heavy packages it may import)
STARTS = {
    ("--version",): (None, {"cli", "core"}, set()),
    ("--help",): (None, {"cli", "core"}, set()),
    ("cost", "--help"): ("cost", {"cli", "core", "money"}, set()),
    ("doctor", "--help"): ("doctor", {"cli", "core", "money", "store", *RUNNER}, set()),
    ("build", "--help"): ("build", {"cli", "core", "money", "store", "ledger", "decision", *SITE}, {"jinja2"}),
    ("check", "--help"): ("check", {"cli", "core", "money", "store", "ledger", "decision", "run"}, set()),
}


@pytest.mark.parametrize("args", sorted(STARTS), ids=" ".join)
def test_a_command_imports_its_own_module_and_library_alone(args):
    """Regression for #59: every command's module and library were imported to run any command (0.3-0.7 s for
    --version). An import added to iteralab.cli, or a command module importing another command's library, fails here."""
    module, rooms, heavy = STARTS[args]
    result = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout)
    assert said["status"] == 0
    imported = set(said["modules"])
    own = {"iteralab.cli", "iteralab.cli.lazy"} | ({"iteralab.cli.options", f"iteralab.cli.{module}"} if module else set())
    assert {name for name in imported if name.startswith("iteralab.cli.") or name == "iteralab.cli"} == own
    assert {name.split(".")[1] for name in imported if name.startswith("iteralab.")} <= rooms
    assert {name for name in HEAVY - heavy if name in imported} == set()
    if module is None:  # nothing beyond click and the standard library
        third_party = {name.split(".")[0] for name in imported} - set(sys.stdlib_module_names)
        assert {name for name in third_party if not name.startswith("_")} == {"click", "iteralab"}
