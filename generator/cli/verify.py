"""iteralab verify: check an evidence bundle, as anyone who receives one can."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option
from iteralab.evidence import verification


@click.command()
@click.argument("bundle_file", metavar="BUNDLE", type=FOLDER)
@click.option("--allowed-signers", type=FOLDER, metavar="FILE",
              help="OpenSSH allowed signers file (NAME KEY per line): the signature must be by one of its keys")
@click.option("--require-signature", is_flag=True, help="refuse a bundle that is not signed")
@json_option
def verify(bundle_file, allowed_signers, require_signature, as_json):
    """Check an evidence bundle: safe entries, every file present, every checksum right, nothing extra, its signature."""
    report = verification.verify_report(bundle_file, allowed_signers=allowed_signers, require_signature=require_signature)
    emit(as_json, {"bundle": str(bundle_file), **report, "valid": not report["problems"]},
         verification.describe(bundle_file, report))
    return 1 if report["problems"] else 0
