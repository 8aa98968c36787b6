"""Options and output shared by the ``iteralab`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import click

from iteralab.core import language
from iteralab.core.paths import DEFAULT_RUNS

FOLDER = click.Path(path_type=Path)
RUNS_HELP = "runs folder (default: runs)"


def runs_option(help_text: str = RUNS_HELP):
    """The --runs option every command that reads or writes records shares."""
    return click.option("--runs", type=FOLDER, default=DEFAULT_RUNS, show_default=False, help=help_text)


def json_option(function):
    """--json: print the result as JSON instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="print the result as JSON")(function)


def catalog_option(function):
    """--catalog FILE: price from another catalog."""
    return click.option("--catalog", type=FOLDER, metavar="FILE",
                        help="price catalog CSV (default: the shipped 2026-09-24 catalog)")(function)


def language_option(*, multiple: bool):
    """Add --lang: the language of what a reader sees (codes of language.LANGUAGES)."""
    choice = click.Choice(list(language.LANGUAGES))
    if multiple:
        return click.option("--lang", "languages", type=choice, multiple=True,
                            help="language of the site; give it twice (--lang en --lang id) to build both, the first at the "
                                 "top of --out and each other one in its own folder (site/id/); default: every language "
                                 "--out already holds (en in a new one); one it holds and --lang leaves out is removed")
    return click.option("--lang", "lang", type=choice, default=language.DEFAULT, show_default=True,
                        help="language of the answer (en, or id for Bahasa Indonesia); other messages stay in English")


def emit(as_json: bool, data: dict, human: str) -> None:
    """Print DATA as JSON with --json, else the human text."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) if as_json else human)


def sign_key_options(function):
    """Add --sign-key KEY and --quiet: sign each evidence bundle's tag manifest with an OpenSSH key."""
    function = click.option("--quiet", is_flag=True, help="never stop to ask for the signing key's passphrase (a key "
                            "with one is refused: load it with ssh-add and pass KEY.pub)")(function)
    return click.option("--sign-key", type=FOLDER, metavar="KEY", help="sign each evidence bundle with this OpenSSH key "
                        "(ssh-keygen -Y sign, namespace iteralab-evidence), e.g. ~/.ssh/id_ed25519")(function)
