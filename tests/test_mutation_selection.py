"""The mutation run's test selection follows the code: a test file that exercises a rule module `make mutation` mutates
is in the selection. Regression for #62: the hand list left out tests/test_answer_owned.py and the multi-card tests, so
mutmut never generated the mutants of lines only they run, and the scores were quoted over a smaller denominator."""

from __future__ import annotations

import ast
import re
import tomllib

from tests.conftest import ROOT

SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
# The record store's modules are mutated too, but nearly every test imports them to write its records: a test file
# is selected for them through the rules it exercises, not for writing a record.
RULES = {path.removeprefix("src/").removesuffix(".py").replace("/", ".") for path in SETTINGS["only_mutate"]
         if not path.startswith("src/iteralab/store/")}
# A rule reached through the command line rather than an import.
COMMANDS = re.compile(r"""cli\(\s*["'](decide|compare|cost|schedule)["']""")


def _imports(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _exercises_a_rule(path, seen: set) -> bool:
    if path in seen or not path.is_file():
        return False
    seen.add(path)
    imported = _imports(path)
    if imported & RULES or COMMANDS.search(path.read_text(encoding="utf-8")):
        return True
    helpers = {name.split(".")[1] for name in imported if name.startswith("tests.") and name.count(".") >= 1}
    return any(_exercises_a_rule(ROOT / "tests" / f"{helper}.py", seen) for helper in helpers)


def test_every_test_file_that_exercises_a_rule_module_is_in_the_mutation_selection():
    selected = set(SETTINGS["pytest_add_cli_args_test_selection"])
    needed = {path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "tests").glob("test_*.py"))
              if _exercises_a_rule(path, set())}
    assert sorted(needed - selected) == [], "add these to [tool.mutmut] pytest_add_cli_args_test_selection"
    assert sorted(name for name in selected if not (ROOT / name).is_file()) == []


def test_a_test_file_reaching_a_rule_through_a_helper_or_the_command_line_counts(tmp_path):
    """The check is not vacuous: the file the hand list missed is found, through the test module it imports."""
    assert _exercises_a_rule(ROOT / "tests" / "test_answer_owned.py", set())
    assert not _exercises_a_rule(ROOT / "tests" / "test_layout.py", set())
    command_line = tmp_path / "test_probe.py"
    command_line.write_text("def test_it(cli):\n    cli(" + '"decide", "camp")\n', encoding="utf-8")
    assert _exercises_a_rule(command_line, set())
