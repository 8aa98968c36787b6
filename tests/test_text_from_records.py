"""#60: text from records and notes reaches a reader as the text it is: the Atom feed's summaries carry no markup, a
bidirectional control is shown (never obeyed), and a note's refused link leaves its words without an empty <a>."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from iteralab.core import language
from iteralab.pages import render
from iteralab.pages.notes import load_notes, sanitise
from iteralab.site import published
from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory

ATOM = "{http://www.w3.org/2005/Atom}"
HOSTILE = '"><img src=x onerror=alert(1)> & <b>bold</b>'
BIDI = "[\u202a-\u202e\u2066-\u2069]"


class Tags(HTMLParser):
    """Collect the start tags of an HTML fragment, as a feed reader's HTML parser would find them."""

    def __init__(self, fragment: str):
        super().__init__()
        self.tags: list[str] = []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def _hostile_feed() -> bytes:
    """A feed whose every field from the records holds HOSTILE: titles, names, answers, the question asked again."""
    summaries = {"a": {"title": f"Title {HOSTILE}", "last_at": "2026-10-01T09:00:00Z"},
                 f"b{HOSTILE}": {"title": f"Again {HOSTILE}", "last_at": "2026-10-03T09:00:00Z"}}
    answers = {"a": f"Rent one CPU {HOSTILE}", f"b{HOSTILE}": f"Rent one {HOSTILE}"}
    asked = [{"question": "a", "title": f"Question {HOSTILE}", "revisions": [
        {"name": "a", "before": None, "answer_changed": False, "summary": summaries["a"]},
        {"name": f"b{HOSTILE}", "before": f"a{HOSTILE}", "answer_changed": True, "summary": summaries[f"b{HOSTILE}"]}]}]
    with language.speaking("en"):
        return published.feed_bytes(summaries, answers, asked, {}, "https://example.org/site/")


def test_no_field_of_the_records_becomes_markup_in_a_feed_reader():
    """Regression for #60: the summary is declared type="html" and was escaped once, for XML only: the CPU model string
    '"><img src=x onerror=alert(1)>' reached feedparser as a real <img>. Read here as a reader reads it: the XML
    unescaped, then the summary parsed as HTML (type="html"), the title as text."""
    root = ET.fromstring(_hostile_feed())
    entries = root.findall(ATOM + "entry")
    assert len(entries) == 3
    for entry in entries:
        summary, title = entry.find(ATOM + "summary"), entry.find(ATOM + "title")
        assert summary.get("type") == "html" and title.get("type", "text") == "text"
        assert Tags(summary.text).tags == [], summary.text  # no element at all: text, escaped for HTML
        assert HOSTILE in re.sub("&lt;", "<", re.sub("&gt;", ">", summary.text)).replace("&amp;", "&")
        assert HOSTILE in title.text  # a text construct: shown as the characters it holds


def test_feedparser_reads_each_summary_as_text():
    import feedparser

    parsed = feedparser.parse(_hostile_feed())
    assert not parsed.bozo and len(parsed.entries) == 3
    for entry in parsed.entries:
        assert "<img" not in entry.summary and "<b>" not in entry.summary, entry.summary
        assert "&lt;img src=x onerror=alert(1)&gt;" in entry.summary
        assert entry.title_detail.type == "text/plain" and HOSTILE in entry.title


def test_a_bidirectional_control_is_shown_as_its_code_point_and_every_template_is_free_of_them():
    said = render.visible_controls("file \u202egnp.exe and \u2066isolated\u2069")
    assert said == "file [U+202E]gnp.exe and [U+2066]isolated[U+2069]"
    assert type(render.visible_controls(render.Markup("<b>\u202ex</b>"))) is render.Markup
    # No page's own words hold one: each [U+...] on a page stands for a control that came from what was recorded.
    for path in render.template_files():
        assert not re.search(BIDI, path.read_text(encoding="utf-8")), path
    for code in language.LANGUAGES:
        assert not re.search(BIDI, "".join(str(message) for message in language.translations(code)._catalog.values())
                             if code != language.DEFAULT else ""), code


NOTE = """---
campaign: camp
decision: Keep b1 \u202eevil\u202c
date: 2026-10-01
author: QA
---
The reviewer approved the \u202eevil\u202c plan; read [the script](javascript:alert(1)) and [the spec](https://example.invalid/s).
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A campaign whose title and CPU hold a right-to-left override, and a note that holds one too."""
    root = tmp_path_factory.mktemp("bidi")
    runs = root / "runs"
    environment = {"cpu": {"model": "Xeon \u202e0009 mpE\u202c"}, "gpus": None, "gpus_reason": "no CUDA device visible",
                   "gpu_count": 0, "libraries": {"torch": "2.13.0", "transformers": "5.0"}}
    manifest = factory.manifest(title="Reviews \u202eevil\u202c", environment=environment)
    records.append(runs, manifest)
    for repetition in range(1, 6):
        records.append(runs, factory.trial(manifest, "b1", seconds=1 + repetition / 10, repetition=repetition,
                                           sequence=repetition))
    notes = root / "notes"
    notes.mkdir()
    (notes / "decision.md").write_text(NOTE, encoding="utf-8")
    out = root / "site"
    assert build_site(runs=runs, out=out, notes=notes, languages=("en",))["failed"] == {}
    return out


def test_no_page_holds_a_raw_bidirectional_control_and_each_is_shown(site):
    """Regression for #60: in a note, "evil" showed as "live" and the sentence after it read backwards."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 5
    assert {str(path.relative_to(site)) for path in pages if re.search(BIDI, path.read_text(encoding="utf-8"))} == set()
    note = (site / "notes" / "decision.html").read_text(encoding="utf-8")
    assert "approved the [U+202E]evil[U+202C] plan" in note and "Keep b1 [U+202E]evil[U+202C]" in note
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Reviews [U+202E]evil[U+202C]" in index
    campaign = (site / "campaigns" / "camp" / "index.html").read_text(encoding="utf-8")
    assert '<td translate="no">Xeon [U+202E]0009 mpE[U+202C]</td>' in campaign  # the machine's CPU, as recorded
    # A chart's rows too: vega draws its labels from the spec's data, as the code points.
    assert '"variant":"b1 · CPU Xeon [U+202E]0009 mpE[U+202C] · torch 2.13.0"' in campaign


def test_a_refused_link_of_a_note_leaves_its_words_without_an_empty_link(site, tmp_path):
    """Regression for #60: nh3 removed the address and left <a rel="noopener noreferrer">, which the Nu checker
    reports (an a element without href cannot have rel)."""
    note = (site / "notes" / "decision.html").read_text(encoding="utf-8")
    assert re.findall(r"<a(?:\s(?![^>]*href=)[^>]*)?>", note) == []
    assert "read the script and" in note
    assert '<a href="https://example.invalid/s" rel="noopener noreferrer">the spec</a>' in note
    assert sanitise('<p><a href="javascript:x" title="t"><em>kept</em> words</a></p>') == "<p><em>kept</em> words</p>"
    (tmp_path / "n.md").write_text(NOTE, encoding="utf-8")
    [loaded] = load_notes(tmp_path)
    assert "<a rel" not in loaded.html
