"""The one trial table of a campaign (pandas, a row per trial): trials.csv and the decision's figures read it."""

from __future__ import annotations

from iteralab.store.views import CampaignView

PHASES = ("environment_check", "model_load", "compilation", "warmup", "measured_window", "evaluation", "writing_results")
ONE_TIME_PHASES = PHASES[:4]  # paid once per machine, before the measured window

# trials.csv's columns, in order; the table also holds the numbers the decision groups by (see NUMBERS).
CSV_COLUMNS = ["record_id", "run_id", "created_at", "configuration", "variant", "hardware", "software", "series", "repetition",
               "sequence", "status", "failed_phase", "error", "entries_expected", "entries_completed", "measured_window_s",
               *[f"{phase}_s" for phase in PHASES if phase != "measured_window"],
               "throughput_entries_per_s", "ids_match", "accuracy", "macro_f1", "agreement", "corpus_accepted",
               "predictions_sha256", "protocol_fingerprint"]
COPIED = ("record_id", "run_id", "created_at", "variant", "series", "repetition", "sequence", "status", "failed_phase", "error",
          "entries_expected", "entries_completed", "throughput_entries_per_s", "corpus_accepted", "protocol_fingerprint")
NUMBERS = ["configuration_key", "accepted", "window_s", "one_time_s"]


def trial_table(view: CampaignView):
    """Return one pandas row per trial, in run order, with its configuration: every per-trial figure the site shows."""
    import pandas as pd

    # What a configuration adds to each of its trials' rows, worked out once per configuration.
    shared = {id(summary): {"configuration": summary.label, "configuration_key": summary.key,
                            "hardware": summary.configuration.hardware, "software": summary.configuration.software}
              for summary in view.variants}
    of_trial = {t["record_id"]: shared[id(summary)] for summary in view.variants for t in summary.trials}
    columns = CSV_COLUMNS + NUMBERS
    rows = [_row(trial, of_trial[trial["record_id"]]) for trial in view.trials]
    # Column by column (pandas builds this far faster than from one dict per row); object columns keep each cell as
    # the record holds it, so an int stays an int beside an empty cell in the CSV.
    data = {name: pd.Series([row[name] for row in rows], dtype=object) for name in columns}
    table = pd.DataFrame(data, columns=columns)
    return table.astype({"window_s": "float64", "one_time_s": "float64"})


def _row(trial: dict, configuration: dict) -> dict:
    phases = trial["phases"]
    overall = (trial.get("quality") or {}).get("overall") or {}
    ok = trial["status"] == "ok"
    one_time = [phases.get(name, {}).get("duration_ns") for name in ONE_TIME_PHASES]
    return {
        **{key: trial.get(key) for key in COPIED},
        **{f"{phase}_s": _seconds(phases.get(phase, {}).get("duration_ns")) for phase in PHASES},
        **configuration,
        "ids_match": (trial.get("id_check") or {}).get("ids_match"),
        "accuracy": overall.get("accuracy"), "macro_f1": overall.get("macro_f1"), "agreement": overall.get("agreement"),
        "predictions_sha256": (trial.get("predictions") or {}).get("sha256"),
        "accepted": bool(trial["corpus_accepted"]),
        "window_s": phases["measured_window"]["duration_ns"] / 1e9 if ok else None,
        # A phase skipped on purpose (no compilation) has no duration: it adds nothing to a one-time cost.
        "one_time_s": sum(value for value in one_time if value is not None) / 1e9 if ok else None,
    }


def _seconds(nanoseconds) -> str | None:
    return None if nanoseconds is None else f"{nanoseconds / 1e9:.6f}"


def trials_csv(table) -> str:
    """Write the table's trials.csv: one row per trial in run order, missing values as empty cells."""
    return table[CSV_COLUMNS].to_csv(index=False, lineterminator="\n")
