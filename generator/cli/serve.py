"""iteralab serve: preview the built site on localhost."""

from __future__ import annotations

from pathlib import Path

import click

from iteralab.cli.options import FOLDER
from iteralab.site import serve


@click.command("serve")
@click.option("--out", type=FOLDER, default=Path("site"), help="folder to serve (default: site)")
@click.option("--port", type=click.IntRange(0, 65535), default=8000,
              help="port on 127.0.0.1 (default 8000; 0: any free port)")
def serve_command(out, port):
    """Preview the built site on http://127.0.0.1:PORT/ (localhost only)."""
    serve.serve(out=out, port=port, announce=lambda message: click.echo(message))
