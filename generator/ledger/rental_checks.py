"""Check every rental against the runs it paid for: hardware, cards, period; named by decide, the pages and check."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

from iteralab.core import processes
from iteralab.core.language import Text
from iteralab.ledger import references
from iteralab.money import compatibility
from iteralab.money.schedule import rental_period
from iteralab.store import reading
from iteralab.store.configuration import manifest_gpus, name_matches
from iteralab.store.records import KINDS
from iteralab.store.views import CampaignView, campaign_views


def check_rentals(view: CampaignView) -> tuple[dict, list[str]]:
    """Match each rental's GPU and cards with the hardware its runs' manifests observed; return valid links and problems.

    A rental's runs are those it names (rental add --run) and those started with it (run --rental). A run outside the
    rental's period is named, and still counted: the package was paid whatever the clock said.
    """
    manifests = {}
    for manifest in view.manifests:
        manifests.setdefault(manifest["run_id"], manifest)
    started_with = {}
    for manifest in manifests.values():
        started_with.setdefault((manifest.get("rental") or {}).get("rental_id"), []).append(manifest["run_id"])
    links, problems = {}, []
    for rental in view.rentals:
        covered = rental["lots"] * rental["cards_per_lot"]
        where = Text("rental {record} ({lots} lot(s) {gpu})", record=rental["record_id"], lots=rental["lots"], gpu=rental["gpu"])
        for run_id in dict.fromkeys([*(rental.get("runs") or []), *started_with.get(rental["record_id"], [])]):
            manifest = manifests.get(run_id)
            if manifest is None:
                problems.append(Text("{where} names run {run}, which has no manifest in campaign {campaign}; copy that run's "
                                     "records here or correct the rental; it is not counted", where=where, run=run_id,
                                     campaign=view.name))
                continue
            observed = manifest_gpus(manifest)
            if not any(name_matches(rental["gpu"], name) for name in observed):
                seen = ", ".join(observed) or Text("no GPU (CPU {cpu})", cpu=(manifest["environment"].get("cpu") or {}).get("model"))
                problems.append(Text("{where} names run {run}, whose manifest observed {seen}: the hardware does not match; it "
                                     "is not counted for that run's configurations", where=where, run=run_id, seen=seen))
                continue
            if len(observed) > covered:
                problems.append(Text("{where} covers {covered} card(s) but run {run} observed {observed}: it is not counted for "
                                     "that run's configurations", where=where, covered=covered, run=run_id, observed=len(observed)))
                continue
            problems += _outside_period(view, rental, run_id, where)
            links.setdefault(run_id, []).append(rental)
    counted = {rental["record_id"] for rental in view.rentals}
    problems += [Text("run {run} was started with --rental {rental}, which is not a counted rental of campaign {campaign} "
                      "(unknown here, or voided); copy its records here or link the run to the right rental with rental add "
                      "--run", run=run_id, rental=rental_id, campaign=view.name)
                 for rental_id, run_ids in started_with.items() if rental_id is not None and rental_id not in counted
                 for run_id in run_ids]
    return links, problems


def _outside_period(view: CampaignView, rental: dict, run_id: str, where: str) -> list[str]:
    """Name a run whose records fall outside the rental's period (start to end, or start + its days)."""
    start, end = rental_period(rental)
    times = [dt.datetime.fromisoformat(r["created_at"].replace("Z", "+00:00"))
             for r in (*view.manifests, *view.trials) if r["run_id"] == run_id]
    first, last = min(times), max(times)
    if start <= first and last <= end:
        return []
    return [Text("{where} paid for run {run}, which ran from {first} to {last}, outside the rental's period ({start} to {end}); "
                 "it is still counted: check the rental's dates and the run", where=where, run=run_id,
                 first=first.isoformat(timespec="seconds"), last=last.isoformat(timespec="seconds"), start=start.isoformat(),
                 end=end.isoformat())]


def check_folder(runs_dir: Path | str, torn: list | None = None) -> reading.Loaded:
    """Load the runs folder as check reads it: every record problem, then every campaign's rental problems.

    A records line that a kill cut off and run --resume closed and named is no problem: TORN, when given, receives each.
    """
    loaded = reading.load(runs_dir)  # the store sets those lines apart for every reader (store/torn.py)
    if torn is not None:
        torn += loaded.torn
    # Views of every campaign allocate millions of objects beside the records, which die by reference count: the cyclic
    # collector only scanned the records again and again (at 204,000 records, a third of a check).
    with processes.collector_paused():
        views = campaign_views(loaded)
        for view in views:
            if view.failure is None:
                loaded.problems.extend(f"campaign {view.name}: {problem}" for problem in check_rentals(view)[1])
        # Information, not a problem: a sheet that names a configuration by its old name still finds it (#44).
        loaded.notices = references.renamed_in_sheets(Path(runs_dir).parent / "qualification",
                                                      [view for view in views if view.failure is None])
    # Each run's GPU combination against the compatibility matrices: information; an exclude is a warning, not a problem.
    loaded.compatibility = compatibility.run_verdicts(loaded.of_kind("manifest"))
    return loaded


def check_data(loaded: reading.Loaded) -> dict:
    """Return the counts per kind and the problems of a check, as plain data."""
    counts = Counter(record["kind"] for record in loaded.records)  # one pass: a scan per kind took 0.1 s at 200,000
    return {"records": len(loaded.records), "by_kind": {kind: counts[kind] for kind in KINDS}, "problems": loaded.problems,
            "compatibility": [{key: value for key, value in found.items() if key != "line"} for found in loaded.compatibility],
            **({"renamed": loaded.notices} if loaded.notices else {})}


def describe_check(loaded: reading.Loaded, data: dict | None = None) -> str:
    """List each problem as file:line: reason, then the counts (DATA: check_data's, when the caller has it)."""
    counts = (data or check_data(loaded))["by_kind"]
    problems = len(loaded.problems)
    summary = (f"{len(loaded.records)} records ({', '.join(f'{n} {k}' for k, n in counts.items())}); "
               f"{problems} problem{'s' * (problems != 1)}")
    # Each run's compatibility verdict is information: an exclude is a warning line of its own; every run is counted in the
    # summary, and --json gives each run's verdict with its matrix row.
    warnings = [str(found["line"]) for found in loaded.compatibility if found["status"] == "exclude"]
    if loaded.compatibility:
        verdicts = Counter(found["status"] for found in loaded.compatibility)
        summary += (f"; compatibility of {len(loaded.compatibility)} run(s) against the matrices: "
                    + ", ".join(f"{verdicts[status]} {status}" for status in ("acceptable", "to-confirm", "exclude", "no-gpu")
                                if verdicts[status]))
    return "\n".join([*loaded.problems, *warnings, *loaded.notices, summary])
