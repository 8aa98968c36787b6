"""Ids a newcomer can find, and a preview server that never ends in a traceback. Part of #21."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests import vega
from tests.test_corrections import CAMPAIGN, FIXTURE

RUN = "run-vm-20261203T062412Z-7432b5c24c0c"


def test_runs_lists_the_run_ids_rental_add_takes(cli):
    code, out, _ = cli("runs", CAMPAIGN, "--runs", FIXTURE, "--json")
    assert code == 0
    (run,) = json.loads(out)["runs"]
    assert (run["run_id"], run["planned"], run["recorded"], run["statuses"], run["complete"], run["rental"]) == (
        RUN, 20, 20, {"ok": 20}, True, None)
    code, text, _ = cli("runs", CAMPAIGN, "--runs", FIXTURE)
    # Regression for #37: a reader's time is to the second, the record's (and --json's) to the microsecond.
    assert text.startswith(f"{RUN}: started 2026-12-03 06:24:12 UTC on") and "20 of 20 planned trials recorded (20 ok)" in text
    assert run["started_at"].startswith("2026-12-03T06:24:12.") and run["started_at"].endswith("Z")
    code, text, _ = cli("decide", CAMPAIGN, "--runs", FIXTURE)
    assert re.search(r"recorded \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text) and not re.search(r"\d\d\.\d{6}Z", text)
    # Regression for #37: "1 lot(s)" for a CPU, which rents no lot.
    assert " min on this CPU;" in text and not re.search(r" min on \d+ lot", text)


def test_the_campaign_pages_evidence_list_names_the_run_id(tmp_path, cli):
    """Part of #21: the README sent readers to the Evidence list for a run id it did not show."""
    from bs4 import BeautifulSoup

    site = _site(tmp_path, cli)
    page = BeautifulSoup((site / "campaigns" / CAMPAIGN / "index.html").read_text(encoding="utf-8"), "html.parser")
    item = next(li for li in page.find_all("li") if li.get_text().startswith("Run "))
    assert item.get_text().startswith(f"Run {RUN} (the id rental add --run takes): manifest ")


def test_trials_lists_the_ids_deliver_and_exclude_take(cli):
    code, out, _ = cli("trials", CAMPAIGN, "--runs", FIXTURE, "--json")
    every = json.loads(out)["trials"]
    assert code == 0 and len(every) == 20 and {row["run_id"] for row in every} == {RUN}
    code, out, _ = cli("trials", CAMPAIGN, "--runs", FIXTURE, "--accepted", "--json")
    accepted = json.loads(out)["trials"]
    # The demo's int8 variant fails its agreement threshold: its 5 trials are not accepted.
    assert len(accepted) == 15 and all(row["corpus_accepted"] for row in accepted)
    assert all("int8" not in row["configuration"] for row in accepted)
    excluded = [row for row in every if row["excluded_by"]]
    assert len(excluded) == 1  # the fixture's exclusion
    code, text, _ = cli("trials", CAMPAIGN, "--runs", FIXTURE, "--run", "run-elsewhere")
    assert code == 0 and text.strip() == f"no trial of campaign {CAMPAIGN} matches"
    code, _, err = cli("trials", "demo-rotten-tomato", "--runs", FIXTURE)
    assert code == 1 and "did you mean demo-rotten-tomatoes?" in err


def _site(tmp_path: Path, cli) -> Path:
    assert cli("build", "--runs", FIXTURE, "--out", tmp_path / "site")[0] == 0
    return tmp_path / "site"


def test_serve_on_a_port_in_use_or_out_of_range_is_one_line(tmp_path, cli):
    site = _site(tmp_path, cli)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("serve", "--out", site, "--port", port)
    assert code == 1 and err.startswith(f"iteralab serve: error: cannot listen on 127.0.0.1:{port}: ") and "--port" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    code, _, err = cli("serve", "--out", site, "--port", "80000")
    assert code == 2 and "80000 is not in the range 0<=x<=65535" in err


def test_serve_on_port_0_announces_the_port_it_listens_on(tmp_path, cli):
    site = _site(tmp_path, cli)
    process = subprocess.Popen([sys.executable, "-m", "iteralab", "serve", "--out", str(site), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        assert line.startswith(f"Serving {site} on http://127.0.0.1:") and ":0/" not in line
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        with urllib.request.urlopen(url + "index.html", timeout=30) as response:
            assert response.status == 200 and b"<html" in response.read()
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_failed_quality_criterion_reads_less_than_with_the_word_failed(tmp_path, cli):
    """Part of #21: "agreement 0.957 ≥ 0.98: 0/5" stated something true-looking; only the colour said it failed."""
    from bs4 import BeautifulSoup

    site = _site(tmp_path, cli)
    for page in ("decision.html", "index.html"):
        soup = BeautifulSoup((site / "campaigns" / CAMPAIGN / page).read_text(encoding="utf-8"), "html.parser")
        verdicts = {div.get_text(): div["class"] for div in soup.select(".verdict")}
        assert verdicts["agreement 0.957 < 0.98: failed in 5 of 5"] == ["verdict", "fail"]
        assert verdicts["accuracy 0.793 ≥ 0.73: passed in 5 of 5"] == ["verdict", "pass"]
        assert not any("≥" in text and "failed" in text for text in verdicts)


def _links_resolve(page: Path, site: Path) -> list[str]:
    """Return every href of PAGE that does not lead to a file (and an element id) in the built site."""
    from bs4 import BeautifulSoup

    broken = []
    for anchor in BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").find_all("a", href=True):
        href = anchor["href"]
        if href.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, fragment = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        missing = not target.is_file() or not target.resolve().is_relative_to(site.resolve())
        if missing or (fragment and target.suffix == ".html" and not _has_id(target, fragment)):
            broken.append(href)
    return broken


def _has_id(page: Path, element_id: str) -> bool:
    from bs4 import BeautifulSoup

    return BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").find(id=element_id) is not None


def test_the_demos_note_drafted_and_signed_publishes_with_no_comment_and_no_broken_link(tmp_path, cli):
    """Part of #21: the draft comment showed as text, 'to fill in' was published, a variant link led nowhere."""
    import shutil

    from bs4 import BeautifulSoup

    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    code, out, _ = cli("note", "new", CAMPAIGN, "--runs", runs)
    assert code == 0
    note = tmp_path / "notes" / f"{CAMPAIGN}-decision.md"
    text = note.read_text(encoding="utf-8")
    # The demo ran on a CPU only: nothing to rent yet, so no CPU row is named as the decision.
    assert "decision: nothing to rent yet" in text and "selected_variant" not in text
    # The Rentals section lists the recorded rental, with its receipt and what it paid for.
    assert ("- `rental-20261203T085833Z-8f6a0a6bf228`: 1 lot(s) rtx-4090 × 3 days from 2026-12-01T09:00:00+07:00, "
            "47.14 USD; receipt sha256 6afd9c1cbf49…; linked to no run: counted in the campaign's spend, for no "
            "configuration.") in text
    code, out, _ = cli("build", "--runs", runs, "--out", tmp_path / "site")
    assert code == 0 and "problem(s) in the records and notes" in out
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    problem = (f"notes/{note.name}: unsigned note: the author is still 'to fill in'; write who signs the decision")
    assert problem in BeautifulSoup(index, "html.parser").get_text()
    page = tmp_path / "site" / "notes" / f"{note.stem}.html"
    assert problem in BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").select_one("#note-problems").get_text()
    # Signed, with a variant selected by hand: no problem, no visible comment, every link resolves.
    note.write_text(text.replace("author: to fill in", "author: Dewi Lestari").replace(
        "date:", "selected_variant: fp32-b8\ndate:"), encoding="utf-8")
    code, out, _ = cli("build", "--runs", runs, "--out", tmp_path / "site")
    assert code == 0 and "problem(s)" not in out
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    assert "Draft written" not in soup.get_text() and "<!--" not in soup.get_text() and not soup.select("#note-problems")
    assert soup.find("a", string="fp32-b8")["href"].startswith(f"../campaigns/{CAMPAIGN}/index.html#variant-fp32-b8-")
    assert _links_resolve(page, tmp_path / "site") == []


def test_a_note_naming_a_missing_campaign_or_variant_is_a_named_problem_and_the_site_builds(tmp_path, cli):
    notes = tmp_path / "notes"
    notes.mkdir()
    front = "---\ncampaign: {campaign}\ndecision: x\nselected_variant: {variant}\ndate: 2026-12-03\nauthor: Dewi\n---\nBody\n"
    (notes / "typo.md").write_text(front.format(campaign="demo-rotten-tomato", variant="fp32-b8"), encoding="utf-8")
    (notes / "variant.md").write_text(front.format(campaign=CAMPAIGN, variant="bf16-b9"), encoding="utf-8")
    code, out, _ = cli("build", "--runs", FIXTURE, "--out", tmp_path / "site", "--notes", notes, "--json")
    assert code == 0
    problems = json.loads(out)["problems"]
    assert "notes/typo.md: campaign 'demo-rotten-tomato' has no records here; check the note's campaign line" in problems
    assert (f"notes/variant.md: selected_variant 'bf16-b9' is not a variant of {CAMPAIGN} (fp32-b1, fp32-b4, fp32-b8, "
            "int8-b8)") in problems
    assert (tmp_path / "site" / "notes" / "typo.html").is_file() and (tmp_path / "site" / "campaigns" / CAMPAIGN).is_dir()


def test_a_catalog_mixing_currencies_is_refused_with_its_line(tmp_path, cli):
    catalog = tmp_path / "mixed.csv"
    catalog.write_text("catalog_version,gpu,gpu_name,cards_per_lot,memory_per_card_gb,days,price_per_lot,currency\n"
                       "v1,rtx-4090,RTX 4090,1,24,3,47.14,USD\nv1,rtx-4090,RTX 4090,1,24,7,99.00,EUR\n", encoding="utf-8")
    code, _, err = cli("cost", "--gpu", "rtx-4090", "--days", "3", "--lots", "1", "--catalog", catalog)
    assert code == 1 and err == (f"iteralab cost: error: {catalog}:3: currency EUR differs from USD at line 2; a catalog "
                                 "holds one currency: convert the prices, or keep one catalog per currency\n")


def test_a_sheet_that_cannot_be_settled_or_names_a_missing_campaign_is_a_named_problem_and_the_site_builds(tmp_path, cli):
    """Part of #21: another catalog stopped the whole build at a sheet's GPU, without naming the sheet."""
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    sheets = tmp_path / "qualification"  # beside the runs folder, where build looks: the demo's example sheets
    shutil.copytree(_demo_sheets(), sheets)
    names = sorted(path.name for path in sheets.glob("*.toml"))
    typo = sheets / names[0]
    typo.write_text(typo.read_text(encoding="utf-8").replace(f'campaign = "{CAMPAIGN}"', 'campaign = "demo-rotten-tomato"'),
                    encoding="utf-8")
    catalog = tmp_path / "other.csv"  # lists the RTX 4090 only
    catalog.write_text("catalog_version,gpu,gpu_name,cards_per_lot,memory_per_card_gb,days,price_per_lot,currency\n"
                       "2026-10-01,rtx-4090,RTX 4090,1,24,3,47.14,USD\n2026-10-01,rtx-4090,RTX 4090,1,24,7,110.00,USD\n",
                       encoding="utf-8")
    code, out, _ = cli("build", "--runs", runs, "--out", tmp_path / "site", "--catalog", catalog, "--json")
    assert code == 0
    problems = json.loads(out)["problems"]
    assert f"{typo}: campaign 'demo-rotten-tomato' has no records here; did you mean {CAMPAIGN}? Its quality and memory " \
           "stay to confirm until that campaign's records are here" in problems
    left_out = [p for p in problems if p.endswith("; the sheet is left out")]
    assert left_out and all("is not in catalog 2026-10-01" in p and str(sheets) in p for p in left_out), problems
    assert (tmp_path / "site" / "campaigns" / CAMPAIGN / "qualification.html").is_file()


def _demo_sheets() -> Path:
    from importlib import resources

    return Path(str(resources.files("iteralab") / "data" / "qualification"))


def test_one_story_of_the_money_on_every_page_and_in_decide(tmp_path, cli):
    """Part of #21: the demo's rental paid for no configuration (its runs are on a CPU): every place says so alike."""
    from bs4 import BeautifulSoup

    rental = "rental-20261203T085833Z-8f6a0a6bf228"
    code, out, _ = cli("decide", CAMPAIGN, "--runs", FIXTURE, "--json")
    data = json.loads(out)
    assert data["rentals_paid_for"] == {}
    assert data["rentals_linked_to_no_configuration"] == [{
        "record_id": rental, "gpu": "rtx-4090", "lots": 1, "days": 3, "start": "2026-12-01T09:00:00+07:00", "total": "47.14",
        "currency": "USD", "receipt_sha256": "6afd9c1cbf495f9221fe5f9d03d4f0e962babd83fd293c696e69686510611a63"}]
    assert all(row["observed"]["cost_per_validated_corpus"] is None for row in data["ranked"] + data["infeasible"])
    code, text, _ = cli("decide", CAMPAIGN, "--runs", FIXTURE)
    assert code == 0
    assert f"Rentals linked to no configuration (the campaign's spend, in no configuration's figures):\n  - {rental}: 1 " \
           "lot(s) rtx-4090 x 3 days from 2026-12-01T09:00:00+07:00, 47.14 USD" in text
    site = _site(tmp_path, cli)
    campaign = BeautifulSoup((site / "campaigns" / CAMPAIGN / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert (campaign.find(id="spend").get_text(), campaign.find(id="spend-linked").get_text()) == (
        "47.14 USD", "none: no rental is linked to a run it could pay for")
    assert campaign.find(id="spend-unlinked").get_text().startswith("47.14 USD (1 rental, listed above")
    row = next(tr for tr in campaign.select("#cost tbody tr") if "rtx-4090" in tr.get_text())
    assert row.find_all("td")[-1].get_text() == "no configuration: linked to no run it could pay for"
    decision = BeautifulSoup((site / "campaigns" / CAMPAIGN / "decision.html").read_text(encoding="utf-8"), "html.parser")
    assert f"{rental}: 1 lot(s) rtx-4090 × 3 days" in decision.select_one("#unlinked-rentals").get_text()


def test_the_decision_page_reads_as_a_decision(tmp_path, cli):
    """Part of #21: headings agree with the answer, optional items are not flagged, the window's role is explained,
    and times are readable with their zone."""
    from bs4 import BeautifulSoup

    site = _site(tmp_path, cli)
    page = BeautifulSoup((site / "campaigns" / CAMPAIGN / "decision.html").read_text(encoding="utf-8"), "html.parser")
    # #45: the fixture's CPU meets the question: said first, then that renting adds nothing it asks, then the card to measure
    said = page.select_one("#answer p").get_text()
    assert said.startswith("Answer. fp32-b8 · CPU AMD EPYC, 2 threads · torch 2.13.0+cpu meets the question without a rental: ")
    assert said.endswith(" Renting adds nothing the question asks for; a card is worth measuring only to compare.")
    # Regression for #37: the answer was one 115-word paragraph; now a short answer, then a list: the other points, and
    # the cards to measure, one per item with its price.
    points = [item.get_text(" ", strip=True) for item in page.select("#answer ul.points > li")]
    cards = [item.get_text(" ", strip=True) for item in page.select("#answer ul.points > li > ul > li")]
    assert points and cards and all(":" in card and "USD" in card for card in cards)
    assert any(card.startswith("RTX 4090: 94.28 USD for one lot") for card in cards)
    assert points[0].startswith("Measure next on RTX 4090, the cheapest card not measured for this window")
    assert len(page.select_one("#answer p").get_text().split()) < 70
    assert page.select_one("#feasible h2").get_text() == (
        "Feasible but not priced: they meet every condition on hardware the catalog does not price")
    optional = page.select_one("#question p.note")
    assert optional.get_text() == ("Optional, not stated: a deadline; a budget ceiling. Nothing is missing: the answer "
                                   "simply checks no deadline or budget.")
    assert not page.select("#question .warning")  # nothing required is missing, so nothing is in red
    assert page.select_one("#window-role").get_text().startswith("Why the window sets the package: a package is bought "
                                                                 "for whole periods")
    assert "96 h, 2026-09-28 09:00 UTC+07:00 to 2026-10-02 09:00 UTC+07:00 (read in Asia/Jakarta)" in \
        page.select_one("#question").get_text()
    assert "2026-12-03 06:24 UTC" in page.select_one("#feasible").get_text()
    import re

    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d+Z", page.get_text())  # no raw ISO time with microseconds


def test_the_projected_hours_chart_is_readable_at_any_scale_with_its_data(tmp_path, cli):
    """Part of #21: bars of 0.04 h on a 0-100 h axis looked empty; a log axis shows minutes and the window together."""
    from bs4 import BeautifulSoup

    site = _site(tmp_path, cli)
    page = BeautifulSoup((site / "campaigns" / CAMPAIGN / "decision.html").read_text(encoding="utf-8"), "html.parser")
    chart = page.select_one("#chart-projected-hours")
    drawn = vega.texts(vega.drawn(vega.spec_of(page, "projected-hours")))
    assert "projected processing hours, min to max (log scale: each step is ten times the last)" in drawn
    rows = {tr.th.get_text() if tr.th else tr.td.get_text(): tr.get_text(" ") for tr in chart.select("table tbody tr")}
    fp32_b8 = next(text for label, text in rows.items() if label.startswith("fp32-b8"))
    assert "2.4 min to 2.7 min" in fp32_b8  # the data table beside it, in words
    assert "0.01" in drawn and "100" in drawn  # minutes and the 96 h window on one axis


def test_the_bundles_cost_rows_tell_the_same_story(tmp_path, cli):
    """Part of #21: the FOCUS rows say which configurations a rental paid for, or that it paid for none."""
    import csv
    import io
    import zipfile

    assert cli("bundle", CAMPAIGN, "--runs", FIXTURE, "-o", tmp_path / "b.zip")[0] == 0
    with zipfile.ZipFile(tmp_path / "b.zip") as bundle:
        name = next(n for n in bundle.namelist() if n.endswith("costs.focus.csv"))
        rows = list(csv.DictReader(io.StringIO(bundle.read(name).decode("utf-8"))))
    (rental,) = [row for row in rows if row["ChargeCategory"] == "Purchase"]
    assert rental["x_Configuration"] == ""
    assert rental["ChargeDescription"].endswith("; linked to no configuration: the campaign's spend only")
