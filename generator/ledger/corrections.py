"""Corrections are records: a rental, deliverable or expense recorded by mistake is voided, never rewritten or dropped."""

from __future__ import annotations

from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.ledger.exclusions import MAX_TEXT, withdraw_exclusion
from iteralab.store import reading, records
from iteralab.store.records import VOIDABLE

WHY_NOT = {
    "trial": "a trial is never voided: set it aside with iteralab exclude, under a rule applied to every configuration",
    "manifest": "a run's manifest is never voided: its trials are the evidence; set trials aside with iteralab exclude",
}


def void_record(*, runs_dir: Path | str, record_id: str, reason: str) -> dict:
    """Append the void of a rental, deliverable or expense (or the withdrawal of an exclusion), with REASON.

    The voided record stays in the records, the site and the bundle, shown struck through; it counts in no figure.
    """
    runs_dir = Path(runs_dir)
    records.check_name(record_id, "record id")
    reason = " ".join(str(reason).split())
    if not reason:
        raise UserError("--reason is empty: say why the record is voided, e.g. 'receipt recorded twice'")
    if len(reason) > MAX_TEXT:
        raise UserError(f"--reason is {len(reason):,} characters; keep it under {MAX_TEXT:,}")
    if not runs_dir.is_dir():
        raise UserError(f"{runs_dir} is not a folder: pass the runs folder with --runs")
    loaded = reading.load(runs_dir)
    target = next((r for r in loaded.records if r["record_id"] == record_id), None)
    if target is None:
        raise UserError(f"{record_id} is not a record in {runs_dir}: copy the id from iteralab rental list, expense list, "
                        "the campaign page or the records file; nothing was recorded")
    if target["kind"] == "exclusion":
        return withdraw_exclusion(runs_dir=runs_dir, campaign=target["campaign"], exclusion_id=record_id, reason=reason)
    if target["kind"] not in VOIDABLE:
        raise UserError(WHY_NOT.get(target["kind"], f"{record_id} is a {target['kind']}, itself a correction: it cannot be "
                                    "voided; record the rental, deliverable or expense again instead"))
    earlier = next((r for r in loaded.of_campaign(target["campaign"], "withdrawal") if r.get("voided_id") == record_id), None)
    if earlier is not None:
        raise UserError(f"{target['kind']} {record_id} was already voided by {earlier['record_id']} ({earlier['reason']!r})")
    record = records.make_record("withdrawal", campaign=target["campaign"], run_id=records.new_id("run-void"),
                                 voided_id=record_id, voided_kind=target["kind"], reason=reason)
    records.append(runs_dir, record)
    return record


def describe_void(record: dict) -> str:
    """Say what a correction just recorded withdraws, and that the record stays."""
    if "exclusion_id" in record:
        return (f"Recorded {record['record_id']}: exclusion {record['exclusion_id']} withdrawn ({record['reason']!r}); "
                "its trials count again")
    return (f"Recorded {record['record_id']}: {record['voided_kind']} {record['voided_id']} voided ({record['reason']!r}); "
            "it stays in the evidence, struck through, and counts in no figure")
