"""The same question asked again: what makes two campaigns one question, and what changed between their manifests.

A campaign asks an earlier one again with ``[decision] asks_again = "EARLIER"`` (the seeds' last rule: run the exact same
question again when the model or a version changes). Only the model and the software may change; the question itself
(workload, window, deadline, budget, thresholds, agreement tolerance, corpus and split) must not: a changed question is
a new campaign, never a revision.
"""

from __future__ import annotations

import json
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.store.listing import campaign_view_of
from iteralab.store.views import kind_of

# What a revision may change, in the order compare lists it: the model, the software, the machine, the protocol's other
# keys and the variants' settings. The question (QUESTION below) is refused instead.
# Not settings: what a run is or measured. The validation stages are outcomes (peaks, what failed), not what changed.
# The kind of work is the question's (a manifest written before it existed classifies), never a change besides it.
_EPHEMERAL = {"created_at", "record_id", "run_id", "kind", "schema_version", "plan", "campaign", "title", "corpus",
              "protocol_fingerprint", "stages", "workload"}


def question_of(manifest: dict) -> dict:
    """Return what makes a manifest's question, flattened: it must be the same in every revision."""
    protocol = manifest.get("protocol") or {}
    decision = {key: value for key, value in (protocol.get("decision") or {}).items() if key != "asks_again"}
    corpus = manifest.get("corpus") or {}
    found = {"kind of work": kind_of(manifest)}  # a generate campaign and a classify one answer different questions
    found.update({f"decision.{key}": value for key, value in sorted(decision.items())})
    found.update({f"thresholds.{key}": value for key, value in sorted((protocol.get("thresholds") or {}).items())})
    found["min_agreement"] = protocol.get("min_agreement")
    found["corpus fingerprint"] = corpus.get("fingerprint")
    found["corpus split"] = corpus.get("split")
    return found


def question_differences(earlier: dict, later: dict) -> list[str]:
    """Name each part of the question that differs between two manifests, 'key: earlier → later'."""
    old, new = question_of(earlier), question_of(later)
    return [f"{key}: {shown_value(old.get(key))} → {shown_value(new.get(key))}" for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)]


def newest(manifests) -> dict:
    """Return the newest of a campaign's manifests (by time, then id): the one its question is read from."""
    return max(manifests, key=lambda manifest: (manifest["created_at"], manifest["record_id"]))


def asked_again(manifest: dict) -> str | None:
    """Return the campaign a manifest's question asks again, or None."""
    return ((manifest.get("protocol") or {}).get("decision") or {}).get("asks_again")


def _flat(value, prefix: str, into: dict) -> None:
    if isinstance(value, dict) and value:
        for key in sorted(value):
            _flat(value[key], f"{prefix}.{key}" if prefix else str(key), into)
    else:
        into[prefix] = value


def changes(earlier: dict, later: dict) -> list[dict]:
    """List what changed between two manifests besides the question: model, software, machine, protocol, variants."""
    old, new = {}, {}
    for manifest, flat in ((earlier, old), (later, new)):
        protocol = {key: value for key, value in (manifest.get("protocol") or {}).items()
                    if key not in ("decision", "thresholds", "min_agreement")}
        kept = {key: value for key, value in manifest.items() if key not in _EPHEMERAL and key != "protocol"}
        _flat({**kept, "protocol": protocol}, "", flat)
    return [{"key": key, "earlier": old.get(key), "later": new.get(key)}
            for key in sorted(set(old) | set(new), key=_order) if old.get(key) != new.get(key)]


def _order(key: str) -> tuple:
    # The model first, then the libraries and the machine, then the protocol and the variants.
    first = ("model", "environment.libraries", "environment", "code_version", "protocol", "variants")
    return (next((index for index, head in enumerate(first) if key.startswith(head)), len(first)), key)


def shown_value(value) -> str:
    """Write a manifest value as a reader sees it: text as it is, anything else as JSON, a missing one as a dash."""
    return "—" if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def check_revision(*, question: dict, campaign: str, runs: Path | str, source) -> dict | None:
    """Refuse a revision whose question differs from the campaign it asks again; return that campaign's last manifest
    (None when QUESTION asks nothing again).

    QUESTION: the new campaign's manifest as far as it is known before any timing (its protocol and corpus).
    """
    asks_again = asked_again(question)
    if asks_again is None:
        return None
    if asks_again == campaign:
        raise UserError(f"{source}: [decision] asks_again names the campaign itself ({campaign}): name the earlier "
                        "campaign whose question this one asks again")
    try:
        earlier = campaign_view_of(runs, asks_again)
    except UserError as error:
        raise UserError(f"{source}: [decision] asks_again = {asks_again!r}, but {error}") from None
    if not earlier.manifests:
        raise UserError(f"{source}: [decision] asks_again = {asks_again!r}, which has no manifest in {runs}: run it first")
    last = newest(earlier.manifests)
    differences = question_differences(last, question)
    if differences:
        raise UserError(f"{source}: [decision] asks_again = {asks_again!r}, but the question differs from {asks_again}'s "
                        f"({'; '.join(differences)}). A revision may change only the model or the software; a changed "
                        "question (kind of work, workload, window, thresholds, tolerance, corpus or split) is a new campaign: remove "
                        "asks_again, or restore the question; nothing was run")
    return last
