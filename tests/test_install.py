"""Installed from its wheel into a fresh venv, as on a rented machine, iteralab builds and bundles from any folder.

Regression for #18: the wheel lacked the templates and the example sheets, so `build` and `bundle` stopped and `demo`
ended in a traceback after its trials; it also installed a top-level module named `generator`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _wheel(tmp_path: Path) -> Path:
    """Build the wheel from the committed files only (a copy of the tracked tree), as a release would."""
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in tracked)):
        if (ROOT / name).is_file():  # a file deleted in the working tree but not yet committed is skipped
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("iteralab-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """Create a venv holding only the wheel; its dependencies are read from this venv's site-packages, whose .pth files
    (the editable install of the source tree among them) are not run."""
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    uv = Path(sys.executable).with_name("uv")  # make setup installs it; pip does the same, a second slower
    # Compiled at install, as pip does: seven processes import the wheel's modules below, each compiling them again
    # where PYTHONDONTWRITEBYTECODE=1 is set (#48).
    install = ([str(uv), "pip", "install", "--quiet", "--offline", "--compile-bytecode", "--python"] if uv.is_file() else
               [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check", "--python"])
    subprocess.run([*install, str(venv / "bin" / "python"), "--no-deps", str(wheel)], check=True, capture_output=True)
    return venv


def test_the_wheel_installs_and_builds_bundles_and_verifies_a_real_run_outside_the_source_tree(tmp_path, tiny_campaign, cli):
    wheel = _wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = wheel.name.split("-py3")[0] + ".dist-info"
    assert {name.split("/")[0] for name in names} == {"iteralab", dist_info}
    # The licence that pyproject.toml declares ships in the wheel, and its metadata names it (#50).
    assert zipfile.ZipFile(wheel).read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    assert "License-Expression: MIT" in zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode("utf-8").splitlines()
    for shipped in ("iteralab/templates/base.html", "iteralab/templates/assets/style.css", "iteralab/data/catalog-2026-09-24.csv",
                    "iteralab/data/qualification/demo-rtx-4090.toml", "iteralab/store/schemas/trial.schema.json",
                    "iteralab/locale/id/LC_MESSAGES/iteralab.mo", "iteralab/data/notebook/lab.ipynb"):
        assert shipped in names
    venv = _fresh_venv(tmp_path, wheel)
    work = tmp_path / "elsewhere"
    work.mkdir()
    # A real run's records (tiny model, real corpus file), made here in-process: the wheel's own process would pay
    # torch's import again for the same code, which the runner tests cover.
    assert cli("run", tiny_campaign(repetitions=1, batch_sizes=(1, 4)), "--runs", work / "runs", "--quiet")[0] == 0
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}

    def run(*command, stdin=None):
        result = subprocess.run([str(venv / "bin" / command[0]), *map(str, command[1:])], cwd=work, env=env, input=stdin,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
        return result.stdout

    # The wheel's console script, once; the other commands run in one interpreter of the fresh venv, one main() call
    # each, as the script calls it: seven interpreters importing the same modules again cost seconds of the suite (#50).
    assert "0 problems" in run("iteralab", "check", "runs")
    commands = [["qualify", "qualification", "--runs", "runs"], ["notebook", "nb"],
                ["build", "--runs", "runs", "--out", "site", "--lang", "en", "--lang", "id"],
                ["decide", "tiny", "--runs", "runs", "--lang", "id"], ["bundle", "tiny", "-o", "evidence.zip", "--runs", "runs"],
                ["verify", "evidence.zip"]]
    # The driver first says where iteralab was imported from and whether a 'generator' module exists, and installs the
    # demo's example sheets.
    driver = ("import contextlib, importlib.util, io, json, pathlib, sys\nimport iteralab\nfrom iteralab.cli import main\n"
              "from iteralab.demos.classify import install_example_sheets\ninstall_example_sheets(pathlib.Path('qualification'))\n"
              "said = [[iteralab.__file__, str(importlib.util.find_spec('generator'))]]\n"
              "for args in json.loads(sys.stdin.read()):\n"
              "    out = io.StringIO()\n"
              "    with contextlib.redirect_stdout(out):\n"
              "        code = main(args)\n"
              "    said.append([code, out.getvalue()])\n"
              "print(json.dumps(said))\n")
    where, *said = json.loads(run("python", "-c", driver, stdin=json.dumps(commands)))
    # The wheel's package is the one imported, there is no 'generator' module, and the demo's example sheets install.
    assert Path(where[0]).is_relative_to(venv) and where[1] == "None"
    assert sorted(path.name for path in (work / "qualification").glob("*.toml")) == ["demo-rtx-4090.toml", "demo-rtx-6000-ada.toml"]
    said = dict(zip((args[0] for args in commands), said, strict=True))
    assert all(code == 0 for code, _ in said.values()), said
    assert "RTX 4090, 1 lot, 2 consecutive 3-day periods" in said["qualify"][1]
    # The lab notebook, from the wheel's package data (#50).
    assert (work / "nb" / "lab.ipynb").read_bytes() == (ROOT / "generator" / "data" / "notebook" / "lab.ipynb").read_bytes()
    assert "Site:" in said["build"][1]
    for page in ("index.html", "catalog.html", "campaigns/tiny/index.html", "campaigns/tiny/decision.html", "assets/style.css"):
        assert (work / "site" / page).is_file(), page
    # The compiled catalog ships in the wheel (#23): the Indonesian pages and the answer are in Bahasa Indonesia.
    assert '<html lang="id">' in (work / "site" / "id" / "campaigns" / "tiny" / "decision.html").read_text(encoding="utf-8")
    assert "Kampanye benchmark" in (work / "site" / "id" / "index.html").read_text(encoding="utf-8")
    assert said["decide"][1].startswith("Laporan keputusan untuk tiny")
    assert "valid" in said["verify"][1]
