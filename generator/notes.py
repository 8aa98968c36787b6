"""Decision notes: Markdown files with a front matter block of ``key: value`` lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from generator.errors import UserError

FIELDS = ("title", "campaign", "decision", "selected_variant", "workload_covered", "date", "author")
REQUIRED = ("campaign", "decision", "date", "author")


@dataclass(frozen=True)
class Note:
    """One rendered decision note."""

    slug: str
    source: str
    meta: dict
    html: str


def _front_matter(text: str, source: str) -> tuple[dict, str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise UserError(f"{source}:1: a decision note starts with a '---' line, then {', '.join(REQUIRED)} as 'key: value' lines, then '---'")
    meta = {}
    for number, line in enumerate(lines[1:], start=2):
        if line.strip() == "---":
            missing = [key for key in REQUIRED if not meta.get(key)]
            if missing:
                raise UserError(f"{source}: front matter lacks {', '.join(missing)}")
            return meta, "\n".join(lines[number:])
        if not line.strip():
            continue
        match = re.fullmatch(r"([a-z_]+)\s*:\s*(.*)", line.strip())
        if not match or match.group(1) not in FIELDS:
            raise UserError(f"{source}:{number}: expected 'key: value' with key one of {', '.join(FIELDS)}")
        meta[match.group(1)] = match.group(2).strip().strip('"')
    raise UserError(f"{source}: the front matter is not closed by a '---' line")


def load_notes(folder: Path | None) -> list[Note]:
    """Read and render every ``*.md`` note in FOLDER (none when FOLDER is None or absent)."""
    import markdown

    if folder is None or not Path(folder).is_dir():
        return []
    notes = []
    for path in sorted(Path(folder).glob("*.md")):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text") from None
        meta, body = _front_matter(text, str(path))
        # Notes are Markdown, not HTML: raw tags are shown as text so a note cannot inject script.
        safe = body.replace("<", "&lt;")
        html = markdown.markdown(safe, extensions=["tables", "fenced_code"], output_format="html")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-") or "note"
        notes.append(Note(slug, path.name, meta, html))
    return notes
