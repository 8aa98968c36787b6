"""Preview a built site on localhost."""

from __future__ import annotations

import functools
import http.server
from collections.abc import Callable
from pathlib import Path

from iteralab.core.errors import UserError


def serve(*, out: Path | str = "site", port: int = 8000, announce: Callable[[str], None] = print) -> None:
    """Serve the folder OUT on http://127.0.0.1:PORT/ until interrupted."""
    out = Path(out)
    if not (out / "index.html").is_file():
        raise UserError(f"{out}/index.html does not exist: run iteralab build first")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as error:
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {error.strerror or error}; pick another --port "
                        "(or --port 0 for any free one)") from None
    with server:
        # --port 0 lets the system pick: announce the port it picked, not 0.
        announce(f"Serving {out} on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
        server.serve_forever()
