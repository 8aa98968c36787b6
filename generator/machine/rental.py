"""Tie a run to its rental as it starts: the rented card on this machine, the clock inside the rental's period."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.money.schedule import rental_period
from iteralab.store import reading, records
from iteralab.store.configuration import name_matches


def find_rental(runs_dir: Path, campaign: str, rental_id: str) -> dict:
    """Return the campaign's rental RENTAL_ID, or say how to record it; a voided rental pays for nothing."""
    records.check_name(rental_id, "--rental")
    folder = Path(runs_dir) / campaign
    mine = reading.load(folder).of_campaign(campaign) if folder.is_dir() else []
    rentals = [r for r in mine if r["kind"] == "rental"]
    rental = next((r for r in rentals if r["record_id"] == rental_id), None)
    if rental is None:
        known = ", ".join(r["record_id"] for r in rentals) or "none yet"
        raise UserError(f"--rental {rental_id} is not a rental of campaign {campaign} in {runs_dir} (its rentals: {known}); "
                        f"record it first with iteralab rental add --campaign {campaign} (--new-campaign before the first run)")
    void = next((r for r in mine if r["kind"] == "withdrawal" and r.get("voided_id") == rental_id), None)
    if void is not None:
        raise UserError(f"rental {rental_id} was voided by {void['record_id']} ({void['reason']!r}); tie the run to the "
                        "rental that replaced it")
    return rental


def check_machine(rental: dict, environment: dict) -> None:
    """Refuse, before any model loads, a machine whose GPUs are not the rental's card or more than its lots hold."""
    observed = [gpu["name"] for gpu in environment.get("gpus") or []]
    covered = rental["lots"] * rental["cards_per_lot"]
    where = f"rental {rental['record_id']} ({rental['lots']} lot(s) of {rental['gpu']}, {covered} card(s))"
    if not observed:
        raise UserError(f"{where}: this machine shows torch no GPU ({environment.get('gpus_reason') or 'none visible'}, CPU "
                        f"{(environment.get('cpu') or {}).get('model')}); run on the rented machine, or leave --rental out")
    other = [name for name in observed if not name_matches(rental["gpu"], name)]
    if other:
        raise UserError(f"{where}: this machine's GPUs are {', '.join(observed)}, not the rented card; a run on other "
                        "hardware is another configuration: run it on the rented machine, or leave --rental out")
    if len(observed) > covered:
        raise UserError(f"{where}: this machine shows {len(observed)} GPUs, more than the rental's lots hold; "
                        "correct the rental (iteralab void, then rental add) or limit CUDA_VISIBLE_DEVICES")


def rental_link(rental: dict, now: dt.datetime) -> tuple[dict, str | None]:
    """Return the manifest's link to the rental, and a warning when NOW is outside the rental's period."""
    start, end = rental_period(rental)
    within = start <= now <= end
    link = {"rental_id": rental["record_id"], "within_period": within, "period_start": start.isoformat(),
            "period_end": end.isoformat()}
    warning = None if within else (
        f"warning: the clock ({now.isoformat(timespec='seconds')}) is outside rental {rental['record_id']}'s period "
        f"({start.isoformat()} to {end.isoformat()}); the run is recorded as outside its rental")
    return link, warning
