"""Exclusions: trials set aside under a documented rule applied to every configuration, and their withdrawal."""

from __future__ import annotations

import re
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.ledger.rentals import kept_copy
from iteralab.store import names, reading, records
from iteralab.store.views import CampaignView, campaign_views

MAX_TEXT = 2000
# A document given as one word ending in an extension, or with a folder in it, was meant as a file.
LOOKS_LIKE_A_FILE = re.compile(r"^\S*(/\S*|\.[A-Za-z0-9]{1,5})$")


def campaign_view(runs_dir: Path, campaign: str) -> CampaignView:
    """Return CAMPAIGN's view from its own folder, or a one-line error saying it has no records."""
    records.check_name(campaign, "campaign")
    folder = Path(runs_dir) / campaign
    views = [view for view in campaign_views(reading.load(folder)) if view.name == campaign] if folder.is_dir() else []
    if not views or not views[0].trials:
        raise UserError(f"campaign {campaign} has no trials in {runs_dir}: run it first, or pass --runs")
    return views[0]


def _sentence(value: str, option: str) -> str:
    value = " ".join(str(value).split())
    if not value:
        raise UserError(f"{option} is empty: state it so that anyone can apply it")
    if len(value) > MAX_TEXT:
        raise UserError(f"{option} is {len(value):,} characters; keep it under {MAX_TEXT:,} and attach the details as a file")
    return value


def _checked(view: CampaignView, checked: tuple | list, trial_ids: list[str]) -> list[str]:
    """Return the keys of the configurations checked against the rule: those named, or all; always the excluded trials' own."""
    by_name = {name: summary.key for name, summary in names.by_name(view.variants).items()}
    unknown = [name for name in checked if name not in by_name]
    if unknown:
        known = "; ".join(summary.label for summary in view.variants)
        raise UserError(f"--checked {unknown[0]!r} is not a configuration of campaign {view.name} (its configurations: {known})")
    keys = [by_name[name] for name in checked] if checked else [summary.key for summary in view.variants]
    of_trial = {t["record_id"]: summary.key for summary in view.variants for t in summary.trials}
    return list(dict.fromkeys([*keys, *(of_trial[trial_id] for trial_id in trial_ids)]))


def _trials(view: CampaignView, trial_ids: tuple | list) -> list[str]:
    trial_ids = list(dict.fromkeys(trial_ids))
    known = {t["record_id"] for t in view.trials}
    rules = {e["record_id"]: e["rule"] for e in view.exclusions}
    for trial_id in trial_ids:
        if trial_id not in known:
            raise UserError(f"--trial {trial_id} is not a trial of campaign {view.name}; its ids are in trials.csv and on "
                            "the campaign page")
        if trial_id in view.excluded:
            exclusion = view.excluded[trial_id]
            raise UserError(f"trial {trial_id} is already excluded by {exclusion} ({rules[exclusion]!r}); "
                            "withdraw that exclusion first to exclude it under another rule")
    return trial_ids


def add_exclusion(*, runs_dir: Path | str, campaign: str, rule: str, trials: tuple | list, document: str,
                  checked: tuple | list = ()) -> dict:
    """Append an exclusion of TRIALS under RULE, with its DOCUMENT (a file kept beside the records, or a text).

    CHECKED names the configurations whose trials were checked against the rule (default: every one of the campaign).
    """
    runs_dir = Path(runs_dir)
    view = campaign_view(runs_dir, campaign)
    rule = _sentence(rule, "--rule")
    trial_ids = _trials(view, trials)
    keys = _checked(view, checked, trial_ids)
    source = Path(document)
    is_file = source.is_file()
    if not is_file and LOOKS_LIKE_A_FILE.match(document.strip()):
        raise UserError(f"--document {document}: no such file; give an existing file, or a sentence that states the evidence")
    text = None if is_file else _sentence(document, "--document")
    with kept_copy(runs_dir, campaign, source if is_file else None, folder="documents", what="document") as copied:
        record = records.make_record("exclusion", campaign=campaign, run_id=records.new_id("run-exclusion"), rule=rule,
                                     trials=trial_ids, document=copied or {"text": text}, checked_configurations=keys)
        records.append(runs_dir, record)
    return record


def withdraw_exclusion(*, runs_dir: Path | str, campaign: str, exclusion_id: str, reason: str) -> dict:
    """Append the withdrawal of an exclusion, with REASON: its trials count again, and both records stay."""
    runs_dir = Path(runs_dir)
    view = campaign_view(runs_dir, campaign)
    exclusion = next((e for e in view.exclusions if e["record_id"] == exclusion_id), None)
    if exclusion is None:
        known = ", ".join(e["record_id"] for e in view.exclusions) or "none"
        raise UserError(f"--exclusion {exclusion_id} is not an exclusion of campaign {campaign} (its exclusions: {known})")
    if (earlier := view.withdrawal_of(exclusion_id)) is not None:
        raise UserError(f"exclusion {exclusion_id} was already withdrawn by {earlier['record_id']} ({earlier['reason']!r})")
    record = records.make_record("withdrawal", campaign=campaign, run_id=records.new_id("run-withdrawal"),
                                 exclusion_id=exclusion_id, reason=_sentence(reason, "--reason"))
    records.append(runs_dir, record)
    return record


def describe_exclusion(record: dict) -> str:
    """Say what an exclusion just recorded sets aside, and where its document is."""
    document = record["document"]
    kept = f"document {document['path']} (sha256 {document['sha256'][:12]}…)" if "path" in document else "document given as text"
    count = len(record["trials"])
    return (f"Recorded {record['record_id']}: {count} trial{'s' * (count != 1)} excluded under the rule {record['rule']!r}; "
            f"{kept}; checked against {len(record['checked_configurations'])} configuration(s). The trials stay in the "
            "records and on the site, marked excluded; every figure now reads the others")


def describe_withdrawal(record: dict) -> str:
    """Say which exclusion a withdrawal just recorded takes back."""
    return f"Recorded {record['record_id']}: exclusion {record['exclusion_id']} withdrawn ({record['reason']!r}); its trials count again"
