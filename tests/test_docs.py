"""The README documents every command and every option (fails when one is added undocumented)."""

import pytest

from iteralab.cli import commands, main
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
COMMANDS = commands()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_documented(name):
    headings = [line for line in README.splitlines() if line.startswith("### ")]
    assert any(f"`iteralab {name.split()[0]}`" in heading for heading in headings)
    assert f"iteralab {name}" in README


@pytest.mark.parametrize(("name", "option"), sorted(
    (name, option)
    for name, command in COMMANDS.items()
    for parameter in command.params
    for option in parameter.opts
    if option.startswith("--")
))
def test_every_option_is_documented(name, option):
    assert option in README, f"iteralab {name} {option} is not in the README"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    assert main([*name.split(), "--help"]) == 0
    first_line = COMMANDS[name].callback.__doc__.strip().splitlines()[0]
    assert first_line in " ".join(capsys.readouterr().out.split())


def test_quick_start_has_exactly_two_commands():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command():
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().endswith("make test")


def test_shell_completion_names_the_commands_and_subcommands(monkeypatch, capsys):
    """click's completion, as the README's line sets it up for bash."""
    monkeypatch.setenv("_ITERALAB_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "iteralab rental a")
    monkeypatch.setenv("COMP_CWORD", "2")
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().out.split() == ["plain,add"]


def test_every_environment_setting_is_documented():
    """Each ITERALAB_* variable the package reads is named in the README (regression for #22's campaign store)."""
    import re

    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "generator").rglob("*.py"))
    settings = set(re.findall(r"[\"'](ITERALAB_[A-Z_]+)[\"']", source))
    assert {"ITERALAB_CACHE_DIR", "ITERALAB_CAMPAIGN_STORE_MB"} <= settings
    assert [name for name in sorted(settings) if f"`{name}" not in README and f"${name}" not in README] == []
