"""Read a TOML table key by key: typed values, every mistake noted with its table and key, the rest still checked."""

from __future__ import annotations

import difflib
from pathlib import Path


class Invalid(Exception):
    """A mistake already noted in the campaign file's list: the step that met it stops, the next ones go on."""


FALLBACK = {str: "", int: 1, float: 0.0, bool: False, dict: None, list: None}
TOP = "campaign file"  # the name of the file's top table: its mistakes that belong to no key name the file itself
TO_FILL = "FILL IN"  # what a starter campaign (iteralab init) writes where a value is still the user's to give


def left_to_fill(source: Path) -> list[tuple[int, str]]:
    """Return the number and text of each line of SOURCE that still says FILL IN (a value, or a comment beside one)."""
    try:
        lines = source.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError):
        return []  # the file's reader says what is wrong with it
    return [(number, line.strip()) for number, line in enumerate(lines, start=1) if TO_FILL in line]


class Table:
    """Read typed values from one TOML table; note every mistake with the table and key, and go on where it can."""

    def __init__(self, data, where: str, source: Path, errors: list[str]):
        self.data, self.where, self.source, self.used, self.errors = data, where, source, set(), errors
        if data is None:  # the key holding it was already noted as wrong
            raise Invalid
        if not isinstance(data, dict):
            self.note(None, "must be a table")
            raise Invalid

    def note(self, key: str | None, message: str) -> None:
        line = f"[{self.where}] {key + ': ' if key else ''}{message}"
        # One mistake per key: a wrong value is not reported again by the checks that read it.
        if not any(line.startswith(f"[{self.where}] {key}: ") for line in self.errors if key):
            self.errors.append(line)

    def fail(self, key: str, message: str):
        self.note(key, message)
        raise Invalid

    def attempt(self, read, default=None):
        """Run READ; if it meets a mistake (already noted), return DEFAULT so the rest of the file is checked too."""
        try:
            return read()
        except Invalid:
            return default

    def get(self, key, kind, default=..., choices=None, minimum=None):
        self.used.add(key)
        fallback = choices[0] if choices else (minimum if minimum is not None else FALLBACK.get(kind))
        if key not in self.data:
            if default is ...:
                close = difflib.get_close_matches(key, [str(k) for k in self.data], n=1)
                self.note(key, "is required" + (f" (found {close[0]}: check the spelling)" if close else ""))
                return fallback
            return default
        value = self.data[key]
        problem = None
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            problem = f"must be a whole number, not {value!r}"
        elif kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            problem = f"must be a number, not {value!r}"
        elif kind in (str, bool, dict) and not isinstance(value, kind):
            problem = f"must be {'a string' if kind is str else 'true or false' if kind is bool else 'a table'}, not {value!r}"
        elif kind is list and not isinstance(value, list):
            problem = f"must be a list of tables ([[{key}]]), not {value!r}"
        elif choices is not None and value not in choices:
            problem = f"{value!r} is not one of {', '.join(map(str, choices))}"
        elif minimum is not None and value < minimum:
            problem = f"must be at least {minimum}, not {value!r}"
        if problem:
            self.note(key, problem)
            return fallback
        return value

    def finish(self, hints: dict[str, str] | None = None):
        """Note the keys never read, each with the closest key this table reads; HINTS say where a key that belongs
        elsewhere goes. The file's top table also notes each line still to fill in (a starter's FILL IN)."""
        unknown = sorted(set(self.data) - self.used)
        placed = [f"{key}: {hints[key]}" for key in unknown if hints and key in hints]
        unknown = [key for key in unknown if not (hints and key in hints)]
        if unknown:
            self.note(None, f"unknown key(s) {', '.join(map(self._closest, unknown))}; check the spelling")
        for line in placed:
            self.note(None, f"unknown key {line}")
        if self.where == TOP:
            for number, line in left_to_fill(self.source):
                self.note(None, f"line {number} still says {TO_FILL} ({' '.join(line.split())}): give your value, then "
                                f"delete the words {TO_FILL}")

    def _closest(self, key) -> str:
        """Return KEY with the valid key of this table closest to it, where one is close: 'repetitons (did you mean
        repetitions?)'."""
        close = difflib.get_close_matches(str(key), sorted(self.used), n=1)
        return f"{key} (did you mean {close[0]}?)" if close else str(key)
