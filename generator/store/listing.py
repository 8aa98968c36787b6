"""Find the ids other commands need: a campaign's runs (for rental add --run) and trials (for deliver and exclude)."""

from __future__ import annotations

import difflib
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.store import adaptation, reading, records
from iteralab.store.disturbance import is_disturbed, measured, set_aside_in
from iteralab.store.trials import card_and_set
from iteralab.store.views import CampaignView, campaign_views, kind_of


def campaign_names(runs_dir: Path | str) -> list[str]:
    """Name the campaigns a runs folder holds records for, from its folders, without reading a record."""
    runs_dir = Path(runs_dir)
    return sorted({path.relative_to(runs_dir).parts[0] for path in reading.record_files(runs_dir)}) if runs_dir.is_dir() else []


def did_you_mean(name: str, known: list[str]) -> str:
    """Return 'did you mean X or Y? ' for the known names closest to a mistyped NAME, or nothing."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f"did you mean {' or '.join(close)}? " if close else ""


def campaign_view_of(runs_dir: Path | str, campaign: str) -> CampaignView:
    """Return CAMPAIGN's view, read from its own folder only, or say which campaigns the runs folder holds."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UserError(f"{runs_dir} is not a folder: pass the runs folder with --runs")
    records.check_name(campaign, "campaign")
    folder = runs_dir / campaign
    views = [view for view in campaign_views(reading.load(folder)) if view.name == campaign] if folder.is_dir() else []
    if not views:
        known = campaign_names(runs_dir)
        raise UserError(f"campaign {campaign} has no records in {runs_dir}: {did_you_mean(campaign, known)}"
                        f"campaigns there: {', '.join(known) or 'none'}")
    return views[0]


def run_rows(view: CampaignView) -> list[dict]:
    """One row per run: when and where it ran, its trials planned and recorded, resumptions and rental link."""
    rows = []
    for manifest in view.manifests:
        trials = [t for t in view.trials if t["manifest_id"] == manifest["record_id"]]
        statuses: dict[str, int] = {}
        for trial in trials:
            statuses[trial["status"]] = statuses.get(trial["status"], 0) + 1
        environment = manifest["environment"]
        gpus = [gpu.get("name") for gpu in environment.get("gpus") or []]
        rows.append({
            "run_id": manifest["run_id"], "started_at": manifest["created_at"], "hostname": environment.get("hostname"),
            "kind": kind_of(manifest),  # of work: the campaign's, read as classify where the manifest predates kinds
            "hardware": f"{len(gpus)}× {gpus[0]}" if gpus else f"CPU {(environment.get('cpu') or {}).get('model')}",
            "planned": len(manifest["plan"]), "recorded": len(trials), "statuses": statuses,
            # An interrupted repetition is left to run again (run --resume), so it does not complete its run.
            "complete": len({t["sequence"] for t in trials if t["status"] != "interrupted"}) >= len(manifest["plan"]),
            "resumptions": sum(1 for r in view.resumptions if r["run_id"] == manifest["run_id"]),
            "rental": (manifest.get("rental") or {}).get("rental_id"),
        })
    return rows


def trial_rows(view: CampaignView, *, accepted: bool = False, run_id: str | None = None) -> list[dict]:
    """One row per trial in run order (only corpus-accepted ones with ACCEPTED, only RUN_ID's with it)."""
    summary_of = {t["record_id"]: summary for summary in view.variants for t in summary.trials}
    aside = set_aside_in(view)
    rows = []
    for trial in view.trials:
        if (accepted and not trial["corpus_accepted"]) or (run_id is not None and trial["run_id"] != run_id):
            continue
        phase = trial["phases"].get("measured_window") or {}
        window = phase.get("duration_ns")
        rows.append({"trial_id": trial["record_id"], "run_id": trial["run_id"], "configuration": summary_of[trial["record_id"]].label,
                     "repetition": trial["repetition"], "status": trial["status"],
                     "corpus_accepted": trial["corpus_accepted"], "excluded_by": view.excluded.get(trial["record_id"]),
                     "retry_of": trial.get("retry_of"), "retry_of_was": view.retried.get(trial["record_id"]),
                     "left_out": summary_of[trial["record_id"]].left_out(trial),  # why it counts in no figure, or None
                     "measured_window_s": None if window is None else window / 1e9,
                     "measured_window_completed": None if window is None else phase.get("completed", True),
                     # None where the record predates the interference reading: not measured, never clean.
                     "disturbed": is_disturbed(trial) if measured(trial) else None,
                     "set_aside_as_disturbed": trial["record_id"] in aside, **(card_and_set(trial) or {}), **_model(trial)})
    return rows



def _model(trial: dict) -> dict:
    """Return an adaptation trial's time to the validated model and its export's sha256 (nothing for another trial)."""
    block = trial.get(adaptation.BLOCK)
    if not block:
        return {}
    return {"time_to_validated_model_s": adaptation.model_seconds(trial),
            "export_sha256": (block.get("export") or {}).get("sha256")}


def describe_runs(view: CampaignView, rows: list[dict]) -> str:
    """List the runs one a line, with what rental add --run and run --resume need to know."""
    lines = []
    for row in rows:
        statuses = ", ".join(f"{count} {status}" for status, count in sorted(row["statuses"].items())) or "none"
        line = (f"{row['run_id']}: started {records.shown_time(row['started_at'])} on {row['hostname'] or 'an unnamed host'}, {row['hardware']}; "
                f"kind of work {row['kind']}; "
                f"{row['recorded']} of {row['planned']} planned trials recorded ({statuses})")
        if not row["complete"]:
            line += "; unfinished: iteralab run CAMPAIGN.toml --resume continues it"
        if row["resumptions"]:
            line += f"; resumed {row['resumptions']} time(s)"
        if row["rental"]:
            line += f"; tied to rental {row['rental']}"
        lines.append(line)
    return "\n".join(lines) or f"campaign {view.name} has no run yet"


def describe_trials(view: CampaignView, rows: list[dict]) -> str:
    """List the trials one a line: the id deliver and exclude take, its configuration, status and window."""
    lines = []
    for row in rows:
        line = f"{row['trial_id']}  {row['configuration']}  rep {row['repetition']}  {row['status']}"
        if row["corpus_accepted"]:
            line += "  accepted"
        if row["excluded_by"]:
            line += f"  excluded by {row['excluded_by']}"
        if row["retry_of"]:  # the repetition of a disturbed trial (--rerun-disturbed) or of an interrupted one
            line += f"  runs again {row['retry_of_was'] or 'interrupted'} {row['retry_of']}"
        if row["disturbed"]:
            line += "  disturbed: set aside" if row["set_aside_as_disturbed"] else "  disturbed: used (use_disturbed)"
        if row.get("card"):
            line += f"  on {row['card']} (set {row['card_set']})"
        if row["measured_window_s"] is not None and row.get("measured_window_completed") is False:
            # A stopped window's time covers part of the corpus: never printed as if it were the trial's duration.
            line += (f"  window {'interrupted' if row['status'] == 'interrupted' else 'failed'} after "  # a signal; else failed
                     f"{row['measured_window_s']:.3f} s (part of the corpus)")
        elif row["measured_window_s"] is not None:
            line += f"  {row['measured_window_s']:.3f} s"
        if row.get("time_to_validated_model_s") is not None and row.get("export_sha256"):
            line += f"  model {row['export_sha256'][:12]}… in {row['time_to_validated_model_s']:.3f} s"
        lines.append(line)
    return "\n".join(lines) or f"no trial of campaign {view.name} matches"
