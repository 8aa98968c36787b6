"""Rules of store/views.py and decision/report.py that the mutation run (#62) found no selected test holding: a
campaign whose records cannot be made into its view fails alone, and deciding it says so."""

from decimal import Decimal
from types import SimpleNamespace

import pytest

from iteralab.core.errors import CampaignFailed, UserError
from iteralab.core.language import Text
from iteralab.decision.report import decide_guarded, decision_report
from iteralab.money.catalog import load_catalog
from iteralab.store import records
from iteralab.store.adaptation import NO_MODEL
from iteralab.store.configuration import Configuration
from iteralab.store.reading import Loaded
from iteralab.store.views import CampaignView, _labels, _renamed, campaign_views
from tests import factory


def _views():
    good = factory.manifest(campaign="good")
    # A trial without its times cannot be ordered: the view of its campaign cannot be made (records that passed no
    # validation, as a reader's bug would hand them over).
    return campaign_views(Loaded(records=[{"campaign": "bad", "kind": "trial", "record_id": "t"}, good,
                                          factory.trial(good)]))


def test_a_campaign_whose_view_cannot_be_made_is_an_empty_view_naming_why_and_the_others_go_on():
    """Regression for #62: _guarded_view turns the failure into an empty view with its reason; another campaign's
    view is made as ever."""
    bad, good = _views()
    assert (bad.name, bad.title, bad.manifests, bad.trials, bad.rentals) == ("bad", "bad", (), (), ())
    assert bad.failure.startswith("KeyError: 'created_at' at ")  # and the line it failed at
    assert good.name == "good" and good.failure is None and len(good.trials) == 1


def test_deciding_a_failed_campaign_raises_its_failure_and_the_failed_view_is_never_decided():
    """Regression for #62: decide_guarded raises CampaignFailed naming the campaign and the reason, not a report."""
    bad, good = _views()
    with pytest.raises(CampaignFailed) as failed:
        decide_guarded(bad, load_catalog())
    assert (failed.value.campaign, failed.value.reason) == ("bad", bad.failure)
    assert decide_guarded(good, load_catalog()).campaign == "good"


def test_a_decision_report_of_a_runs_folder_that_is_not_one_says_so(tmp_path):
    """Regression for #62: decision_report refuses a runs path that is not a folder, naming the option."""
    missing = tmp_path / "nowhere"
    with pytest.raises(UserError) as refused:
        decision_report(campaign="camp", runs=missing)
    assert str(refused.value) == f"{missing} is not a folder: pass the runs folder that holds the records (--runs)"


def test_a_decision_report_names_the_campaigns_there_or_decides_the_one_asked_with_the_catalog_given(tmp_path):
    """Regression for #62: decision_report refuses a campaign the folder lacks, naming those there (or none), and
    decides the one asked with the catalog file given, not the shipped one."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with pytest.raises(UserError) as refused:
        decision_report(campaign="camp", runs=runs)
    assert str(refused.value) == f"campaign camp has no records in {runs}; campaigns there: none"
    for campaign in ("zeta", "alpha"):
        manifest = factory.manifest(campaign=campaign, run_id=f"run-{campaign}")
        records.append(runs, manifest)
        records.append(runs, factory.trial(manifest))
    with pytest.raises(UserError) as refused:
        decision_report(campaign="camp", runs=runs)
    assert str(refused.value) == f"campaign camp has no records in {runs}; campaigns there: alpha, zeta"
    prices = tmp_path / "prices.csv"
    prices.write_text(factory.CHEAPER_CATALOG, encoding="utf-8")
    report = decision_report(campaign="zeta", runs=runs, catalog=prices)
    assert (report.campaign, report.catalog_version) == ("zeta", "2026-12-01")


def _view(**parts) -> CampaignView:
    """A view made in code, as campaign_views makes it, with only the PARTS a rule reads."""
    return CampaignView("camp", "camp", parts.pop("manifests", ()), parts.pop("trials", ()), parts.pop("rentals", ()), (),
                        parts.pop("variants", ()), (), **parts)


def test_a_trial_is_resumed_after_the_latest_resumption_of_its_own_run_recorded_before_or_with_it():
    """Regression for #62: resumed_before reads only its run's resumptions, up to the trial's own time included."""
    resumptions = ({"run_id": "run-1", "created_at": "2026-10-01T10:00:00Z", "record_id": "r1"},
                   {"run_id": "run-2", "created_at": "2026-10-01T10:30:00Z", "record_id": "other-run"},
                   {"run_id": "run-1", "created_at": "2026-10-01T11:00:00Z", "record_id": "r2"},
                   {"run_id": "run-1", "created_at": "2026-10-01T12:00:00Z", "record_id": "later"})
    view = _view(resumptions=resumptions)
    assert view.resumed_before({"run_id": "run-1", "created_at": "2026-10-01T11:00:00Z"})["record_id"] == "r2"
    assert view.resumed_before({"run_id": "run-1", "created_at": "2026-10-01T10:59:00Z"})["record_id"] == "r1"
    assert view.resumed_before({"run_id": "run-1", "created_at": "2026-10-01T09:00:00Z"}) is None
    assert view.resumed_before({"run_id": "run-2", "created_at": "2026-10-01T10:45:00Z"})["record_id"] == "other-run"
    assert view.resumed_before({"run_id": "run-3", "created_at": "2026-10-02T00:00:00Z"}) is None


def test_a_record_without_a_void_has_none():
    """Regression for #62: void_of answers None for a record nothing voids, and the void for one that is."""
    view = _view(voids=({"voided_id": "rent-1", "record_id": "void-1"},))
    assert view.void_of("rent-1")["record_id"] == "void-1"
    assert view.void_of("rent-2") is None


def _exclusion_view(recorded_at: str, withdrawn: bool) -> tuple[CampaignView, dict]:
    manifest = factory.manifest()
    trials = [{**factory.trial(manifest, "b1", repetition=k, sequence=k), "created_at": f"2026-10-01T10:00:0{k}Z"}
              for k in (1, 2)]
    summary = SimpleNamespace(label="b1 label", key="b1-key", trials=trials)
    other = SimpleNamespace(label="b8 label", key="b8-key", trials=[])
    exclusion = {"record_id": "ex-1", "rule": "r", "document": "doc.md", "created_at": recorded_at,
                 "checked_configurations": ["b1-key"], "trials": [trials[0]["record_id"]]}
    withdrawals = ({"exclusion_id": "ex-1", "record_id": "w-1"},) if withdrawn else ()
    excluded = {} if withdrawn else {trials[0]["record_id"]: "ex-1"}
    return _view(trials=tuple(trials), variants=(summary, other), exclusions=(exclusion,), withdrawals=withdrawals,
                 excluded=excluded), trials[0]


def test_an_exclusion_row_names_each_configuration_its_key_and_only_the_trials_it_sets_aside():
    """Regression for #62: an exclusion's table lists every configuration by label and key, whether it was checked,
    and the trials it sets aside now; a withdrawn one still lists the trials it named; 'after results' only when it
    was recorded strictly after the last trial."""
    view, first = _exclusion_view("2026-10-02T00:00:00Z", withdrawn=False)
    (row,) = view.exclusion_table()
    assert row["configurations"] == [{"label": "b1 label", "key": "b1-key", "checked": True, "trials": [first["record_id"]]},
                                     {"label": "b8 label", "key": "b8-key", "checked": False, "trials": []}]
    assert (row["after_results"], row["withdrawal"], row["unchecked"]) == (True, None, ["b8 label"])
    last = max(t["created_at"] for t in view.trials)
    assert _exclusion_view(last, withdrawn=False)[0].exclusion_table()[0]["after_results"] is False
    withdrawn, first = _exclusion_view("2000-01-01T00:00:00Z", withdrawn=True)
    (row,) = withdrawn.exclusion_table()
    assert row["configurations"][0]["trials"] == [first["record_id"]] and row["withdrawal"]["record_id"] == "w-1"
    assert row["after_results"] is False
    # set aside by another exclusion that applies: this one lists nothing for it
    view, first = _exclusion_view("2026-10-02T00:00:00Z", withdrawn=False)
    view.excluded[first["record_id"]] = "ex-0"
    assert view.exclusion_table()[0]["configurations"][0]["trials"] == []
    assert _view(exclusions=view.exclusions).exclusion_table()[0]["after_results"] is False  # no trial at all


def test_an_adaptation_campaign_holds_its_optimizer_settings_constant_unless_a_variant_sets_its_own():
    """Regression for #62: the campaign's [adaptation] optimizer settings join each variant's, other [adaptation] keys
    do not; the GPUs of a CPU machine are the word 'none', a Text that a page translates."""
    manifest = factory.manifest()
    manifest["protocol"]["adaptation"] = {"optimizer": "adamw", "learning_rate": 5e-05, "epochs": 3}
    del manifest["environment"]["libraries"]["transformers"]
    variants = (SimpleNamespace(config={"batch_size": 8, "learning_rate": 1e-4}),
                SimpleNamespace(config={"batch_size": 8}))
    compared, constant = _view(manifests=(manifest,), variants=variants).compared_and_constant()
    assert compared["learning_rate"] == ["0.0001", "5e-05"]
    assert constant["optimizer"] == ["adamw"] and "epochs" not in constant and "epochs" not in compared
    (none,) = constant["GPUs"]
    assert isinstance(none, Text) and str(none) == "none"
    # a library the manifest does not list is still a value the page can show, never a bare None
    assert all(isinstance(value, str | Text) for values in (*compared.values(), *constant.values()) for value in values)


ADAPT_TRIAL = {"status": "ok", "adaptation": {"method": "full"}}


def test_an_adaptation_campaign_without_a_validated_model_has_no_cost_per_model_and_says_why():
    """Regression for #62: a campaign whose trials carry the adaptation object counts validated models (unit 'model'),
    and with none its cost per model is undefined with that reason; what the spend includes is said."""
    cost = _view(trials=(ADAPT_TRIAL,), rentals=(factory.rental(),)).cost()
    assert (cost["unit"], cost["deliverables"], cost["cost_per_validated_corpus"]) == ("model", 0, None)
    assert cost["reason"] == f"undefined: {NO_MODEL}"
    assert cost["includes"] == "package spend 47.14 USD only (no other cost recorded)"
    assert cost["spend"] == Decimal("47.14") and cost["currency"] == "USD"
    # one configuration with a validated model: the spend buys one model, whatever the deliverables (none here)
    export = {"path": "camp/models/t-1", "sha256": "b" * 64}
    trained = {"record_id": "t-1", "variant": "b1", "status": "ok", "corpus_accepted": True,
               "adaptation": {"export": export}}
    cost = _view(trials=(trained,), rentals=(factory.rental(),),
                 variants=(SimpleNamespace(counted=[trained]),)).cost()
    assert (cost["deliverables"], cost["cost_per_validated_corpus"], cost["reason"]) == (1, Decimal("47.14"), None)


def test_a_cost_whose_other_costs_cannot_be_added_is_undefined_with_why_and_a_campaign_of_corpora_has_no_unit():
    """Regression for #62: other costs in another currency make the cost undefined with that reason (not 'no accepted
    deliverable'); no rental leaves 'includes' empty; a campaign of corpora names no unit."""
    expense = {"record_id": "e-1", "amount": "100000", "currency": "IDR", "applies_to": "all"}
    cost = _view(rentals=(factory.rental(),), expenses=(expense,)).cost()
    assert cost["reason"] == "undefined: package spend in USD and other costs in IDR are never summed"
    assert cost["cost_per_validated_corpus"] is None and "unit" not in cost
    same = {**expense, "amount": "2.86", "currency": "USD"}
    assert _view(rentals=(factory.rental(),), expenses=(same,)).cost()["includes"] == (
        "package spend 47.14 USD and other costs 2.86 USD (1 item)")
    assert _view(expenses=(same,)).cost()["includes"] is None


def test_a_failed_view_holds_empty_parts_and_a_prediction_file_missing_from_the_folder_is_named():
    """Regression for #62: a view that could not be made has empty deliverables, variants and problems of its own (a
    page iterates them); a view made with the folder's files names a trial whose prediction file is not among them."""
    bad, _ = _views()
    assert (bad.deliverables, bad.variants, bad.problems) == ((), (), ())
    manifest = factory.manifest()
    trial = factory.trial(manifest)
    (view,) = campaign_views(Loaded(records=[manifest, trial]), present=set())
    assert view.missing_predictions == frozenset({trial["record_id"]})
    assert view.problems == (f"camp/predictions/p.csv: prediction file of trial {trial['record_id']} is missing from "
                             "the runs folder",)
    (view,) = campaign_views(Loaded(records=[manifest, trial]), present={"camp/predictions/p.csv"})
    assert view.missing_predictions == frozenset() and view.problems == ()


def test_a_record_naming_configurations_by_their_old_keys_names_them_by_their_keys_now():
    """Regression for #62: old keys are replaced, unknown ones kept as written; a record naming no old key, or 'all'
    (never a list of letters, whatever the keys), is the record itself."""
    current = {"old": "new", "a": "x"}
    record = {"record_id": "e-1", "applies_to": ["old", "unknown"]}
    assert _renamed(record, "applies_to", current) == {"record_id": "e-1", "applies_to": ["new", "unknown"]}
    assert record["applies_to"] == ["old", "unknown"]  # records are read-only
    untouched = {"record_id": "e-2", "applies_to": ["unknown"]}
    assert _renamed(untouched, "applies_to", current) is untouched
    every = {"record_id": "e-3", "applies_to": "all"}
    assert _renamed(every, "applies_to", current) is every


def test_two_configurations_one_name_and_one_machine_are_told_apart_by_the_end_of_their_keys():
    """Regression for #62: where even runtime and driver do not tell two configurations apart (settings differ under
    one variant name), each detailed label gets the last 8 characters of its key."""
    first = Configuration("b1", (("batch_size", 1),), "cpu", None, 0, "Test CPU", 2, "2.13.0", None, None)
    second = Configuration("b1", (("batch_size", 8),), "cpu", None, 0, "Test CPU", 2, "2.13.0", None, None)
    labels = _labels([first, second])
    assert labels == {first: f"{first.label(detailed=True)} · {first.key[-8:]}",
                      second: f"{second.label(detailed=True)} · {second.key[-8:]}"}
    assert len(set(labels.values())) == 2 and all(len(c.key) > 8 for c in (first, second))
    alone = Configuration("b8", (("batch_size", 8),), "cpu", None, 0, "Test CPU", 2, "2.13.0", None, None)
    assert _labels([alone]) == {alone: alone.label()}


def test_a_view_holds_the_runs_resumptions_in_order_and_an_expense_for_all_configurations_names_none():
    """Regression for #62: the view keeps each resumption record, oldest first; an expense that applies to 'all' is no
    problem, one naming a configuration the campaign lacks is."""
    manifest = factory.manifest()
    later = {"kind": "resumption", "campaign": "camp", "record_id": "resumption-2", "run_id": "run-1",
             "created_at": "2026-10-01T12:00:00Z"}
    earlier = {**later, "record_id": "resumption-1", "created_at": "2026-10-01T11:00:00Z"}
    every = {"kind": "expense", "campaign": "camp", "record_id": "expense-1", "created_at": "2026-10-01T10:00:00Z",
             "amount": "10.00", "currency": "USD", "applies_to": "all"}
    stray = {**every, "record_id": "expense-2", "applies_to": ["no-such-key"]}
    (view,) = campaign_views(Loaded(records=[manifest, factory.trial(manifest), later, earlier, every]))
    assert view.resumptions == (earlier, later) and view.problems == () and view.expenses == (every,)
    (view,) = campaign_views(Loaded(records=[manifest, factory.trial(manifest), stray]))
    assert view.problems == ("expense expense-2 names configuration no-such-key, which campaign camp lacks; it is "
                             "added to none",)
