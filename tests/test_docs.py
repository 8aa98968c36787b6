"""The README documents every command, option, setting and campaign key, and reads as a manual (fails when it does not)."""

import re

import pytest

from iteralab.cli import commands, main
from iteralab.core.errors import UserError
from iteralab.run import campaign, tables
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
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "generator").rglob("*.py"))
    settings = set(re.findall(r"[\"'](ITERALAB_[A-Z_]+)[\"']", source))
    assert {"ITERALAB_CACHE_DIR", "ITERALAB_CAMPAIGN_STORE_MB"} <= settings
    assert [name for name in sorted(settings) if f"`{name}" not in README and f"${name}" not in README] == []


def _prose(text: str) -> str:
    """Return TEXT without fenced code blocks, inline code spans and link targets: what a reader reads as words."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)\s]*\)", "]", text)


def _slugs(text: str) -> set[str]:
    """Return the anchors GitHub gives the headings of TEXT (lowercased, punctuation dropped, spaces as hyphens)."""
    slugs, seen = set(), {}
    for line in re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL).splitlines():
        if re.match(r"#{1,6} ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            slugs.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return slugs


def test_every_anchor_link_leads_to_a_heading():
    """Each `(#anchor)` in the README, and each link into the benchmarks' README, names a heading that exists."""
    prose = re.sub(r"^```.*?^```", "", README, flags=re.MULTILINE | re.DOTALL)
    anchors = set(re.findall(r"\]\(#([^)\s]+)\)", prose))
    assert len(anchors) > 20 and sorted(anchors - _slugs(README)) == []
    benchmarks = (ROOT / "tests" / "benchmarks" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(tests/benchmarks/README\.md#([^)\s]+)\)", prose))
    assert sorted(linked - _slugs(benchmarks)) == []


def test_the_first_screen_names_the_product_once_then_lists_the_contents():
    """Title, the one line on the product's two names, the quick start, then the contents list before any other section."""
    first = README.split("\n## ", 3)
    assert first[0].startswith("# IteraGPU Lab\n") and first[1].startswith("Quick start")
    assert README.count('The product is "IteraGPU Lab"') == 1 and "**Contents**" in first[1]


def test_the_manual_holds_no_development_history():
    """No issue number, session or commit hash in the user manual: they belong in tests/benchmarks/README.md."""
    prose = _prose(README)
    assert re.findall(r"(?<![\w&/])#\d+", prose) == []
    assert re.findall(r"\bsessions?\b", README, flags=re.IGNORECASE) == []
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


def test_every_campaign_key_is_in_the_readme_table(tmp_path, monkeypatch):
    """The key-by-key table names each key the campaign reader accepts, and no key it refuses."""
    section = README.split("### The campaign file, key by key", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `")]
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
