"""#60: a reviewer on a phone. The index shows each campaign's answer in the first screen, and a page's charts cost
nothing until the reader comes near them (Lighthouse's mobile run counted 1.8 to 2.0 s of blocking from the chart
libraries on a campaign page whose charts are screens below)."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from iteralab.site.build import build_site
from iteralab.store import records
from tests import factory
from tests.conftest import watched_page

PHONE, HEIGHT = 390, 900


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("phone")
    runs = root / "runs"
    for campaign, title in (("camp", "Classify the support tickets of the spring release"), ("other", "Second one")):
        manifest = factory.manifest(campaign, f"run-{campaign}", title=title)
        records.append(runs, manifest)
        for repetition in range(1, 6):
            records.append(runs, factory.trial(manifest, "b1", seconds=1 + repetition / 10, repetition=repetition,
                                               sequence=repetition))
    out = root / "site"
    assert build_site(runs=runs, out=out, languages=("en", "id"))["failed"] == {}
    return out


CELLS = """() => [...document.querySelectorAll('main table tr')].map(tr => [...tr.children].map(cell => {
    const r = cell.getBoundingClientRect(); return [cell.textContent.trim().slice(0, 20), r.left, r.right, r.top]; }))"""


@pytest.mark.parametrize("folder", ["", "id"])
def test_on_a_phone_the_index_shows_each_answer_beside_its_campaign_in_the_first_screen(site, browser, folder):
    """Regression for #60: at 390 px the answer was the 8th column, at x = 624 px, reached only by scrolling sideways."""
    page, errors, _ = watched_page(browser, width=PHONE)
    page.goto((site / folder / "index.html").as_uri(), wait_until="load")
    rows = page.evaluate(CELLS)
    for header_or_row in rows:
        first, answer = header_or_row[0], header_or_row[7]  # the table holds them in this order, on a phone too
        assert answer[1] == pytest.approx(first[2], abs=1) and answer[2] <= PHONE, header_or_row  # beside it, whole
        assert max(cell[1] for cell in header_or_row) > PHONE  # the other columns follow, in the box that scrolls
    assert rows[1][7][3] < HEIGHT and rows[1][7][0].startswith(("Decision report", "Laporan keputusan"))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE
    page.set_viewport_size({"width": 1280, "height": HEIGHT})  # a wide screen keeps the table's own order
    lefts = [cell[1] for cell in page.evaluate(CELLS)[1]]
    assert lefts == sorted(lefts)
    page.close()
    assert errors == []
    # The table itself is unchanged: a screen reader meets the campaign, its facts, then its answer, as before.
    table = BeautifulSoup((site / folder / "index.html").read_text(encoding="utf-8"), "html.parser").select_one("main table")
    assert [len(row.find_all(["th", "td"])) for row in table.find_all("tr")] == [9, 9, 9]
    assert all(row.find_all(["th", "td"])[7].a["href"].endswith("/decision.html") for row in table.tbody.find_all("tr"))


LIBRARIES = "[...document.scripts].filter(s => s.src.endsWith('/vega-embed.js')).length"


def test_the_chart_libraries_wait_until_a_chart_comes_near_the_screen(site, browser):
    """Regression for #60: asked for at the page's load, vega-embed.js (898 KB) started up while the reader read the
    answer on a phone, though the charts are screens below. Nothing is asked for until a chart is a screen away."""
    page, errors, _ = watched_page(browser, width=PHONE)
    asked = []
    page.on("request", lambda request: asked.append(request.url) if request.url.endswith("vega-embed.js") else None)
    page.goto((site / "campaigns" / "camp" / "index.html").as_uri(), wait_until="load")
    first = page.evaluate("document.querySelector('.vega').getBoundingClientRect().top")
    assert first > 2 * HEIGHT  # the precondition: the charts are further than a screen ahead
    page.wait_for_timeout(1500)
    assert (asked, page.evaluate(LIBRARIES), page.evaluate("document.querySelectorAll('[data-drawn]').length")) == ([], 0, 0)
    page.evaluate(f"window.scrollTo(0, {first} - 1.5 * innerHeight)")  # a screen away: asked for, and every chart drawn
    page.wait_for_function("[...document.querySelectorAll('.vega')].every(box => box.dataset.drawn === 'yes')", timeout=20000)
    assert len(asked) == 1 and page.evaluate(LIBRARIES) == 1
    page.close()
    assert errors == []


def test_a_page_about_to_print_draws_its_charts(site, browser):
    page, errors, _ = watched_page(browser, width=PHONE)
    page.goto((site / "campaigns" / "camp" / "index.html").as_uri(), wait_until="load")
    page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    page.wait_for_function("[...document.querySelectorAll('.vega')].every(box => box.dataset.drawn === 'yes')", timeout=20000)
    page.close()
    assert errors == []
