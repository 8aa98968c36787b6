"""#45: a campaign page names the machine its configurations share once per table, each row by its variant; rows of
different machines keep their whole labels. Read from the demo's real records and a campaign merged from two machines."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from iteralab.ledger import exclusions
from iteralab.site.build import build_site
from tests.test_decision import CPU, RTX_4090, write_machine

DEMO = "demo-rotten-tomatoes"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The demo's checked-in records beside a campaign run on an RTX 4090 and on a CPU, built in English."""
    root = tmp_path_factory.mktemp("campaign-tables")
    runs = root / "runs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "demo-runs", runs)
    for run_id, environment, durations in (("run-4090", RTX_4090, {"b1": [100, 102, 104, 106, 108], "b8": [30, 31, 32, 33, 34]}),
                                           ("run-cpu", CPU, {"b1": [500, 510, 520, 530, 540]})):
        write_machine(runs, run_id, environment, durations, campaign="two-machines")
    assert build_site(runs=runs, out=root / "site")["failed"] == {}
    return root


def page(built, campaign: str, name: str = "index.html") -> BeautifulSoup:
    soup = BeautifulSoup((built / "site" / "campaigns" / campaign / name).read_text(encoding="utf-8"), "html.parser")
    for script in soup("script"):  # the charts' specs: data, not text a reader reads
        script.decompose()
    return soup


def labels(built, campaign: str) -> list[str]:
    """Return each configuration's whole label as the records make it: 'variant · hardware · software'."""
    return [summary.label for summary in exclusions.campaign_view(built / "runs", campaign).variants]


def test_the_demos_campaign_page_names_its_machine_once_per_table(built):
    whole = labels(built, DEMO)
    machine = whole[0].partition(" · ")[2]
    assert machine.startswith("CPU ") and " · torch " in machine and all(label.endswith(f" · {machine}") for label in whole)
    soup = page(built, DEMO)
    tables = soup.select("main table")
    counts = {table.caption.get_text(" ", strip=True)[:50]: table.get_text(" ").count(machine) for table in tables}
    assert max(counts.values()) == 1, counts  # the regression: every row of these tables said it (over 20 on the page)
    # The tables whose rows are configurations say it in their caption; each row is its variant alone.
    for selector in ("#compatibility table", "table.variants", "#memory-estimate table", "table.exclusion"):
        table = soup.select_one(selector)
        assert machine in table.caption.get_text(" "), selector
        assert [row.th.get_text() for row in table.select("tbody tr") if row.th] == [label.partition(" · ")[0] for label in whole]
    for chart_table in soup.select("#charts table"):  # the charts' data tables, as the charts say it: once, above
        assert chart_table.caption.get_text(" ").count(machine) == 1
    # The separation sentences: the machine once above them, then the variants by name.
    separation = soup.select_one("#separation")
    assert separation.get_text(" ").count(machine) == 1
    sentences = [item.get_text() for item in separation.select("li")]
    assert len(sentences) == 6 and all(re.match(r"(fp32|int8)-b\d ", sentence) for sentence in sentences), sentences
    # Nowhere else on the page but in the answer at its top, which names the configuration whole.
    assert machine in soup.select_one("#decision-link").get_text()
    assert soup.get_text(" ").count(machine) == sum(counts.values()) + 2


def test_a_campaign_from_two_machines_keeps_each_rows_machine(built):
    whole = labels(built, "two-machines")
    assert len(whole) == 3 and len({label.partition(" · ")[2] for label in whole}) == 2
    soup = page(built, "two-machines")
    assert soup.select(".machine") == []  # no machine said once: they differ
    rows = [row.th.get_text() for row in soup.select("table.variants tbody tr")]
    assert sorted(rows) == sorted(whole)  # both b1 rows told apart by their machines
    separation = soup.select_one("#separation").get_text(" ")
    assert "b1 · 1× NVIDIA GeForce RTX 4090" in separation and "b1 · CPU Test CPU" in separation
    assert sorted(row.th.get_text() for row in soup.select("#memory-estimate tbody tr")) == sorted(whole)


def test_the_demos_decision_page_names_its_machine_once_per_table(built):
    machine = labels(built, DEMO)[0].partition(" · ")[2]
    soup = page(built, DEMO, "decision.html")
    counts = {table.caption.get_text(" ", strip=True)[:50]: table.get_text(" ").count(machine) for table in soup.select("main table")}
    assert max(counts.values()) == 1, counts  # the details table said it in every row, the exclusion table too
    rows = [th.get_text(" ", strip=True) for th in soup.select("table.decision tbody th, table.decision-details tbody th")]
    assert rows and all(re.fullmatch(r"(fp32|int8)-b\d", row) for row in rows), rows


def test_a_decision_from_two_machines_keeps_each_rows_machine(built):
    soup = page(built, "two-machines", "decision.html")
    # A chart of the feasible rows alone (all on the RTX 4090) says its machine once, as its data table does.
    assert [said for said in soup.select(".machine") if not said.find_parent("figure")] == []
    rows = [th.get_text(" ", strip=True) for th in soup.select("table.decision tbody th")]
    assert any("RTX 4090" in row for row in rows) and any("CPU Test CPU" in row for row in rows), rows
