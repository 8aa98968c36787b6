"""Check every rental against the runs it paid for: hardware, cards, period; named by decide, the pages and check."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from iteralab.money.schedule import rental_period
from iteralab.store import reading
from iteralab.store.configuration import manifest_gpus, name_matches
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
        where = f"rental {rental['record_id']} ({rental['lots']} lot(s) {rental['gpu']})"
        for run_id in dict.fromkeys([*(rental.get("runs") or []), *started_with.get(rental["record_id"], [])]):
            manifest = manifests.get(run_id)
            if manifest is None:
                problems.append(f"{where} names run {run_id}, which has no manifest in campaign {view.name}; "
                                "copy that run's records here or correct the rental; it is not counted")
                continue
            observed = manifest_gpus(manifest)
            if not any(name_matches(rental["gpu"], name) for name in observed):
                seen = ", ".join(observed) or f"no GPU (CPU {(manifest['environment'].get('cpu') or {}).get('model')})"
                problems.append(f"{where} names run {run_id}, whose manifest observed {seen}: the hardware does not match; "
                                "it is not counted for that run's configurations")
                continue
            if len(observed) > covered:
                problems.append(f"{where} covers {covered} card(s) but run {run_id} observed {len(observed)}: "
                                "it is not counted for that run's configurations")
                continue
            problems += _outside_period(view, rental, run_id, where)
            links.setdefault(run_id, []).append(rental)
    counted = {rental["record_id"] for rental in view.rentals}
    problems += [f"run {run_id} was started with --rental {rental_id}, which is not a counted rental of campaign {view.name} "
                 "(unknown here, or voided); copy its records here or link the run to the right rental with rental add --run"
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
    return [f"{where} paid for run {run_id}, which ran from {first.isoformat(timespec='seconds')} to "
            f"{last.isoformat(timespec='seconds')}, outside the rental's period ({start.isoformat()} to {end.isoformat()}); "
            "it is still counted: check the rental's dates and the run"]


def check_folder(runs_dir: Path | str) -> reading.Loaded:
    """Load the runs folder as check reads it: every record problem, then every campaign's rental problems."""
    loaded = reading.load(runs_dir)
    for view in campaign_views(loaded):
        if view.failure is None:
            loaded.problems.extend(f"campaign {view.name}: {problem}" for problem in check_rentals(view)[1])
    return loaded
