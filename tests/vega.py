"""Read a page's chart specs and draw them with vl-convert: the Vega engine the browser runs, without a browser."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def spec_of(page, chart_id: str) -> dict:
    """Return the Vega-Lite spec a parsed page (BeautifulSoup) embeds for its chart CHART_ID."""
    return json.loads(page.select_one(f"script#spec-{chart_id}").string)


def drawn(spec: dict) -> ET.Element:
    """Draw SPEC as SVG with vl-convert and return its root element."""
    import vl_convert

    return ET.fromstring(vl_convert.vegalite_to_svg(spec))


def texts(root: ET.Element) -> list[str]:
    """Return every text a drawn chart shows (axis labels and titles, legends, the title)."""
    return ["".join(element.itertext()) for element in root.iter(f"{SVG}text")]


def marks(root: ET.Element) -> int:
    """Count the drawn marks (each dot, bar and tick is one path in a mark group)."""
    return sum(1 for group in root.iter(f"{SVG}g") if "mark-" in (group.get("class") or "")
               for _ in group.iter(f"{SVG}path"))
