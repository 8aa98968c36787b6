"""Rules of store/trials.py that the mutation run (#62) found no selected test holding."""

import math
from dataclasses import replace

import pandas as pd
import pytest

from iteralab.store import adaptation, reading, records
from iteralab.store.trials import (
    _NO_ADAPTATION,
    _NO_GENERATION,
    ADAPTATION_COLUMNS,
    ADAPTATION_FIGURES,
    CSV_COLUMNS,
    GENERATION_COLUMNS,
    GENERATION_FIGURES,
    NOT_RECORDED,
    OBJECT_COLUMNS,
    UNREADABLE,
    VariantSummary,
    _adaptation_cells,
    _generation_cells,
    _per_card_cells,
    _seconds,
    card_and_set,
    initialisation,
    initialised_runs,
    left_out_words,
    phases_of,
    trial_table,
    trials_csv,
)
from iteralab.store.views import campaign_views
from tests import blocks, factory
from tests.test_cache import FIXTURE


def test_the_reasons_trials_count_in_no_figure_are_listed_with_a_comma():
    """Regression for #62: each reason by its name and count, separated as a list is."""
    assert str(left_out_words({"excluded": 1, "disturbed": 3})) == "1 excluded, 3 disturbed"
    assert str(left_out_words({"failed": 2})) == "2 failed"


def test_a_phase_this_version_does_not_know_is_shown_after_the_kinds_own_and_before_the_evaluation():
    """Regression for #62: a phase a later version records (here 'zz_new') keeps its row, after prefill and decode,
    before the evaluation and the writing of results."""
    phases = dict.fromkeys(["environment_check", "model_load", "prefill", "decode", "zz_new", "evaluation"])
    assert phases_of({"phases": phases}) == ("environment_check", "model_load", "compilation", "warmup", "measured_window",
                                             "prefill", "decode", "zz_new", "evaluation", "writing_results")


def test_an_adaptation_trial_shows_its_first_steps_in_place_of_the_warm_up_and_an_unknown_phase_after_its_export():
    """Regression for #62: an adaptation's first forward, backward and update stand in for the warm-up row; its
    validation and export follow the measured window; a phase this version does not know comes after them."""
    phases = dict.fromkeys(["environment_check", "model_load", "first_forward", "first_backward", "first_update",
                            "measured_window", "validation", "export", "zz_new", "evaluation"])
    assert phases_of({"phases": phases}) == (
        "environment_check", "model_load", "compilation", "first_forward", "first_backward", "first_update",
        "measured_window", "validation", "export", "zz_new", "evaluation", "writing_results")


def test_an_empty_cell_of_the_trial_table_is_an_empty_cell_of_trials_csv_whether_none_or_nan():
    """Regression for #62: a table put together from several (pandas fills a missing cell with NaN) writes NaN as it
    writes None, an empty cell, never 'nan'."""
    row = {**dict.fromkeys(OBJECT_COLUMNS), "record_id": "t-1", "accuracy": float("nan"), "macro_f1": 0.5,
           "has_generation": False, "has_adaptation": False, "has_per_card": False}
    header, line = trials_csv(pd.DataFrame([row], columns=OBJECT_COLUMNS)).split("\n")[:2]
    assert header.split(",") == CSV_COLUMNS
    cells = dict(zip(CSV_COLUMNS, line.split(","), strict=True))
    assert (cells["record_id"], cells["accuracy"], cells["macro_f1"], cells["status"]) == ("t-1", "", "0.5", "")


def test_a_configuration_counts_every_trial_left_out_unless_asked_for_its_successes_only():
    """Regression for #62: by default every trial in no figure is counted by its reason, failed ones too."""
    trials = tuple({"record_id": f"t-{index}", "status": status}
                   for index, status in enumerate(("ok", "ok", "oom", "interrupted", "ok")))
    summary = VariantSummary("b1", "s", {}, trials, excluded=frozenset({"t-0"}), disturbed=frozenset({"t-1"}))
    assert summary.left_out_counts() == {"excluded": 1, "disturbed": 1, "failed": 1, "interrupted": 1}
    assert summary.left_out_counts(successes=True) == {"excluded": 1, "disturbed": 1}


def test_cudas_initialisation_is_read_from_a_manifest_as_recorded_or_said_why_not():
    """Regression for #62: a manifest's device_initialisation gives seconds, or the manifest's own reason, or why
    nothing is counted; its devices are kept in every case where it has the field."""
    def of(found):
        return initialisation({"device_initialisation": found})

    assert initialisation(None) == {"seconds": None, "reason": NOT_RECORDED, "devices": [], "recorded": False}
    assert of({"duration_ns": None, "reason": "no CUDA device", "devices": ["cuda:0"]}) == {
        "seconds": None, "reason": "no CUDA device", "devices": ["cuda:0"], "recorded": True}
    assert of({"duration_ns": None}) == {"seconds": None, "reason": NOT_RECORDED, "devices": [], "recorded": True}
    for unreadable in (True, "2", -1, float("inf")):
        assert of({"duration_ns": unreadable, "devices": ["cuda:1"]}) == {
            "seconds": None, "reason": UNREADABLE, "devices": ["cuda:1"], "recorded": True}
    assert of({"duration_ns": 0}) == {"seconds": 0.0, "reason": None, "devices": [], "recorded": True}
    assert of({"duration_ns": 2_500_000_000, "devices": ["cuda:0"]})["seconds"] == 2.5
    assert initialised_runs([{"record_id": "m-1"}, {"record_id": "m-2"}]) == {}
    assert initialised_runs([{"record_id": "m-1"}, {"record_id": "m-2", "device_initialisation": {"duration_ns": 1e9}}]) == {
        "m-1": initialisation(None), "m-2": {"seconds": 1.0, "reason": None, "devices": [], "recorded": True}}


def test_each_trials_quality_figures_are_its_rows_as_recorded():
    """Regression for #62: accuracy, macro-F1 and agreement come from the trial's quality.overall."""
    (view,) = campaign_views(reading.load(FIXTURE))
    table = trial_table(view)
    for trial, (_, row) in zip(view.trials, table.iterrows(), strict=True):
        overall = (trial.get("quality") or {}).get("overall") or {}
        assert (row["accuracy"], row["macro_f1"], row["agreement"]) == (
            overall.get("accuracy"), overall.get("macro_f1"), overall.get("agreement"))
    assert table["accuracy"].notna().sum() >= 10


def test_an_adaptation_trials_useful_seconds_are_its_time_to_the_validated_model():
    """Regression for #62: the decision reads an adaptation trial's window as the time to its validated model, not
    the measured window alone."""
    base, campaign = blocks.BASES["adapt"]
    (view,) = [view for view in campaign_views(reading.load(base)) if view.name == campaign]
    table = trial_table(view)
    ok = [(trial, row) for trial, (_, row) in zip(view.trials, table.iterrows(), strict=True) if trial["status"] == "ok"]
    assert ok
    for trial, row in ok:
        model = adaptation.model_seconds(trial)
        assert model is not None and row["window_s"] == model
        assert model != trial["phases"]["measured_window"]["duration_ns"] / 1e9
        # Its one-time seconds are those the model's time does not hold (a CPU run: no CUDA initialisation to add).
        outside = [trial["phases"].get(name, {}).get("duration_ns") for name in adaptation.OUTSIDE_MODEL]
        assert row["one_time_s"] == sum(value for value in outside if value is not None) / 1e9


def _view_of(kind):
    base, campaign = blocks.BASES[kind]
    (view,) = [view for view in campaign_views(reading.load(base)) if view.name == campaign]
    return view


def test_a_generation_trials_cells_are_its_record_as_written():
    """Regression for #62: prefill and decode seconds from its phases, each figure from its generation object, the
    match with the reference from its quality, the KV cache's estimate and measure: every cell of every trial."""
    view = _view_of("generate")
    table = trial_table(view)
    for trial, (_, row) in zip(view.trials, table.iterrows(), strict=True):
        block, phases = trial["generation"], trial["phases"]
        # seconds as trials.csv writes them, to the microsecond
        assert row["prefill_s"] == f"{phases['prefill']['duration_ns'] / 1e9:.6f}" != "0.000000"
        assert row["decode_s"] == f"{phases['decode']['duration_ns'] / 1e9:.6f}" != "0.000000"
        assert [row[name] for name in GENERATION_FIGURES] == [block[name] for name in GENERATION_FIGURES]
        assert row["reference_match"] == trial["quality"]["overall"]["reference_match"] is not None
        kv = block["kv_cache"]
        assert (row["kv_cache_estimate_bytes"], row["kv_cache_measured_bytes"]) == (kv["estimate_bytes"], kv["measured_bytes"])
        assert kv["estimate_bytes"] != kv["measured_bytes"]
        assert row["has_generation"] is True
    assert not table[GENERATION_FIGURES].isna().any().any()


def test_a_trial_is_a_generation_trial_by_its_generation_object_or_either_of_its_phases():
    """Regression for #62: a trial that failed before its figures still has the generation columns (its phases), and
    one that recorded its figures but no phase too; a classification trial has none."""
    assert _generation_cells({}, {}, {}) is _NO_GENERATION and _NO_GENERATION["has_generation"] is False
    assert set(_NO_GENERATION) == {*GENERATION_COLUMNS, "has_generation"} and not any(
        _NO_GENERATION[name] for name in GENERATION_COLUMNS)
    figures = _generation_cells({"generation": {"output_tokens": 5, "kv_cache": {"estimate_bytes": 7}}}, {}, {})
    assert (figures["output_tokens"], figures["kv_cache_estimate_bytes"], figures["has_generation"]) == (5, 7, True)
    assert figures["prefill_s"] is None
    prefill = _generation_cells({}, {"prefill": {"duration_ns": 2 * 10**9}}, {"reference_match": 0.5})
    assert (prefill["prefill_s"], prefill["decode_s"], prefill["reference_match"], prefill["has_generation"]) == (
        "2.000000", None, 0.5, True)
    decode = _generation_cells({}, {"decode": {"duration_ns": 3 * 10**9}}, {})
    assert (decode["prefill_s"], decode["decode_s"], decode["has_generation"]) == (None, "3.000000", True)


@pytest.mark.parametrize(("kind", "column", "own"), [("generate", "has_generation", ("generation", "prefill", "decode")),
                                                     ("adapt", "has_adaptation", ("adaptation", *adaptation.BEFORE_WINDOW))])
def test_a_campaign_of_a_kind_has_its_columns_though_no_trial_reached_them(kind, column, own):
    """Regression for #62 (and #61): a generate or adapt campaign whose trials all stopped before their own phases
    still writes its kind's columns; a classification campaign writes neither."""
    view = _view_of(kind)
    stopped = tuple({**{key: value for key, value in trial.items() if key not in own},
                     "phases": {name: phase for name, phase in trial["phases"].items() if name not in own}}
                    for trial in view.trials)
    assert trial_table(replace(view, trials=stopped))[column].tolist() == [True] * len(stopped)
    (classified,) = campaign_views(reading.load(FIXTURE))
    table = trial_table(classified)
    assert table["has_generation"].tolist() == table["has_adaptation"].tolist() == [False] * len(classified.trials)


def test_each_trial_row_says_its_exclusion_its_prediction_file_and_its_one_time_seconds_with_cudas_initialisation(tmp_path):
    """Regression for #62: an excluded trial names its exclusion and rule and is set aside; a trial's row holds its
    predictions' sha256 and whether its corpus was accepted; CUDA's initialisation is added to the one-time seconds of
    its own run's trials only; a failed trial's seconds are empty (NaN), and both columns stay floats."""
    timed = factory.manifest()
    timed["device_initialisation"] = {"duration_ns": 2 * 10**9, "devices": ["cuda:0"]}
    other = factory.manifest(run_id="run-2")
    first = factory.trial(timed, seconds=1.0)
    failed = factory.trial(timed, status="error", failed_phase="measured_window", sequence=2, repetition=2)
    plain = factory.trial(other, seconds=2.0, sequence=1, accepted=False)
    excluded = factory.trial(other, seconds=3.0, sequence=2, repetition=2)
    exclusion = records.make_record("exclusion", campaign="camp", run_id="run-x", rule="the host was shared",
                                    trials=[excluded["record_id"]], document={"text": "t"}, checked_configurations=[])
    for record in (timed, other, first, failed, plain, excluded, exclusion):
        records.append(tmp_path, record)
    (view,) = campaign_views(reading.load(tmp_path))
    table = trial_table(view)
    rows = {row["record_id"]: row for row in table.to_dict("records")}
    once = 4 * 1_000_000 / 1e9  # the factory's environment check, model load, compilation and warm-up: 1 ms each
    row = rows[first["record_id"]]
    assert (row["window_s"], row["one_time_s"]) == (1.0, once + 2.0)
    assert (row["predictions_sha256"], row["accepted"], row["set_aside"]) == (factory.SHA, True, False)
    assert pd.isna(row["excluded_by"]) and pd.isna(row["exclusion_rule"])  # a text column's empty cell
    row = rows[plain["record_id"]]
    assert (row["window_s"], row["one_time_s"], row["accepted"]) == (2.0, once, False)
    row = rows[excluded["record_id"]]
    assert (row["excluded_by"], row["exclusion_rule"], row["set_aside"]) == (
        exclusion["record_id"], "the host was shared", True)
    row = rows[failed["record_id"]]
    assert math.isnan(row["window_s"]) and math.isnan(row["one_time_s"]) and pd.isna(row["predictions_sha256"])
    assert row["accepted"] is False
    assert table["window_s"].dtype == table["one_time_s"].dtype == "float64"


def test_a_configuration_without_a_label_is_shown_by_its_variants_name():
    """Regression for #62."""
    assert VariantSummary(name="b8", series="batch", config={}, trials=()).label == "b8"
    assert VariantSummary(name="b8", series="batch", config={}, trials=(), label="batch 8").label == "batch 8"


def test_an_adaptation_trials_cells_are_its_record_as_written():
    """Regression for #62: each phase's seconds, the method (the variant's when the block lacks it), the effective
    batch, the figures, the parameters, the memory estimate beside each measured peak, the export and both losses."""
    block = {"method": "lora", "effective_batch": {"microbatch": 4, "accumulation": 2, "examples": 8},
             **{name: float(index + 1) for index, name in enumerate(ADAPTATION_FIGURES)},
             "parameters": {"trainable_parameters": 10, "total_parameters": 100},
             "memory": {"estimate": {"total_bytes": 1000},
                        "measured": {name: 2000 + index for index, name in enumerate(adaptation.PEAKS)}},
             "export": {"sha256": "e" * 64, "bytes": 22}, "losses": {"first_update": 0.7, "validation": 0.6}}
    own = (*adaptation.BEFORE_WINDOW, *adaptation.AFTER_WINDOW)
    phases = {name: {"duration_ns": (index + 1) * 10**9} for index, name in enumerate(own)}
    cells = _adaptation_cells({"adaptation": block, "variant_config": {"method": "all"}}, phases)
    assert set(cells) == {*ADAPTATION_COLUMNS, "has_adaptation"}
    assert [cells[f"{name}_s"] for name in own] == [f"{index + 1}.000000" for index in range(len(own))]
    assert (cells["method"], cells["microbatch"], cells["accumulation"], cells["effective_batch"]) == ("lora", 4, 2, 8)
    assert [cells[name] for name in ADAPTATION_FIGURES] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert (cells["trainable_parameters"], cells["total_parameters"], cells["memory_estimate_total_bytes"]) == (10, 100, 1000)
    assert [cells[name] for name in adaptation.PEAKS] == [2000, 2001, 2002]
    assert (cells["export_sha256"], cells["export_bytes"], cells["first_update_loss"], cells["validation_loss"]) == (
        "e" * 64, 22, 0.7, 0.6)
    assert cells["has_adaptation"] is True
    unnamed = _adaptation_cells({"adaptation": {"updates": 1}, "variant_config": {"method": "all"}}, {})
    assert (unnamed["method"], unnamed["updates"], unnamed["first_forward_s"], unnamed["has_adaptation"]) == (
        "all", 1, None, True)


def test_a_trial_is_an_adaptation_trial_by_its_adaptation_object_or_its_first_steps():
    """Regression for #62: a trial that stopped in its first forward pass has the adaptation columns; a validation or
    export phase alone does not make one, and a classification trial has none."""
    assert _adaptation_cells({}, {}) is _NO_ADAPTATION and _NO_ADAPTATION["has_adaptation"] is False
    assert set(_NO_ADAPTATION) == {*ADAPTATION_COLUMNS, "has_adaptation"} and not any(
        _NO_ADAPTATION[name] for name in ADAPTATION_COLUMNS)
    for name in adaptation.BEFORE_WINDOW:
        stopped = _adaptation_cells({"variant_config": {"method": "lora"}}, {name: {"duration_ns": 10**9}})
        assert (stopped[f"{name}_s"], stopped["method"], stopped["has_adaptation"]) == ("1.000000", "lora", True)
    assert _adaptation_cells({}, {"validation": {"duration_ns": 1}, "export": {"duration_ns": 1}}) is _NO_ADAPTATION
    real = _view_of("adapt")
    for trial, (_, row) in zip(real.trials, trial_table(real).iterrows(), strict=True):
        exported = trial["adaptation"]["export"]
        assert (row["export_sha256"], row["export_bytes"], row["has_adaptation"]) == (
            exported["sha256"], exported["bytes"], True) and exported["bytes"] > 0


def test_a_per_card_trial_names_its_card_and_set_and_others_none():
    """Regression for #62: a trial run one per card at the same time carries its card and set; any other, none."""
    assert card_and_set({"per_card": {"card": 1, "set": "set-2"}}) == {"card": 1, "card_set": "set-2"}
    assert card_and_set({}) is None and card_and_set({"per_card": "set-2"}) is None
    assert _per_card_cells({"per_card": {"card": 0, "set": "set-1"}}) == {"card": 0, "card_set": "set-1",
                                                                            "has_per_card": True}
    assert _per_card_cells({}) == {"card": None, "card_set": None, "has_per_card": False}
    assert (_seconds(1_500_000_000), _seconds(0), _seconds(None)) == ("1.500000", "0.000000", None)
    assert _seconds(86_400 * 10**9) == "86400.000000"  # a day-long adaptation window, to the microsecond
