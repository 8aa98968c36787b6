"""iteralab bundle: write a campaign's evidence bundle."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option, runs_option, sign_key_options
from iteralab.evidence import bundle


@click.command("bundle")
@click.argument("campaign")
@click.option("-o", "--output", type=FOLDER, required=True, metavar="FILE.zip", help="where to write the bundle")
@runs_option()
@click.option("--notes", "notes_dir", type=FOLDER, help="decision notes folder (default: notes/ beside the runs folder)")
@catalog_option
@sign_key_options
@json_option
def bundle_command(campaign, output, runs, notes_dir, catalog, sign_key, quiet, as_json):
    """Write a campaign's evidence bundle: a deterministic zipped BagIt bag with checksums, signed with --sign-key."""
    path, digest = bundle.write_bundle(campaign=campaign, out=output, runs=runs, notes=notes_dir, catalog=catalog,
                                       sign_key=sign_key, quiet=quiet)
    emit(as_json, {"path": str(path), "sha256": digest}, f"{path}\nsha256 {digest}")
