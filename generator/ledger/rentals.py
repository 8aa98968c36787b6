"""Rentals with their receipts and accepted deliverables, appended to the record store."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from iteralab.core.errors import UserError
from iteralab.core.files import copy_atomically, sha256_file, writing
from iteralab.ledger.rental_checks import check_rentals
from iteralab.money.catalog import load_catalog, quote
from iteralab.money.schedule import elapsed_hours, format_hours, parse_time
from iteralab.store import adaptation, reading, records
from iteralab.store.listing import campaign_names, did_you_mean
from iteralab.store.views import campaign_views

MAX_RECEIPT_BYTES = 50 * 2**20  # receipts are PDFs or photos; anything larger is probably the wrong file


def _receipt_place(runs_dir: Path, campaign: str, receipt: Path, folder: str, what: str) -> tuple[str, str, int]:
    """Check a receipt or document and return where its copy goes (relative to the runs folder), its sha256 and size."""
    receipt = Path(receipt)
    if not receipt.is_file():
        raise UserError(f"{what} {receipt} is not a file")
    size = receipt.stat().st_size
    if size > MAX_RECEIPT_BYTES:
        raise UserError(f"{what} {receipt} is {size:,} bytes; the limit is {MAX_RECEIPT_BYTES:,} (50 MiB): attach a smaller scan")
    name = receipt.name
    if name.startswith(".") or "\\" in name or any(ord(c) < 32 for c in name):
        raise UserError(f"{what} name {name!r} cannot be stored: rename the file without control characters or a leading dot")
    digest = sha256_file(receipt)
    return f"{campaign}/{folder}/{digest[:16]}/{name}", digest, size


def copy_receipt(runs_dir: Path, campaign: str, receipt: Path) -> dict:
    """Copy a receipt into runs/CAMPAIGN/receipts/SHA/NAME (never overwriting) and describe it."""
    with kept_copy(runs_dir, campaign, receipt) as copied:
        return copied


@contextlib.contextmanager
def kept_copy(runs_dir: Path, campaign: str, receipt: Path | None, *, folder: str = "receipts", what: str = "receipt"):
    """Copy RECEIPT (or another document) for the block; if the block fails (its record could not be written), remove the copy it made."""
    if receipt is None:
        yield None
        return
    relative, digest, size = _receipt_place(runs_dir, campaign, receipt, folder, what)
    target = Path(runs_dir) / relative
    # A copy made here goes again, with its new folders, if the block fails: no receipt without its record.
    with writing(target, f"the {what} copy"):
        if not target.exists():
            copy_atomically(receipt, target)
        if sha256_file(target) != digest:
            raise UserError(f"{target} already exists with other content; it was not overwritten")
        yield {"path": relative, "sha256": digest, "size_bytes": size, "original_name": Path(receipt).name}


def add_rental(*, runs_dir: Path | str, campaign: str, gpu: str, lots: int, days: int, start: str, end: str | None = None,
               receipt: Path | None = None, catalog: Path | None = None, note: str | None = None,
               paid_runs: list[str] | tuple = (), tz: str | None = None, new_campaign: bool = False) -> dict:
    """Append a rental priced from the catalog as it is now, with its receipt copied beside the records.

    PAID_RUNS names the runs (ids) the package paid for; each must exist and have observed the rented GPU. Times without an
    offset are read in TZ, else in the campaign's declared time zone. A campaign with no records yet needs NEW_CAMPAIGN.
    """
    runs_dir = Path(runs_dir)
    records.check_name(campaign, "campaign")
    price = quote(load_catalog(catalog), gpu=gpu, days=days, lots=lots)
    mine = _known_campaign(runs_dir, campaign, new_campaign)
    zone = _zone(tz, mine, campaign)
    begin = _moment(start, zone, "start", campaign)
    finish = None
    if end is not None:
        finish = _moment(end, zone, "end", campaign)
        hours = elapsed_hours(begin, finish)
        if hours <= 0:
            raise UserError(f"--end {end} is not after --start {start}")
        if hours > days * 24:
            raise UserError(f"the window is {format_hours(hours)} h, longer than the {days}-day package ({days * 24} h); packages are "
                            "never extended automatically: record each extra period as its own rental")
    paid_runs = list(dict.fromkeys(paid_runs))
    if paid_runs:
        _check_runs(runs_dir, campaign, paid_runs, price, begin, finish)
    if receipt is not None:
        _refuse_repeated_receipt(mine, Path(receipt), campaign)
    with kept_copy(runs_dir, campaign, receipt) as copied:
        record = records.make_record(
            "rental", campaign=campaign, run_id=records.new_id("run-rental"),
            gpu=price.price.gpu.slug, lots=lots, days=days, start=begin.isoformat(), end=None if end is None else finish.isoformat(),
            catalog_version=price.catalog_version, price_per_lot=str(price.price.price_per_lot), total=str(price.total),
            currency=price.price.currency, cards_per_lot=price.price.gpu.cards_per_lot, gpus=price.gpus,
            receipt=copied, note=note, runs=paid_runs,
        )
        records.append(runs_dir, record)
    return record


def _known_campaign(runs_dir: Path, campaign: str, new_campaign: bool) -> list[dict]:
    """Return the campaign's records; refuse an unknown name (a typo would start a campaign of its own) unless it is new."""
    folder = runs_dir / campaign
    mine = reading.load(folder).of_campaign(campaign) if folder.is_dir() else []
    if mine or new_campaign:
        return mine
    known = campaign_names(runs_dir)
    hint = did_you_mean(campaign, known) + (f"campaigns there: {', '.join(known)}; " if known else "")
    raise UserError(f"campaign {campaign} has no records in {runs_dir}: {hint}for a rental bought before the campaign's "
                    "first run, add --new-campaign")


def _zone(tz: str | None, mine: list[dict], campaign: str) -> ZoneInfo | None:
    """Return the zone of times without an offset: --tz, else the time zone the campaign's [decision] table declares."""
    if tz is None:
        declared = next((((m.get("protocol") or {}).get("decision") or {}).get("time_zone")
                         for m in reversed(mine) if m["kind"] == "manifest"), None)
        if declared is None:
            return None
        tz = declared
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise UserError(f"--tz {tz!r} is not a known time zone; use an IANA name such as Asia/Jakarta") from None


def _moment(text: str, zone: ZoneInfo | None, what: str, campaign: str):
    """Parse a rental time; one without an offset needs a zone, since a guessed UTC shifts the rental by hours."""
    moment = parse_time(text, zone, what)
    if zone is None and dt.datetime.fromisoformat(str(text).strip()).tzinfo is None:
        raise UserError(f"--{what} {text} has no UTC offset and campaign {campaign} declares no time zone: write the offset "
                        "(e.g. 2026-09-28T09:00+07:00) or pass --tz Asia/Jakarta; nothing was recorded")
    return moment


def _refuse_repeated_receipt(mine: list[dict], receipt: Path, campaign: str) -> None:
    """Refuse a receipt already recorded for the campaign's rentals (same sha256): the spend would count twice."""
    if not receipt.is_file():
        return  # kept_copy says what is wrong with it
    voided = reading.voided_ids(mine)
    digest, earlier = receipt_holder((r for r in mine if r["kind"] == "rental" and r["record_id"] not in voided), receipt)
    if earlier is not None:
        raise UserError(f"receipt {receipt} (sha256 {digest[:12]}…) is already recorded for {campaign} by rental "
                        f"{earlier['record_id']} ({earlier['total']} {earlier['currency']} from {earlier['start']}); "
                        f"one receipt is one rental. If that rental is wrong, iteralab void {earlier['record_id']} "
                        "--reason '...' first; nothing was recorded")


def receipt_holder(counted, receipt: Path) -> tuple[str, dict | None]:
    """Return RECEIPT's sha256 and the first of COUNTED (rentals or expenses that count) that holds the same file."""
    digest = sha256_file(receipt)
    return digest, next((r for r in counted if r["receipt"] and r["receipt"]["sha256"] == digest), None)


def _check_runs(runs_dir: Path, campaign: str, paid_runs: list[str], price, begin, finish) -> None:
    """Refuse a rental whose runs are unknown or observed other hardware than the package rented."""
    for run_id in paid_runs:
        records.check_name(run_id, "--run")
    folder = runs_dir / campaign
    views = campaign_views(reading.load(folder)) if folder.is_dir() else []
    view = next((v for v in views if v.name == campaign), None)
    known = sorted({m["run_id"] for m in view.manifests}) if view else []
    unknown = [run_id for run_id in paid_runs if run_id not in known]
    if unknown:
        raise UserError(f"--run {unknown[0]} is not a run of campaign {campaign} in {runs_dir} "
                        f"(its runs: {', '.join(known) or 'none yet'}); record the rental after the run, or leave --run out")
    probe = {"record_id": "being recorded", "gpu": price.price.gpu.slug, "lots": price.lots, "days": price.price.days,
             "cards_per_lot": price.price.gpu.cards_per_lot, "runs": paid_runs, "start": begin.isoformat(),
             "end": finish.isoformat() if finish else None}
    _, problems = check_rentals(dataclasses.replace(view, rentals=(probe,)))
    if problems:
        raise UserError(problems[0].replace("it is not counted for that run's configurations",
                                            "check --gpu, --lots and --run; nothing was recorded")
                        .replace("it is still counted: check the rental's dates and the run",
                                 "check --start, --end and --run; nothing was recorded"))


def deliver(*, runs_dir: Path | str, campaign: str, trial_id: str, name: str | None = None) -> dict:
    """Append a deliverable for an accepted trial whose corpus was not delivered yet."""
    runs_dir = Path(runs_dir)
    records.check_name(campaign, "campaign")
    folder = runs_dir / campaign
    if not folder.is_dir():
        raise UserError(f"campaign {campaign} has no records in {runs_dir}")
    loaded = reading.load(folder)
    mine = loaded.of_campaign(campaign)
    trial = next((r for r in mine if r["kind"] == "trial" and r["record_id"] == trial_id), None)
    if trial is None:
        raise UserError(f"trial {trial_id} is not a trial of campaign {campaign}; see the campaign page or runs/{campaign}/records")
    if trial.get(adaptation.BLOCK):
        raise UserError(f"trial {trial_id} is an adaptation: its deliverable is its validated model, which decide and the "
                        "pages count by themselves (one per configuration with an accepted, exported and hashed model; "
                        "repetitions are not extra models), so there is nothing to record; nothing was recorded")
    if not trial["corpus_accepted"]:
        why = trial["error"] or "; ".join(f"{v['metric']} {v['value']} < {v['threshold']}"
                                          for v in (trial.get("quality") or {}).get("verdicts", []) if not v["passed"])
        raise UserError(f"trial {trial_id} is not corpus_accepted (status {trial['status']}{': ' + why if why else ''}); "
                        "only a validated corpus can be delivered")
    manifest = next((r for r in mine if r["kind"] == "manifest" and r["record_id"] == trial["manifest_id"]), None)
    if manifest is None:
        raise UserError(f"the manifest {trial['manifest_id']} of trial {trial_id} is missing; run iteralab check")
    fingerprint = manifest["corpus"]["fingerprint"]
    voided = reading.voided_ids(mine)
    for earlier in (r for r in mine if r["kind"] == "deliverable" and r["record_id"] not in voided):
        if earlier["corpus_fingerprint"] == fingerprint:
            raise UserError(f"the corpus {fingerprint[:19]}… was already delivered for {campaign} "
                            f"({earlier['record_id']}, from trial {earlier['trial_id']}); repetitions are not new deliverables")
    record = records.make_record(
        "deliverable", campaign=campaign, run_id=records.new_id("run-deliver"), trial_id=trial_id,
        name=name or f"{manifest['corpus'].get('source_name') or 'corpus'} classified by {trial['variant']}",
        corpus_fingerprint=fingerprint, predictions_sha256=trial["predictions"]["sha256"])
    records.append(runs_dir, record)
    return record


def list_rentals(*, runs_dir: Path | str, campaign: str) -> list[dict]:
    """Return the campaign's rental records in reading order (none when the runs folder does not exist yet)."""
    return campaign_records(runs_dir=runs_dir, campaign=campaign, kind="rental")


def campaign_records(*, runs_dir: Path | str, campaign: str, kind: str) -> list[dict]:
    """Return the campaign's records of KIND in reading order (none when the runs folder does not exist yet)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    return reading.load(runs_dir).of_campaign(campaign, kind)


def describe_rentals(rentals: list[dict], campaign: str) -> str:
    """List rentals one a line: lots, card, days, start, total and receipt."""
    lines = [f"{r['record_id']}: {r['lots']} lot(s) {r['gpu']} x {r['days']} days from {r['start']}, {r['total']} {r['currency']}"
             f" (catalog {r['catalog_version']}){', receipt ' + r['receipt']['path'] if r['receipt'] else ', no receipt'}"
             for r in rentals]
    return "\n".join(lines) or f"no rental recorded for {campaign}"


def describe_rental(record: dict) -> str:
    """Say what a rental just recorded costs, its receipt and the runs it paid for."""
    receipt = (f"; receipt {record['receipt']['path']} (sha256 {record['receipt']['sha256'][:12]}…)" if record["receipt"]
               else "; no receipt")
    runs = (f"; paid for run(s) {', '.join(record['runs'])}" if record["runs"] else
            "; linked to no run: it counts in the campaign's spend, for no configuration (add --run RUN_ID)")
    return (f"Recorded {record['record_id']}: {record['total']} {record['currency']} for {record['gpus']} "
            f"GPU{'s' * (record['gpus'] != 1)} ({record['lots']} lot{'s' * (record['lots'] != 1)} x "
            f"{record['price_per_lot']}, catalog {record['catalog_version']}){receipt}{runs}")


def describe_deliverable(record: dict) -> str:
    """Say which corpus a deliverable just recorded counts."""
    return f"Recorded deliverable {record['record_id']}: {record['name']} (corpus {record['corpus_fingerprint'][:19]}…)"
