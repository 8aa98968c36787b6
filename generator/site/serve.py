"""Preview a built site on localhost."""

from __future__ import annotations

import functools
import http.server
from collections.abc import Callable
from pathlib import Path

from iteralab.core.errors import UserError


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serve the site's files; a missing one gets the site's 404.html (which leads old trial links to their new place)."""

    def send_error(self, code, message=None, explain=None):
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            super().send_error(code, message, explain)
            return
        body = page.read_bytes()
        self.send_response(404, message)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def serve(*, out: Path | str = "site", port: int = 8000, announce: Callable[[str], None] = print) -> None:
    """Serve the folder OUT on http://127.0.0.1:PORT/ until interrupted."""
    with server(out=out, port=port) as httpd:
        # --port 0 lets the system pick: announce the port it picked, not 0.
        announce(f"Serving {out} on http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C to stop)")
        httpd.serve_forever()


def server(*, out: Path | str, port: int) -> http.server.ThreadingHTTPServer:
    """Return a server of the folder OUT listening on 127.0.0.1:PORT (0: any free port), not yet serving."""
    out = Path(out)
    if not (out / "index.html").is_file():
        raise UserError(f"{out}/index.html does not exist: run iteralab build first")
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Handler, directory=str(out)))
    except OSError as error:
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {error.strerror or error}; pick another --port "
                        "(or --port 0 for any free one)") from None
