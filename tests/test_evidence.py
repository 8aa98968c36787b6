"""Rentals with receipts, deliverables, evidence bundles and their verification."""

from __future__ import annotations

import json
import shutil
import stat
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from iteralab.evidence.verification import verify_bundle
from iteralab.store import reading, records
from tests import factory


def rezip(source, target, change):
    """Copy a zip, passing each (name, bytes) through CHANGE (which may return None to drop it)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = change(info.filename, old.read(info))
            if data is not None:
                new.writestr(info, data)


@pytest.fixture(scope="module")
def measured_once(tiny_model, tmp_path_factory):
    """Run the tiny campaign once for the module: each test gets its own copy of the runs folder (2.4 s a run)."""
    from iteralab.run.runner import run_campaign
    from tests.tiny import corpus_rows, write_campaign, write_corpus

    folder = tmp_path_factory.mktemp("measured")
    corpus = write_corpus(folder / "corpus.jsonl", corpus_rows())
    campaign = write_campaign(folder, tiny_model, corpus, repetitions=2, batch_sizes=(1, 4))
    result = run_campaign(campaign_file=campaign, runs_dir=folder / "runs", quiet=True)
    assert not result.interrupted and all(trial["status"] == "ok" for trial in result.trials)
    return folder / "runs"


@pytest.fixture
def measured(measured_once, tmp_path):
    return shutil.copytree(measured_once, tmp_path / "runs")


@pytest.mark.slow
def test_rental_receipt_deliverable_bundle_and_verify_end_to_end(measured, tmp_path, cli):
    receipt = tmp_path / "reçu de location n°7 (sept).pdf"
    receipt.write_bytes(b"%PDF-1.4 receipt \xe2\x82\xac 47.14")
    code, out, err = cli("rental", "add", "--campaign", "tiny", "--gpu", "rtx-4090", "--lots", "2", "--days", "7",
                         "--start", "2026-09-28T09:00+07:00", "--end", "2026-10-02T09:00+07:00", "--receipt", receipt, "--runs", measured)
    assert code == 0, err
    assert "220.00 USD for 2 GPUs" in out
    rental = reading.load(measured).of_kind("rental")[0]
    assert rental["price_per_lot"] == "110.00" and rental["catalog_version"] == "2026-09-24"
    stored = measured / rental["receipt"]["path"]
    assert stored.name == receipt.name and stored.read_bytes() == receipt.read_bytes()

    trials = reading.load(measured).of_kind("trial")
    accepted = next(t for t in trials if t["corpus_accepted"])
    assert cli("deliver", "--campaign", "tiny", "--trial", accepted["record_id"], "--runs", measured)[0] == 0

    bundle = tmp_path / "evidence.zip"
    code, out, _ = cli("bundle", "tiny", "-o", bundle, "--runs", measured)
    assert code == 0
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
    assert f"tiny-evidence/data/receipts/{rental['receipt']['sha256'][:16]}/{receipt.name}" in names
    assert {"tiny-evidence/bagit.txt", "tiny-evidence/manifest-sha256.txt", "tiny-evidence/data/index.html",
            "tiny-evidence/data/trials.csv", "tiny-evidence/data/catalog.csv", "tiny-evidence/data/protocol.json",
            "tiny-evidence/data/verdicts.json"} <= set(names)
    assert sum(name.startswith("tiny-evidence/data/predictions/") for name in names) == len(trials)
    with zipfile.ZipFile(bundle) as archive:
        built = archive.read("tiny-evidence/bag-info.txt").decode().split("Bagging-Date: ")[1][:10]
    assert cli("verify", bundle) == (0, f"{bundle}: valid (every file present and matching its sha256); not signed (its "
                                        f"checksums prove that it is whole, not who made it); built {built}\n", "")

    prediction = next(name for name in names if "/predictions/" in name)
    altered = tmp_path / "altered.zip"
    rezip(bundle, altered, lambda name, data: (data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]) if name == prediction else data)
    code, out, _ = cli("verify", altered)
    assert code == 1 and prediction.removeprefix("tiny-evidence/") in out and "altered" in out


@pytest.mark.slow
def test_site_links_a_bundle_whose_sha256_it_shows(measured, tmp_path, cli):
    assert cli("build", "--runs", measured, "--out", tmp_path / "site")[0] == 0
    import hashlib

    from bs4 import BeautifulSoup

    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "tiny" / "index.html").read_text(), "html.parser")
    link = page.find(id="bundle").find("a")["href"]
    data = (tmp_path / "site" / "campaigns" / "tiny" / link).read_bytes()
    assert hashlib.sha256(data).hexdigest() in page.find(id="bundle").get_text()
    assert verify_bundle(tmp_path / "site" / "campaigns" / "tiny" / link) == []


@pytest.mark.slow
def test_bundle_bytes_are_deterministic(measured, tmp_path, cli):
    cli("bundle", "tiny", "-o", tmp_path / "one.zip", "--runs", measured)
    cli("bundle", "tiny", "-o", tmp_path / "two.zip", "--runs", measured)
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "one.zip") as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {stat.S_IMODE(i.external_attr >> 16) for i in infos} == {0o644}


@pytest.mark.slow
def test_verify_names_missing_and_unexpected_files(measured, tmp_path, cli):
    cli("bundle", "tiny", "-o", tmp_path / "b.zip", "--runs", measured)
    rezip(tmp_path / "b.zip", tmp_path / "missing.zip", lambda name, data: None if name.endswith("trials.csv") else data)
    code, out, _ = cli("verify", tmp_path / "missing.zip")
    assert code == 1 and "data/trials.csv: missing" in out
    with zipfile.ZipFile(tmp_path / "b.zip") as old, zipfile.ZipFile(tmp_path / "extra.zip", "w") as new:
        for info in old.infolist():
            new.writestr(info, old.read(info))
        new.writestr("tiny-evidence/data/extra.txt", b"slipped in")
    code, out, _ = cli("verify", tmp_path / "extra.zip")
    assert code == 1 and "data/extra.txt: unexpected" in out


@pytest.mark.parametrize(("entry", "why"), [("/etc/evil", "absolute path"), ("bag/../../evil", "path with '..'"),
                                           ("..\\evil", "absolute path"), ("C:/evil", "absolute path")])
def test_zip_slip_entries_are_refused_and_nothing_is_extracted(tmp_path, cli, monkeypatch, entry, why):
    """Regression for #13: watch the folder verify really extracts into (the system temp folder, redirected here)."""
    import tempfile

    extract_root = tmp_path / "a" / "b" / "tmp"  # deep enough that bag/../../evil would land inside tmp_path
    extract_root.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(extract_root))
    bundle = tmp_path / "evil.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("bag/bagit.txt", b"BagIt-Version: 1.0\n")
        archive.writestr(zipfile.ZipInfo(entry), b"owned")
    code, out, _ = cli("verify", bundle)
    assert code == 1 and out.strip().startswith(f"{entry}: refused ({why}); nothing was extracted")
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != bundle]
    assert written == [] and not Path("/etc/evil").exists()


def test_symbolic_links_in_a_bundle_are_refused(tmp_path, cli):
    bundle = tmp_path / "link.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        info = zipfile.ZipInfo("bag/data/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        info.create_system = 3
        archive.writestr(info, "/etc/passwd")
    code, out, _ = cli("verify", bundle)
    assert code == 1 and "symbolic link" in out


def test_verify_of_a_non_zip_is_a_clear_error(tmp_path, cli):
    (tmp_path / "x.zip").write_text("not a zip")
    assert cli("verify", tmp_path / "x.zip")[0:2] == (1, "")


def test_deliverable_is_refused_for_an_unaccepted_trial_and_for_a_corpus_already_delivered(tmp_path, cli):
    runs = tmp_path / "runs"
    manifest = factory.manifest()
    records.append(runs, manifest)
    weak = factory.trial(manifest, "b1", accuracy=0.5, sequence=1)
    good, again = factory.trial(manifest, "b1", sequence=2), factory.trial(manifest, "b1", sequence=3, repetition=2)
    for trial in (weak, good, again):
        records.append(runs, trial)
    code, _, err = cli("deliver", "--campaign", "camp", "--trial", weak["record_id"], "--runs", runs)
    assert code == 1 and "not corpus_accepted" in err and "accuracy 0.5 < 0.7" in err
    assert cli("deliver", "--campaign", "camp", "--trial", good["record_id"], "--runs", runs)[0] == 0
    code, _, err = cli("deliver", "--campaign", "camp", "--trial", again["record_id"], "--runs", runs)
    assert code == 1 and "already delivered" in err and "repetitions are not new deliverables" in err
    assert len(reading.load(runs).of_kind("deliverable")) == 1
    code, _, err = cli("deliver", "--campaign", "camp", "--trial", "trial-nope", "--runs", runs)
    assert code == 1 and "is not a trial of campaign camp" in err


def test_rental_of_an_unlisted_package_is_refused_with_the_options(tmp_path, cli):
    code, _, err = cli("rental", "add", "--campaign", "camp", "--gpu", "rtx-6000-ada", "--lots", "1", "--days", "7",
                       "--start", "2026-09-28T09:00+07:00", "--new-campaign", "--runs", tmp_path / "runs")
    assert code == 1 and "3 days at 55.71 USD per lot" in err
    assert not (tmp_path / "runs").exists()


def test_rental_window_longer_than_the_package_is_refused(tmp_path, cli):
    code, _, err = cli("rental", "add", "--campaign", "camp", "--gpu", "rtx-4090", "--lots", "1", "--days", "3",
                       "--start", "2026-09-28T09:00+07:00", "--end", "2026-10-02T09:00+07:00", "--new-campaign",
                       "--runs", tmp_path / "runs")
    assert code == 1 and "96 h, longer than the 3-day package" in err


def test_rental_add_without_required_options_is_a_usage_error(tmp_path, cli):
    code, _, err = cli("rental", "add", "--campaign", "camp", "--runs", tmp_path)
    assert code == 2 and err == "iteralab rental add: error: Missing option '--gpu'.\n"


def test_rental_list(tmp_path, cli):
    records.append(tmp_path, factory.rental())
    code, out, _ = cli("rental", "list", "--campaign", "camp", "--runs", tmp_path, "--json")
    assert code == 0 and json.loads(out)["rentals"][0]["total"] == "47.14"


def test_two_teams_delivering_one_corpus_count_one_deliverable_after_a_merge(tmp_path, cli):
    """Regression for #13: two copies of a campaign each delivered the same corpus; merged, the site showed
    "Accepted deliverables 2" and 55.00 USD per validated corpus, and check reported nothing."""
    import shutil

    from bs4 import BeautifulSoup

    origin = tmp_path / "origin"
    manifest = factory.manifest("camp", "run-1")
    records.append(origin, manifest)
    trials = [factory.trial(manifest, "b1", repetition=r, sequence=r) for r in (1, 2)]
    for trial in trials:
        records.append(origin, trial)
    records.append(origin, factory.rental("camp", total="110.00", price="110.00", days=7, runs=["run-1"]))
    teams = {}
    for team, trial in zip(("a", "b"), trials, strict=True):
        teams[team] = tmp_path / f"team-{team}"
        shutil.copytree(origin, teams[team])
        records.append(teams[team], factory.deliverable("camp", trial))  # each team delivers the corpus once
    merged = tmp_path / "merged"
    for folder in teams.values():
        shutil.copytree(folder, merged, dirs_exist_ok=True)
    code, out, _ = cli("check", merged)
    assert code == 1 and "repeats the corpus" in out and "counted once" in out
    assert cli("build", "--runs", merged, "--out", tmp_path / "site")[0] == 0
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / "camp" / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert page.find(id="deliverables").get_text(strip=True) == "1"
    # The rental names a CPU run, so it pays for no configuration: no campaign-wide division (#21), the spend is apart.
    assert page.find(id="cost-per-corpus").get_text(strip=True) == "undefined: no configuration has both its own rentals and accepted deliverables"
    assert page.find(id="spend-unlinked").get_text(strip=True).startswith("110.00 USD (1 rental, listed above")


def test_a_bundle_written_from_records_alone_verifies_and_carries_the_catalog_as_listed(tmp_path):
    """Fast: no model, factory records; the bundle's catalog.csv is the catalog file's rows, sorted by GPU and days."""
    import hashlib

    from iteralab.evidence.bundle import write_bundle
    from iteralab.money.catalog import DEFAULT_CATALOG

    runs = tmp_path / "runs"
    manifest = factory.with_corpus_file(runs, factory.manifest())
    for record in (manifest, factory.with_prediction_file(runs, factory.trial(manifest, "b1"))):
        records.append(runs, record)
    bundle, digest = write_bundle(campaign="camp", out=tmp_path / "out" / "camp.zip", runs=runs)
    assert verify_bundle(bundle) == []
    assert digest == hashlib.sha256(bundle.read_bytes()).hexdigest()
    with zipfile.ZipFile(bundle) as archive:
        text = archive.read("camp-evidence/data/catalog.csv").decode("utf-8")
    source = (resources.files("iteralab") / "data" / DEFAULT_CATALOG).read_text(encoding="utf-8")
    header, *rows = source.split("\n")[:-1]
    expected = [header, *sorted(rows, key=lambda row: (row.split(",")[1], int(row.split(",")[5])))]
    assert text == "\n".join(expected) + "\n"
    assert ",b200,B200,2,,7,2071.00,USD" in text  # an unstated memory stays an empty cell, never "None"


def test_bag_names_replace_control_and_line_break_characters_only():
    from iteralab.evidence.bundle import bag_name

    assert bag_name("reçu n°7 (sept) 47,14 €.pdf") == "reçu n°7 (sept) 47,14 €.pdf"  # spaces and accents stay
    assert bag_name("a\tb\nc\rd\x1fe\x85f\u2028g\u2029h\x0bi\x0cj\x1ck.pdf") == "a_b_c_d_e_f_g_h_i_j_k.pdf"
    assert bag_name("") == ""


@pytest.mark.parametrize(("name", "mode", "why"), [
    ("bag/data/x", stat.S_IFREG | 0o644, None), ("bag/data/", stat.S_IFDIR | 0o755, None), ("bag/data/x", 0, None),
    ("a", 0, None), ("a:", 0, "absolute path"), ("ab:c", 0, None), ("C:evil", 0, "absolute path"), ("/x", 0, "absolute path"),
    ("bag/..", 0, "path with '..'"), ("bag/data/l", stat.S_IFLNK | 0o777, "symbolic link"),
    ("bag/data/fifo", stat.S_IFIFO | 0o644, "not a regular file"), ("bag/data/dev", stat.S_IFCHR | 0o644, "not a regular file")])
def test_unsafe_zip_entries_are_named_and_ordinary_ones_pass(name, mode, why):
    from iteralab.evidence.verification import _unsafe

    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    assert _unsafe(info) == why


def test_payload_holds_every_record_input_prediction_receipt_and_note_of_the_campaign(tmp_path):
    """Fast: every file a bundle must carry, and what each holds, from factory records (no model)."""
    from iteralab.evidence.bundle import payload
    from iteralab.ledger.rentals import copy_receipt
    from iteralab.store.views import campaign_views

    runs, notes = tmp_path / "runs", tmp_path / "notes"
    (runs / "camp" / "inputs").mkdir(parents=True)
    (runs / "camp" / "inputs" / "c.jsonl").write_bytes(b'{"id": "e1", "text": "x"}\n')
    (runs / "camp" / "predictions").mkdir()
    (runs / "camp" / "predictions" / "p.csv").write_bytes(b"id,label,score\ne1,pos,0.9\n")
    receipt = tmp_path / "reçu\u2028sept.pdf"
    receipt.write_bytes(b"%PDF receipt")
    manifest = factory.manifest()
    ok = factory.trial(manifest, "b1")
    failed = factory.trial(manifest, "b1", status="error", failed_phase="warmup", sequence=2, repetition=2)
    rental = factory.rental()
    rental["receipt"] = copy_receipt(runs, "camp", receipt)
    other = factory.manifest("other", "run-9")
    for record in (manifest, ok, failed, rental, other):
        records.append(runs, record)
    notes.mkdir()
    (notes / "mine.md").write_text("---\ncampaign: camp\ndecision: Rent b1\nselected_variant: b1\nworkload_covered: 1 text\n"
                                   "date: 2026-10-01\nauthor: Team\n---\n\nWhy.\n", encoding="utf-8")
    (notes / "theirs.md").write_text("---\ncampaign: other\ndecision: Rent\nselected_variant: b1\nworkload_covered: 1\n"
                                     "date: 2026-10-01\nauthor: Team\n---\n\nNot this campaign.\n", encoding="utf-8")
    view = next(v for v in campaign_views(reading.load(runs)) if v.name == "camp")
    files = payload(view, runs, notes, None)
    record_files = sorted((runs / "camp" / "records").glob("*.jsonl"))
    assert len(record_files) == 2  # the run's file and the rental's
    assert sorted(files) == sorted([
        *(f"records/{path.name}" for path in record_files), f"manifests/{manifest['record_id']}.json", "inputs/c.jsonl", "protocol.json",
        "corpus-fingerprint.json", "predictions/p.csv", "verdicts.json", "trials.csv", "catalog.csv", "decision.json",
        "decision.txt", "costs.focus.csv", f"receipts/{rental['receipt']['sha256'][:16]}/reçu_sept.pdf", "notes/mine.md", "index.html",
        *(f"charts/{name}.vl.json" for name in ("durations", "memory", "quality", "projected-hours"))])  # no price: no spend chart
    assert all(files[f"records/{path.name}"] == path.read_bytes() for path in record_files)
    assert json.loads(files[f"manifests/{manifest['record_id']}.json"]) == manifest
    assert files["inputs/c.jsonl"] == b'{"id": "e1", "text": "x"}\n'
    assert json.loads(files["protocol.json"]) == {"protocol_fingerprints": ["a" * 64], "protocol": manifest["protocol"]}
    assert json.loads(files["corpus-fingerprint.json"]) == {manifest["record_id"]: manifest["corpus"]}
    assert files["predictions/p.csv"] == b"id,label,score\ne1,pos,0.9\n"
    label = view.variants[0].label
    assert json.loads(files["verdicts.json"]) == {
        ok["record_id"]: {"variant": "b1", "configuration": label, "status": "ok", "corpus_accepted": True,
                          "id_check": ok["id_check"], "excluded_by": None, "verdicts": ok["quality"]["verdicts"]},
        failed["record_id"]: {"variant": "b1", "configuration": label, "status": "error", "corpus_accepted": False,
                              "id_check": None, "excluded_by": None, "verdicts": None}}
    assert files[f"receipts/{rental['receipt']['sha256'][:16]}/reçu_sept.pdf"] == b"%PDF receipt"
    assert files["notes/mine.md"] == (notes / "mine.md").read_bytes()
    assert json.loads(files["decision.json"])["campaign"] == "camp"
    assert files["decision.txt"].decode("utf-8").endswith("\n")
    assert files["trials.csv"].decode("utf-8").count("\n") == 3  # header and two trials


def test_bag_files_lay_out_a_bagit_bag_with_both_manifests():
    import hashlib

    from iteralab.evidence.bundle import bag_files

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    bag = bag_files("top", {"b.txt": b"bb", "a/x.json": b"{}"}, "2026-09-30")
    assert sorted(bag) == ["bag-info.txt", "bagit.txt", "data/a/x.json", "data/b.txt", "manifest-sha256.txt",
                           "tagmanifest-sha256.txt"]
    assert bag["bagit.txt"] == b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"
    assert bag["bag-info.txt"] == (b"Bag-Software-Agent: iteralab\nBagging-Date: 2026-09-30\nExternal-Identifier: top\n"
                                   b"Payload-Oxum: 4.2\n")
    grouped = bag_files("top-en", {"b.txt": b"bb"}, "2026-09-30", group="top")["bag-info.txt"]
    assert grouped == (b"Bag-Software-Agent: iteralab\nBagging-Date: 2026-09-30\nBag-Group-Identifier: top\n"
                       b"External-Identifier: top-en\nPayload-Oxum: 2.1\n")
    assert bag["manifest-sha256.txt"].decode() == f"{sha(b'{}')}  data/a/x.json\n{sha(b'bb')}  data/b.txt\n"
    assert bag["tagmanifest-sha256.txt"].decode() == "".join(
        f"{sha(bag[name])}  {name}\n" for name in ("bag-info.txt", "bagit.txt", "manifest-sha256.txt"))


def test_zip_entries_are_sorted_regular_files_at_the_zip_epoch():
    import io

    from iteralab.evidence.bundle import zip_bytes

    with zipfile.ZipFile(io.BytesIO(zip_bytes("top", {"b": b"2" * 100, "a/c": b"1"}))) as archive:
        infos = archive.infolist()
        assert [info.filename for info in infos] == ["top/a/c", "top/b"]
        assert archive.read("top/b") == b"2" * 100
    for info in infos:
        assert info.date_time == (1980, 1, 1, 0, 0, 0) and info.create_system == 3
        assert info.external_attr == (stat.S_IFREG | 0o644) << 16 and info.compress_type == zipfile.ZIP_DEFLATED


def test_files_of_the_same_content_are_deflated_once_into_the_bytes_of_deflating_each():
    import io

    from stream_zip import ZIP_32, stream_zip
    from zlib_ng import zlib_ng

    from iteralab.evidence.bundle import ZIP_EPOCH, zip_bytes

    # A variant's repetitions write the same predictions: each content is deflated once per bundle, to the same bytes.
    same, other = b"id,label,score\n" + b"e1,fresh,0.5\n" * 5000, b"id,label,score\n" + b"e1,rotten,0.25\n" * 4000
    alike = same.replace(b"0.5", b"0.7", 1)  # as long as SAME, one figure apart: told apart by content, not by size
    files = {"predictions/t1.csv": same, "predictions/t2.csv": other, "predictions/t3.csv": same, "predictions/t4.csv": alike,
             "empty": b""}
    members = ((f"top/{path}", ZIP_EPOCH, stat.S_IFREG | 0o644, ZIP_32, (files[path],)) for path in sorted(files))
    each = b"".join(stream_zip(members, get_compressobj=lambda: zlib_ng.compressobj(2, zlib_ng.DEFLATED, -zlib_ng.MAX_WBITS),
                               extended_timestamps=False))
    data = zip_bytes("top", files)
    assert data == each
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        assert {info.filename[4:]: archive.read(info) for info in archive.infolist()} == files


def test_campaign_bundle_names_its_top_folder_dates_the_bag_and_reads_the_given_catalog(tmp_path):
    import io

    from iteralab.evidence.bundle import campaign_bundle
    from iteralab.store.views import campaign_views

    runs = tmp_path / "runs"
    manifest = factory.manifest()
    trial = factory.trial(manifest, "b1")
    manifest["created_at"], trial["created_at"] = "2026-09-28T09:00:00Z", "2026-09-30T23:59:59Z"
    for record in (manifest, trial):
        records.append(runs, record)
    prices = factory.price_file(tmp_path / "prices.csv")
    (view,) = campaign_views(reading.load(runs))
    with zipfile.ZipFile(io.BytesIO(campaign_bundle(view, runs=runs, catalog=prices))) as archive:
        assert {name.split("/")[0] for name in archive.namelist()} == {"camp-evidence"}
        assert b"Bagging-Date: 2026-09-30\n" in archive.read("camp-evidence/bag-info.txt")
        assert archive.read("camp-evidence/data/catalog.csv").decode() == factory.CHEAPER_CATALOG
    rentals_only = tmp_path / "rentals-only"
    records.append(rentals_only, factory.rental())
    (view,) = campaign_views(reading.load(rentals_only))
    with zipfile.ZipFile(io.BytesIO(campaign_bundle(view, runs=rentals_only))) as archive:
        assert b"Bagging-Date: 1980-01-01\n" in archive.read("camp-evidence/bag-info.txt")


def test_a_bundle_of_manifests_alone_is_dated_by_them_and_names_itself(tmp_path, monkeypatch):
    import io

    from iteralab.core.errors import UserError
    from iteralab.evidence.bundle import campaign_bundle, write_bundle
    from iteralab.store.views import campaign_views

    manifest = factory.with_corpus_file(tmp_path / "runs", factory.manifest())
    manifest["created_at"] = "2026-09-28T09:00:00Z"
    records.append(tmp_path / "runs", manifest)
    (view,) = campaign_views(reading.load(tmp_path / "runs"))
    with zipfile.ZipFile(io.BytesIO(campaign_bundle(view, runs=tmp_path / "runs"))) as archive:
        info = archive.read("camp-evidence/bag-info.txt")
    assert b"Bagging-Date: 2026-09-28\n" in info and b"External-Identifier: camp-evidence-en\n" in info
    monkeypatch.chdir(tmp_path)  # the runs folder defaults to ./runs, as on the command line
    bundle, _ = write_bundle(campaign="camp", out="camp.zip")
    assert verify_bundle(bundle) == []
    (tmp_path / "x.zip").write_text("not a zip")
    with pytest.raises(UserError, match=r"x\.zip is not a zip file$"):
        verify_bundle(tmp_path / "x.zip")
    with pytest.raises(UserError, match=r"y\.zip does not exist$"):
        verify_bundle(tmp_path / "y.zip")


def test_verify_names_altered_unexpected_and_malformed_entries_from_a_bundle_built_here(tmp_path):
    """Fast twin of the end-to-end verify test: a bundle from records alone, with a receipt nested three folders deep."""
    from iteralab.evidence.bundle import write_bundle
    from iteralab.ledger.rentals import copy_receipt

    runs = tmp_path / "runs"
    manifest = factory.with_corpus_file(runs, factory.manifest())
    receipt = tmp_path / "receipt  with two spaces.pdf"
    receipt.write_bytes(b"%PDF receipt")
    rental = factory.rental()
    rental["receipt"] = copy_receipt(runs, "camp", receipt)
    for record in (manifest, factory.with_prediction_file(runs, factory.trial(manifest, "b1")), rental):
        records.append(runs, record)
    (tmp_path / "notes").mkdir()  # beside the runs folder: the default notes folder
    (tmp_path / "notes" / "n.md").write_text("---\ncampaign: camp\ndecision: Rent b1\nselected_variant: b1\n"
                                             "workload_covered: 1\ndate: 2026-10-01\nauthor: Team\n---\n\nWhy.\n", encoding="utf-8")
    prices = factory.price_file(tmp_path / "prices.csv")
    bundle, _ = write_bundle(campaign="camp", out=tmp_path / "a" / "b" / "camp.zip", runs=runs, catalog=prices)
    assert verify_bundle(bundle) == []
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        assert "camp-evidence/data/notes/n.md" in names
        assert any(name.endswith("/receipt  with two spaces.pdf") for name in names)
        assert b"2026-12-01,rtx-4090,RTX 4090,1,24,3,40.00,USD" in archive.read("camp-evidence/data/catalog.csv")
    elsewhere = tmp_path / "team notes"
    elsewhere.mkdir()
    (tmp_path / "notes" / "n.md").replace(elsewhere / "m.md")
    named, _ = write_bundle(campaign="camp", out=tmp_path / "named.zip", runs=runs, notes=elsewhere, catalog=prices)
    with zipfile.ZipFile(named) as archive:
        assert [name for name in archive.namelist() if "/notes/" in name] == ["camp-evidence/data/notes/m.md"]

    def changed(name, data):
        if name.endswith("data/trials.csv"):
            return data + b"forged\n"
        return data

    rezip(bundle, tmp_path / "altered.zip", changed)
    assert verify_bundle(tmp_path / "altered.zip") == [
        "data/trials.csv: altered (its sha256 differs from manifest-sha256.txt)"]
    with zipfile.ZipFile(bundle) as old, zipfile.ZipFile(tmp_path / "extra.zip", "w") as new:
        for info in old.infolist():
            new.writestr(info, old.read(info))
        new.writestr("camp-evidence/data/extra/smuggled.txt", b"x")
    assert verify_bundle(tmp_path / "extra.zip") == ["data/extra/smuggled.txt: unexpected (not in manifest-sha256.txt)"]

    def malformed(name, data):
        if name.endswith("/tagmanifest-sha256.txt"):
            return data.replace(b"\n", b"\r").replace(b"  bagit.txt", b" bagit.txt")
        if name.endswith("/manifest-sha256.txt"):  # the same lines in another order: listed on line 3, checked still
            return b"\n".join(reversed(data.removesuffix(b"\n").split(b"\n"))) + b"\n"
        return data

    rezip(bundle, tmp_path / "malformed.zip", malformed)
    problems = verify_bundle(tmp_path / "malformed.zip")
    assert problems == ["tagmanifest-sha256.txt:2: not 'sha256  path'",
                        "manifest-sha256.txt: altered (its sha256 differs from tagmanifest-sha256.txt)"]


def _with_every_named_file(runs, tmp_path, cli) -> Path:
    """Add to RUNS a rental with a receipt, an expense with a receipt and an exclusion with a document, through the CLI."""
    receipt, invoice, log = tmp_path / "receipt.pdf", tmp_path / "invoice-0042.txt", tmp_path / "provider-log.txt"
    receipt.write_bytes(b"%PDF-1.4 receipt 47.14")
    invoice.write_text("invoice 0042: two setup hours, 12.50 USD\n", encoding="utf-8")
    log.write_text("09:10-09:25 UTC thermal throttling\n", encoding="utf-8")
    trial = next(t for t in reading.load(runs).of_kind("trial") if t["status"] == "ok")
    for args in (("rental", "add", "--campaign", "tiny", "--gpu", "rtx-4090", "--lots", "1", "--days", "3",
                  "--start", "2026-09-28T09:00+07:00", "--receipt", receipt),
                 ("expense", "add", "--campaign", "tiny", "--amount", "12.50", "--currency", "USD", "--justification",
                  "setup hours", "--all-configurations", "--receipt", invoice),
                 ("exclude", "--campaign", "tiny", "--rule", "throttled", "--trial", trial["record_id"], "--document", log)):
        code, _, err = cli(*args, "--runs", runs)
        assert code == 0, err
    return runs


@pytest.mark.slow
def test_verify_fails_when_a_file_a_bundled_record_names_is_missing_from_the_bundle(measured, tmp_path, cli):
    """Regression for #37: an expense's receipt was left out of the bundle, and verify said valid."""
    import shutil

    from iteralab.evidence.bundle import references

    runs = _with_every_named_file(measured, tmp_path, cli)
    complete = tmp_path / "complete.zip"
    assert cli("bundle", "tiny", "--runs", runs, "-o", complete)[0] == 0
    assert verify_bundle(complete) == []
    named = {record["kind"]: references([record])[0] for record in reading.load(runs).records if references([record])}
    assert set(named) == {"manifest", "trial", "rental", "expense", "exclusion"}
    with zipfile.ZipFile(complete) as archive:  # each named file is carried, at the place verify looks for it
        carried = {name.split("/", 1)[1] for name in archive.namelist()}
    assert {f"data/{place}" for place, _, _ in named.values()} <= carried
    for kind, (place, relative, _) in named.items():
        lost = tmp_path / f"lost-{kind}"
        shutil.copytree(runs, lost)
        (lost / relative).unlink()  # the runs folder lost it: the bag is whole by its manifests, not by its records
        partial = tmp_path / f"partial-{kind}.zip"
        assert cli("bundle", "tiny", "--runs", lost, "-o", partial)[0] == 0
        problems = verify_bundle(partial)
        assert len(problems) == 1 and problems[0].startswith(f"data/{place}: missing; data/records/"), problems
        assert relative in problems[0]
        code, out, err = cli("verify", partial)
        assert code == 1 and f"data/{place}: missing" in out + err


def test_each_chart_of_the_bundle_draws_again_from_its_spec_alone(tmp_path):
    """#34: the bundle carries each chart as a Vega-Lite spec with its data; vl-convert draws one again from the file."""
    from iteralab.evidence.bundle import write_bundle
    from tests import hostile, vega

    path, _ = write_bundle(campaign=hostile.CAMPAIGN, out=tmp_path / "evidence.zip", runs=hostile.FIXTURE)
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if "/data/charts/" in name]
        spec = json.loads(archive.read(f"{hostile.CAMPAIGN}-evidence/data/charts/durations.vl.json"))
    assert sorted(name.rpartition("/")[2] for name in names) == ["durations.vl.json", "memory.vl.json",
                                                                  "projected-hours.vl.json", "quality.vl.json"]
    rows = spec["datasets"][spec["data"]["name"]]
    assert len(rows) == 19 and {"variant", "run_order", "seconds"} == set(rows[0])  # the fixture's 19 successful trials
    drawn = vega.drawn(spec)
    assert vega.marks(drawn) >= 19 and "fp32-b1" in vega.texts(drawn) and "measured window (s)" in vega.texts(drawn)


def test_another_deflate_version_is_a_change_to_build(tmp_path, monkeypatch):
    """A bundle's bytes depend on zlib-ng's version: a build after an upgrade renders every campaign again."""
    from importlib import metadata

    from iteralab.site import output
    from iteralab.site.build import build_site

    runs = tmp_path / "runs"
    manifest = factory.with_corpus_file(runs, factory.manifest())
    records.append(runs, manifest)
    records.append(runs, factory.with_prediction_file(runs, factory.trial(manifest)))
    monkeypatch.setenv("ITERALAB_CAMPAIGN_STORE_MB", "0")
    assert build_site(runs=runs, out=tmp_path / "site")["rendered"] == ["camp"]
    assert build_site(runs=runs, out=tmp_path / "site")["rendered"] == []
    real = metadata.version
    monkeypatch.setattr(output.metadata, "version", lambda name: "99.0" if name == "zlib-ng" else real(name))
    assert build_site(runs=runs, out=tmp_path / "site")["rendered"] == ["camp"]


def _bag_info(bundle: Path) -> dict[str, str]:
    with zipfile.ZipFile(bundle) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith("/bag-info.txt")]
        lines = archive.read(name).decode("utf-8").splitlines()
    return dict(line.split(": ", 1) for line in lines)


def _payload(bundle: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(bundle) as archive:
        return {name.split("/", 1)[1]: archive.read(name) for name in archive.namelist() if "/data/" in name}


def test_each_language_s_bag_of_a_campaign_has_its_own_identifier_in_one_group(tmp_path, cli):
    """Regression for #48: the English and the Indonesian bag of a campaign both said External-Identifier:
    demo-rotten-tomatoes-evidence while their payloads differ, so an archivist filing both by it kept one. Each bag's
    identifier names its language; both name the campaign's evidence as their group (Bag-Group-Identifier, RFC 8493)."""
    import bagit

    from iteralab.site.build import build_site

    runs = tmp_path / "runs"
    manifest = factory.with_corpus_file(runs, factory.manifest())
    for record in (manifest, *(factory.with_prediction_file(runs, factory.trial(manifest, "b1", repetition=repetition,
                                                                                 sequence=repetition))
                               for repetition in (1, 2))):
        records.append(runs, record)
    site = tmp_path / "site"
    assert build_site(runs=runs, out=site, languages=("en", "id"))["failed"] == {}
    campaign = "camp"
    bundles = {code: site / folder / "campaigns" / campaign / f"evidence-{campaign}.zip" for code, folder in (("en", ""), ("id", "id"))}
    infos = {code: _bag_info(bundle) for code, bundle in bundles.items()}
    assert {code: (info["External-Identifier"], info["Bag-Group-Identifier"]) for code, info in infos.items()} == {
        "en": (f"{campaign}-evidence-en", f"{campaign}-evidence"), "id": (f"{campaign}-evidence-id", f"{campaign}-evidence")}
    payloads = {code: _payload(bundle) for code, bundle in bundles.items()}
    assert payloads["en"].keys() == payloads["id"].keys()
    assert [name for name in payloads["en"] if payloads["en"][name] != payloads["id"][name]], "the payloads differ"
    for bundle in bundles.values():  # iteralab verify, and the Library of Congress bagit library on the unzipped bag
        assert verify_bundle(bundle) == [], bundle
        unpacked = tmp_path / bundle.parent.parent.parent.name / "unpacked"
        with zipfile.ZipFile(bundle) as archive:
            archive.extractall(unpacked)
        bag = bagit.Bag(str(unpacked / f"{campaign}-evidence"))
        bag.validate()
        assert bag.info["External-Identifier"] == _bag_info(bundle)["External-Identifier"]
    # iteralab bundle makes the English bag, byte for byte the site's.
    code, _, err = cli("bundle", campaign, "-o", tmp_path / "cli.zip", "--runs", runs)
    assert code == 0, err
    assert (tmp_path / "cli.zip").read_bytes() == bundles["en"].read_bytes()
