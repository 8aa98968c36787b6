"""Rules of evidence/bundle.py that the mutation run (#62) found no selected test holding."""

import hashlib
import io
import json
import zipfile
import zlib
from types import SimpleNamespace
from urllib.parse import quote

import pytest

from iteralab.core import language
from iteralab.core.errors import CampaignFailed, UserError
from iteralab.decision.report import decide
from iteralab.decision.text import report_dict
from iteralab.evidence import bundle
from iteralab.evidence.bundle import write_bundle
from iteralab.money.catalog import parse_catalog
from iteralab.store import reading, records
from iteralab.store.reading import Loaded
from iteralab.store.views import CampaignView, campaign_views
from tests import factory
from tests.test_signing import _key


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
    assert question["asked_manifest_file"] == f"data/manifests/{first['record_id']}.json in first's evidence bundle"
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


def test_an_adaptation_bundle_lists_every_export_and_each_configurations_model_and_says_where_the_weights_are():
    """Regression for #62: models/exports.json holds every successful trial's export, the validated model of each
    configuration (None where it has none) and that the weights are not in the bundle; models/README.txt says where
    they are and how to check them, word for word; a campaign of corpora has neither file."""
    export = {"path": "camp/models/t-1", "method": "lora", "files": [{"name": "adapter.bin", "bytes": 3,
                                                                      "sha256": "a" * 64}], "sha256": "b" * 64}
    good = {"record_id": "t-1", "variant": "b8", "status": "ok", "corpus_accepted": True,
            "adaptation": {"export": export}}
    failed = {"record_id": "t-2", "variant": "b1", "status": "oom", "corpus_accepted": False, "adaptation": {}}
    variants = (SimpleNamespace(label="b8 label", counted=[good]), SimpleNamespace(label="b1 label", counted=[failed]))
    view = CampaignView("camp", "camp", (), (good, failed), (), (), variants, ())
    files = bundle._models(view)
    assert sorted(files) == ["models/README.txt", "models/exports.json"]
    assert json.loads(files["models/exports.json"]) == {
        "exports": [{"trial_id": "t-1", "variant": "b8", "accepted": True, **export}],
        "validated_models": {"b8 label": {"trial_id": "t-1", **export}, "b1 label": None},
        "weights_in_this_bundle": False}
    assert files["models/README.txt"].decode() == (
        "The exported models (the fine-tuned weights, or the LoRA adapter alone) are not in this bundle: they are kept "
        "beside the runs folder, under the path each export names (CAMPAIGN/models/TRIAL_ID). exports.json lists every "
        "successful trial's export with each file's bytes and sha256, and the sha256 over them (the sha256sum lines of "
        "its files, sorted by name), so an archivist can check a model kept apart against these records: sha256sum its "
        "files and compare. validated_models names, per configuration, the model that counts in the decision: one at "
        "most, whatever its repetitions.\n")
    assert bundle._models(CampaignView("camp", "camp", (), ({**failed, "adaptation": None},), (), (), (), ())) == {}


def test_the_index_lists_each_file_with_a_quoted_link_its_escaped_name_its_size_in_the_language_and_its_sha256():
    """Regression for #62: the bundle index's rows, written outside Jinja, link by the quoted path (its slashes kept),
    show the name escaped and the size grouped as the language groups it."""
    listing = [{"path": "data/a b/c&d.txt", "size": 12345, "sha256": "ab" * 32},
               {"path": "data/e.json", "size": 7, "sha256": "cd" * 32}]
    english = ('<tr><td><a href="data/a%20b/c%26d.txt">data/a b/c&amp;d.txt</a></td><td class="num">12,345</td>'
               f'<td><code>{"ab" * 32}</code></td></tr>'
               '<tr><td><a href="data/e.json">data/e.json</a></td><td class="num">7</td>'
               f'<td><code>{"cd" * 32}</code></td></tr>')
    assert str(bundle._file_rows(listing)) == english
    with language.speaking("id"):
        assert str(bundle._file_rows(listing)) == english.replace("12,345", "12.345")


def test_a_payload_uses_what_the_build_gives_it_and_hands_back_each_files_sha256(tmp_path):
    """Regression for #62: a site build's table, charts and notes are used as given, not made again (a note in the
    folder that the build did not load is not carried), and DIGESTS receives the sha256 of every file but the index."""
    runs, notes = tmp_path / "runs", tmp_path / "notes"
    _campaign(runs, "camp")
    notes.mkdir()
    (notes / "n.md").write_text("---\ncampaign: camp\ndecision: d\ndate: 2026-10-01\nauthor: a\n---\nbody\n")
    (view,) = campaign_views(reading.load(runs))
    digests = {}
    files = bundle.payload(view, runs, notes, None, table_csv="given,table\n", charts=[], loaded_notes=[],
                           digests=digests)
    assert files["trials.csv"] == b"given,table\n"
    assert not any(name.startswith(("charts/", "notes/")) for name in files)
    assert digests == {name: hashlib.sha256(data).hexdigest() for name, data in files.items() if name != "index.html"}
    made = bundle.payload(view, runs, notes, None)
    assert any(name.startswith("charts/") for name in made) and "notes/n.md" in made


def test_a_document_without_a_sha256_has_no_place_and_the_files_after_it_are_still_found():
    """Regression for #62: a receipt or document is filed under its sha256; one without is left out, alone."""
    unhashed = {"kind": "exclusion", "document": {"path": "camp/documents/why.md", "sha256": None}}
    rental = {"kind": "rental", "receipt": {"path": "camp/receipts/r 1.pdf", "sha256": "ab" * 32}}
    assert bundle.references([unhashed, rental]) == [(f"receipts/{'ab' * 8}/r 1.pdf", "camp/receipts/r 1.pdf", "ab" * 32)]


def test_an_entry_given_in_several_chunks_is_deflated_whole_and_an_empty_one_is_empty():
    """Regression for #62: _Deflate joins every chunk it was given (stream-zip may hand an entry in pieces, or none)."""
    def inflated(*chunks):
        deflate = bundle._Deflate({})
        assert all(deflate.compress(chunk) == b"" for chunk in chunks)
        return zlib.decompress(deflate.flush(), -zlib.MAX_WBITS)

    assert inflated(b"ab", b"cd", b"ef") == b"abcdef"
    assert inflated(b"ab", b"cd") == b"abcd"
    assert inflated(b"abc") == b"abc"
    assert inflated() == b""


def test_a_campaign_bundle_is_made_of_the_parts_the_build_gives_it(tmp_path):
    """Regression for #62: campaign_bundle passes the build's catalog, report, table, charts and notes on to the bag,
    and the bag's index lists every file of it."""
    runs, notes = tmp_path / "runs", tmp_path / "notes"
    _campaign(runs, "camp")
    notes.mkdir()
    (notes / "n.md").write_text("---\ncampaign: camp\ndecision: d\ndate: 2026-10-01\nauthor: a\n---\nbody\n")
    (view,) = campaign_views(reading.load(runs))
    small = parse_catalog(factory.CATALOG_HEADER + "v9,rtx-4090,RTX 4090,1,24,3,47.14,USD\n", "small.csv")
    report = decide(view, parse_catalog(factory.CATALOG_HEADER + "v8,b200,B200,1,,7,2071.00,USD\n", "other.csv"))
    zipped = bundle.campaign_bundle(view, runs=runs, notes=notes, loaded_notes=[], price_catalog=small,
                                    table_csv="given,table\n", report=report, charts=[])
    with zipfile.ZipFile(io.BytesIO(zipped)) as archive:
        data = {name.removeprefix("camp-evidence/data/"): archive.read(name) for name in archive.namelist()
                if name.startswith("camp-evidence/data/")}
    assert data["trials.csv"] == b"given,table\n"
    assert data["catalog.csv"].decode() == bundle._catalog_csv(small)
    assert json.loads(data["decision.json"]) == json.loads(json.dumps(report_dict(report), default=str))
    assert not any(name.startswith(("charts/", "notes/")) for name in data)
    assert "Kind-Of-Work: classify\n" in archive_bag_info(zipped)
    index = data["index.html"].decode()
    assert all(f'<a href="{quote(name, safe="/")}">' in index for name in data if name != "index.html")


def test_write_bundle_asks_for_a_keys_passphrase_unless_told_to_be_quiet(tmp_path, monkeypatch):
    """Regression for #62: write_bundle is not quiet by default: a key with a passphrase is asked for it (here through
    SSH_ASKPASS, as a desktop would) and signs; with quiet=True it is refused before anything is written."""
    runs = tmp_path / "runs"
    _campaign(runs, "camp")
    locked = _key(tmp_path / "keys", passphrase="correct horse")
    askpass = tmp_path / "askpass.sh"
    askpass.write_text("#!/bin/sh\necho 'correct horse'\n")
    askpass.chmod(0o755)
    monkeypatch.setenv("SSH_ASKPASS", str(askpass))
    monkeypatch.setenv("SSH_ASKPASS_REQUIRE", "force")
    out, _ = write_bundle(campaign="camp", out=tmp_path / "signed.zip", runs=runs, sign_key=locked)
    with zipfile.ZipFile(out) as archive:
        assert any(name.startswith("camp-evidence/signatures/") for name in archive.namelist())
    with pytest.raises(UserError, match="has a passphrase, and --quiet asks for none"):
        write_bundle(campaign="camp", out=tmp_path / "quiet.zip", runs=runs, sign_key=locked, quiet=True)
    assert not (tmp_path / "quiet.zip").exists()


def archive_bag_info(zipped: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(zipped)) as archive:
        return archive.read("camp-evidence/bag-info.txt").decode()
