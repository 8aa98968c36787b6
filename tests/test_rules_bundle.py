"""Rules of evidence/bundle.py that the mutation run (#62) found no selected test holding."""

import pytest

from iteralab.core.errors import UserError
from iteralab.evidence.bundle import write_bundle
from iteralab.store import records
from tests import factory


def test_a_bundle_of_a_campaign_the_runs_folder_lacks_names_the_campaigns_there_and_writes_nothing(tmp_path):
    """Regression for #62: write_bundle refuses an unknown campaign, listing the campaigns of the folder (or none)."""
    runs, out = tmp_path / "runs", tmp_path / "out" / "nope.zip"
    runs.mkdir()
    with pytest.raises(UserError) as refused:
        write_bundle(campaign="nope", out=out, runs=runs)
    assert str(refused.value) == f"campaign nope has no records in {runs}; campaigns there: none"
    records.append(runs, factory.manifest(campaign="zeta"))
    records.append(runs, factory.manifest(campaign="alpha", run_id="run-2"))
    with pytest.raises(UserError) as refused:
        write_bundle(campaign="nope", out=out, runs=runs)
    assert str(refused.value) == f"campaign nope has no records in {runs}; campaigns there: alpha, zeta"
    assert not out.exists() and not out.parent.exists()
