"""Where a person's file names a configuration by a name it had before: before its trials named their cards (#44), or
before its key named its kind of work (#60)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from iteralab.store import names
from iteralab.store.views import KindConfiguration


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
        sentence = _renamed(summary, named) if summary else None
        if sentence:
            found.append(f"{path}: {sentence}; it still finds that configuration (write the new name to stop this notice)")
    return found


def _renamed(summary, name: str) -> str | None:
    """Say SUMMARY's name now when NAME is one it had: a key from before keys named the kind of work, or see store.names."""
    configuration = summary.configuration
    if isinstance(configuration, KindConfiguration) and name == configuration.aliases[0]:
        return (f"configuration {name!r} is the key it had before a configuration's key named its kind of work "
                f"({configuration.kind}); it is now {summary.key!r} ({summary.label!r})")
    return names.renamed(summary, name)
