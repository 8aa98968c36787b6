"""The README documents every command and every option (fails when one is added undocumented)."""

import pytest

from iteralab.cli import COMMANDS, build_parser
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_documented(name):
    headings = [line for line in README.splitlines() if line.startswith("### ")]
    assert any(f"`iteralab {name}`" in heading for heading in headings)


@pytest.mark.parametrize(("name", "option"), sorted(
    (name, option)
    for name, (_, arguments) in COMMANDS.items()
    for names, _ in arguments
    for option in names
    if option.startswith("--")
))
def test_every_option_is_documented(name, option):
    assert option in README, f"iteralab {name} {option} is not in the README"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([name, "--help"])
    assert exit_.value.code == 0
    assert COMMANDS[name][0].__doc__.strip().splitlines()[0] in " ".join(capsys.readouterr().out.split())


def test_quick_start_has_exactly_two_commands():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command():
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().endswith("make test")
