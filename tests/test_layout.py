"""The package's shape: the written layering holds (no cycle, no import against it) and no module or function grows past
the sizes a newcomer can read. Regression for #18."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCE = ROOT / "generator"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def lint_imports(package_parent: Path | None = None) -> subprocess.CompletedProcess:
    """Check pyproject.toml's contracts against the package found first on the path (a copy under PACKAGE_PARENT)."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)} if package_parent else dict(os.environ)
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_written_layering_holds():
    result = lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("site/build.py", "from iteralab.run import runner", "iteralab.site is not allowed to import iteralab.run"),
    ("store/views.py", "from iteralab.decision import report", "iteralab.store is not allowed to import iteralab.decision"),
    ("run/runner.py", "from iteralab.decision import plan", "iteralab.run is not allowed to import iteralab.decision"),
    ("machine/facts.py", "from iteralab.decision import plan", "iteralab.machine is not allowed to import iteralab.decision"),
    ("pages/render.py", "from iteralab.pages import per_trial", "No cycles are allowed in iteralab.pages"),
    ("workloads/generate.py", "from iteralab.run import stages", "A kind of work uses the runner's shared pieces"),
    ("machine/phases.py", "from iteralab.workloads import classify", "iteralab.machine is not allowed to import iteralab.workloads"),
    ("declared/corpus.py", "from iteralab.machine import facts", "iteralab.declared is not allowed to import iteralab.machine"),
    ("pages/charts.py", "from iteralab.machine import facts", "iteralab.pages is not allowed to import iteralab.machine"),
    ("evidence/bundle.py", "from iteralab.site import build", "iteralab.evidence is not allowed to import iteralab.site"),
])
def test_an_import_against_the_layering_or_a_cycle_breaks_the_contracts(tmp_path, module, line, broken):
    """The contracts are not vacuous: each kind of wrong import, added to a copy of the package, is reported."""
    copy = tmp_path / "iteralab"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / module, "a", encoding="utf-8") as handle:
        handle.write(f"\n{line}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1 and broken in result.stdout, result.stdout + result.stderr


def _sizes():
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        yield path, "module", len(text.split("\n")) - text.endswith("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node.name, node.end_lineno - node.lineno + 1


def test_no_module_over_400_lines_and_no_function_over_60():
    too_long = [f"{path.relative_to(ROOT)} {name}: {lines} lines" for path, name, lines in _sizes()
                if lines > (MAX_MODULE_LINES if name == "module" else MAX_FUNCTION_LINES)]
    assert too_long == []


# A room a newcomer can read in an afternoon. store/ stands a little over (about 2,700 lines): the record store and the
# per-campaign views of its records, each module one record shape or one view.
MAX_ROOM_LINES = {"store": 2750}


def _rooms() -> list[Path]:
    return sorted(path for path in SOURCE.iterdir() if (path / "__init__.py").is_file())


def test_no_room_over_about_2500_lines():
    """Regression for #59: run/ had grown to 5,200 lines and site/ to 4,000."""
    sizes = {room.name: sum(len(p.read_text(encoding="utf-8").split("\n")) - 1 for p in room.rglob("*.py")) for room in _rooms()}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_ROOM_LINES.get(name, 2500)} == {}


def test_every_room_is_named_in_the_layering():
    """A new folder of generator/ must take its place in the written layering before it can land."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    named = {part.strip().removeprefix("iteralab.") for layer in layers for part in layer.split("|")}
    assert {room.name for room in _rooms()} - named == set()


def test_internal_imports_are_at_the_top_of_each_module():
    """Only heavy third-party packages (torch, transformers, pandas, ...) may be imported inside a function."""
    late = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("iteralab"):
                        late.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
                    if isinstance(inner, ast.Import) and any(a.name.startswith("iteralab") for a in inner.names):
                        late.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    assert late == []


def _third_party_imports() -> dict[str, list[str]]:
    """Return each top-level module the package imports from outside itself and the standard library, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top != "iteralab" and top not in sys.stdlib_module_names:
                    found.setdefault(top, []).append(path.relative_to(ROOT).as_posix())
    return found


def test_every_package_the_code_imports_is_a_declared_dependency():
    """Regression for #33: click, numpy and markupsafe were imported but arrived only through other packages."""
    import importlib
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    declared = {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
                for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]}
    distributions = packages_distributions()
    missing = {}
    for module, places in _third_party_imports().items():
        owners = {name.lower().replace("_", "-") for name in distributions.get(module, [])}
        if not owners & declared:
            missing[module] = sorted(set(places))
    assert missing == {}
    assert {"click", "numpy", "markupsafe", "torch", "pandas"} <= set(_third_party_imports())  # the scan sees imports
    for path in sorted(SOURCE.rglob("*.py")):  # and every module imports with them alone
        relative = path.relative_to(SOURCE).with_suffix("")
        importlib.import_module(".".join(["iteralab", *relative.parts]).removesuffix(".__init__"))
