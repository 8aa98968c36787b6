"""The site and the decision in Bahasa Indonesia as well as English (#23): catalogs complete, figures exact, both built."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import parse_decimal
from bs4 import BeautifulSoup
from hypothesis import given
from hypothesis import strategies as st

from iteralab.core import language
from iteralab.core.errors import UserError
from iteralab.core.language import Figure, Joined, Recorded, Text
from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory
from tests.conftest import ROOT

LOCALE = ROOT / "generator" / "locale"
CATALOG = LOCALE / "id" / "LC_MESSAGES" / "iteralab.po"


def extracted(tmp_path: Path):
    """Run the Makefile's extraction (pybabel, the same options) over the code and templates; return its catalog."""
    pybabel = Path(sys.executable).parent / "pybabel"
    out = tmp_path / "messages.pot"
    subprocess.run([str(pybabel), "extract", "-F", str(LOCALE / "babel.cfg"), "-k", "Text", "-k", "wording", "--no-location", "--omit-header",
                    "-o", str(out), "."], cwd=ROOT, check=True, capture_output=True)
    with out.open("rb") as handle:
        return read_po(handle)


def test_every_message_of_the_code_and_templates_has_an_indonesian_translation(tmp_path):
    """Regression for #23: a new Text(...), _() or {% trans %} without its Indonesian entry fails here."""
    with CATALOG.open("rb") as handle:
        catalog = read_po(handle)
    messages = [message for message in extracted(tmp_path) if message.id]
    assert len(messages) > 500
    missing = [message.id for message in messages if message.id not in catalog]
    untranslated = [message.id for message in catalog if message.id and (not message.string or message.fuzzy
                    or (isinstance(message.string, tuple) and not all(message.string)))]
    assert missing == [], "run make translations, then translate the new entries"
    assert untranslated == []
    for message in catalog:  # every field and tag of the English is in the translation, or the page breaks
        if message.id:
            english = message.id if isinstance(message.id, str) else message.id[0]
            for said in (message.string if isinstance(message.string, tuple) else (message.string,)):
                assert sorted(_marks(english)) == sorted(_marks(said)), message.id


def _marks(text: str) -> list[str]:
    import re

    return re.findall(r"%\(\w+\)s|\{\w+\}|</?\w+[^>]*>", text)


def test_the_compiled_catalog_shipped_is_the_po_file_compiled():
    with CATALOG.open("rb") as handle:
        catalog = read_po(handle)
    import io

    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    assert (CATALOG.with_suffix(".mo")).read_bytes() == compiled.getvalue(), "run make translations"


@given(st.integers(0, 6).flatmap(lambda places: st.decimals(min_value=Decimal("-1e12"), max_value=Decimal("1e12"),
                                                              places=places, allow_nan=False, allow_infinity=False)))
def test_an_amount_written_in_either_language_parses_back_to_the_same_decimal(amount):
    for code in ("id", "en"):
        written = language.money(amount, code)
        assert parse_decimal(written, locale=code, strict=True) == amount
        assert str(parse_decimal(written, locale=code)) == str(amount)  # the same digits: 2071.00 stays 2071.00


@given(st.one_of(st.integers(-10**15, 10**15), st.floats(-1e12, 1e12, allow_nan=False),
                 st.decimals(min_value=Decimal("-1e12"), max_value=Decimal("1e12"), allow_nan=False, allow_infinity=False)),
       st.integers(0, 6), st.booleans())
def test_a_figure_is_written_as_babel_writes_it(value, places, grouped):
    """The fast way of writing a figure gives Babel's own result, rounding and signs included."""
    from babel.numbers import format_decimal

    for code in ("id", "en"):
        pattern = ("#,##0" if grouped else "0") + ("." + "0" * places if places else "")
        assert language.number(value, code, places, grouped=grouped) == format_decimal(
            value, format=pattern, locale=code, decimal_quantization=True)


def test_figures_and_dates_are_written_the_indonesian_way():
    assert language.money(Decimal("2071.00"), "id") == "2.071,00"
    assert language.money(Decimal("2071.00"), "en") == "2,071.00"
    assert language.say(1000, "en") == 1000  # a count stays as written in English; an amount is grouped
    assert language.say(1000, "id") == "1.000" and language.say(0.73, "id") == "0,73"
    assert Figure(1234.5678, 2).say("id") == "1.234,57" and str(Figure(1234.5678, 2)) == "1,234.57"
    import datetime as dt

    when = dt.datetime(2026, 12, 2, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=7)))
    assert language.moment(when, "UTC+07:00", "id") == "2 Desember 2026 09.00 UTC+07:00"


def test_a_text_is_english_as_a_string_and_said_in_the_page_language():
    text = Text("{count} independent corpora like the campaign's", count=1000)
    assert text == "1000 independent corpora like the campaign's"
    assert text.say("id") == "1.000 korpus independen seperti korpus kampanye"
    with language.speaking("id"):
        assert Joined(" ", [text, Text("no rental recorded")]).say() == (
            "1.000 korpus independen seperti korpus kampanye tidak ada sewa yang tercatat")
    # A sentence the runner wrote into a record, with a field, is read back from its message.
    assert Recorded("not reached: the trial stopped in measured_window").say("id") == (
        "tidak tercapai: percobaan berhenti pada jendela terukur")
    assert Recorded("a note nobody translated").say("id") == "a note nobody translated"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("language") / "runs"
    manifest = factory.manifest()
    records.append(folder, manifest)
    for repetition in range(1, 4):
        for variant, seconds in (("b1", 2.0), ("b8", 1.0)):
            records.append(folder, factory.trial(manifest, variant, seconds=seconds + repetition / 10, repetition=repetition,
                                                 batch_size=int(variant[1:])))
    return folder


def test_both_languages_are_built_side_by_side_each_page_linking_to_its_twin(runs, tmp_path):
    out = tmp_path / "site"
    result = build_site(runs=runs, out=out, languages=("en", "id"))
    assert set(result["languages"]) == {"en", "id"}
    english = sorted(p.relative_to(out) for p in out.rglob("*.html") if p.relative_to(out).parts[0] != "id")
    indonesian = sorted(p.relative_to(out / "id") for p in (out / "id").rglob("*.html"))
    assert english == indonesian and len(english) >= 8
    for page in english:
        en = BeautifulSoup((out / page).read_text(encoding="utf-8"), "html.parser")
        ind = BeautifulSoup((out / "id" / page).read_text(encoding="utf-8"), "html.parser")
        assert en.html["lang"] == "en" and ind.html["lang"] == "id"
        to_id, to_en = en.select_one('a[hreflang="id"]'), ind.select_one('a[hreflang="en"]')
        if page.name == "404.html":  # served for a missing path at any depth: its links start at the host's root
            assert (to_id["href"], to_en["href"]) == ("/id/404.html", "/id/../404.html")
            continue
        assert (out / page).parent.joinpath(to_id["href"]).resolve() == (out / "id" / page).resolve()
        assert (out / "id" / page).parent.joinpath(to_en["href"]).resolve() == (out / page).resolve()
    decision = BeautifulSoup((out / "id" / "campaigns" / "camp" / "decision.html").read_text(encoding="utf-8"), "html.parser")
    assert decision.find(id="answer").get_text().strip().startswith("Jawaban.")
    # Each language is byte-reproducible on its own: built again elsewhere, every file is the same; built alone, every
    # page is the same but for the link to the other language (and the 404 page's root, at the top of the host now).
    elsewhere = tmp_path / "elsewhere"
    build_site(runs=runs, out=elsewhere, languages=("en", "id"))
    for path in (out / "id").rglob("*"):
        if path.is_file():
            assert (elsewhere / "id" / path.relative_to(out / "id")).read_bytes() == path.read_bytes(), path
    alone = tmp_path / "alone"
    build_site(runs=runs, out=alone, languages=("id",))
    for page in indonesian:
        expected = (out / "id" / page).read_text(encoding="utf-8")
        if page.name != "404.html":
            assert (alone / page).read_text(encoding="utf-8") == _without_language_links(expected), page
    # A rebuild with nothing changed writes nothing, in either language.
    again = build_site(runs=runs, out=out, languages=("en", "id"))
    assert [found["written"] for found in again["languages"].values()] == [0, 0]


def _without_language_links(html: str) -> str:
    """Return the page as a one-language build writes it: no link to the other language."""
    lines = [line for line in html.split("\n") if 'hreflang="en"' not in line]
    return "\n".join(lines)


def test_an_unknown_language_is_refused_before_anything_is_written(runs, tmp_path):
    with pytest.raises(UserError, match="unknown language fr: choose from en, id"):
        build_site(runs=runs, out=tmp_path / "site", languages=("fr",))
    assert not (tmp_path / "site").exists()


def test_decide_says_the_answer_in_indonesian_and_other_messages_stay_english(runs, cli):
    code, out, _ = cli("decide", "camp", "--runs", runs, "--lang", "id")
    assert code in (0, None)
    assert out.startswith("Laporan keputusan untuk camp (katalog ")
    assert "Layak, biaya terencana termurah lebih dulu" in out and "Feasible" not in out
    code, out, _ = cli("decide", "camp", "--runs", runs)
    assert out.startswith("Decision report for camp (catalog ")
    code, out, _ = cli("decide", "camp", "--runs", runs, "--lang", "id", "--json")
    data = json.loads(out)
    # #45: the CPU that meets the question is said first, without a rental
    assert data["language"] == "id" and data["answer_said"].startswith(
        "b8 · CPU Test CPU · torch 2.13.0 memenuhi pertanyaan ini tanpa sewa: ")
    assert data["answer"].startswith(  # the figures and their English stay as they are
        "b8 · CPU Test CPU · torch 2.13.0 meets the question without a rental: ")
    code, _, err = cli("decide", "camp", "--runs", runs, "--lang", "fr")
    assert code == 2 and "'fr' is not one of 'en', 'id'" in err


def test_a_recorded_sentence_is_read_back_by_the_message_that_fits_it_whole():
    """The shorter message 'no GPU: the variant runs on {device}' matched a longer recorded sentence first."""
    from iteralab.core.language import recorded

    said = recorded("no GPU: the variant runs on cpu; the host's memory is measured instead", "id")
    assert "the host's memory" not in said and "cpu" in said
