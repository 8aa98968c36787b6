"""Where a person's file names a configuration by the name it had before its trials named their cards (#44)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from iteralab.store import names


def renamed_in_sheets(folder: Path, views: list) -> list[str]:
    """Say, once per sheet, the new name of a configuration a qualification sheet in FOLDER names by its old one."""
    found = []
    by_campaign = {view.name: view for view in views}
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else ():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue  # qualify names what is wrong with the sheet itself; check only follows its references
        view, named = by_campaign.get(data.get("campaign")), data.get("configuration")
        summary = names.by_name(view.variants).get(named) if view and isinstance(named, str) else None
        sentence = names.renamed(summary, named) if summary else None
        if sentence:
            found.append(f"{path}: {sentence}; it still finds that configuration (write the new name to stop this notice)")
    return found
