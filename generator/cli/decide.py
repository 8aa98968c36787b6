"""iteralab decide: the campaign's answer, for the lowest planned spend, and why."""

from __future__ import annotations

import click

from iteralab.cli.options import catalog_option, emit, json_option, language_option, runs_option
from iteralab.core import language
from iteralab.decision import text
from iteralab.decision.report import decision_report


@click.command()
@click.argument("campaign")
@runs_option()
@language_option(multiple=False)
@catalog_option
@json_option
def decide(campaign, runs, lang, catalog, as_json):
    """Answer which configuration gets the campaign's result for the lowest planned spend, and why."""
    report = decision_report(campaign=campaign, runs=runs, catalog=catalog)
    with language.speaking(lang):
        emit(as_json, text.report_dict(report, said_in=lang), text.describe_report(report))
