"""The manual in docs/ documents every command, option, setting and campaign key, builds with Sphinx offline without a
warning, and its generated command reference says what each command's --help says (fails when it does not)."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from bs4 import BeautifulSoup

from iteralab.cli import commands, main
from iteralab.core.errors import UserError
from iteralab.declared import tables
from iteralab.run import campaign
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"
PAGES = {path.name: path.read_text(encoding="utf-8") for path in sorted(DOCS.glob("*.md"))}
MANUAL = "\n".join(PAGES.values())
COMMANDS = commands()
# The page sphinx-click fills from the click commands: the command reference, generated, never written by hand.
REFERENCE = "reference.md"


def _prose(text: str) -> str:
    """Return TEXT without fenced code blocks, inline code spans and link targets: what a reader reads as words."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)\s]*\)", "]", text)


def _headings(text: str) -> list[str]:
    """Return the Markdown headings of TEXT, code blocks left out, as written after their #s."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return [line.lstrip("#").strip() for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def _slugs(text: str) -> set[str]:
    """Return the anchors GitHub and MyST give the headings of TEXT (lowercased, punctuation dropped, spaces as hyphens)."""
    slugs, seen = set(), {}
    for heading in _headings(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        slugs.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return slugs


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_documented(name):
    """Each command has a section of prose on a page of the manual, under a heading that names it."""
    headings = [heading for page, text in PAGES.items() if page != REFERENCE for heading in _headings(text)]
    assert any(f"`iteralab {name.split()[0]}`" in heading for heading in headings)
    assert f"iteralab {name}" in MANUAL


@pytest.mark.parametrize(("name", "option"), sorted(
    (name, option)
    for name, command in COMMANDS.items()
    for parameter in command.params
    for option in parameter.opts
    if option.startswith("--")
))
def test_every_option_is_documented(name, option):
    assert option in MANUAL, f"iteralab {name} {option} is not in the manual's pages"


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
    """click's completion, as the commands page's line sets it up for bash."""
    monkeypatch.setenv("_ITERALAB_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "iteralab rental a")
    monkeypatch.setenv("COMP_CWORD", "2")
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().out.split() == ["plain,add"]
    assert "_ITERALAB_COMPLETE=bash_source iteralab" in PAGES["commands.md"]


def test_every_environment_setting_is_documented():
    """Each ITERALAB_* variable the package reads is named in the manual."""
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "generator").rglob("*.py"))
    settings = set(re.findall(r"[\"'](ITERALAB_[A-Z_]+)[\"']", source))
    assert {"ITERALAB_CACHE_DIR", "ITERALAB_CAMPAIGN_STORE_MB"} <= settings
    assert [name for name in sorted(settings) if f"`{name}" not in MANUAL and f"${name}" not in MANUAL] == []


def _links(text: str) -> list[str]:
    """Return the targets of TEXT's Markdown links outside code blocks that lead within the repository."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"[a-z]+:", target)]


def _broken_links(sources: dict) -> tuple[int, list[str]]:
    """Return how many #anchors SOURCES' links name (path: text) and each link whose file or heading is missing."""
    checked, broken = 0, []
    for source, text in sources.items():
        for target in _links(text):
            path, _, anchor = target.partition("#")
            linked = (source.parent / path).resolve() if path else source
            if not linked.is_file():
                broken.append(f"{source.name}: {target} (no such file)")
            elif anchor:
                checked += 1
                if anchor not in _slugs(text if linked == source else linked.read_text(encoding="utf-8")):
                    broken.append(f"{source.name}: {target} (no such heading)")
    return checked, broken


SOURCES = {ROOT / "README.md": README, **{DOCS / page: text for page, text in PAGES.items()}}


def test_every_link_leads_to_a_page_and_every_anchor_to_a_heading():
    """Each relative link of the README and of the manual's pages names a file that exists, and each #anchor a heading
    of that page (as GitHub and MyST make anchors): the links work on GitHub as in the built manual."""
    checked, broken = _broken_links(SOURCES)
    assert checked > 20 and broken == []


@pytest.mark.parametrize(("link", "broken", "why"), [
    ("](docs/commands.md)", "](docs/command.md)", "no such file"),
    ("](docs/getting-started.md#what-the-demo-does)", "](docs/getting-started.md#what-the-demo-did)", "no such heading"),
])
def test_a_broken_link_of_the_readme_is_named(link, broken, why):
    """The README is no page of the built manual: the link test is what sees its links break."""
    assert link in README
    _, found = _broken_links({**SOURCES, ROOT / "README.md": README.replace(link, broken, 1)})
    assert found == [f"README.md: {broken[2:-1]} ({why})"]


def test_the_readme_is_a_short_front_door_into_every_page():
    """The README stays short and links to every page of the manual, relatively, so the links work on GitHub too."""
    assert README.count("\n") <= 150
    linked = {path for target in _links(README) for path in [target.partition("#")[0]] if path.startswith("docs/")}
    assert sorted(f"docs/{page}" for page in PAGES if f"docs/{page}" not in linked) == []


def test_the_first_screen_names_the_product_once_then_lists_the_contents():
    """Title, the one line on the product's two names, the quick start, then the contents list before any other section."""
    first = README.split("\n## ", 3)
    assert first[0].startswith("# IteraGPU Lab\n") and first[1].startswith("Quick start")
    assert README.count('The product is "IteraGPU Lab"') == 1 and "**Contents**" in first[1]


@pytest.mark.parametrize("page", ["README.md", *sorted(PAGES)])
def test_the_manual_holds_no_development_history(page):
    """No issue number, session or commit hash in the user manual: they belong in tests/benchmarks/README.md."""
    text = README if page == "README.md" else PAGES[page]
    prose = _prose(text)
    assert re.findall(r"(?<![\w&/])#\d+", prose) == []
    assert re.findall(r"\bsessions?\b", text, flags=re.IGNORECASE) == []
    assert re.findall(r"\bat (?:commit )?[0-9a-f]{7,40}\b", prose) == []


def _accepted_keys(tmp_path, monkeypatch) -> set[tuple[str, str]]:
    """Return every (table, key) the campaign reader asks for, over files that open each of its optional tables.

    The reader has no list of its keys: each table notes the keys it reads and refuses the others when it finishes, so
    the keys are read off the tables as they finish, the reader itself doing the reading.
    """
    seen, finish = set(), tables.Table.finish

    def noting(table, hints=None):
        where = "variants" if table.where.startswith("variants.") else table.where
        seen.update((where, key) for key in table.used)
        return finish(table, hints)

    monkeypatch.setattr(tables.Table, "finish", noting)
    (tmp_path / "train.jsonl").write_text('{"id": "a", "text": "x", "label": "p"}\n', encoding="utf-8")
    for kind, tables_of_kind in (("classify", "[protocol.disturbance]\n[decision]\n[placement]\nmode = \"across_cards\"\n"),
                                 ("generate", "[generation]\n[generation.sampling]\n"),
                                 ("adapt", '[adaptation]\ntrain = "train.jsonl"\n[adaptation.lora]\n[decision]\n')):
        path = tmp_path / f"{kind}.toml"
        path.write_text(f'campaign = "c"\n[workload]\nkind = "{kind}"\n[corpus]\n[model]\n[protocol]\n[protocol.warmup]\n'
                        f'{tables_of_kind}[[variants]]\nname = "a"\n', encoding="utf-8")
        with pytest.raises(UserError):  # required keys are missing: the reader still reads every key it knows
            campaign.load_campaign(path)
    assert {("campaign file", "campaign"), ("adaptation.lora", "rank"), ("generation.sampling", "seeds"),
            ("decision", "models"), ("protocol.disturbance", "use_disturbed")} <= seen
    return seen


def test_every_campaign_key_is_in_the_campaign_file_page(tmp_path, monkeypatch):
    """The key-by-key table of the campaign file's page names each key the campaign reader accepts, and no key it
    refuses."""
    rows = [line.split("|")[1].strip().strip("`") for line in PAGES["campaign-file.md"].splitlines()
            if line.startswith("| `")]
    accepted = _accepted_keys(tmp_path, monkeypatch)

    def named(where: str, key: str) -> bool:
        table = "[[variants]]" if where == "variants" else f"[{where}]"
        nested = key if where == "campaign file" else f"{where}.{key}"
        return (key in rows if where == "campaign file" else f"{table} {key}" in rows) or any(
            row.startswith((f"[{nested}]", f"[{nested}.", f"[[{nested}]]")) for row in rows)

    assert sorted(f"{where}: {key}" for where, key in accepted if not named(where, key)) == []
    for row in rows:
        where, _, key = row.rpartition(" ")
        where = where.strip("[]") or "campaign file"
        parent, _, child = where.rpartition(".")
        assert (where, key) in accepted or (key.isupper() and (parent, child) in accepted), f"{row} is not read"


def _sphinx(source, out) -> subprocess.CompletedProcess:
    """Build the manual in SOURCE as HTML into OUT, offline, every warning an error (all of them listed)."""
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q", str(source), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The manual built once for this module's tests: the build's result and its HTML folder."""
    out = tmp_path_factory.mktemp("manual") / "html"
    return _sphinx(DOCS, out), out


@pytest.mark.slow
def test_the_manual_builds_offline_without_a_warning(built):
    result, out = built
    assert result.returncode == 0, result.stderr
    assert (out / "index.html").exists() and (out / "reference.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("page", "link", "broken"), [
    ("commands.md", "(running.md#iteralab-run-run-a-benchmark-campaign)", "(running.md#iteralab-run-a-campaign)"),
    ("running.md", "(#resume-after-a-kill)", "(#resume-after-a-crash)"),
    ("commands.md", "(reference.md)", "(references.md)"),
])
def test_a_broken_link_or_anchor_fails_the_build(tmp_path, page, link, broken):
    """A link whose heading or page does not exist fails the build, and the build names it."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("_build"))
    text = (docs / page).read_text(encoding="utf-8")
    assert link in text
    (docs / page).write_text(text.replace(link, broken, 1), encoding="utf-8")
    result = _sphinx(docs, tmp_path / "html")
    assert result.returncode != 0 and broken.strip("()").split("#")[-1].removesuffix(".md") in result.stderr, result.stderr


def _section(html: str, name: str):
    """Return the generated reference's section of the command NAME ('rental add'), as sphinx-click writes it."""
    soup = BeautifulSoup(html, "html.parser")
    return soup.find("section", id="iteralab-" + name.replace(" ", "-"))


def _words(text: str) -> str:
    """Return TEXT as a reader compares it: whitespace collapsed, the markup of reStructuredText's code spans dropped."""
    return " ".join(text.replace("`", "").split())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_reference_says_what_its_help_says(built, name, capsys):
    """The command's section in the built reference holds its --help's first line, each of its options with its help,
    and no option the command lacks: a reference written by hand, or left behind by a change, fails here."""
    result, out = built
    assert result.returncode == 0, result.stderr
    section = _section((out / "reference.html").read_text(encoding="utf-8"), name)
    assert section is not None, f"iteralab {name} has no section in the command reference"
    command = COMMANDS[name]
    assert main([*name.split(), "--help"]) == 0
    help_text = _words(capsys.readouterr().out)
    text = _words(section.get_text(" "))
    first_line = _words(command.callback.__doc__.strip().splitlines()[0])
    assert first_line in help_text and first_line in text
    listed = {span.get_text() for span in section.select("dl.option dt .sig-name")}
    shown = [parameter for parameter in command.params if not getattr(parameter, "hidden", False)]
    options = {option for parameter in shown for option in (*parameter.opts, *parameter.secondary_opts)
               if option.startswith("-")}
    arguments = {parameter.human_readable_name for parameter in shown if parameter.param_type_name == "argument"}
    assert {name for name in listed if name.startswith("-")} == options
    assert {name for name in listed if not name.startswith("-")} == arguments
    for parameter in command.params:
        if getattr(parameter, "help", None):
            assert _words(parameter.help) in text, f"iteralab {name}: {parameter.help!r}"


@pytest.mark.slow
def test_the_reference_has_a_section_for_each_command_and_no_other(built):
    result, out = built
    assert result.returncode == 0, result.stderr
    soup = BeautifulSoup((out / "reference.html").read_text(encoding="utf-8"), "html.parser")
    sections = {section["id"] for section in soup.select("section[id^=iteralab-]")}
    groups = {"iteralab-" + name.split()[0] for name in COMMANDS if " " in name}
    assert sections - groups == {"iteralab-" + name.replace(" ", "-") for name in COMMANDS}
    assert ".. click:: iteralab.cli:cli" in PAGES[REFERENCE]


@pytest.mark.slow
@pytest.mark.parametrize("page", ["reference.html", "api.html"])
def test_the_generated_pages_hold_no_development_history(built, page):
    """What the commands' help and the docstrings put into the manual reads as the manual does: no issue, no session."""
    result, out = built
    assert result.returncode == 0, result.stderr
    text = BeautifulSoup((out / page).read_text(encoding="utf-8"), "html.parser").find("article").get_text(" ")
    assert re.findall(r"(?<![\w&/])#\d+", text) == []
    assert re.findall(r"\bsessions?\b", text, flags=re.IGNORECASE) == []
