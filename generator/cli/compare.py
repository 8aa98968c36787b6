"""iteralab compare: two revisions of a question side by side."""

from __future__ import annotations

import click

from iteralab.cli.options import catalog_option, emit, json_option, language_option, runs_option
from iteralab.core import language
from iteralab.decision import compared, revisions


@click.command()
@click.argument("earlier")
@click.argument("later")
@runs_option()
@language_option(multiple=False)
@catalog_option
@json_option
def compare(earlier, later, runs, lang, catalog, as_json):
    """Set two revisions of a question side by side: what changed, each configuration's figures, whether the answer did."""
    comparison = revisions.compare_campaigns(earlier=earlier, later=later, runs=runs, catalog=catalog)
    with language.speaking(lang):
        emit(as_json, compared.comparison_dict(comparison), compared.describe_comparison(comparison))
