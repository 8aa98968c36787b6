"""Split text into records as their format says."""

from __future__ import annotations


def json_lines(text: str) -> list[str]:
    """Split JSON Lines text at \\n only (a \\r before it dropped): U+2028, U+0085 and other breaks inside a text are text."""
    # str.splitlines() also breaks at U+0085, U+2028, U+2029, \\x0b, \\x0c and \\x1c-\\x1e, cutting a valid record in two.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
