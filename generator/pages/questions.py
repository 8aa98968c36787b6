"""Questions asked again on the site (#35): which campaigns are revisions of one question, each revision's links and
figures, and what its question's page shows."""

from __future__ import annotations

import hashlib

from iteralab.decision.kinds import MODEL
from iteralab.decision.report import Report
from iteralab.decision.revisions import answer_key, answer_row, configuration_name
from iteralab.pages.render import pretty_json
from iteralab.store import generation
from iteralab.store.questions import asked_again, changes, newest


def latest_manifests(table) -> dict[str, dict]:
    """Return the newest manifest of each campaign that asks another's question again, and of each campaign asked.

    Only the manifests whose row names a campaign asked again are read first (the record table's column: scanning
    4,000 manifests' bytes for the key took a fifth of a second of every build); then the manifests of the campaigns
    they name.
    """
    rows = table.frame[table.frame["kind"] == "manifest"]
    naming = rows[rows["asks_again"].notna().to_numpy(bool)]
    asks = [record for record in table.records(naming) if isinstance(record, dict) and asked_again(record)]
    asking, named = {record["campaign"] for record in asks}, {asked_again(record) for record in asks}
    found: dict[str, list[dict]] = {}
    for record in table.records(rows[rows["campaign"].isin(list(asking | named))]):
        if isinstance(record, dict) and record.get("kind") == "manifest":
            found.setdefault(record["campaign"], []).append(record)
    return {name: newest(manifests) for name, manifests in found.items()}



def manifest_sha256(manifest: dict) -> str:
    """Return the sha256 of a manifest's file in its campaign's bundle (data/manifests/ID.json), which an archivist checks."""
    return hashlib.sha256((pretty_json(manifest) + "\n").encode("utf-8")).hexdigest()


def links(manifests: dict[str, dict]) -> dict[str, dict]:
    """Return, per campaign in a question asked again: its question (the first revision), the revision it asks again
    (with that revision's manifest id and hash), the revisions that ask it again, and every revision in order."""
    before = {name: asked_again(manifest) for name, manifest in manifests.items() if asked_again(manifest) in manifests}
    after: dict[str, list[str]] = {}
    for name, earlier in sorted(before.items()):
        after.setdefault(earlier, []).append(name)
    found = {}
    for name in sorted(set(before) | set(after)):
        root, seen = name, {name}
        while before.get(root) and before[root] not in seen:  # a loop of links ends where it closes
            root = before[root]
            seen.add(root)
        found[name] = {"question": root, "before": before.get(name), "after": after.get(name, []),
                       "before_manifest": {"record_id": manifests[before[name]]["record_id"],
                                           "sha256": manifest_sha256(manifests[before[name]])} if name in before else None}
    for link in found.values():
        link["revisions"] = sorted((other for other, seen in found.items() if seen["question"] == link["question"]),
                                   key=lambda other: (manifests[other]["created_at"], other))
    return found


def revision_figures(report: Report) -> dict:
    """Return what a question's page shows of one revision: its answer and each configuration's median and plan."""
    chosen = answer_row(report)
    return {"answer": report.summary_line, "next_step": report.next_step,
            "answer_key": None if chosen is None else answer_key(chosen),
            "configurations": [{"configuration": configuration_name(row), **_median(row),
                                "planned": float(row.plan.total) if row.plan else None,
                                "currency": row.plan.currency if row.plan else None, "feasible": row.feasible,
                                **_tokens(row.summary)}
                               for row in report.rows]}


def _median(row) -> dict:
    """Return a row's median time of one unit: a corpus's measured window, or (unit 'model') the time to the validated
    model, never a model's training window read as a corpus's."""
    if row.unit == MODEL:
        median = row.window_seconds[1]
        return {"median": None if median is None else round(median, 3), "unit": MODEL}
    return {"median": round(row.summary.median, 3) if row.summary.seconds else None}


def of_models(page: dict) -> bool:
    """Say whether a question's revisions deliver validated models (an adaptation campaign's): its chart of medians is
    then of the time to the validated model."""
    return any(row.get("unit") == MODEL for revision in page["revisions"]
               for row in revision["figures"].get("configurations", []))


def _tokens(summary) -> dict:
    """Return a configuration's median output tokens per second where its trials carry the generation object."""
    figures = generation.of_summary(summary)
    if figures is None:
        return {}
    median = figures["output_tokens_per_s"]["median"]
    return {"output_tokens_per_s": None if median is None else round(median, 1)}


def question_pages(summaries: dict, manifests: dict[str, dict], found: dict[str, dict]) -> list[dict]:
    """Return each question's page data: its revisions in time order, each with its answer and what changed before it."""
    pages = []
    for question in sorted({link["question"] for link in found.values()}):
        names = next(link["revisions"] for link in found.values() if link["question"] == question)
        revisions, previous = [], None
        for name in names:
            figures = (summaries.get(name) or {}).get("revision") or {}
            changed = None if previous is None else figures.get("answer_key") != previous[1].get("answer_key")
            revisions.append({"name": name, "summary": summaries.get(name) or {}, "figures": figures,
                              "manifest": manifests[name], "answer_changed": changed, "before": previous and previous[0],
                              "changes": [] if previous is None else changes(manifests[previous[0]], manifests[name])})
            previous = (name, figures)
        pages.append({"question": question, "revisions": revisions, "title": (summaries.get(question) or {}).get("title", question)})
    return pages


def chart_rows(page: dict) -> tuple[list[dict], list[dict]]:
    """Return the rows of a question's two charts: each configuration's median, and its planned spend, per revision."""
    medians, spend = [], []
    # Output tokens per second beside each median where a revision's trials carry them (a generation campaign's).
    tokens = any("output_tokens_per_s" in row for revision in page["revisions"]
                 for row in revision["figures"].get("configurations", []))
    for revision in page["revisions"]:
        for row in revision["figures"].get("configurations", []):
            if row["median"] is not None:
                medians.append({"revision": revision["name"], "configuration": row["configuration"], "seconds": row["median"],
                                **({"output_tokens_per_s": row.get("output_tokens_per_s")} if tokens else {})})
            if row["planned"] is not None:
                spend.append({"revision": revision["name"], "configuration": row["configuration"], "planned": row["planned"],
                              "currency": row["currency"]})
    return medians, spend
