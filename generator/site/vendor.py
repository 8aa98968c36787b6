"""The chart libraries every page with a chart loads: vega-embed, Vega and Vega-Lite, bundled by vl-convert."""

from __future__ import annotations

import contextlib
import threading
from importlib import metadata
from pathlib import Path

from iteralab.core.files import cache_root, write_atomically

# The Vega-Lite of Altair's specs ($schema v6.4.1): vl-convert bundles that minor version.
VEGA_LITE = "6.4"
BUNDLE = "assets/vendor/vega-embed.js"
LICENCES = "assets/vendor/THIRD-PARTY-LICENSES.txt"


def versions() -> str:
    """Name the chart packages installed here: another version draws other pages."""
    return f"altair {metadata.version('altair')}, vl-convert-python {metadata.version('vl-convert-python')}"


def bundle() -> bytes:
    """Return the one script file of the chart libraries, made once a machine (about a second) and kept in the cache."""
    global _making
    if _making is not None:  # started by prepare(): its bytes, or made here when it failed (saying why)
        _making.join()
        _making = None
        if "bytes" in _made:
            return _made.pop("bytes")
    return _bundle()


def prepare() -> None:
    """Start making the bundle in a thread where this machine keeps none, for ``bundle()`` to take later.

    vl-convert runs its JavaScript engine with the interpreter's lock released: a cold build makes the bundle (1.5 s)
    on the core its planning leaves idle, not after every campaign is rendered.
    """
    global _making
    if _making is not None or _kept().is_file():
        return
    _made.clear()
    _making = threading.Thread(target=_make_aside, name="iteralab-vendor-bundle", daemon=True)
    _making.start()


_making: threading.Thread | None = None
_made: dict = {}


def _make_aside() -> None:
    with contextlib.suppress(Exception):  # made again by bundle(), where the error is raised to the build
        _made["bytes"] = _bundle()


def _kept() -> Path:
    return cache_root() / "vendor" / f"vega-embed-vl-convert-{metadata.version('vl-convert-python')}-vl{VEGA_LITE}.js"


def _bundle() -> bytes:
    made = _kept()
    try:
        return made.read_bytes()
    except OSError:
        pass
    import vl_convert

    header = (f"/* vega-embed {vl_convert.get_vega_embed_version()}, Vega {vl_convert.get_vega_version()} and Vega-Lite "
              f"{VEGA_LITE}, bundled by vl-convert-python {metadata.version('vl-convert-python')} "
              "(javascript_bundle). Licences: THIRD-PARTY-LICENSES.txt beside this file. */\n")
    data = (header + vl_convert.javascript_bundle(vl_version=VEGA_LITE) + "\n").encode("utf-8")
    try:
        made.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(made, data)
    except OSError:  # a cache folder that cannot be written only costs making the bundle again
        pass
    return data
