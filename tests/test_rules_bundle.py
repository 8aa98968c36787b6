"""Rules of evidence/bundle.py that the mutation run (#62) found no selected test holding."""

import hashlib
import json
import zipfile

import pytest

from iteralab.core.errors import CampaignFailed, UserError
from iteralab.evidence import bundle
from iteralab.evidence.bundle import write_bundle
from iteralab.store import records
from iteralab.store.reading import Loaded
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


def _campaign(runs, campaign, **manifest):
    made = factory.manifest(campaign=campaign, run_id=f"run-{campaign}", **manifest)
    records.append(runs, made)
    records.append(runs, factory.trial(made))
    return made


def test_the_bundle_of_a_question_asked_again_names_the_revision_it_asks_again(tmp_path):
    """Regression for #62: write_bundle ties a revision to the one it asks again by that one's manifest, as a site
    build does (data/question.json); the first revision's bundle has none."""
    runs = tmp_path / "runs"
    first = _campaign(runs, "first")
    _campaign(runs, "second", decision={"asks_again": "first"})
    out, _ = write_bundle(campaign="second", out=tmp_path / "second.zip", runs=runs)
    with zipfile.ZipFile(out) as archive:
        question = json.loads(archive.read("second-evidence/data/question.json"))
    assert (question["question"], question["asks_again"], question["asked_manifest"]["record_id"]) == (
        "first", "first", first["record_id"])
    out, _ = write_bundle(campaign="first", out=tmp_path / "first.zip", runs=runs)
    with zipfile.ZipFile(out) as archive:
        assert not any(name.endswith("question.json") for name in archive.namelist())


def test_a_campaign_whose_view_failed_is_not_bundled_and_its_failure_is_named(tmp_path, monkeypatch):
    """Regression for #62: the campaign's failure, with its name and reason, instead of a bundle (records that passed
    no validation, as a reader's bug would hand them over)."""
    monkeypatch.setattr(bundle, "load", lambda runs: Loaded(records=[{"campaign": "bad", "kind": "trial",
                                                                       "record_id": "t"}]))
    with pytest.raises(CampaignFailed) as failed:
        write_bundle(campaign="bad", out=tmp_path / "bad.zip", runs=tmp_path)
    assert failed.value.campaign == "bad" and failed.value.reason.startswith("KeyError: 'created_at' at ")
    assert not (tmp_path / "bad.zip").exists()


def test_a_bundle_that_cannot_be_written_says_so_in_one_line(tmp_path):
    """Regression for #62: the write's refusal names the evidence bundle and its path."""
    runs = tmp_path / "runs"
    _campaign(runs, "camp")
    (tmp_path / "a-file").write_text("not a folder")
    out = tmp_path / "a-file" / "camp.zip"
    with pytest.raises(UserError) as refused:
        write_bundle(campaign="camp", out=out, runs=runs)
    assert str(refused.value).startswith(f"could not write the evidence bundle {out}: ")


def test_serving_files_are_read_only_from_the_blocks_they_belong_in():
    """Regression for #62: a serving block, files list or digest that is not what its schema says gives no file, or no
    digest: never a crash, never a digest that is not one."""
    log = {"path": "camp/serving/t/engine.log", "sha256": "e" * 64}
    assert bundle._serving_files({"record_id": "t", "serving": "kept"}) == []
    assert bundle._serving_files({"record_id": "t", "serving": {"files": {"engine_log": log, "load_generator": "x"}}}
                                 ) == [("serving/t/engine.log", log["path"], "e" * 64)]
    assert bundle._serving_files({"record_id": "t", "serving": {"files": {"engine_log": {**log, "sha256": "e"}}}}
                                 ) == [("serving/t/engine.log", log["path"], None)]
    assert bundle._serving_files({"record_id": "t", "serving": {"files": {"load_generator": ["x", log]}}}
                                 ) == [("serving/t/engine.log", log["path"], "e" * 64)]


def test_a_bag_lists_the_digests_it_was_given_without_hashing_again():
    """Regression for #62: a payload file already hashed (a site build hashes each once) is listed with that digest."""
    files = bundle.bag_files("camp", {"a.txt": b"a", "b.txt": b"b"}, "2026-12-07", {"a.txt": "f" * 64})
    assert files["manifest-sha256.txt"].decode() == (f"{'f' * 64}  data/a.txt\n"
                                                    f"{hashlib.sha256(b'b').hexdigest()}  data/b.txt\n")


def test_a_bag_names_each_kind_of_work_on_a_line_of_its_own():
    """Regression for #62: where the manifests disagree on the kind of work, bag-info has one Kind-Of-Work line each."""
    info = bundle.bag_files("camp", {"a.txt": b"a"}, "2026-12-07", kinds=("classify", "generate"))["bag-info.txt"]
    assert info.decode().split("\n") == ["Bag-Software-Agent: iteralab", "Bagging-Date: 2026-12-07",
                                         "Kind-Of-Work: classify", "Kind-Of-Work: generate", "External-Identifier: camp",
                                         "Payload-Oxum: 1.1", ""]
