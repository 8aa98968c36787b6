"""A campaign's trials: each configuration's, summed (VariantSummary), and the one trial table (pandas, a row per trial)
that trials.csv and the decision's figures read."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from iteralab.core.language import Joined, Recorded, Text
from iteralab.store import adaptation, generation
from iteralab.store.configuration import Configuration
from iteralab.store.disturbance import disturbance_cells

# Why a trial counts in no figure, by its name (#60): an exclusion's rule, disturbed, an error or OOM, a signal.
LEFT_OUT = {"excluded": Text("{count} excluded"), "disturbed": Text("{count} disturbed"), "failed": Text("{count} failed"),
            "interrupted": Text("{count} interrupted")}


def left_out_words(counts: dict[str, int]) -> Text:
    """Say how many trials count in no figure, each reason by its name: '4 disturbed', '1 excluded, 3 disturbed'."""
    return Joined(", ", [Text(LEFT_OUT[reason].message, count=count) for reason, count in counts.items()])


def window_figures(seconds) -> tuple[float | None, float | None, float | None]:
    """Return (min, median, max) of measured windows in seconds, or three Nones when there is none."""
    return (min(seconds), statistics.median(seconds), max(seconds)) if seconds else (None, None, None)


@dataclass(frozen=True)
class VariantSummary:
    """One configuration's trials (a variant on one kind of hardware and software) in run order and their sums."""

    name: str
    series: str
    config: dict
    trials: tuple[dict, ...]
    configuration: Configuration | None = None
    label: str = ""
    durations: tuple[tuple[str, float], ...] = ()
    ok: int = 0  # successful trials that count: those set aside (excluded, disturbed) are left out of every figure
    failed: int = 0
    accepted: int = 0
    excluded: frozenset[str] = frozenset()  # its trials set aside by an active exclusion (kept, shown, not counted)
    disturbed: frozenset[str] = frozenset()  # those measured as disturbed that the protocol does not use (#49), apart
    _peaks: dict = field(default_factory=dict, repr=False, compare=False)  # a cache of figures, filled on first use

    def __post_init__(self):
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @property
    def key(self) -> str:
        """Return the configuration's stable identifier (HTML ids, CSV cells)."""
        return self.configuration.key if self.configuration else self.name

    set_aside = property(lambda self: self.excluded | self.disturbed)  # in no figure whatever their status

    @property
    def counted(self) -> tuple[dict, ...]:
        """Return the trials every figure is read from: all but those set aside, in run order."""
        aside = self.set_aside
        return tuple(t for t in self.trials if t["record_id"] not in aside) if aside else self.trials

    def left_out(self, trial: dict) -> str | None:
        """Name why TRIAL is in no figure of the measured window (LEFT_OUT), or None where it counts."""
        if trial["record_id"] in self.excluded or trial["record_id"] in self.disturbed:
            return "excluded" if trial["record_id"] in self.excluded else "disturbed"
        return None if trial["status"] == "ok" else "interrupted" if trial["status"] == "interrupted" else "failed"

    def left_out_counts(self, *, successes: bool = False) -> dict[str, int]:
        """Count its trials (only the successful ones with SUCCESSES) per reason they count in no figure, in LEFT_OUT's order."""
        found = [reason for t in self.trials if (reason := self.left_out(t)) and (t["status"] == "ok" or not successes)]
        return {reason: found.count(reason) for reason in LEFT_OUT if reason in found}

    excluded_successes = property(lambda self: self.left_out_counts(successes=True).get("excluded", 0))
    disturbed_successes = property(lambda self: self.left_out_counts(successes=True).get("disturbed", 0))

    @property
    def raw_durations(self) -> list[tuple[str, float, str | None]]:
        """Return (trial id, measured window s, why it is set aside or None) of every successful trial in run order."""
        return [(t["record_id"], t["phases"]["measured_window"]["duration_ns"] / 1e9, self.left_out(t))
                for t in self.trials if t["status"] == "ok"]

    seconds = property(lambda self: [value for _, value in self.durations])

    # The measured window's figures over the counted successes, None where there is none.
    minimum = property(lambda self: window_figures(self.seconds)[0])
    median = property(lambda self: window_figures(self.seconds)[1])
    maximum = property(lambda self: window_figures(self.seconds)[2])

    @property
    def throughput(self) -> float | None:
        rates = [t["throughput_entries_per_s"] for t in self.counted if t["status"] == "ok" and t.get("throughput_entries_per_s")]
        return statistics.median(rates) if rates else None

    @property
    def ids_match(self) -> bool | None:
        checks = [t["id_check"]["ids_match"] for t in self.counted if t.get("id_check")]
        return all(checks) if checks else None

    def verdicts(self) -> list[dict]:
        """Per threshold: the metric, threshold, median value over ok trials and passes/ok."""
        rows = {}
        for trial in self.counted:
            for verdict in (trial.get("quality") or {}).get("verdicts", []):
                row = rows.setdefault(verdict["metric"], {"metric": verdict["metric"], "threshold": verdict["threshold"],
                                                          "values": [], "passed": 0, "judged": 0, "reason": verdict["reason"]})
                row["judged"] += 1
                row["passed"] += verdict["passed"]
                if verdict["value"] is not None:
                    row["values"].append(verdict["value"])
        for row in rows.values():
            row["median"] = statistics.median(row["values"]) if row["values"] else None
        return [rows[key] for key in sorted(rows)]

    def peak(self, key: str) -> tuple[int | None, str | None]:
        """Highest value of a per-phase memory counter over ok trials, or None with the reason."""
        # Asked for by several tables and charts of the same page; the trials no longer change by then.
        if key not in self._peaks:
            self._peaks[key] = self._peak(key)
        return self._peaks[key]

    def _peak(self, key: str) -> tuple[int | None, str | None]:
        values = [phase[key] for t in self.counted if t["status"] == "ok" for phase in t["phases"].values() if phase.get(key) is not None]
        if values:
            return max(values), None
        if not key.startswith("gpu_"):
            return None, Text("no successful trial measured it")  # a GPU's absence says nothing about host memory
        reasons = {t["memory"].get("gpu_memory_reason") for t in self.trials if t["memory"].get("gpu_memory_reason")}
        # The runner's reasons are sentences of the catalog: a page looks each one up in its language.
        return None, Joined("; ", [Recorded(reason) for reason in sorted(reasons)]) if reasons else Text("no successful trial measured it")

    def bucket_quality(self, metric: str) -> dict[str, float | None]:
        """Median METRIC per bucket over ok trials."""
        per_bucket = {}
        for trial in self.counted:
            for name, scores in ((trial.get("quality") or {}).get("buckets") or {}).items():
                per_bucket.setdefault(name, [])
                if scores.get(metric) is not None:
                    per_bucket[name].append(scores[metric])
        return {name: statistics.median(values) if values else None for name, values in per_bucket.items()}


# What the source points to when a phase fails: where to look before renting a larger card.
POINTS_TO = {
    "model_load": Text("the weights, their format or a temporary allocation while loading"),
    "tokenize": Text("the tokenizer or the corpus text"),
    "forward": Text("the context (tokens per entry) and the concurrency (entries per batch)"),
    "prefill": Text("the context (tokens per entry) and the concurrency (entries per batch)"),
    "decode": Text("the context (tokens per entry and new tokens) and the concurrency (entries per batch)"),
    "backward": Text("the microbatch, the activations it keeps for the backward pass, or the compute strategy (gradient "
                     "checkpointing)"),
    "first_forward": Text("the microbatch, the activations it keeps for the backward pass, or the compute strategy "
                          "(gradient checkpointing)"),
    "first_backward": Text("the microbatch, the activations it keeps for the backward pass, or the compute strategy "
                           "(gradient checkpointing)"),
    "first_update": Text("the optimizer state, created at the first update (AdamW: two moments per trainable parameter)"),
    "measured_window": Text("the batch (an adaptation's microbatch) and the activations of its longest entries, or "
                            "memory that grows from one batch or update to the next"),
    "validation": Text("the validation batch (the microbatch) and the context"),
    "export": Text("the disk: the exported model's files"),
}

PHASES = ("environment_check", "model_load", "compilation", "warmup", "measured_window", "evaluation", "writing_results")
ONE_TIME_PHASES = PHASES[:4]  # paid once per machine, before the measured window
# Every phase a trial record may hold, in the order they run: a kind of work's own phases come before the measured
# window (an adaptation's first forward, backward and update) or after it, outside it (a generation trial's prefill and
# decode, an adaptation's validation and export). Records keep their keys sorted, so this order is the one shown.
PHASE_ORDER = (*PHASES[:4], *adaptation.BEFORE_WINDOW, "measured_window", "prefill", "decode", *adaptation.AFTER_WINDOW,
               *PHASES[5:])

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
# And those of a campaign whose trials carry the adaptation object: its phases, its figures over the measured window,
# the time to the validated model, the parameters, the memory estimate beside the measured peaks, the export's hash.
ADAPTATION_COLUMNS = ["first_forward_s", "first_backward_s", "first_update_s", "validation_s", "export_s", "method",
                      "microbatch", "accumulation", "effective_batch", "updates", "updates_per_s", "train_examples_per_s",
                      "train_tokens_per_s", "time_to_validated_model_s", "trainable_parameters", "total_parameters",
                      "memory_estimate_total_bytes", "gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes",
                      "host_peak_rss_bytes", "export_sha256", "export_bytes", "first_update_loss", "validation_loss"]
ADAPTATION_FIGURES = ("updates", "updates_per_s", "train_examples_per_s", "train_tokens_per_s", "time_to_validated_model_s")
# And those of a campaign run one trial per card at the same time ([placement] per_card): the card a record ran on and
# the set it ran in (a set's cards share its window), so that a spreadsheet can group them as the decision does.
PER_CARD_COLUMNS = ["card", "card_set"]
# set_aside is in no figure: an exclusion names the trial, or it was disturbed and the protocol does not use it.
OBJECT_COLUMNS = [*CSV_COLUMNS, *GENERATION_COLUMNS, *ADAPTATION_COLUMNS, *PER_CARD_COLUMNS, "configuration_key", "accepted",
                  "has_generation", "has_adaptation", "has_per_card", "set_aside"]
# then two float columns, what the decision reads: window_s, the seconds of one useful unit (a corpus's measured window;
# an adaptation's time to the validated model), and one_time_s, the one-time seconds that unit does not hold (for a
# model: the environment check and the compilation, its time holding the load and the first steps), plus CUDA's
# initialisation, once per run, where the trial's manifest records it (see initialisation)

CUDA_INITIALISATION = Text("CUDA initialisation (once per process)")
NOT_RECORDED = Text("not recorded: this run's manifest has no device_initialisation (written before it was timed), so "
                    "nothing is counted for it")
UNREADABLE = Text("not counted: the manifest's device_initialisation.duration_ns is not a number of nanoseconds")


_ORDER = {name: index for index, name in enumerate(PHASE_ORDER)}
_SHARED = frozenset(PHASES)
_ADAPTING = frozenset(adaptation.BEFORE_WINDOW)


def phases_of(trial: dict) -> tuple[str, ...]:
    """Return the phases a trial's page shows, in the order they run: every shared phase (one the record lacks is shown
    empty, as not recorded), then its kind's own after the measured window; one this version does not know, by name,
    after those. An adaptation trial has no warm-up row: its first forward, backward and update stand in its place."""
    if _SHARED.issuperset(trial["phases"]):
        return PHASES  # a trial with no phase of its own kind: most of them, thousands per page
    later = _ORDER["evaluation"] - 0.5
    shared = _SHARED - {"warmup"} if _ADAPTING.intersection(trial["phases"]) else _SHARED
    return tuple(sorted(shared | set(trial["phases"]), key=lambda name: (_ORDER.get(name, later), name)))


def initialisation(manifest: dict | None) -> dict:
    """Return CUDA's initialisation as a run's manifest records it: its seconds (None on a CPU, with the manifest's
    reason), the devices, and whether the manifest has the field at all (a manifest without it: nothing is counted)."""
    found = (manifest or {}).get("device_initialisation")
    if not isinstance(found, dict):
        return {"seconds": None, "reason": NOT_RECORDED, "devices": [], "recorded": False}
    duration = found.get("duration_ns")
    if duration is None:
        return {"seconds": None, "reason": found.get("reason") or NOT_RECORDED, "devices": found.get("devices") or [],
                "recorded": True}
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not 0 <= duration < float("inf"):
        return {"seconds": None, "reason": UNREADABLE, "devices": found.get("devices") or [], "recorded": True}
    return {"seconds": duration / 1e9, "reason": None, "devices": found.get("devices") or [], "recorded": True}


def initialised_runs(manifests) -> dict[str, dict]:
    """Return CUDA's initialisation per manifest id, for the pages, where one of the campaign's manifests has the field;
    nothing for a campaign whose runs all predate it (its pages stay as they were)."""
    found = {manifest["record_id"]: initialisation(manifest) for manifest in manifests}
    return found if any(entry["recorded"] for entry in found.values()) else {}


def trial_table(view):
    """Return one pandas row per trial of a campaign VIEW (store.views.CampaignView), in run order, with its configuration:
    every per-trial figure the site shows."""
    import numpy as np
    import pandas as pd

    # What a configuration adds to each of its trials' rows, worked out once per configuration.
    shared = {id(summary): (summary.label, summary.key, summary.configuration.hardware, summary.configuration.software)
              for summary in view.variants}
    of_trial = {t["record_id"]: shared[id(summary)] for summary in view.variants for t in summary.trials}
    rules = {exclusion["record_id"]: exclusion["rule"] for exclusion in view.exclusions}
    # CUDA's initialisation of each run, counted once in each of its trials' one-time seconds (paid once per process).
    initialised = {manifest["record_id"]: seconds for manifest in (view.manifests if view.trials else ())
                   if (seconds := initialisation(manifest)["seconds"]) is not None}
    aside = frozenset().union(*(summary.set_aside for summary in view.variants))
    cells = np.empty((len(view.trials), len(OBJECT_COLUMNS)), dtype=object)
    windows, one_times = np.full(len(view.trials), np.nan), np.full(len(view.trials), np.nan)
    for index, trial in enumerate(view.trials):
        exclusion = view.excluded.get(trial["record_id"])
        cells[index], windows[index], one_times[index] = _row(trial, of_trial[trial["record_id"]], exclusion, rules.get(exclusion),
                                                              trial["record_id"] in aside)
        one_times[index] += initialised.get(trial.get("manifest_id"), 0.0)  # NaN (a failed trial) stays NaN
    # One object block keeps each cell as the record holds it (an int stays an int beside an empty cell in the CSV);
    # built whole, it costs a tenth of a column-by-column frame, which matters at a thousand campaigns per build.
    table = pd.DataFrame(cells, columns=OBJECT_COLUMNS, copy=False)
    table["window_s"], table["one_time_s"] = windows, one_times
    for kind, column in (("generate", "has_generation"), ("adapt", "has_adaptation")):  # the manifests' kind: its columns
        table[column] = table[column].astype(bool) | (bool(view.trials) and kind in view.kinds)  # no trial reached them (#61)
    return table


def _row(trial: dict, configuration: tuple, exclusion: str | None, rule: str | None,
         aside: bool) -> tuple[tuple, float, float]:
    phases = trial["phases"]
    overall = (trial.get("quality") or {}).get("overall") or {}
    ok = trial["status"] == "ok"
    model = adaptation.model_seconds(trial)
    one_time = [phases.get(name, {}).get("duration_ns") for name in (ONE_TIME_PHASES if model is None else adaptation.OUTSIDE_MODEL)]
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
        **_adaptation_cells(trial, phases), **_per_card_cells(trial),
        **disturbance_cells(trial), "set_aside": aside,
    }
    window = (phases["measured_window"]["duration_ns"] / 1e9 if model is None else model) if ok else float("nan")
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
            "has_generation": True}  # a generation trial by its phases, whatever its outcome: the CSV's columns (#61)


_NO_GENERATION = {**dict.fromkeys(GENERATION_COLUMNS), "has_generation": False}


def _adaptation_cells(trial: dict, phases: dict) -> dict:
    """Return the cells only a trial with the adaptation object fills (None in every other trial's row); a failed
    adaptation trial has its phases up to the one that failed."""
    block = trial.get(adaptation.BLOCK) or {}
    if not block and not _ADAPTING.intersection(phases):
        return _NO_ADAPTATION
    batch, parameters = block.get("effective_batch") or {}, block.get("parameters") or {}
    memory, export = block.get("memory") or {}, block.get("export") or {}
    measured = memory.get("measured") or {}
    return {**{f"{phase}_s": _seconds(phases.get(phase, {}).get("duration_ns"))
               for phase in (*adaptation.BEFORE_WINDOW, *adaptation.AFTER_WINDOW)},
            "method": block.get("method") or (trial.get("variant_config") or {}).get("method"),
            "microbatch": batch.get("microbatch"), "accumulation": batch.get("accumulation"),
            "effective_batch": batch.get("examples"), **{name: block.get(name) for name in ADAPTATION_FIGURES},
            **{name: parameters.get(name) for name in ("trainable_parameters", "total_parameters")},
            "memory_estimate_total_bytes": (memory.get("estimate") or {}).get("total_bytes"),
            **{name: measured.get(name) for name in adaptation.PEAKS},
            "export_sha256": export.get("sha256"), "export_bytes": export.get("bytes"),
            "first_update_loss": (block.get("losses") or {}).get("first_update"),
            "validation_loss": (block.get("losses") or {}).get("validation"), "has_adaptation": True}


_NO_ADAPTATION = {**dict.fromkeys(ADAPTATION_COLUMNS), "has_adaptation": False}


def card_and_set(trial: dict) -> dict | None:
    """Return the card and set of a trial run one per card at the same time ([placement] per_card), else None."""
    found = trial.get("per_card")
    return {"card": found.get("card"), "card_set": found.get("set")} if isinstance(found, dict) else None


def _per_card_cells(trial: dict) -> dict:
    """Return the card and set cells of a per_card trial (None in every other trial's row)."""
    found = card_and_set(trial)
    return _NO_PER_CARD if found is None else {**found, "has_per_card": True}


_NO_PER_CARD = {**dict.fromkeys(PER_CARD_COLUMNS), "has_per_card": False}


def _seconds(nanoseconds) -> str | None:
    return None if nanoseconds is None else f"{nanoseconds / 1e9:.6f}"


def trials_csv(table) -> str:
    """Write the table's trials.csv: one row per trial in run order, missing values as empty cells."""
    import csv
    import io

    # The csv module over the object block writes what pandas' to_csv wrote (each cell as str, None empty, quoted
    # only where needed) in a tenth of its time, which counted at a thousand campaigns per build.
    columns = [*CSV_COLUMNS, *(GENERATION_COLUMNS if table["has_generation"].any() else ()),
               *(ADAPTATION_COLUMNS if table["has_adaptation"].any() else ()),
               *(PER_CARD_COLUMNS if table["has_per_card"].any() else ())]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    cells = table.to_numpy(dtype=object)[:, :len(columns)] if list(table.columns[:len(columns)]) == columns \
        else table[columns].to_numpy(dtype=object)  # the table starts with them (faster than selecting them)
    writer.writerows(["" if cell is None or cell != cell else cell for cell in row] for row in cells)  # None, NaN: empty
    return buffer.getvalue()
