"""The site's icon (#48): `favicon.ico` in each language's folder, linked from every page.

Without one, a browser asks the host for /favicon.ico and logs its absence as an error on every page. Drawn here
rather than shipped as a binary file (the package ships templates and text): three bars of a chart in the site's
accent colour, 16 and 32 pixels, PNG images inside one ICO file (every browser reads it). The same code gives the
same bytes.
"""

from __future__ import annotations

import struct
import zlib

FILE = "favicon.ico"
ACCENT = (0x1F, 0x5F, 0x99)  # --accent in assets/style.css
SIZES = (16, 32)


def _rows(size: int) -> list[bytes]:
    """Return SIZE rows of 1-bit pixels, eight to a byte: 1 (white) where a bar is, 0 (the accent colour) elsewhere."""
    unit = size // 16  # the drawing is made on a 16 × 16 grid
    bars = ((3, 6, 9), (7, 10, 5), (11, 14, 2))  # (left, right, top) of each bar; every bar ends at row 13
    rows = []
    for y in range(size):
        bits = [any(left <= x // unit < right and top <= y // unit < 13 for left, right, top in bars) for x in range(size)]
        rows.append(bytes(sum(bit << (7 - index) for index, bit in enumerate(bits[start:start + 8]))
                          for start in range(0, size, 8)))
    return rows


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(size: int) -> bytes:
    """Return a SIZE × SIZE PNG of the icon: two colours, one bit a pixel.

    Stored, not compressed (level 0): a few hundred bytes all the same, and the same bytes whatever zlib the machine
    has (another zlib, zlib-ng for one, may compress to other bytes)."""
    header = struct.pack(">IIBBBBB", size, size, 1, 3, 0, 0, 0)  # bit depth 1, colour type 3: a palette
    raw = b"".join(b"\0" + row for row in _rows(size))  # filter 0 on each row
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"PLTE", bytes((*ACCENT, 255, 255, 255)))
            + _chunk(b"IDAT", zlib.compress(raw, 0)) + _chunk(b"IEND", b""))


def ico() -> bytes:
    """Return the ICO file: a directory of the images, then each PNG."""
    images = [png(size) for size in SIZES]
    offset = 6 + 16 * len(images)
    directory = struct.pack("<HHH", 0, 1, len(images))
    for size, image in zip(SIZES, images, strict=True):
        directory += struct.pack("<BBBBHHII", size, size, 2, 0, 1, 1, len(image), offset)  # 2 colours, 1 bit
        offset += len(image)
    return directory + b"".join(images)
