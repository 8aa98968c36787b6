"""Configurations measured one trial per card at the same time ([placement] per_card, #44): their unit is the set.

A set is the cards' trials that ran together, each on its own copy of the corpus. What the set delivers is its cards'
corpora at once, in the time of its slowest card: that is the window the projection uses, so K corpora take
ceil(K / (lots × cards)) windows of a set. A card's own figure is never multiplied by a number of cards: only sets where
every card ended ok (and none is set aside) are counted, and the set's throughput is the entries its cards completed
over its slowest card's window. Not the sum of each card's own rate: a faster card idles until the slowest ends, and
that idle time is paid.
"""

from __future__ import annotations

import statistics

from iteralab.core.language import Figure, Text

HOW = Text("one trial per card at the same time, each on its own corpus: a set's window is its slowest card's, its "
           "throughput the entries of all its cards over that window; only sets where every card ended ok count")


def counted(table) -> dict[str, tuple]:
    """Return, per trial that ended ok and counts in the figures, its window and one-time seconds."""
    found = {}
    for record, status, excluded, aside, window, once in zip(
            table["record_id"].tolist(), table["status"].tolist(), table["excluded_by"].tolist(),
            table["set_aside"].tolist(), table["window_s"].tolist(), table["one_time_s"].tolist(), strict=True):
        if status == "ok" and not aside and (excluded is None or excluded != excluded):
            found[record] = (window, once)
    return found


def sets_of(trials) -> dict[str, list[dict]]:
    """Group the trials that ran one per card by their set, in the order they were recorded."""
    groups: dict[str, list[dict]] = {}
    for trial in trials:
        found = trial.get("per_card")
        if isinstance(found, dict) and found.get("set"):
            groups.setdefault(found["set"], []).append(trial)
    return groups


def figures(summary, found: dict, measured: dict[str, tuple]) -> dict:
    """Return FOUND (a configuration's figures) with its window and one-time seconds those of its complete sets, and what
    they were measured on; unchanged for a configuration whose trials ran one at a time."""
    groups = sets_of(summary.trials)
    if not groups:
        return found
    cards = max(len(trial["per_card"].get("cards") or ()) for members in groups.values() for trial in members)
    complete = [members for members in groups.values()
                if len(members) == cards and all(trial["record_id"] in measured for trial in members)]
    windows = [max(measured[t["record_id"]][0] for t in members) for members in complete]
    # The cards load and warm up at the same time: the set waits for the slowest.
    once = [max(measured[t["record_id"]][1] for t in members) for members in complete]
    rates = [sum(t.get("entries_completed") or 0 for t in members) / window
             for members, window in zip(complete, windows, strict=True) if window]
    together = {"cards": cards, "sets": len(groups), "complete_sets": len(complete), "how": HOW,
                "throughput": (min(rates), statistics.median(rates), max(rates)) if rates else None}
    return {**found, "together": together,
            "window": (min(windows), statistics.median(windows), max(windows)) if windows else (None, None, None),
            "one_time": (min(once), max(once)) if once else (None, None)}


def describe(together: dict | None) -> str | None:
    """Say how a configuration measured one trial per card was counted, or None for one that was not."""
    if not together:
        return None
    if together["throughput"] is None:
        return Text("{cards} cards at the same time: no set where every card ended ok, so nothing is projected from "
                    "them ({sets} set(s) recorded)", cards=together["cards"], sets=together["sets"])
    return Text("{cards} cards at the same time, one corpus each: median {rate} entries/s per set over its slowest card's "
                "window ({complete} of {sets} set(s) with every card ok)", cards=together["cards"],
                rate=Figure(together["throughput"][1], 1), complete=together["complete_sets"], sets=together["sets"])
