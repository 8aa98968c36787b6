"""Rules of store/trials.py that the mutation run (#62) found no selected test holding."""

import pandas as pd

from iteralab.store import adaptation, reading
from iteralab.store.trials import (
    CSV_COLUMNS,
    NOT_RECORDED,
    OBJECT_COLUMNS,
    UNREADABLE,
    VariantSummary,
    initialisation,
    initialised_runs,
    left_out_words,
    phases_of,
    trial_table,
    trials_csv,
)
from iteralab.store.views import campaign_views
from tests import blocks
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
