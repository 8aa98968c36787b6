"""iteralab cost: price a rental package from the catalog."""

from __future__ import annotations

import click

from iteralab.cli.options import catalog_option, emit, json_option
from iteralab.money import catalog as prices


@click.command()
@click.option("--gpu", required=True, help="GPU as the catalog names it, e.g. rtx-4090, rtx-6000-ada, b200")
@click.option("--days", required=True, type=int, help="package length in days: 3, 7 or 30")
@click.option("--lots", required=True, type=click.IntRange(min=1), help="number of lots (a lot may hold several cards)")
@click.option("--accepted-results", type=click.IntRange(min=0), metavar="K",
              help="distinct validated results actually accepted (corpora, or models with --unit model); adds the cost "
                   "per validated result")
@click.option("--unit", type=click.Choice(prices.UNITS), default="corpus", show_default=True,
              help="what an accepted result is: a validated corpus, or a validated model (an adaptation campaign)")
@catalog_option
@json_option
def cost(gpu, days, lots, accepted_results, unit, catalog, as_json):
    """Price a rental package: lot price x lots, never multiplied again by cards per lot."""
    result = prices.quote(prices.load_catalog(catalog), gpu=gpu, days=days, lots=lots, accepted_results=accepted_results,
                          unit=unit)
    emit(as_json, prices.quote_data(result), prices.describe_quote(result))
