"""The one trial table of a campaign (pandas, a row per trial): trials.csv and the decision's figures read it."""

from __future__ import annotations

from iteralab.store import generation
from iteralab.store.disturbance import disturbance_cells
from iteralab.store.views import CampaignView

PHASES = ("environment_check", "model_load", "compilation", "warmup", "measured_window", "evaluation", "writing_results")
ONE_TIME_PHASES = PHASES[:4]  # paid once per machine, before the measured window
# Every phase a trial record may hold, in the order they run: a kind of work's own phases (a generation trial's prefill
# and decode) come after the measured window, outside it. Records keep their keys sorted, so this order is the one shown.
PHASE_ORDER = (*PHASES[:5], "prefill", "decode", *PHASES[5:])

# trials.csv's columns, in order; the table also holds the numbers the decision groups by (see NUMBERS).
CSV_COLUMNS = ["record_id", "run_id", "created_at", "configuration", "variant", "hardware", "software", "series", "repetition",
               "sequence", "status", "failed_phase", "error", "entries_expected", "entries_completed", "measured_window_s",
               *[f"{phase}_s" for phase in PHASES if phase != "measured_window"],
               "throughput_entries_per_s", "ids_match", "accuracy", "macro_f1", "agreement", "corpus_accepted",
               "predictions_sha256", "protocol_fingerprint", "excluded_by", "exclusion_rule", "retry_of",
               "disturbed", "disturbance"]  # #49: empty for a trial recorded before interference was read
COPIED = ("record_id", "run_id", "created_at", "variant", "series", "repetition", "sequence", "retry_of", "status", "failed_phase", "error",
          "entries_expected", "entries_completed", "throughput_entries_per_s", "corpus_accepted", "protocol_fingerprint")
# trials.csv's columns after those, only in a campaign whose trials carry the generation object (a classification
# campaign's trials.csv keeps its columns and their order): its phases, then its figures.
GENERATION_COLUMNS = ["prefill_s", "decode_s", "output_tokens_per_s", "input_tokens", "output_tokens", "cut_by_max_new_tokens",
                      "stopped_at_eos", "prefill_s_per_batch", "decode_s_per_new_token", "reference_match",
                      "kv_cache_estimate_bytes", "kv_cache_measured_bytes"]
GENERATION_FIGURES = GENERATION_COLUMNS[2:9]
OBJECT_COLUMNS = [*CSV_COLUMNS, *GENERATION_COLUMNS, "configuration_key", "accepted", "has_generation",
                  "set_aside"]  # in no figure: an exclusion names it, or it was disturbed and the protocol does not use it
# then two float columns: window_s and one_time_s


_ORDER = {name: index for index, name in enumerate(PHASE_ORDER)}
_SHARED = frozenset(PHASES)


def phases_of(trial: dict) -> tuple[str, ...]:
    """Return the phases a trial's page shows, in the order they run: every shared phase (one the record lacks is shown
    empty, as not recorded), then its kind's own after the measured window; one this version does not know, by name,
    after those."""
    if _SHARED.issuperset(trial["phases"]):
        return PHASES  # a trial with no phase of its own kind: most of them, thousands per page
    later = _ORDER["evaluation"] - 0.5
    return tuple(sorted(_SHARED | set(trial["phases"]), key=lambda name: (_ORDER.get(name, later), name)))


def trial_table(view: CampaignView):
    """Return one pandas row per trial, in run order, with its configuration: every per-trial figure the site shows."""
    import numpy as np
    import pandas as pd

    # What a configuration adds to each of its trials' rows, worked out once per configuration.
    shared = {id(summary): (summary.label, summary.key, summary.configuration.hardware, summary.configuration.software)
              for summary in view.variants}
    of_trial = {t["record_id"]: shared[id(summary)] for summary in view.variants for t in summary.trials}
    rules = {exclusion["record_id"]: exclusion["rule"] for exclusion in view.exclusions}
    aside = frozenset().union(*(summary.excluded for summary in view.variants))
    cells = np.empty((len(view.trials), len(OBJECT_COLUMNS)), dtype=object)
    windows, one_times = np.full(len(view.trials), np.nan), np.full(len(view.trials), np.nan)
    for index, trial in enumerate(view.trials):
        exclusion = view.excluded.get(trial["record_id"])
        cells[index], windows[index], one_times[index] = _row(trial, of_trial[trial["record_id"]], exclusion, rules.get(exclusion),
                                                              trial["record_id"] in aside)
    # One object block keeps each cell as the record holds it (an int stays an int beside an empty cell in the CSV);
    # built whole, it costs a tenth of a column-by-column frame, which matters at a thousand campaigns per build.
    table = pd.DataFrame(cells, columns=OBJECT_COLUMNS, copy=False)
    table["window_s"], table["one_time_s"] = windows, one_times
    return table


def _row(trial: dict, configuration: tuple, exclusion: str | None, rule: str | None,
         aside: bool) -> tuple[tuple, float, float]:
    phases = trial["phases"]
    overall = (trial.get("quality") or {}).get("overall") or {}
    ok = trial["status"] == "ok"
    one_time = [phases.get(name, {}).get("duration_ns") for name in ONE_TIME_PHASES]
    label, key, hardware, software = configuration
    cells = {
        **{name: trial.get(name) for name in COPIED},
        **{f"{phase}_s": _seconds(phases.get(phase, {}).get("duration_ns")) for phase in PHASES},
        "configuration": label, "configuration_key": key, "hardware": hardware, "software": software,
        "ids_match": (trial.get("id_check") or {}).get("ids_match"),
        "accuracy": overall.get("accuracy"), "macro_f1": overall.get("macro_f1"), "agreement": overall.get("agreement"),
        "predictions_sha256": (trial.get("predictions") or {}).get("sha256"),
        "accepted": bool(trial["corpus_accepted"]),
        "excluded_by": exclusion, "exclusion_rule": rule, **_generation_cells(trial, phases, overall),
        **disturbance_cells(trial), "set_aside": aside,
    }
    window = phases["measured_window"]["duration_ns"] / 1e9 if ok else float("nan")
    # A phase skipped on purpose (no compilation) has no duration: it adds nothing to a one-time cost.
    once = sum(value for value in one_time if value is not None) / 1e9 if ok else float("nan")
    return tuple(cells[name] for name in OBJECT_COLUMNS), window, once


def _generation_cells(trial: dict, phases: dict, overall: dict) -> dict:
    """Return the cells only a trial with the generation object fills (None in every other trial's row)."""
    block = trial.get(generation.BLOCK) or {}
    if not block and "prefill" not in phases and "decode" not in phases:
        return _NO_GENERATION  # a classification trial: made once, not once per row of a thousand campaigns
    kv = block.get("kv_cache") or {}
    return {"prefill_s": _seconds(phases.get("prefill", {}).get("duration_ns")),
            "decode_s": _seconds(phases.get("decode", {}).get("duration_ns")),
            **{name: block.get(name) for name in GENERATION_FIGURES}, "reference_match": overall.get("reference_match"),
            "kv_cache_estimate_bytes": kv.get("estimate_bytes"), "kv_cache_measured_bytes": kv.get("measured_bytes"),
            "has_generation": bool(block)}


_NO_GENERATION = {**dict.fromkeys(GENERATION_COLUMNS), "has_generation": False}


def _seconds(nanoseconds) -> str | None:
    return None if nanoseconds is None else f"{nanoseconds / 1e9:.6f}"


def trials_csv(table) -> str:
    """Write the table's trials.csv: one row per trial in run order, missing values as empty cells."""
    import csv
    import io

    # The csv module over the object block writes what pandas' to_csv wrote (each cell as str, None empty, quoted
    # only where needed) in a tenth of its time, which counted at a thousand campaigns per build.
    columns = [*CSV_COLUMNS, *GENERATION_COLUMNS] if table["has_generation"].any() else CSV_COLUMNS
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    cells = table.to_numpy(dtype=object)[:, :len(columns)] if list(table.columns[:len(columns)]) == columns \
        else table[columns].to_numpy(dtype=object)  # the table starts with them (faster than selecting them)
    writer.writerows(["" if cell is None or cell != cell else cell for cell in row] for row in cells)  # None, NaN: empty
    return buffer.getvalue()
