"""Draw a horizontal chart as SVG text: bands of categories down the side, one value axis along the bottom.

Drawn here rather than by a browser engine: the same data gives the same bytes on every machine (no system font is
measured), in about a millisecond a chart. Label widths are estimated from Helvetica's advance widths, which is all the
layout needs: the reader's browser draws the text with its own sans-serif font.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from html import escape
from unicodedata import east_asian_width

from iteralab.core.language import Figure

LABEL, TITLE = 12, 13  # font sizes in px: Vega-Lite's 10 and 11 printed at 5 pt (#37)
STEP = 22  # px per category band
# The reader's sans-serif (DejaVu Sans on many Linux machines) sets text up to a sixth wider than Helvetica: room is
# estimated that much wider, so no label or title is cut off (#37: the Indonesian axis title was).
ROOM = 1.17
PALETTE = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac")
LINE, INK, FONT = "#ddd", "#888", "sans-serif"

# Helvetica's advance widths in thousandths of an em, by character; any other character counts as 600 (1000 when full-width).
_WIDTHS = {**dict.fromkeys(" .,:;!|'ijlft/·", 278), **dict.fromkeys("0123456789abdeghnopqu_$#?", 556),
           **dict.fromkeys("cksvxyzJ", 500), **dict.fromkeys("-()[]r", 333), **dict.fromkeys("mMW", 833),
           **dict.fromkeys("wCDHNRU", 722), **dict.fromkeys("ABEKPSVXY&", 667), **dict.fromkeys("FTZ", 611),
           **dict.fromkeys("GOQ", 778), "I": 278, "L": 556, "+": 584, "=": 584, "^": 469, "%": 889, "@": 1015}


def text_width(text: str, size: int) -> float:
    """Estimate how wide TEXT is in px at SIZE (a full-width character, as in Chinese or Japanese, a whole em)."""
    return sum(_WIDTHS.get(char) or (1000 if east_asian_width(char) in "WF" else 600) for char in text) * size * ROOM / 1000


def num(value: float) -> str:
    """Write a coordinate with at most two decimals, the same on every machine ('0', never '-0')."""
    written = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if written == "-0" else written


def text(x: float, y: float, words: str, *, size: int = LABEL, anchor: str = "start", bold: bool = False) -> str:
    """Return a text element, its words escaped (labels come from the records)."""
    weight = ' font-weight="bold"' if bold else ""
    return f'<text x="{num(x)}" y="{num(y)}" font-size="{size}" text-anchor="{anchor}"{weight}>{escape(words)}</text>'


def linear_ticks(low: float, high: float, count: int = 6) -> tuple[float, float, list[Decimal]]:
    """Return a domain widened to round figures around LOW..HIGH and about COUNT ticks on it, as exact decimals."""
    if not high > low:  # one value (or none): a unit around it
        low, high = (low - 1, high + 1) if low else (0.0, 1.0)
    raw = (high - low) / count
    power = math.floor(math.log10(raw))
    error = raw / 10**power
    factor = 10 if error >= math.sqrt(50) else 5 if error >= math.sqrt(10) else 2 if error >= math.sqrt(2) else 1
    step = Decimal(factor).scaleb(power)
    first, last = math.floor(Decimal(repr(low)) / step), math.ceil(Decimal(repr(high)) / step)
    ticks = [step * index for index in range(first, last + 1)]
    return float(ticks[0]), float(ticks[-1]), ticks


def log_ticks(low: float, high: float) -> tuple[float, float, list[Decimal]]:
    """Return a domain of whole powers of ten around LOW..HIGH (both above zero) and a tick at each power."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    last = max(last, first + 1)
    ticks = [Decimal(1).scaleb(power) for power in range(first, last + 1)]
    return float(ticks[0]), float(ticks[-1]), ticks


def places(ticks: list[Decimal]) -> int:
    """Return the decimals every tick label needs so that each reads exactly and all read alike."""
    return max(0, -min(t.normalize().as_tuple().exponent for t in ticks)) if ticks else 0


class Axis:
    """A value axis WIDTH px long: linear, or logarithmic (LOG) for values over several powers of ten."""

    def __init__(self, values: list[float], width: float, *, log: bool = False, zero: bool = False,
                 domain: tuple[float, float] | None = None):
        self.log, self.width, self.overhang = log, width, 0.0
        if domain:
            self.low, self.high, self.ticks = (*domain, linear_ticks(*domain)[2])
        elif log:
            positive = [v for v in values if v > 0] or [1.0]
            self.low, self.high, self.ticks = log_ticks(min(positive), max(positive))
        else:
            low = min([*values, 0.0] if zero else values, default=0.0)
            self.low, self.high, self.ticks = linear_ticks(low, max([*values, low], default=1.0))

    def x(self, value: float) -> float:
        """Return the position of VALUE on the axis, in px from its start (clamped to it)."""
        if self.log:
            value = max(value, self.low)
            share = (math.log10(value) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        else:
            share = (value - self.low) / (self.high - self.low)
        return min(max(share, 0.0), 1.0) * self.width

    def draw(self, height: float, title: str, code: str) -> list[str]:
        """Return the grid, the axis line, its ticks and labels below a plot HEIGHT px high, and its TITLE."""
        digits = places(self.ticks)
        parts = []
        for tick in self.ticks:
            x = num(self.x(float(tick)))
            parts.append(f'<line x1="{x}" x2="{x}" y1="0" y2="{num(height)}" stroke="{LINE}"/>')
            parts.append(f'<line x1="{x}" x2="{x}" y1="{num(height)}" y2="{num(height + 5)}" stroke="{INK}"/>')
            # A log axis writes each power as it reads (0.01, 0.1, 1, 10); a linear one gives every label the same decimals.
            said = Figure(tick, places([tick]) if self.log else digits).say(code)
            parts.append(text(float(x), height + 15, said, anchor="middle"))
        if self.log:  # unlabelled ticks at 2, 3 … 9 of each power: a log axis is read by them
            for power in self.ticks[:-1]:
                for multiple in range(2, 10):
                    x = num(self.x(float(power * multiple)))
                    parts.append(f'<line x1="{x}" x2="{x}" y1="{num(height)}" y2="{num(height + 3)}" stroke="{INK}"/>')
        parts.append(f'<line x1="0" x2="{num(self.width)}" y1="{num(height)}" y2="{num(height)}" stroke="{INK}"/>')
        parts.append(text(self.width / 2, height + 32, title, size=TITLE, anchor="middle", bold=True))
        self.overhang = max(0.0, text_width(title, TITLE) / 2 - self.width / 2)  # a title wider than the axis: room beside it
        return parts


def legend(title: str, names: list[str], x: float) -> tuple[list[str], float]:
    """Return a colour legend at X (one swatch per name, in PALETTE's order) and its width."""
    parts = [text(x, 9, title, size=TITLE, bold=True)]
    for index, name in enumerate(names):
        y = 16 + index * 16
        parts.append(f'<rect x="{num(x)}" y="{y}" width="10" height="10" fill="{colour(index)}"/>')
        parts.append(text(x + 15, y + 9, name))
    width = max([text_width(title, TITLE), *(15 + text_width(name, LABEL) for name in names)])
    return parts, width


def colour(index: int) -> str:
    """Return the colour of the INDEXth series."""
    return PALETTE[index % len(PALETTE)]


def shared_part(labels: list[str]) -> tuple[list[str], str | None]:
    """Return LABELS without the hardware and software they all share ('fp32-b8 · CPU … · torch …'), and that part.

    A trailing remark in brackets ('(not feasible)') stays with its label. Labels that share nothing come back whole.
    """
    heads, tails = [], set()
    for label in labels:
        found = re.fullmatch(r"(.*?)( \([^()]*\))?", label)
        head, separator, tail = found.group(1).partition(" · ")
        if not separator:
            return labels, None
        heads.append(head + (found.group(2) or ""))
        tails.add(tail)
    return (heads, tails.pop()) if len(labels) > 1 and len(tails) == 1 else (labels, None)


def document(plot: list[str], *, bands: list[tuple[str, float, float]], width: float, height: float,
             legend_parts: tuple[list[str], float] | None = None, overhang: float = 0.0) -> str:
    """Wrap PLOT (drawn from its top left corner) with the band labels down its side and any legend to its right.

    BANDS: (label, top, height) of each category, labelled at its middle. OVERHANG: how far the axis title reaches past
    each end of the axis. What every band label shares (the hardware and software of one machine) is written once,
    above the plot, rather than on every row (#37).
    """
    names, shared = shared_part([label for label, _, _ in bands])
    bands = [(name, top, size) for name, (_, top, size) in zip(names, bands, strict=True)]
    above = 18 if shared else 0
    left = max(8 + max((text_width(label, LABEL) for label, _, _ in bands), default=0) + 7, overhang + 8)
    right = max(18 + legend_parts[1] if legend_parts else 8, overhang + 8)
    total_width = math.ceil(max(left + width + right, left + text_width(shared or "", LABEL) + 8))
    total_height = math.ceil(6 + above + height + 40)
    labels = [text(-7, top + size / 2 + 3.5, label, anchor="end") for label, top, size in bands]
    frame = f'<rect x="0" y="0" width="{num(width)}" height="{num(height)}" fill="none" stroke="{LINE}"/>'
    extra = legend_parts[0] if legend_parts else []
    key = f'<g transform="translate({num(width + 18)},0)">{"".join(extra)}</g>' if extra else ""
    heading = [f'<text x="0" y="-7" font-size="{LABEL}" fill="{INK}">{escape(shared)}</text>'] if shared else []
    inner = "".join([frame, *plot, *labels, key, *heading])
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{total_height}" '
            f'viewBox="0 0 {total_width} {total_height}" font-family="{FONT}" focusable="false">'
            f'<rect width="{total_width}" height="{total_height}" fill="white"/>'
            f'<g transform="translate({num(left)},{6 + above})">{inner}</g></svg>')
