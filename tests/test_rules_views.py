"""Rules of store/views.py and decision/report.py that the mutation run (#62) found no selected test holding: a
campaign whose records cannot be made into its view fails alone, and deciding it says so."""

import pytest

from iteralab.core.errors import CampaignFailed, UserError
from iteralab.decision.report import decide_guarded, decision_report
from iteralab.money.catalog import load_catalog
from iteralab.store import records
from iteralab.store.reading import Loaded
from iteralab.store.views import campaign_views
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
