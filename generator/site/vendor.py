"""The chart libraries every page with a chart loads: vega-embed, Vega and Vega-Lite, bundled by vl-convert."""

from __future__ import annotations

from importlib import metadata

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
    made = cache_root() / "vendor" / f"vega-embed-vl-convert-{metadata.version('vl-convert-python')}-vl{VEGA_LITE}.js"
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
