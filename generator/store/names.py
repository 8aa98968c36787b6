"""Find a configuration by the name a person wrote: its key, its label, or the name it had before its trials named their cards."""

from __future__ import annotations


def names(summary) -> tuple[str, ...]:
    """Return every name that finds SUMMARY: its key, its label, then its aliases (store.configuration's)."""
    aliases = summary.configuration.aliases if summary.configuration else ()
    return (summary.key, summary.label, *aliases)


def by_name(summaries) -> dict:
    """Map every name of SUMMARIES to its summary; a configuration's own key or label wins over another's alias."""
    # An old run's trials (no devices named) keep "2× B200" while a new run's "1 of 2× B200" has it as an alias: the name
    # still means the configuration that is called so today.
    found = {alias: summary for summary in summaries for alias in names(summary)[2:]}
    found.update({name: summary for summary in summaries for name in names(summary)[:2]})
    return found


def renamed(summary, name: str) -> str | None:
    """Say the name SUMMARY has now when NAME is one it had before, else None."""
    if name in names(summary)[:2]:
        return None
    return (f"configuration {name!r} is the name it had before its trials named the cards they used; it is now "
            f"{summary.label!r} (id {summary.key})")
