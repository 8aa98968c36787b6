"""iteralab build: render the records into the static site."""

from __future__ import annotations

from pathlib import Path

import click

from iteralab.cli.options import (
    FOLDER,
    catalog_option,
    emit,
    json_option,
    language_option,
    runs_option,
    sign_key_options,
)
from iteralab.site.build import build_site, describe_build


@click.command()
@runs_option("runs folder to read (default: runs)")
@click.option("--out", type=FOLDER, default=Path("site"), help="output folder (default: site)")
@click.option("--notes", type=FOLDER, help="folder of Markdown decision notes (default: notes/ beside the runs folder)")
@click.option("--sheets", type=FOLDER, help="folder of qualification sheets (default: qualification/ beside the runs folder)")
@click.option("--processes", type=click.IntRange(min=1),
              help="render campaigns on this many processes (default: one per core once there are thousands of trials)")
@click.option("--base-url", metavar="URL",
              help="where the site is published, e.g. https://example.org/team/site/ (default: a host's root); "
                   "the 404 page, served at any path, links from there")
@language_option(multiple=True)
@catalog_option
@sign_key_options
@json_option
def build(runs, out, notes, sheets, processes, base_url, languages, catalog, sign_key, quiet, as_json):
    """Render the records, the catalog and decision notes into a static site, in English, Indonesian or both."""
    result = build_site(runs=runs, out=out, notes=notes, catalog=catalog, sheets=sheets, processes=processes,
                        languages=languages, base_url=base_url, sign_key=sign_key, quiet=quiet)
    data = {**result, "index": str(result["index"].resolve()),
            "languages": {code: {**found, "index": str(found["index"].resolve())} for code, found in result["languages"].items()}}
    emit(as_json, data, describe_build(result))
    return 1 if result["failed"] else 0
