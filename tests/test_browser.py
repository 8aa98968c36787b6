"""Each page type opened from file:// in real headless Chromium: no console error, no request elsewhere, axe-core clean."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import unicodedata
from pathlib import Path

import pytest

from iteralab.ledger import corrections, costs, exclusions
from iteralab.run import resume
from iteralab.site import campaign as pages
from iteralab.site.build import build_site
from iteralab.store import reading, records
from tests import factory, hostile
from tests.conftest import AXE, ROOT, watched_page
from tests.test_decision import CPU, QUESTION, RTX_4090, RTX_6000_ADA, write_machine
from tests.test_generation_pages import write_gpu_campaign

# A decision note written to attack its reviewers: every one of these must reach the page inert.
HOSTILE_NOTE = """---
campaign: camp
decision: Keep b1
date: 2026-10-01
author: QA
---
Body with [a script link](javascript:alert(1)), [mixed case](JaVaScRiPt:alert(2)), [data](data:text/html;base64,PHNjcmlwdD4=),
[vb](vbscript:msgbox(3)), <script>alert(4)</script>, <img src=x onerror=alert(5)>, <iframe src="javascript:alert(6)"></iframe>,
<a href="javascript:alert(7)" onclick="alert(8)">raw</a> and ![remote](https://example.invalid/pixel.png).

[the evidence](../campaigns/camp/index.html) and [the spec](https://example.invalid/spec) stay links.
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    runs = root / "runs"
    manifest = factory.manifest(model_name="<script>alert(1)</script>")
    records.append(runs, manifest)
    for repetition in range(1, 6):
        records.append(runs, factory.trial(manifest, "b1", seconds=1 + repetition / 10, repetition=repetition, sequence=repetition))
    records.append(runs, factory.trial(manifest, "b8", status="oom", failed_phase="measured_window", entries_completed=8, error="OOM",
                                       batch_size=8))
    # A run killed in its seventh trial and resumed (#20): the resumptions table, an interrupted trial's page, a trial
    # page after the resumption; and a rental voided with its reason, struck through.
    start = resume.start_record(manifest, records.new_id("trial"), "b1", 6, 7)
    records.append(runs, start)
    planned = {**manifest, "variants": {"b1": factory.trial(manifest, "b1")["variant_config"]}}  # as the runner writes it
    state = resume.Resumption(planned, [(7, "b1", 6), (8, "b1", 7)], set(range(1, 7)), [start])
    records.append(runs, resume.interrupted_row(planned, start, records.utc_now()))
    records.append(runs, resume.resumption_record(state, {"hostname": "rented-box"}))
    records.append(runs, factory.trial(manifest, "b1", seconds=1.7, repetition=7, sequence=8))
    mistaken = factory.rental("camp")
    records.append(runs, mistaken)
    corrections.void_record(runs_dir=runs, record_id=mistaken["record_id"], reason="recorded twice <b>oops</b>")
    # A campaign merged from three machines, with a rental named for the wrong hardware: the decision page at full width.
    for name, environment, durations in (("run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108], "b8": [30, 31, 32, 33, 34]}),
                                         ("run-ada", RTX_6000_ADA, {"b8": [25, 26, 27, 28, 29]}),
                                         ("run-cpu", CPU, {"b1": [500, 510, 520, 530, 540]})):
        write_machine(runs, name, environment, durations)
    records.append(runs, factory.rental("merged", runs=["run-cpu"]))
    # The same question asked again on another card (#35): a question page, with its table of changes and two charts.
    write_machine(runs, "run-again", RTX_6000_ADA, {"b1": [90, 91, 92, 93, 94], "b8": [20, 21, 22, 23, 24]},
                  question={**QUESTION, "asks_again": "merged"}, campaign="merged-again")
    # An exclusion on each campaign page type: one that applies, one withdrawn.
    camp_trial = reading.load(runs).of_campaign("camp", "trial")[0]
    exclusions.add_exclusion(runs_dir=runs, campaign="camp", rule="thermal throttling in the provider's log",
                             trials=[camp_trial["record_id"]], document="ticket 4711 <b>not bold</b>")
    merged_trial = reading.load(runs).of_campaign("merged", "trial")[0]
    withdrawn = exclusions.add_exclusion(runs_dir=runs, campaign="merged", rule="a neighbour's job on the host",
                                         trials=[merged_trial["record_id"]], document="host log", checked=[])
    exclusions.withdraw_exclusion(runs_dir=runs, campaign="merged", exclusion_id=withdrawn["record_id"], reason="another host")
    # Other costs, one carried by a single configuration: the cost table, the unequal-items warning and the totals table.
    labels = [summary.label for summary in exclusions.campaign_view(runs, "merged").variants]
    costs.add_expense(runs_dir=runs, campaign="merged", amount="12.50", currency="USD", justification="setup hours <i>on one card</i>",
                      configurations=labels[:1])
    costs.add_expense(runs_dir=runs, campaign="merged", amount="3", currency="USD", justification="storage", all_configurations=True)
    # A generation campaign (#42): its figures, the KV cache beside its estimate, prefill and decode phases, seeds' rows.
    write_gpu_campaign(runs, "gen")
    # A serving campaign (#64), a real tiny run: its levels, latency quantiles, engine, distributions and knee.
    shutil.copytree(ROOT / "tests" / "fixtures" / "serve-runs" / "tiny-serve-w", runs / "tiny-serve-w")
    notes = root / "notes"
    notes.mkdir()
    (notes / "decision.md").write_text(HOSTILE_NOTE, encoding="utf-8")
    # A campaign whose pages fail as a renderer's bug would: its page says why, in the index too (#24).
    broken = factory.manifest("broken", "run-broken")
    records.append(runs, broken)
    records.append(runs, factory.trial(broken))
    out = root / "site"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pages, "campaign_charts", hostile.charts_failing_for("broken"))
        # Both languages (#23): the Indonesian pages go through the same checks, from out/id/.
        assert build_site(runs=runs, out=out, notes=notes,
                          languages=("en", "id"))["failed"].keys() == {"broken"}
    return out


def page_paths(site):
    # The trials page holds every trial of the campaign: the failed trial's phase table is the widest.
    merged = site / "campaigns" / "merged"
    return {"index": site / "index.html", "campaign": site / "campaigns" / "camp" / "index.html",
            "trials": site / "campaigns" / "camp" / "trials.html",
            "note": site / "notes" / "decision.html", "catalog": site / "catalog.html", "sizing": site / "sizing.html",
            "qualification": merged / "qualification.html", "decision": merged / "decision.html",
            "merged campaign": merged / "index.html", "decision without question": site / "campaigns" / "camp" / "decision.html",
            "campaign not built": site / "campaigns" / "broken" / "index.html", "question": site / "questions" / "merged.html",
            "generation campaign": site / "campaigns" / "gen" / "index.html",
            "generation trials": site / "campaigns" / "gen" / "trials.html",
            "serving campaign": site / "campaigns" / "tiny-serve-w" / "index.html"}


# The rules whose verdict a narrower window can change: a page checked whole at one width is checked again with these.
LAYOUT_RULES = ["target-size", "scrollable-region-focusable", "meta-viewport", "meta-viewport-large", "region"]


def axe_violations(page, rules: list[str] | None = None) -> list:
    # wcag22aa: target-size (WCAG 2.5.8), a tap target of 24 × 24 CSS px unless spaced from the next one (#48).
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    chosen = (f"{{type: 'rule', values: {rules!r}}}" if rules else
              "{type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa']}")
    # Violations only: axe's passes and inapplicable lists are never read here, and gathering them is most of its time.
    result = page.evaluate(f"() => axe.run(document, {{runOnly: {chosen}, resultTypes: ['violations']}})")
    return [(v["id"], v["help"], [n["target"] for n in v["nodes"]][:3]) for v in result["violations"]]


def test_an_old_trial_link_leads_to_its_section_and_the_404_page_is_accessible(site, browser):
    """Regression for #22: one trials page per campaign; a link to a trial page or prediction copy of an older site
    lands on the trial's section, through the 404 page that iteralab serve (and most static hosts) answer with."""
    import threading

    from bs4 import BeautifulSoup

    from iteralab.site.serve import server

    trial_ids = [article["id"] for article in BeautifulSoup((site / "campaigns" / "camp" / "trials.html").read_text(encoding="utf-8"),
                                                            "html.parser").select("article.trial")]
    assert len(trial_ids) > 1
    httpd = server(out=site, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        for old in (f"campaigns/camp/trials/{trial_ids[1]}.html", f"campaigns/camp/predictions/{trial_ids[1]}.csv"):
            page.goto(f"{base}/{old}")
            page.wait_for_url(f"{base}/campaigns/camp/trials.html#{trial_ids[1]}")
            assert page.evaluate("document.querySelector(':target').id") == trial_ids[1]
        response = page.goto(f"{base}/no/such/page.html", wait_until="load")
        assert response.status == 404 and page.title().startswith("Not here")
        assert page.evaluate("getComputedStyle(document.body).fontFamily") != "", "its stylesheet loads at any depth"
        assert axe_violations(page) == [] and errors == []
        page.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def tables_wider_than_their_box(page) -> list:
    """Return [caption, table width, box width] of each shown table of PAGE wider than the box that holds it.

    Regression for #45: at 1,280 px the campaign page's variants table was 1,614 px in a 1,232 px box (1,714 in
    Indonesian), its GPU and memory columns reached only by scrolling sideways. A table in a closed disclosure (a
    chart's data) is not shown, so it has no width to measure.
    """
    return page.evaluate("""[...document.querySelectorAll('main table')].filter(t => t.getClientRects().length).map(t => {
        const box = t.closest('.scroll') || t.parentElement;
        return [(t.caption ? t.caption.textContent : t.className).trim().slice(0, 50), Math.max(t.scrollWidth, box.scrollWidth),
                box.clientWidth]; }).filter(([, width, room]) => width > room)""")


PHONE = 390  # CSS px: the width of a common phone's screen (Lighthouse's mobile preset is narrower still, 412 at 2.6x)


def every_page_type(site) -> dict:
    """Every page type in both languages (#23): the Indonesian pages are checked as the English ones are."""
    return {**page_paths(site), **{f"id {name}": path for name, path in page_paths(site / "id").items()}}


@contextlib.contextmanager
def served(site, monkeypatch):
    """Serve SITE as `iteralab serve` does; yield its address and the list of (path, status) it answers."""
    import threading

    from iteralab.site import serve

    answered = []
    monkeypatch.setattr(serve._Handler, "log_request",
                        lambda handler, code="-", size="-": answered.append((handler.path, int(getattr(code, "value", code)))))
    httpd = serve.server(out=site, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answered
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.mark.slow
@pytest.mark.parametrize("language", ["en", "id"])
def test_every_page_type_loads_offline_accessible_and_fits_1280_px_and_a_phone(site, reader, tmp_path, language):
    """Every page type in both languages, opened from file://: no console error, dialog or request elsewhere, every
    chart drawn, axe-core clean; no wider than the window at 1,280 px, then on a 390 px phone screen.

    Regression for #48: at 390 px the pages were wider than the screen (index 751 px, decision page 515, campaign page
    1,084) and slid sideways; the language link was an 18 px high tap target. At 390 px, wide tables scroll in their
    own focusable box, every link of the site's menu is at least 44 × 44 px (axe's target-size checks 24 × 24 for
    every other target), and axe-core is clean again at that width. One load per page serves both widths: the charts
    are drawn once, at a fixed size their box scales down. One browser page opens them all in turn (the Reader); each
    language is a test of its own, so the suite's two workers can share them (#48).
    """
    widths = {}
    pages = {name: path for name, path in every_page_type(site).items() if name.startswith("id ") == (language == "id")}
    assert len(pages) == len(page_paths(site))
    for name, path in pages.items():
        page = reader.open(path.as_uri(), width=1280)
        errors, outside, dialogs = reader.errors, reader.outside, reader.dialogs
        assert page.title(), name
        drawn = charts_drawn(page)  # every chart drawn, with marks (#34)
        assert all(marks > 0 for marks in drawn.values()), (name, drawn)
        if name in ("campaign", "decision"):
            assert drawn, name
        assert page.evaluate("document.documentElement.lang") == ("id" if name.startswith("id ") else "en"), name
        screenshot = tmp_path / f"{name}.png"
        # The window's top as a reader first sees it (header, title, the answer's start): something was painted. A
        # quarter of the window, not all of it: encoding 14 whole windows a language took 1.3 s of the suite (#50).
        page.screenshot(path=str(screenshot), clip={"x": 0, "y": 0, "width": 640, "height": 360})
        assert screenshot.stat().st_size > 1000
        # Wide tables scroll inside their own box: the page never scrolls sideways at 1,280 px.
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280, name
        if name == "trials":  # five columns fit at 1,280 px: long 'not reached: …' reasons wrap in their cell
            assert page.evaluate("(rs => rs.length > 1 && rs.every(r => r.scrollWidth <= r.clientWidth))"
                                 "([...document.querySelectorAll('.trial section[id$=\"-phases\"] .scroll')])"), name
        if name.endswith(("campaign", "decision")):  # #45: no table of theirs scrolls sideways in its box at 1,280 px
            assert tables_wider_than_their_box(page) == [], name
        # Before axe runs: it asks for the stylesheet itself, which file:// refuses it with a console error of its own.
        assert (errors, outside, dialogs) == ([], [], []), name
        assert axe_violations(page) == [], name
        page.set_viewport_size({"width": PHONE, "height": 900})
        widths[name] = page.evaluate("document.documentElement.scrollWidth")
        menu = page.evaluate("[...document.querySelectorAll('header.site a')].map(a => { const r = a.getBoundingClientRect(); "
                             "return [a.textContent.trim(), Math.round(r.width), Math.round(r.height)]; })")
        assert len(menu) == 4 and ["Bahasa Indonesia", "English"][name.startswith("id ")] in [text for text, _, _ in menu], menu
        assert [target for target in menu if min(target[1:]) < 44] == [], (name, menu)
        # A box that scrolls can be reached by keyboard and says what it holds (axe: scrollable-region-focusable).
        boxes = page.evaluate("[...document.querySelectorAll('main *')].filter(e => e.scrollWidth > e.clientWidth + 1 && "
                              "['auto', 'scroll'].includes(getComputedStyle(e).overflowX))"
                              ".map(e => [e.tabIndex, e.getAttribute('role'), !!(e.getAttribute('aria-label') || e.getAttribute('aria-labelledby'))])")
        assert all(box == [0, "region", True] for box in boxes), (name, boxes)
        # Colours, names and structure do not change with the width; what the layout decides is checked again.
        assert axe_violations(page, LAYOUT_RULES) == [], f"{name} at {PHONE} px"
        assert (outside, dialogs) == ([], []), name
    assert {name: width for name, width in widths.items() if width > PHONE} == {}, widths


@pytest.mark.slow
def test_every_page_has_its_favicon_from_a_server_without_an_error(site, browser, monkeypatch):
    """Regression for #48: a browser asked the host for /favicon.ico, which the site lacked: a 404 and a console error
    on every page. Each language's folder ships favicon.ico and every page links it: served, each page's request for it
    is answered (the Indonesian pages' from id/), and no request of the page fails. A page at each depth of the site in
    each language (test_site.py checks that every page links its language's icon)."""
    import time

    at_each_depth = {name: path for name, path in every_page_type(site).items()
                     if name.removeprefix("id ") in ("index", "campaign", "trials")}
    assert len(at_each_depth) == 6
    with served(site, monkeypatch) as (base, answered):
        for name, path in at_each_depth.items():
            page, errors, _ = watched_page(browser, width=PHONE)
            answered.clear()
            page.goto(f"{base}/{path.relative_to(site).as_posix()}", wait_until="load")
            deadline = time.monotonic() + 10  # the browser asks for the icon on its own, around the page's load
            while not any(request.endswith("favicon.ico") for request, _ in answered) and time.monotonic() < deadline:
                time.sleep(0.05)
            page.close()
            icon = "/id/favicon.ico" if name.startswith("id ") else "/favicon.ico"
            assert [(request, code) for request, code in answered if request.endswith("favicon.ico")] == [(icon, 200)], name
            assert [(request, code) for request, code in answered if code != 200] == [], name
            assert errors == [], (name, errors)


@pytest.mark.slow
def test_the_chart_libraries_load_after_the_page_so_the_answer_and_tables_paint_first(site, browser):
    """Regression for #48: on a phone the largest paint of a campaign or decision page waited for the 898 KB
    vega-embed.js, though the charts are below the first screen. It is asked for once the page has loaded; the charts
    are drawn all the same (the test above and the one at 1,280 px wait for every chart)."""
    for name in ("campaign", "decision", "id campaign", "id decision"):
        page = browser.new_page(viewport={"width": PHONE, "height": 900})
        # Runs before the page's scripts, so its listener is the load event's first: what the page asked for by then.
        page.add_init_script("window.addEventListener('load', () => { window.atLoad = {"
                             "libraries: [...document.scripts].filter(s => s.src.endsWith('/vega-embed.js')).length, "
                             "drawn: typeof vegaEmbed !== 'undefined'}; });")
        page.goto(every_page_type(site)[name].as_uri(), wait_until="load")
        assert charts_drawn(page), name
        seen = page.evaluate("({atLoad: window.atLoad, libraries: [...document.scripts].filter(s => s.src.endsWith('/vega-embed.js')).length})")
        page.close()
        assert seen == {"atLoad": {"libraries": 0, "drawn": False}, "libraries": 1}, (name, seen)


@pytest.mark.slow
def test_a_hostile_note_is_inert(site, browser):
    page = browser.new_page()
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto((site / "notes" / "decision.html").as_uri(), wait_until="load")
    for link in page.query_selector_all("main a"):
        if link.get_attribute("href") is None:
            link.click()  # a neutralised link does nothing when clicked
    assert dialogs == []
    assert page.evaluate("document.querySelectorAll('script, iframe, object, embed, img').length") == 0
    urls = page.evaluate("[...document.querySelectorAll('[href], [src], [action]')]"
                         ".map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action'))")
    assert not [url for url in urls if url.strip().lower().startswith(("javascript:", "data:", "vbscript:"))]
    handlers = page.evaluate("[...document.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))"
                             ".filter(n => n.startsWith('on'))")
    assert handlers == []
    hrefs = [link.get_attribute("href") for link in page.query_selector_all("main a[href]")]
    assert "../campaigns/camp/index.html" in hrefs and "https://example.invalid/spec" in hrefs
    page.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["merged campaign", "decision"])
def test_printed_on_a4_every_column_is_on_paper(site, browser, name):
    from pypdf import PdfReader

    page = browser.new_page()
    page.goto(page_paths(site)[name].as_uri(), wait_until="load")
    # The disclosure's table too (#21): closed on screen, on paper all the same. textContent: innerText is empty while
    # a closed disclosure hides it on screen.
    wide = "table.variants, table.decision, table.decision-details"
    headers = page.evaluate(f"[...document.querySelectorAll('{wide.replace(',', ' thead th,')} thead th')]"
                            ".map(th => th.textContent.trim())")
    # Text at the far right edge of each wide table: its last column's cells.
    last_cells = page.evaluate(f"[...document.querySelectorAll('{wide.replace(',', ' tbody tr,')} tbody tr')]"
                               ".map(tr => tr.lastElementChild.textContent.trim())")
    pdf = page.pdf(format="A4", print_background=False)
    page.close()
    text = " ".join(" ".join(page.extract_text().split()) for page in PdfReader(io.BytesIO(pdf)).pages)
    # NFKC: the PDF font sets "fi" as one ligature glyph.
    squeezed = unicodedata.normalize("NFKC", text).replace(" ", "").replace("-", "")
    assert headers and last_cells
    for expected in headers + last_cells:
        # Wrapped cells break lines (and may hyphenate), so words are compared without spaces.
        assert unicodedata.normalize("NFKC", "".join(expected.split())).replace("-", "") in squeezed, (name, expected)
    # Regression for #37: a heading breaks between its words on paper, never inside one ("Observ" / "ed").
    words = set(re.findall(r"\w+", unicodedata.normalize("NFKC", text)))
    broken = [word for heading in headers for word in re.findall(r"\w{5,}", heading) if word not in words]
    assert broken == [], (name, broken, sorted(word for word in words if any(part[:4] in word for part in broken)))


DRAWN = "[...document.querySelectorAll('.vega')].every(box => box.dataset.drawn)"


def charts_drawn(page) -> dict:
    """Scroll to PAGE's first chart as a reader would (the libraries are asked for when a chart comes near the screen,
    #60), wait until every chart is drawn or failed, scroll back to the top; return each one's marks (the paths of its
    mark groups)."""
    page.evaluate("(box => box && box.scrollIntoView())(document.querySelector('.vega'))")
    page.wait_for_function(DRAWN, timeout=20000)
    page.evaluate("window.scrollTo(0, 0)")
    return page.evaluate("Object.fromEntries([...document.querySelectorAll('.vega')].map(box => [box.dataset.spec, "
                         "box.dataset.drawn === 'yes' ? box.querySelectorAll('svg g[class*=\"mark-\"] path').length : -1]))")


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["", "id"])
def test_charts_draw_offline_show_a_tooltip_and_print(site, browser, folder):
    """#34: each chart is drawn by the vendored vega-embed from its spec, a mark's tooltip shows its figures in the page's
    language, and the printed page carries the drawn chart (its marks are painted on the paper)."""
    from pypdf import PdfReader

    page, errors, outside = watched_page(browser)
    page.goto((site / folder / "campaigns" / "merged" / "decision.html").as_uri(), wait_until="load")
    drawn = charts_drawn(page)
    assert set(drawn) == {"spec-planned-spend", "spec-projected-hours"} and min(drawn.values()) >= 2, drawn
    page.locator("#chart-planned-spend g[class*='mark-rect'] path").first.hover()
    tooltip = page.locator("#vg-tooltip-element")
    tooltip.wait_for(state="visible", timeout=5000)
    said = tooltip.inner_text()
    words = ("konfigurasi", "terencana") if folder else ("configuration", "planned")
    assert all(word in said for word in words) and re.search(r"\d", said), said
    assert errors == [] and outside == [], (errors, outside)
    page.emulate_media(media="print")
    assert charts_drawn(page)["spec-projected-hours"] >= 2  # still drawn for paper
    pdf = page.pdf(format="A4", print_background=False)
    page.close()
    # On paper: the bars in Vega's first colour (#4c78a8, which nothing else on the page paints), as vector marks.
    fills = pdf_fills(PdfReader(io.BytesIO(pdf)))
    assert any(all(abs(part - value / 255) < 0.002 for part, value in zip(fill, (0x4C, 0x78, 0xA8), strict=True))
               for fill in fills), sorted(fills)


def pdf_fills(reader) -> set[tuple[float, ...]]:
    """Return every RGB fill colour a PDF's pages paint with, their form XObjects (where Chromium puts SVG marks) included."""
    fills, seen = set(), set()

    def visit(resources, data: bytes):
        fills.update(tuple(float(n) for n in found) for found in re.findall(rb"([\d.]+) ([\d.]+) ([\d.]+) rg", data))
        for reference in (resources or {}).get("/XObject", {}).values():
            xobject = reference.get_object()
            if xobject.get("/Subtype") == "/Form" and id(xobject) not in seen:
                seen.add(id(xobject))
                visit(xobject.get("/Resources"), xobject.get_data())

    for sheet in reader.pages:
        visit(sheet.get("/Resources"), sheet.get_contents().get_data() if sheet.get_contents() else b"")
    return fills


@pytest.mark.slow
def test_the_decision_a_reader_signs_is_visible_at_1280_px_without_scrolling_sideways(site, browser, tmp_path):
    """Part of #21: the answer, the rented card, the planned total and the cost per validated corpus of the cheapest row
    of a campaign with priced GPU and CPU configurations, all inside the window and their table's visible box."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(page_paths(site)["decision"].as_uri(), wait_until="load")
    page.screenshot(path=str(tmp_path / "decision-1280.png"), full_page=True)
    seen = page.evaluate("""() => {
        const row = document.querySelector('#feasible table.decision tr.cheapest');
        const box = row.closest('.scroll').getBoundingClientRect();
        const visible = element => { const r = element.getBoundingClientRect();
            return r.width > 0 && r.left >= box.left - 1 && r.right <= Math.min(box.right, window.innerWidth) + 1; };
        const answer = document.querySelector('#answer').getBoundingClientRect();
        return {answer: answer.width > 0 && answer.right <= window.innerWidth,
                card: visible(row.querySelector('th[scope=row]')), total: visible(row.querySelector('td.plan strong')),
                cost: visible(row.querySelector('td.cost-per-corpus')),
                text: [row.querySelector('th[scope=row]').innerText, row.querySelector('td.plan strong').innerText,
                       row.querySelector('td.cost-per-corpus').innerText],
                scrolled: row.closest('.scroll').scrollWidth > row.closest('.scroll').clientWidth};
    }""")
    page.close()
    assert (seen["answer"], seen["card"], seen["total"], seen["cost"], seen["scrolled"]) == (True, True, True, True, False), seen
    assert "RTX 4090" in seen["text"][0] and seen["text"][1].endswith(" USD")


# English words no Indonesian sentence of this site uses: any of them outside the records' own words is an interface
# string left in English. ("per", "batch", "deliverable", "lot" and "median" are words of both, so they are not here.)
ENGLISH_WORDS = {"the", "of", "and", "with", "from", "which", "is", "are", "was", "not", "for", "by", "this", "that", "no",
                 "none", "to", "in", "on", "at", "or", "trial", "trials", "campaign", "price", "cost", "failed", "passed",
                 "recorded", "records", "hours", "measured", "each", "every", "yet", "page", "window", "rental", "rentals",
                 "configuration", "spend", "planned", "observed", "quality", "undefined", "excluded", "unknown", "stated",
                 "true", "false"}
# What the fixture's people wrote (titles, rules, documents, reasons, justifications, the note): shown as written.
WRITTEN_BY_PEOPLE = ("Test campaign", "thermal throttling in the provider's log", "ticket 4711 <b>not bold</b>",
                     "recorded twice <b>oops</b>", "setup hours <i>on one card</i>", "a neighbour's job on the host",
                     "another host", "host log", "storage", "Keep b1", "Tiny serving campaign")


def interface_words(page_html: str, written: tuple = WRITTEN_BY_PEOPLE) -> list[str]:
    """Return the English words of a page outside code, charts, names the records use (translate="no") and WRITTEN, the
    words people wrote."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page_html, "html.parser")
    for quoted in soup(["svg", "script", "style", "code", "pre", "del"]):
        quoted.decompose()
    for name in soup.select('[translate="no"], .body'):  # .body: the decision note, as its author wrote it
        name.decompose()
    text = soup.get_text(" ")
    for words in sorted(written, key=len, reverse=True):
        text = text.replace(words, " ")
    text = re.sub(r"\b[a-z]+-\d{8}T\d{6}Z-[0-9a-f]+\b", " ", text)  # record and run ids
    return [word for word in re.findall(r"[A-Za-z]+", text) if word.lower() in ENGLISH_WORDS]


def test_the_indonesian_pages_show_no_english_interface_string(site):
    """Regression for #23: every page of the Indonesian build says its interface in Bahasa Indonesia."""
    pages = sorted((site / "id").rglob("*.html"))
    assert len(pages) >= 15
    left = {str(path.relative_to(site)): words for path in pages if (words := interface_words(path.read_text(encoding="utf-8")))}
    assert left == {}
    # The check itself finds English: the English build's pages are full of it.
    assert interface_words((site / "campaigns" / "camp" / "decision.html").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def demo_site(tmp_path_factory):
    """The demo's real records, with its example sheets, built as make demo builds them: English and Indonesian."""
    from iteralab.demos import classify as demo
    from iteralab.demos.whole import DEMO_LANGUAGES

    root = tmp_path_factory.mktemp("demo-site")
    runs = root / "runs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "demo-runs", runs)
    demo.install_example_sheets(root / "qualification")
    assert build_site(runs=runs, out=root / "site", languages=DEMO_LANGUAGES)["failed"] == {}
    return root


def _people_words(root: Path) -> tuple:
    """Return what people wrote for the demo: the sheets (candidates, notes, documents), the campaign's title and the
    records a person adds (rules, documents, justifications, reasons). Shown as written, in their language."""
    import tomllib

    words = []
    for sheet in (root / "qualification").glob("*.toml"):
        data = tomllib.loads(sheet.read_text(encoding="utf-8"))
        words.append(data["candidate"])
        words += [text for entry in data.get("criteria", {}).values() for text in (entry.get("note"), entry.get("document")) if text]
    loaded = reading.load(root / "runs")
    words += [manifest["title"] for manifest in loaded.records if manifest["kind"] == "manifest"]
    words += [value for record in loaded.records if record["kind"] in ("exclusion", "withdrawal", "expense", "void", "rental")
              for value in record.values() if isinstance(value, str)]
    words += [record["document"]["text"] for record in loaded.records
              if record["kind"] == "exclusion" and "text" in (record.get("document") or {})]
    return tuple(words)


def test_the_indonesian_demo_site_opens_offline_accessible_and_in_indonesian(demo_site, reader):
    """Regression for #23: every Indonesian page of the demo (real records and sheets): lang="id", no console error, no
    request to another host, axe-core clean, and no English interface word."""
    site = demo_site / "site" / "id"
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 8
    people = _people_words(demo_site)
    for path in pages:
        assert interface_words(path.read_text(encoding="utf-8"), people) == [], path
        if path.name == "404.html":
            continue  # opened through a server by the test above: its links start at the host's root
        page = reader.open(path.as_uri())
        assert page.evaluate("document.documentElement.lang") == "id", path
        assert (reader.errors, reader.outside) == ([], []), path
        assert axe_violations(page) == [], path


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["", "id"])
def test_the_decision_page_shows_the_answer_its_list_and_the_ranked_table_in_the_first_screen(demo_site, browser, folder):
    """Regression for #37: the answer was one long paragraph, the ranked table below the question, and the Indonesian
    table cut its last column off at 1,280 px."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((demo_site / "site" / folder / "campaigns" / "demo-rotten-tomatoes" / "decision.html").as_uri(), wait_until="load")
    seen = page.evaluate("""() => {
        const top = selector => document.querySelector(selector).getBoundingClientRect().top;
        const box = document.querySelector('#feasible .scroll');
        return {answer: top('#answer p'), list: top('#answer ul.points'), table: top('#feasible table.decision tbody tr'),
                cut: box.scrollWidth - box.clientWidth, wide: document.documentElement.scrollWidth - window.innerWidth};
    }""")
    page.close()
    assert 0 < seen["answer"] < seen["list"] < seen["table"] < 900, seen  # all three in the first screen
    assert seen["cut"] <= 0 and seen["wide"] <= 0, seen  # no column clipped, no page wider than the window
