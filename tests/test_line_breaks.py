"""Regression for #12: readers split records as their format says; Unicode line breaks inside a text are text."""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iteralab.declared.corpus import Entry, json_lines, load_corpus, write_jsonl
from iteralab.evidence.verification import verify_bundle
from iteralab.ledger.rentals import add_rental
from iteralab.pages.notes import load_notes
from iteralab.store import reading
from tests.tiny import corpus_rows, write_campaign, write_corpus

# Every character str.splitlines() breaks at besides \n and \r, and two emoji (one a ZWJ sequence).
BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\r\n"]
EMOJI = ["🎬", "👩‍👩‍👧"]
texts = st.lists(st.sampled_from(BREAKS + EMOJI) | st.text(min_size=1, max_size=8), min_size=1, max_size=6).map("".join).filter(
    lambda text: text.strip())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(texts, st.sampled_from(["neg", "pos"])), min_size=1, max_size=12))
def test_corpus_round_trip_keeps_every_text_whole(rows):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "corpus.jsonl"
        entries = [Entry(f"id-{index}", text, label) for index, (text, label) in enumerate(rows)]
        write_jsonl(entries, path)
        loaded = load_corpus(path)
        assert [(e.id, e.text, e.label) for e in loaded.entries] == [(e.id, e.text, e.label) for e in entries]


def test_a_tweet_with_nel_is_one_record():
    """The reported case: an exported tweet holding U+0085 was refused as 'not valid JSON'."""
    line = json.dumps({"id": "t1", "text": "first\x85second\u2028third"}, ensure_ascii=False)
    assert json_lines(line + "\r\n" + line.replace("t1", "t2") + "\n") == [line, line.replace("t1", "t2")]


@pytest.mark.slow
def test_line_breaks_survive_corpus_runner_predictions_site_bundle_and_verify(tiny_model, tmp_path, cli):
    rows = corpus_rows(12)
    for index, row in enumerate(rows):
        row["text"] = f"{row['text']} {BREAKS[index % len(BREAKS)]} {EMOJI[index % 2]} end"
    rows[0]["id"] = "doc\u2028with-break"  # an id may hold one too: the predictions CSV must keep it whole
    corpus = write_corpus(tmp_path / "corpus.jsonl", rows)
    campaign = write_campaign(tmp_path, tiny_model, corpus, repetitions=1, batch_sizes=(1,))
    runs = tmp_path / "runs"
    code, _, err = cli("run", campaign, "--runs", runs, "--quiet")
    assert code == 0, err
    (trial,) = reading.load(runs).of_kind("trial")
    assert trial["id_check"]["ids_match"] and trial["id_check"]["observed"] == 12
    receipt = tmp_path / "receipt\u20282026.pdf"  # BagIt manifests must not split this name either
    receipt.write_bytes(b"%PDF-1.4 receipt")
    add_rental(runs_dir=runs, campaign="tiny", gpu="rtx-4090", lots=1, days=3, start="2026-09-28T09:00+07:00", receipt=receipt)
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    bundle = tmp_path / "site" / "campaigns" / "tiny" / "evidence-tiny.zip"
    assert verify_bundle(bundle) == []
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        predictions = archive.read(next(n for n in names if "/data/predictions/" in n)).decode("utf-8")
        corpus_copy = archive.read(next(n for n in names if "/data/inputs/" in n)).decode("utf-8")
    assert "doc\u2028with-break" in predictions
    assert [row["text"] for row in map(json.loads, json_lines(corpus_copy))] == [row["text"] for row in rows]
    # The bagit library splits manifest lines at U+2028, so the bag's copy is renamed; the record keeps the real name.
    assert any(name.endswith("/receipt_2026.pdf") for name in names)
    (rental,) = reading.load(runs).of_kind("rental")
    assert rental["receipt"]["original_name"] == "receipt\u20282026.pdf"


def test_a_note_with_a_unicode_line_separator_keeps_its_front_matter(tmp_path):
    (tmp_path / "n.md").write_text("---\r\ncampaign: c\r\ndecision: keep\u2028b1\r\ndate: 2026-10-01\r\nauthor: QA\r\n---\r\nBody\u2028more\n",
                                   encoding="utf-8")
    (note,) = load_notes(tmp_path)
    assert note.meta["decision"] == "keep\u2028b1" and "Body\u2028more" in note.html
