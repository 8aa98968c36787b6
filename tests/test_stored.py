"""The machine's store of rendered campaigns (issue #22): a build into an empty folder copies it, never trusting it blindly."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from iteralab.core.errors import UserError
from iteralab.site import campaign as pages
from iteralab.site import stored
from iteralab.site.build import build_site, describe_build
from iteralab.store import records
from tests import factory, hostile
from tests.test_cache import FIXTURE, tree


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")
    monkeypatch.delenv(stored.LIMIT_SETTING, raising=False)
    copy = tmp_path / "runs"
    shutil.copytree(FIXTURE, copy)
    for name in ("other", "third"):  # three campaigns in all, so that one can be told from the others
        manifest = factory.manifest(name, f"run-{name}")
        records.append(copy, manifest)
        for repetition in (1, 2):
            records.append(copy, factory.trial(manifest, "b1", seconds=1 + repetition / 10, repetition=repetition,
                                               sequence=repetition))
    return copy


@pytest.fixture
def rendered(monkeypatch):
    """Name the campaigns rendered from their records (not copied from the store), in the order rendered."""
    seen = []
    original = pages.render_campaign_job
    monkeypatch.setattr(pages, "render_campaign_job",
                        lambda job, places, files=None: seen.append(job.view.name) or original(job, places, files))
    return seen


CAMPAIGNS = ["demo-rotten-tomatoes", "other", "third"]


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "campaigns").glob("*/*.bin"))


def test_a_build_into_an_empty_folder_copies_every_campaign_and_is_byte_identical(runs, rendered, tmp_path):
    build_site(runs=runs, out=tmp_path / "first", languages=("en", "id"))
    assert sorted(rendered) == sorted(CAMPAIGNS * 2)  # each campaign in each language
    assert len(entries(tmp_path / "cache")) == 6
    rendered.clear()
    result = build_site(runs=runs, out=tmp_path / "second", languages=("en", "id"))
    assert rendered == []  # every campaign copied from the store, and the build says so
    said = describe_build(result)
    assert "re-rendered: demo-rotten-tomatoes, other, third (3 copied from this machine's store of rendered campaigns)" in said
    assert "0 unchanged (3 copied from this machine's store of rendered campaigns); " in said.split("Bahasa Indonesia: ")[1]
    first = tree(tmp_path / "first")
    assert len(first) > 40 and tree(tmp_path / "second") == first


def _truncate(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def _flip(blob: bytes) -> bytes:
    """Flip a bit inside the entry's stored pages: only the entry's sha256 can tell."""
    end = blob.index(b"\n", len(stored.MAGIC))
    middle = end + 1 + (len(blob) - end - 1) // 2
    return blob[:middle] + bytes([blob[middle] ^ 0x01]) + blob[middle + 1:]


def _other_format(blob: bytes) -> bytes:
    end = blob.index(b"\n", len(stored.MAGIC))
    header = orjson.loads(blob[len(stored.MAGIC):end])
    return stored.MAGIC + orjson.dumps({**header, "format": stored.FORMAT + 1}) + blob[end:]


def _other_key(blob: bytes) -> bytes:
    """An entry copied under another campaign's name: its header names the key it was made for."""
    end = blob.index(b"\n", len(stored.MAGIC))
    header = orjson.loads(blob[len(stored.MAGIC):end])
    return stored.MAGIC + orjson.dumps({**header, "key": "0" * 64}) + blob[end:]


def _not_an_object(blob: bytes) -> bytes:
    end = blob.index(b"\n", len(stored.MAGIC))
    return stored.MAGIC + b"[1, 2]" + blob[end:]


@pytest.mark.parametrize("damage", [_truncate, _flip, _other_format, _other_key, _not_an_object, lambda blob: b""],
                         ids=["truncated", "bit-flip", "other-format", "other-key", "header-not-an-object", "emptied"])
def test_a_damaged_entry_is_detected_rendered_again_and_stored_anew(runs, rendered, tmp_path, damage):
    build_site(runs=runs, out=tmp_path / "first")
    for entry in entries(tmp_path / "cache"):
        entry.write_bytes(damage(entry.read_bytes()))
    rendered.clear()
    build_site(runs=runs, out=tmp_path / "second")
    assert sorted(rendered) == CAMPAIGNS  # none of the damaged entries was used
    assert tree(tmp_path / "second") == tree(tmp_path / "first")
    assert all(stored.load(entry.stem) is not None for entry in entries(tmp_path / "cache"))  # stored anew
    rendered.clear()
    build_site(runs=runs, out=tmp_path / "third")
    assert rendered == []


def _bundles(cache: Path) -> list[Path]:
    return sorted((cache / "campaigns").glob("*/*.zip"))


@pytest.mark.parametrize("damage", ["flip", "remove", "replace"])
def test_the_bundle_is_linked_from_the_site_not_written_twice_and_a_changed_one_is_rendered_again(runs, rendered, tmp_path,
                                                                                                damage):
    build_site(runs=runs, out=tmp_path / "first")
    linked = _bundles(tmp_path / "cache")
    assert len(linked) == len(entries(tmp_path / "cache")) == 3
    sites = sorted((tmp_path / "first" / "campaigns").glob("*/evidence-*.zip"))
    assert sorted(path.stat().st_ino for path in linked) == sorted(path.stat().st_ino for path in sites)
    rendered.clear()
    build_site(runs=runs, out=tmp_path / "second")
    assert rendered == []  # copied from the store, the bundle read through its link
    for path in linked:
        if damage == "flip":  # rewritten in place (a site's file is never; someone else's tool might)
            with open(path, "r+b") as handle:
                handle.seek(100)
                byte = handle.read(1)
                handle.seek(100)
                handle.write(bytes([byte[0] ^ 1]))
        elif damage == "remove":
            path.unlink()
        else:
            path.unlink()
            path.write_bytes(b"PK not the bundle")
    rendered.clear()
    build_site(runs=runs, out=tmp_path / "third")
    assert sorted(rendered) == CAMPAIGNS
    if damage != "flip":  # the site's bundles were not touched: every build gave the same pages
        assert tree(tmp_path / "third") == tree(tmp_path / "second")


def test_a_bundle_that_cannot_be_linked_is_stored_whole(runs, tmp_path):
    entry = {"answer": "a", "summary": {}}
    stored.save("ab" * 32, [("campaigns/x/index.html", b"<p>page</p>"), ("campaigns/x/evidence-x.zip", b"PK bundle")], entry,
                tmp_path / "no-such-site")
    assert _bundles(tmp_path / "cache") == []
    assert stored.load("ab" * 32) == ([("campaigns/x/index.html", b"<p>page</p>"), ("campaigns/x/evidence-x.zip", b"PK bundle")],
                                      entry)


def test_pruning_removes_an_entry_with_its_bundle_and_a_bundle_left_without_entry(runs, tmp_path):
    build_site(runs=runs, out=tmp_path / "first")
    orphan = tmp_path / "cache" / "campaigns" / "00" / f"{'0' * 64}.zip"
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"PK")
    stored.prune(10**12)
    assert not orphan.exists() and len(_bundles(tmp_path / "cache")) == 3
    stored.prune(0)
    assert entries(tmp_path / "cache") == [] and _bundles(tmp_path / "cache") == []


def test_a_changed_campaign_or_another_runs_folder_is_rendered_not_copied(runs, rendered, tmp_path):
    build_site(runs=runs, out=tmp_path / "first")
    manifest = factory.manifest("other", "run-other-2")
    records.append(runs, manifest)
    records.append(runs, factory.trial(manifest, "b1", seconds=1.5))
    rendered.clear()
    build_site(runs=runs, out=tmp_path / "second")
    assert rendered == ["other"]  # only the campaign whose records changed
    # A copy of the runs folder elsewhere may hold other corpus copies or receipts than the bundle's: not served.
    moved = tmp_path / "moved"
    shutil.copytree(runs, moved)
    rendered.clear()
    build_site(runs=moved, out=tmp_path / "third")
    assert sorted(rendered) == CAMPAIGNS


def test_a_failed_campaign_is_never_stored(runs, rendered, tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(pages, "campaign_charts", hostile.charts_failing_for("other"))
        assert build_site(runs=runs, out=tmp_path / "first")["failed"].keys() == {"other"}
    assert len(entries(tmp_path / "cache")) == 2
    rendered.clear()
    result = build_site(runs=runs, out=tmp_path / "second")
    assert rendered == ["other"] and result["failed"] == {}  # rendered, and it succeeds now
    assert "not built" not in (tmp_path / "second" / "campaigns" / "other" / "index.html").read_text(encoding="utf-8")


def test_the_store_can_be_turned_off_and_a_bad_limit_is_a_clear_error(runs, rendered, tmp_path, monkeypatch):
    monkeypatch.setenv(stored.LIMIT_SETTING, "0")
    build_site(runs=runs, out=tmp_path / "first")
    assert entries(tmp_path / "cache") == []
    monkeypatch.setenv(stored.LIMIT_SETTING, "two gigabytes")
    with pytest.raises(UserError, match=f"{stored.LIMIT_SETTING}='two gigabytes' is not a whole number of megabytes"):
        build_site(runs=runs, out=tmp_path / "second")
    assert not (tmp_path / "second").exists()


def stored_size(entry: Path) -> int:
    """What prune counts for an entry: its file and, where it has one, its linked bundle."""
    bundle = entry.with_suffix(".zip")
    return entry.stat().st_size + (bundle.stat().st_size if bundle.exists() else 0)


@pytest.mark.parametrize("oldest", ["largest", "smallest"])
def test_the_least_recently_used_entries_go_first_when_the_store_outgrows_its_limit(runs, tmp_path, oldest):
    """Regression for #48: an entry counts with its linked bundle, and the ages are set, not left to the hashes' order.

    The old test aged the entries in the order of their (random) names and set the limit from the .bin files alone, so
    it passed only when the largest entry happened to be the oldest. Both orders are forced here.
    """
    build_site(runs=runs, out=tmp_path / "first")
    found = sorted(entries(tmp_path / "cache"), key=stored_size, reverse=oldest == "largest")
    sizes = [stored_size(entry) for entry in found]
    assert len(found) == 3 and sizes[0] != sizes[-1]
    assert all(entry.with_suffix(".zip").exists() for entry in found)  # every entry links its bundle
    for age, entry in enumerate(found):  # found[0] is the least recently used
        os.utime(entry, ns=(10**18 + age, 10**18 + age))

    def left() -> list[Path]:
        return sorted(entries(tmp_path / "cache"), key=found.index)

    stored.prune(sum(sizes))  # at the limit: nothing goes
    assert left() == found
    stored.prune(sum(sizes) - 1)  # one byte over: the oldest entry goes, with its bundle, and no other
    assert left() == found[1:]
    assert not found[0].with_suffix(".zip").exists() and found[1].with_suffix(".zip").exists()
    stored.prune(sizes[2])  # the newest alone fits: the next oldest goes
    assert left() == found[2:]
    stored.prune(0)
    assert left() == []
    assert list((tmp_path / "cache" / "campaigns").glob("*/*.zip")) == []


def test_a_limit_counted_without_the_bundles_removes_entries_until_the_store_fits(runs, tmp_path):
    """Regression for #48: the old test's limit (the .bin files alone, less a byte), with the smallest entry the oldest.

    The store holds each entry's bundle too, so one entry removed is not enough: prune goes on to the next oldest
    until what is left, bundles included, fits the limit.
    """
    build_site(runs=runs, out=tmp_path / "first")
    found = sorted(entries(tmp_path / "cache"), key=stored_size)  # the smallest first, so the oldest
    for age, entry in enumerate(found):
        os.utime(entry, ns=(10**18 + age, 10**18 + age))
    limit = sum(entry.stat().st_size for entry in found) - 1
    kept = list(found)
    while sum(stored_size(entry) for entry in kept) > limit:
        kept.pop(0)
    assert len(kept) < len(found) - 1  # more than one entry must go: the old expectation of one fails here
    stored.prune(limit)
    assert sorted(entries(tmp_path / "cache"), key=found.index) == kept


NOTE = """---
campaign: other
decision: Rent one card
selected_variant: b1
workload_covered: 1,000 reviews
date: 2026-10-01
author: Publishing team
title: Why b1
---
The reasons.
<!-- an aside the page never shows -->
"""


def test_a_note_changed_only_in_an_aside_is_copied_anew_into_the_bundle(runs, rendered, tmp_path):
    """Regression for #22: the bundle copies a note's file whole, so an aside the page never shows is evidence too."""
    import io
    import zipfile

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "why.md").write_text(NOTE, encoding="utf-8")
    build_site(runs=runs, out=tmp_path / "site", notes=notes)
    (notes / "why.md").write_text(NOTE.replace("an aside", "a corrected aside"), encoding="utf-8")
    rendered.clear()
    for out in (tmp_path / "site", tmp_path / "empty"):  # rebuilt in place, and into an empty folder from the store
        build_site(runs=runs, out=out, notes=notes)
        bundle = (out / "campaigns" / "other" / "evidence-other.zip").read_bytes()
        with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
            assert b"a corrected aside" in archive.read("other-evidence/data/notes/why.md")
    assert rendered == ["other"]  # rendered once, then copied from the store


def test_a_receipt_replaced_in_the_runs_folder_is_copied_anew_into_the_bundle(runs, rendered, tmp_path):
    """Regression for #22: the bundle copies a campaign's receipts, corpus copies and documents whole; their names, sizes
    and times are part of its key, in place and in the store."""
    import io
    import zipfile

    build_site(runs=runs, out=tmp_path / "site")
    (receipt,) = (runs / "demo-rotten-tomatoes" / "receipts").rglob("*.pdf")
    receipt.write_bytes(b"%PDF-1.4 a rescanned receipt\n")
    rendered.clear()
    for out in (tmp_path / "site", tmp_path / "empty"):
        build_site(runs=runs, out=out)
        bundle = (out / "campaigns" / "demo-rotten-tomatoes" / "evidence-demo-rotten-tomatoes.zip").read_bytes()
        with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
            (name,) = [n for n in archive.namelist() if n.endswith("/receipt.pdf")]
            assert archive.read(name) == b"%PDF-1.4 a rescanned receipt\n"
    assert rendered == ["demo-rotten-tomatoes"]


def test_the_other_files_of_a_campaign_folder_are_all_but_its_records_and_predictions(tmp_path):
    """Regression for #22: the listing's records and predictions are stepped over, not one file more or less."""
    from iteralab.site import incremental
    from iteralab.site.output import list_files

    for relative in ("a/records/run.jsonl", "a/predictions/t1.csv", "a/predictions/t2.csv", "a/records0",
                     "a/inputs/records/copy.csv", "a/receipts/x/receipt.pdf", "b/predictions/t.csv", "b/records/r.jsonl",
                     "c/predictions-old/t.csv", "top.txt"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(relative, encoding="utf-8")
    listing = list_files(tmp_path)
    keys = incremental.other_files(listing)
    assert sorted(keys) == ["a", "c"]  # b has only records and predictions; top.txt is in no campaign's folder
    (tmp_path / "a" / "inputs" / "records" / "copy.csv").write_text("changed, longer", encoding="utf-8")
    changed = incremental.other_files(list_files(tmp_path))
    assert changed["a"] != keys["a"] and changed["c"] == keys["c"]
    # Records and predictions have keys of their own (their content hashes, their names): not counted again here.
    (tmp_path / "a" / "predictions" / "t1.csv").write_text("changed, longer", encoding="utf-8")
    (tmp_path / "b" / "records" / "r.jsonl").write_text("changed, longer", encoding="utf-8")
    assert incremental.other_files(list_files(tmp_path)) == changed


def test_a_pyarrow_without_zstd_stores_nothing_and_builds_as_usual(runs, rendered, tmp_path, monkeypatch):
    def no_zstd():
        raise ValueError("Unsupported compression type: zstd")

    monkeypatch.setattr(stored, "_codec", no_zstd)
    build_site(runs=runs, out=tmp_path / "first")
    assert entries(tmp_path / "cache") == [] and sorted(rendered) == CAMPAIGNS
    assert (tmp_path / "first" / "campaigns" / "other" / "index.html").is_file()
