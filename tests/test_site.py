"""The static site, parsed with BeautifulSoup and checked against the records it was built from."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import zipfile

import pytest
from bs4 import BeautifulSoup

from iteralab.core import workers
from iteralab.site import output
from iteralab.site.build import build_site
from iteralab.store import reading, records
from tests import factory, vega
from tests.conftest import run_module

SECONDS = [1.30, 1.10, 1.25, 1.40, 1.20]


def soup(path):
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


@pytest.fixture
def runs(tmp_path):
    """A campaign with two variants (five trials each, one OOM) and one with only failures."""
    folder = tmp_path / "runs"
    manifest = factory.manifest(model_name="<script>alert(1)</script>", title="Reviews <b>bold</b>")
    records.append(folder, manifest)
    sequence = 0
    for repetition, seconds in enumerate(SECONDS, start=1):
        for variant, scale in (("b1", 1.0), ("b8", 0.5)):
            sequence += 1
            records.append(folder, factory.trial(manifest, variant, seconds=seconds * scale, repetition=repetition,
                                                 sequence=sequence, batch_size=int(variant[1:])))
    records.append(folder, factory.trial(manifest, "b8", status="oom", repetition=6, sequence=99, failed_phase="measured_window",
                                         entries_completed=48, error="OutOfMemoryError: CUDA out of memory", batch_size=8))
    records.append(folder, factory.rental())
    broken = factory.manifest("broken", "run-b")
    records.append(folder, broken)
    records.append(folder, factory.trial(broken, "only", status="error", failed_phase="model_load", error="OSError: <no weights>"))
    return folder


@pytest.fixture
def site(runs, tmp_path):
    out = tmp_path / "site"
    build_site(runs=runs, out=out)
    return out


def variant_row(page, name):
    return next(row for row in page.select("tr[id^=variant-]") if row.th.get_text().split(" · ")[0] == name)


def test_variant_row_shows_the_five_raw_durations_in_run_order_and_their_median_min_max(site):
    page = soup(site / "campaigns" / "camp" / "index.html")
    row = variant_row(page, "b1")
    shown = [a.get_text() for a in row.select("td.runs a.duration")]
    assert shown == [f"{value:.3f} s" for value in SECONDS]
    cells = [td.get_text(" ", strip=True) for td in row.find_all("td")]
    assert f"{statistics.median(SECONDS):.3f} s" in cells
    assert f"{min(SECONDS):.3f} s" in cells and f"{max(SECONDS):.3f} s" in cells


def test_failure_rows_are_visible_with_phase_and_entries_completed(site):
    page = soup(site / "campaigns" / "camp" / "index.html")
    failure = page.select_one("table.failures tr.failure")
    text = failure.get_text(" ", strip=True)
    assert "oom" in text and "measured_window" in text and "48 / 100" in text and "OutOfMemoryError" in text
    assert variant_row(page, "b8").find_all("td")[7].get_text() == "1"  # the Failed column


def test_cost_block_shows_spend_and_undefined_cost_without_deliverables(site):
    page = soup(site / "campaigns" / "camp" / "index.html")
    assert page.find(id="spend").get_text(strip=True) == "47.14 USD"
    assert page.find(id="deliverables").get_text(strip=True) == "0"
    assert page.find(id="cost-per-corpus").get_text(strip=True) == "undefined: no configuration has both its own rentals and accepted deliverables"
    assert page.find(id="spend-linked").get_text(strip=True) == "none: no rental is linked to a run it could pay for"


def test_distinct_corpora_count_once_and_unlinked_spend_is_never_divided_by_them(runs, tmp_path):
    """Three distinct corpora delivered, one of them twice by two teams: 3, not 4. The rentals pay for no configuration
    (a campaign-wide 267.14 ÷ 3 mixed cards and corpora, #21): the cost per corpus is undefined, the spend apart."""
    loaded = reading.load(runs)
    accepted = [t for t in loaded.of_kind("trial") if t["corpus_accepted"]]
    records.append(runs, factory.rental(total="220.00", lots=2))
    for trial, corpus in zip(accepted, "cdee", strict=False):
        records.append(runs, factory.deliverable("camp", trial, corpus=corpus))
    out = tmp_path / "site2"
    build_site(runs=runs, out=out)
    page = soup(out / "campaigns" / "camp" / "index.html")
    assert page.find(id="spend").get_text(strip=True) == "267.14 USD"
    assert page.find(id="deliverables").get_text(strip=True) == "3"
    assert page.find(id="cost-per-corpus").get_text(strip=True) == "undefined: no configuration has both its own rentals and accepted deliverables"
    assert page.find(id="spend-unlinked").get_text(strip=True).startswith("267.14 USD (2 rentals, listed above")
    assert "repeats the corpus" in page.find(id="problems").get_text()


def test_record_strings_are_escaped(site):
    for path in site.rglob("*.html"):
        page = soup(path)
        # The scripts are the 404 page's own (it leads an old trial link to its section of trials.html), the chart
        # libraries and their specs: JSON, never run, with no record's '<' in it (#34).
        inline = [script for script in page.find_all("script") if not script.get("src")]
        specs = [script for script in inline if script.get("type") == "application/json"]
        assert len(inline) - len(specs) == (path.name == "404.html"), path
        assert all(script["id"].startswith("spec-") and "<" not in script.string for script in specs), path
        assert {script["src"].rpartition("/")[2] for script in page.find_all("script", src=True)} <= {"vega-embed.js", "charts.js"}
        assert not page.find("b", string="bold"), path
    index = soup(site / "index.html")
    assert "Reviews <b>bold</b>" in index.get_text()
    assert "OSError: <no weights>" in soup(site / "campaigns" / "broken" / "trials.html").get_text()


def test_missing_values_are_empty_with_a_reason_never_zero(site):
    page = soup(site / "campaigns" / "camp" / "index.html")
    cells = variant_row(page, "b1").find_all("td")
    gpu_allocated, gpu_reserved = cells[12], cells[13]
    for cell in (gpu_allocated, gpu_reserved):
        missing = cell.find(class_="missing")
        assert missing["data-missing"] == "no GPU: the variant runs on cpu"
        assert "0" not in cell.get_text()



def test_host_memory_of_a_variant_without_success_gives_its_own_reason(site):
    """The host RSS cell of a variant that never succeeded must not blame a missing GPU."""
    cells = variant_row(soup(site / "campaigns" / "broken" / "index.html"), "only").find_all("td")
    gpu_allocated, host_rss = cells[12], cells[14]
    assert gpu_allocated.find(class_="missing")["data-missing"] == "no GPU: the variant runs on cpu"
    assert host_rss.find(class_="missing")["data-missing"] == "no successful trial measured it"


def test_no_tail_percentile_is_computed_from_five_runs(site):
    """Regression for #13: no percentile of any kind, in any wording, on any page or CSV."""
    import re

    pattern = re.compile(r"\bp\d{1,2}(\.\d+)?\b|percentile|quantile|\b\d{1,2}(st|nd|rd|th)\b|\bq[1-3]\b|interquartile|\biqr\b")
    for path in [*site.rglob("*.html"), *site.rglob("*.csv")]:
        text = soup(path).get_text(" ").lower() if path.suffix == ".html" else path.read_text(encoding="utf-8").lower()
        text = " ".join(text.split()).replace("no tail percentile is computed from", "")  # the caption that says so
        assert not pattern.search(text), (path, pattern.search(text))


def test_every_cell_of_a_configuration_without_success_is_empty_with_its_reason(site):
    """Regression for #13: median, min, max and throughput were made to return 0.0 and no test noticed."""
    import re

    cells = variant_row(soup(site / "campaigns" / "broken" / "index.html"), "only").find_all("td")
    # series, settings, durations, median, min, max, ok, failed, throughput, verdict, ids_match, accepted, 3 memory peaks
    for index in (2, 3, 4, 5, 8, 9, 10, 12, 13, 14):
        missing = cells[index].find(class_="missing")
        assert missing is not None and missing["data-missing"], index
        assert not re.search(r"\d", cells[index].get_text()), (index, cells[index].get_text())
    assert [cells[index].get_text(strip=True) for index in (6, 7, 11)] == ["0", "1", "0/0"]  # counts, not measurements


def test_campaign_with_only_failures_still_renders_with_its_failure(site):
    page = soup(site / "campaigns" / "broken" / "index.html")
    assert "model_load" in page.select_one("table.failures").get_text()
    assert "no successful trial" in variant_row(page, "only").get_text()


def test_torn_lines_are_listed_on_the_pages(runs, tmp_path):
    path = next((runs / "camp" / "records").glob("*.jsonl"))
    with open(path, "ab") as handle:
        handle.write(b'{"kind": "tri')
    out = tmp_path / "torn"
    build_site(runs=runs, out=out)
    assert "incomplete last line" in soup(out / "index.html").find(class_="problems").get_text()
    assert "incomplete last line" in soup(out / "campaigns" / "camp" / "index.html").find(id="problems").get_text()


def test_charts_are_vega_lite_specs_with_their_data_beside_them(site):
    """#34: a chart is its Vega-Lite spec (drawn by the one vendored vega-embed file) beside its data table."""
    page = soup(site / "campaigns" / "camp" / "index.html")
    figure = page.find(id="chart-durations")
    assert "median" in figure.figcaption.get_text()
    assert len(figure.find("details").find_all("tr")) == 1 + 10  # header + ten successful trials
    spec = vega.spec_of(page, "durations")
    assert len(spec["datasets"][spec["data"]["name"]]) == 10
    assert figure.select_one('.vega[role="img"]')["aria-label"] == "Measured window per successful trial"
    # The page loads charts.js alone; it asks for the libraries once the page has loaded (#48), from data-libraries.
    scripts = [script["src"] for script in page.select("script[src]")] + [page.select_one("script[data-libraries]")["data-libraries"]]
    assert scripts == ["../../assets/charts.js", "../../assets/vendor/vega-embed.js"]
    assert all((site / "campaigns" / "camp" / src).is_file() for src in scripts)
    assert (site / "assets" / "vendor" / "THIRD-PARTY-LICENSES.txt").is_file()
    assert vega.marks(vega.drawn(spec)) >= 10
    assert not soup(site / "catalog.html").select("script[src]")  # a page without charts loads no chart library


def test_every_page_links_the_favicon_its_language_folder_ships(tmp_path):
    """Regression for #48: no favicon, so a browser's request for /favicon.ico failed on every page. Each language's
    folder has favicon.ico (an ICO of 16 and 32 pixel PNG images), and every page links the one of its folder."""
    import struct

    from tests import hostile

    out = tmp_path / "site"
    build_site(runs=hostile.FIXTURE, out=out, languages=("en", "id"))
    for folder in (out, out / "id"):
        data = (folder / "favicon.ico").read_bytes()
        reserved, kind, count = struct.unpack("<HHH", data[:6])
        entries = [struct.unpack("<BBBBHHII", data[6 + 16 * index:22 + 16 * index]) for index in range(count)]
        assert (reserved, kind, [entry[:2] for entry in entries]) == (0, 1, [(16, 16), (32, 32)])
        for *_, size, offset in entries:
            image = data[offset:offset + size]
            assert image.startswith(b"\x89PNG\r\n\x1a\n") and image.endswith(b"IEND\xaeB`\x82") and len(image) == size
        pages = [path for path in folder.rglob("*.html") if path.name != "404.html" and (folder == out) != ("id" in path.relative_to(out).parts[:1])]
        assert len(pages) == 7  # index, catalog, sizing, and the campaign's four pages
        for path in pages:
            (icon,) = soup(path).select('link[rel="icon"]')
            assert (path.parent / icon["href"]).resolve() == (folder / "favicon.ico").resolve(), path
    assert (out / "favicon.ico").read_bytes() == (out / "id" / "favicon.ico").read_bytes()


def test_every_link_is_relative_and_resolves(site):
    """Every link leads to a file of the site, and a link to a section (trials.html#TRIAL_ID) to an element with that id."""
    ids = {}
    for path in site.rglob("*.html"):
        page = soup(path)
        for tag in page.find_all(["a", "link"], href=True):
            href, _, fragment = tag["href"].partition("#")
            if not href:
                continue
            if path.name == "404.html":  # served for a missing path at any depth: its links start at the site's root
                assert href.startswith("/") and (site / href.lstrip("/")).exists(), href
                continue
            assert "://" not in href and not href.startswith("/"), (path, href)
            target = (path.parent / href).resolve()
            assert target.exists(), (path, href)
            if fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = {tag["id"] for tag in soup(target).find_all(id=True)}
                assert fragment in ids[target], (path, tag["href"])


def test_two_builds_of_the_same_records_are_byte_identical(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")

    def digest(folder):
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}

    build_site(runs=runs, out=tmp_path / "one")
    build_site(runs=runs, out=tmp_path / "two")
    assert digest(tmp_path / "one") == digest(tmp_path / "two")
    assert "built 2026-" in (tmp_path / "one" / "index.html").read_text()


def test_rebuild_renders_only_the_changed_campaign(runs, tmp_path):
    out = tmp_path / "site"
    first = build_site(runs=runs, out=out)
    assert sorted(first["rendered"]) == ["broken", "camp"]
    assert build_site(runs=runs, out=out)["rendered"] == []
    broken = next(m for m in reading.load(runs).of_kind("manifest") if m["campaign"] == "broken")
    records.append(runs, factory.trial(broken, "only", seconds=2.0, sequence=2))
    assert build_site(runs=runs, out=out)["rendered"] == ["broken"]


def test_catalog_page_shows_gb_and_gib_and_not_listed(site):
    page = soup(site / "catalog.html")
    rows = {row.th.get_text(" ", strip=True).split(" ")[0] + " " + row.th.get_text(" ", strip=True).split(" ")[1]: row
            for row in page.select("tbody tr")}
    rtx = rows["RTX 4090"].get_text(" ", strip=True)
    assert "24 GB" in rtx and "22.35 GiB" in rtx and "47.14 USD" in rtx and "not listed" in rtx
    assert "not stated" in rows["B200 b200"].get_text()


def test_decision_notes_render_and_link_both_ways(runs, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "choose-b8.md").write_text(
        "---\ncampaign: camp\ndecision: Rent batch 8 on RTX 4090\nselected_variant: b8\nworkload_covered: 100 texts\n"
        "date: 2026-10-01\nauthor: Publishing team\n---\n\nBatch 8 halves the time. <script>x</script>\n", encoding="utf-8")
    out = tmp_path / "site"
    build_site(runs=runs, out=out, notes=notes)
    note = soup(out / "notes" / "choose-b8.html")
    assert note.find("a", href="../campaigns/camp/index.html")
    assert not note.find("script") and "<script>x</script>" in note.get_text()
    campaign = soup(out / "campaigns" / "camp" / "index.html")
    assert campaign.find("a", href="../../notes/choose-b8.html").get_text() == "Rent batch 8 on RTX 4090"
    assert soup(out / "index.html").find("a", href="notes/choose-b8.html")


def test_bad_note_front_matter_is_a_clear_error(runs, tmp_path, cli):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "bad.md").write_text("---\ncampaign: camp\n---\nno decision\n", encoding="utf-8")
    code, _, err = cli("build", "--runs", runs, "--out", tmp_path / "site", "--notes", notes)
    assert code == 1 and "bad.md: front matter lacks decision, date, author" in err


def test_build_cli_ends_with_the_index_path(runs, tmp_path, cli):
    code, out, _ = cli("build", "--runs", runs, "--out", tmp_path / "site")
    assert code == 0 and out.strip().splitlines()[-1] == f"Site: {(tmp_path / 'site' / 'index.html').resolve()}"


def test_campaign_page_shows_estimate_beside_observed_peaks(site):
    page = soup(site / "campaigns" / "camp" / "index.html")
    row = page.find(id="memory-estimate").find("tbody").find("tr")
    cells = row.find_all("td")
    assert cells[0].find(class_="missing") is not None  # the factory manifest records no parameter count
    # Factory records predate the host baseline (#44): the raw peak is said for what it is, interpreter and torch included.
    assert "no GPU" in cells[3].get_text() and "counts the interpreter and torch with the model" in cells[5].get_text()


@pytest.mark.slow
def test_serve_previews_the_site_on_localhost(site):
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "iteralab", "serve", "--out", str(site), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as response:
                    body = response.read().decode("utf-8")
                break
            except OSError:
                time.sleep(0.1)
        assert "Benchmark campaigns" in body
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_build_on_two_processes_writes_the_same_bytes_as_on_one(runs, tmp_path, monkeypatch):
    """Regression for #7: campaigns rendered by forked workers (a fresh CLI process) equal a one-process build."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")

    def digest(folder):
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}

    parallel = run_module("build", "--runs", runs, "--out", tmp_path / "a" / "site", "--processes", "2")
    assert parallel.returncode == 0, parallel.stderr
    assert "on 2 processes" in parallel.stdout
    single = run_module("build", "--runs", runs, "--out", tmp_path / "b" / "site", "--processes", "1")
    assert single.returncode == 0 and "re-rendered: broken, camp;" in single.stdout
    assert digest(tmp_path / "a" / "site") == digest(tmp_path / "b" / "site")
    assert 'id="spec-durations"' in (tmp_path / "a" / "site" / "campaigns" / "camp" / "index.html").read_text()  # the workers made the charts


def _worker_answer(value):
    import os

    return os.getpid(), value, workers.shared()["greeting"]


def test_a_process_running_other_threads_still_renders_on_several_processes():
    """Workers are spawned, never forked: the build reads records with pandas and pyarrow, which start threads."""
    started, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (started.set(), release.wait()))
    thread.start()
    started.wait()
    try:
        assert workers.choose_workers(2, 10**6, 10) == 2
        results = workers.run(_worker_answer, [(1,), (2,), (3,)], 2, {"greeting": "shared once"})
    finally:
        release.set()
        thread.join()
    assert [value for _, value, _ in results] == [1, 2, 3] and {shared for _, _, shared in results} == {"shared once"}
    assert os.getpid() not in {pid for pid, _, _ in results}
    assert workers.choose_workers(None, 10, 10) == 1  # too little work to start workers


def test_a_script_without_a_main_guard_builds_on_two_processes(runs, tmp_path):
    """Spawned workers do not import the caller's script: unguarded, each worker would run the build again, fail, and
    be started anew without end (seen while measuring #22)."""
    script = tmp_path / "build_it.py"
    script.write_text("from iteralab.site.build import build_site\n"
                      f"result = build_site(runs={str(runs)!r}, out={str(tmp_path / 'site')!r}, processes=2)\n"
                      "print('processes', result['processes'], 'rendered', len(result['rendered']))\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "processes 2 rendered 2"


def test_a_missing_prediction_file_is_listed_and_restoring_it_rebuilds_the_campaign(runs, tmp_path):
    """Regression for #7: prediction files are found from one listing of runs/, not one check per trial."""
    out = tmp_path / "site"
    build_site(runs=runs, out=out)
    problems = soup(out / "campaigns" / "camp" / "index.html").select("#problems code")
    assert any("camp/predictions/p.csv: prediction file of trial" in problem.get_text() for problem in problems)
    trial = next(t for t in reading.load(runs).of_kind("trial") if t["campaign"] == "camp" and t["status"] == "ok")
    section = soup(out / "campaigns" / "camp" / "trials.html").find(id=trial["record_id"])
    assert "is missing from the runs folder" in section.get_text()

    (runs / "camp" / "predictions").mkdir(parents=True)
    (runs / "camp" / "predictions" / "p.csv").write_text("id,label,score\ne1,pos,0.9\n", encoding="utf-8")
    assert build_site(runs=runs, out=out)["rendered"] == ["camp"]
    assert not soup(out / "campaigns" / "camp" / "index.html").select("#problems code")
    with zipfile.ZipFile(out / "campaigns" / "camp" / "evidence-camp.zip") as bundle:  # predictions travel in the bundle
        assert bundle.read("camp-evidence/data/predictions/p.csv") == b"id,label,score\ne1,pos,0.9\n"
    section = soup(out / "campaigns" / "camp" / "trials.html").find(id=trial["record_id"])
    assert "data/predictions/p.csv in the evidence bundle evidence-camp.zip" in section.get_text(" ", strip=True)


def test_the_no_change_digest_reads_a_predictions_folder_by_its_times_and_sees_a_file_added_or_removed(tmp_path):
    """#45: a no-change rebuild listed every prediction file (100,000 names, a fifth of a second); the folder's times
    stand for its names now: a file added, removed or renamed changes them, as a changed name changed the listing."""
    folder = tmp_path / "camp" / "predictions"
    folder.mkdir(parents=True)
    (folder / "a.csv").write_text("id,label\n", encoding="utf-8")
    (tmp_path / "camp" / "deeper" / "predictions").mkdir(parents=True)
    (tmp_path / "camp" / "deeper" / "predictions" / "x.csv").write_text("x\n", encoding="utf-8")
    summary = [relative for relative, _ in output.list_files(tmp_path, summarised=True)]
    assert summary == ["camp/deeper/predictions/x.csv", "camp/predictions/"]  # only a campaign's own folder is summarised

    def digest() -> str:
        return output.inputs_digest(output.list_files(tmp_path, summarised=True), tmp_path / "notes", tmp_path / "sheets", None)

    first = digest()
    (folder / "a.csv").write_text("id,label\ne1,pos\n", encoding="utf-8")  # rewritten in place: its name stands for it
    assert digest() == first
    # Each change below moves the folder's modification time from a set old value to now: seen whatever the clock's tick.
    for change in (lambda: (folder / "b.csv").write_text("id,label\n", encoding="utf-8"), (folder / "b.csv").unlink,
                   lambda: (folder / "a.csv").rename(folder / "c.csv")):
        os.utime(folder, ns=(10**18, 10**18))
        before = digest()
        change()
        assert digest() != before
        os.utime(folder, ns=(10**18, 10**18))  # the same times again: only the change of ctime (never settable) differs
        assert digest() != before


def test_the_runs_listing_matches_the_loaders_and_survives_a_link_loop(tmp_path):
    """The no-change check lists runs/ as the record loader's rglob does: linked folders are not entered."""
    (tmp_path / "camp" / "records").mkdir(parents=True)
    (tmp_path / "camp" / "records" / "run.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "camp" / "records" / "back").symlink_to(tmp_path / "camp")
    (tmp_path / "camp" / "linked.csv").symlink_to(tmp_path / "camp" / "records" / "run.jsonl")
    expected = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert [relative for relative, _ in output.list_files(tmp_path)] == expected == ["camp/linked.csv", "camp/records/run.jsonl"]


def test_a_build_where_no_worker_can_be_started_renders_every_campaign_itself(runs, tmp_path, monkeypatch):
    """A sandbox that refuses new processes makes a build slower, never fails it."""
    from iteralab.core import processes

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")
    refusals = []

    def refused(count, **options):
        refusals.append(count)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(processes, "spawned_pool", refused)
    result = build_site(runs=runs, out=tmp_path / "refused", processes=2)
    assert refusals == [2] and sorted(result["rendered"]) == ["broken", "camp"]
    alone = build_site(runs=runs, out=tmp_path / "alone", processes=1)
    assert sorted(p.name for p in (tmp_path / "refused").rglob("*")) == sorted(p.name for p in (tmp_path / "alone").rglob("*"))
    assert alone["rendered"] == result["rendered"]


def test_a_site_published_below_a_path_serves_a_working_404_page(tmp_path):
    """Regression for #33: 404.html linked from the host's root, so a site under https://host/team/site/ got a broken one."""
    import functools
    import http.server
    import threading
    import urllib.error
    import urllib.request

    from iteralab.site.build import build_site
    from tests import hostile

    served = tmp_path / "served"
    build_site(runs=hostile.FIXTURE, out=served / "team" / "site", languages=("en", "id"),
               base_url="https://example.org/team/site")

    class Host(http.server.SimpleHTTPRequestHandler):
        """A static host set to answer a missing path below the site with the site's own 404.html, as hosts are."""

        def log_message(self, *args):
            pass

        def send_error(self, code, message=None, explain=None):
            folder = "team/site/id" if self.path.startswith("/team/site/id/") else "team/site"
            body = (served / folder / "404.html").read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Host, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        for missing in ("/team/site/campaigns/demo-rotten-tomatoes/trials/old.html", "/team/site/id/no/such/page.html"):
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(base + missing)
            page = BeautifulSoup(answer.value.read().decode("utf-8"), "html.parser")
            links = [tag.get("href") or tag.get("src") for tag in page.find_all(["a", "link", "script", "img"])]
            below = [link for link in links if link and link.startswith("/")]
            assert below and all(link.startswith("/team/site/") for link in below), below
            for link in below:  # the stylesheet, the index, the other language: each is there
                with urllib.request.urlopen(base + link) as response:
                    assert response.status == 200, link
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("url", ["team/site", "ftp://example.org/site/", "https://example.org/a/../b/", "/site/?x=1"])
def test_a_base_url_that_cannot_be_published_under_is_one_line_and_writes_nothing(tmp_path, cli, url):
    from tests import hostile

    code, _, err = cli("build", "--runs", hostile.FIXTURE, "--out", tmp_path / "site", "--base-url", url)
    assert code == 1 and "--base-url" in err and "is not where a site can be published" in err
    assert not (tmp_path / "site").exists()


def test_the_footer_and_the_index_name_the_newest_record_of_any_kind(tmp_path, monkeypatch):
    """Regression for #37: "records up to" and "Last record" said 11:33 where the newest record, an expense, was 13:57."""
    from iteralab.pages.render import moment
    from iteralab.site.build import build_site
    from iteralab.store import reading
    from tests import hostile

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    loaded = reading.load(hostile.FIXTURE)
    newest = max(record["created_at"] for record in loaded.records)
    runs_end = max(record["created_at"] for record in loaded.records if record["kind"] in ("manifest", "trial"))
    assert newest > runs_end and max(loaded.records, key=lambda r: r["created_at"])["kind"] == "expense"
    build_site(runs=hostile.FIXTURE, out=tmp_path / "site")
    campaign = (tmp_path / "site" / "campaigns" / hostile.CAMPAIGN / "index.html").read_text(encoding="utf-8")
    footer = BeautifulSoup(campaign, "html.parser").find("footer").get_text(" ", strip=True)
    assert f"records up to {moment(newest)}" in footer
    index = BeautifulSoup((tmp_path / "site" / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert moment(newest) in index.select_one("tbody tr").get_text(" ", strip=True)


def _english_amounts(page_html: str) -> list[str]:
    """Return the amounts of a page written the English way ('47.14 USD', '2,071.00 USD'), outside code and charts."""
    import re

    soup = BeautifulSoup(page_html, "html.parser")
    for quoted in soup(["svg", "script", "style", "code", "pre"]):
        quoted.decompose()
    return re.findall(r"\b\d[\d,]*\.\d+ USD\b", soup.get_text(" "))


def test_every_amount_on_an_indonesian_page_is_written_the_indonesian_way(tmp_path):
    """Regression for #37: rentals and expenses showed '47.14 USD' and '12.50 USD' beside '47,14' on Indonesian pages."""
    from iteralab.site.build import build_site
    from tests import hostile

    site = tmp_path / "site"
    build_site(runs=hostile.FIXTURE, out=site, languages=("en", "id"))
    pages = sorted((site / "id").rglob("*.html"))
    assert len(pages) >= 8
    assert {str(path.relative_to(site)): found for path in pages
            if (found := _english_amounts(path.read_text(encoding="utf-8")))} == {}
    indonesian = (site / "id" / "campaigns" / hostile.CAMPAIGN / "index.html").read_text(encoding="utf-8")
    assert "47,14 USD" in indonesian  # the rental, said as every other amount is
    # The check itself finds English amounts: the English build's pages are full of them.
    assert "47.14 USD" in _english_amounts((site / "campaigns" / hostile.CAMPAIGN / "index.html").read_text(encoding="utf-8"))


def test_a_plain_build_builds_every_language_the_site_holds_and_one_left_out_is_removed(tmp_path, cli):
    """Regression for #37: a plain build after --lang en --lang id left site/id/ behind, stale and unlinked."""
    from tests import hostile

    runs, site = tmp_path / "runs", tmp_path / "site"
    shutil.copytree(hostile.FIXTURE, runs)
    assert cli("build", "--runs", runs, "--out", site, "--lang", "en", "--lang", "id")[0] == 0
    (runs / hostile.CAMPAIGN / "records" / "run-vm-20261203T062412Z-7432b5c24c0c.jsonl").touch()  # a change to build
    code, out, err = cli("build", "--runs", runs, "--out", site)
    assert code == 0, err
    assert "Bahasa Indonesia:" in out and (site / "id" / "index.html").is_file()
    english = BeautifulSoup((site / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert english.select_one('a.language[hreflang="id"]')["href"] == "id/index.html"  # still linked to its twin
    code, out, err = cli("build", "--runs", runs, "--out", site, "--lang", "en")
    assert code == 0, err
    assert "Bahasa Indonesia (id/) removed" in out and not (site / "id").exists()
    english = BeautifulSoup((site / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert english.select_one('a.language[hreflang="id"]') is None


def test_an_excluded_trial_is_marked_in_the_run_order_table_and_the_trials_contents(tmp_path):
    """Regression for #37: an excluded trial looked like any other in "Every trial in run order" and the trials page's list."""
    from tests import hostile

    build_site(runs=hostile.FIXTURE, out=tmp_path / "site", languages=("en", "id"))
    (excluded,) = {trial for record in reading.load(hostile.FIXTURE).of_kind("exclusion") for trial in record["trials"]}
    for folder, words in ((tmp_path / "site", "excluded: counts in no figure"),
                          (tmp_path / "site" / "id", "dikecualikan: tidak dihitung dalam angka mana pun")):
        campaign = BeautifulSoup((folder / "campaigns" / hostile.CAMPAIGN / "index.html").read_text(encoding="utf-8"), "html.parser")
        marked = {row.find("a")["href"].split("#")[1] for row in campaign.select("tr") if row.select_one(".excluded")}
        assert marked == {excluded}
        assert campaign.select_one(".excluded a")["href"] == "#exclusions" and words in campaign.select_one(".excluded").get_text()
        trials = BeautifulSoup((folder / "campaigns" / hostile.CAMPAIGN / "trials.html").read_text(encoding="utf-8"), "html.parser")
        listed = [item for item in trials.select(".trial-index li") if words in item.get_text()]
        assert [item.find("a")["href"] for item in listed] == [f"#{excluded}"]


def test_the_decision_page_links_to_its_bundle_notes_and_qualification(tmp_path):
    """Regression for #37: the decision page linked to neither the bundle, the signed note nor the qualification page."""
    from tests import hostile

    runs = tmp_path / "runs"
    shutil.copytree(hostile.FIXTURE, runs)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "choice.md").write_text(f"---\ncampaign: {hostile.CAMPAIGN}\ndecision: Keep b1\nauthor: A. Reviewer\n"
                                                  "date: 2026-10-02\n---\nWhy.\n", encoding="utf-8")
    build_site(runs=runs, out=tmp_path / "site")
    folder = tmp_path / "site" / "campaigns" / hostile.CAMPAIGN
    page = BeautifulSoup((folder / "decision.html").read_text(encoding="utf-8"), "html.parser")
    links = [a["href"] for a in page.select("nav.evidence a")]
    assert links[0] == f"evidence-{hostile.CAMPAIGN}.zip" and "qualification.html" in links and "trials.html" in links
    notes = [link for link in links if "/notes/" in link]
    assert notes and all((folder / link).resolve().is_file() for link in links), links


def test_the_trials_page_folds_each_record_and_leads_back_to_its_list_and_the_bundle_states_the_decision(tmp_path):
    """Regression for #37: the trials page was 102,479 px tall for 25 trials, each record open, with no way back; the
    bundle's index.html never stated the decision."""
    import zipfile

    from tests import hostile

    build_site(runs=hostile.FIXTURE, out=tmp_path / "site")
    folder = tmp_path / "site" / "campaigns" / hostile.CAMPAIGN
    page = BeautifulSoup((folder / "trials.html").read_text(encoding="utf-8"), "html.parser")
    sections = page.select("article.trial")
    assert len(sections) == 20
    for section in sections:
        record = section.select_one('section[id$="-record"]')
        assert record.select_one("details > pre.record") is not None and record.select_one("details").get("open") is None
        assert record.select_one('a[href="#contents"]') is not None
    assert page.select_one("nav#contents ol.trial-index") is not None
    with zipfile.ZipFile(folder / f"evidence-{hostile.CAMPAIGN}.zip") as archive:
        index = BeautifulSoup(archive.read(f"{hostile.CAMPAIGN}-evidence/data/index.html").decode("utf-8"), "html.parser")
        answer = archive.read(f"{hostile.CAMPAIGN}-evidence/data/decision.txt").decode("utf-8")
    stated = index.select_one("#answer").get_text(" ", strip=True)
    assert stated.startswith("The decision, from these records:") and len(stated) > 60
    assert stated.split(":", 1)[1].strip()[:40] in " ".join(answer.split())


def test_the_trials_page_says_greater_or_equal_with_its_sign(tmp_path):
    """Regression for #37: trial sections said '>=' where every other page says '≥'."""
    from tests import hostile

    build_site(runs=hostile.FIXTURE, out=tmp_path / "site")
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / hostile.CAMPAIGN / "trials.html").read_text(encoding="utf-8"),
                         "html.parser")
    verdicts = " ".join(item.get_text(" ") for item in page.select('section[id$="-quality"] li'))
    assert "≥" in verdicts and ">=" not in verdicts


def test_the_protocol_says_how_many_entries_were_truncated_in_words_that_agree(tmp_path):
    """Regression for #37: "truncation truncate (1 entries truncated)"."""
    from tests import hostile

    build_site(runs=hostile.FIXTURE, out=tmp_path / "site")
    page = BeautifulSoup((tmp_path / "site" / "campaigns" / hostile.CAMPAIGN / "index.html").read_text(encoding="utf-8"),
                         "html.parser")
    said = next(dd.get_text(" ", strip=True) for dt in page.select("dt") if dt.get_text() == "Max length" for dd in [dt.find_next("dd")])
    count = reading.load(hostile.FIXTURE).of_kind("manifest")[0]["corpus"]["truncated_entries"]
    assert "truncation truncate" not in said and "entries truncated" not in said
    assert said.endswith(f"a longer entry is truncated: {count} {'entry was' if count == 1 else 'entries were'}")


def test_the_campaign_page_states_the_answer_in_the_decision_pages_words(tmp_path):
    """Regression for #37: the campaign page's top said the answer in other words than the decision page."""
    from tests import hostile

    build_site(runs=hostile.FIXTURE, out=tmp_path / "site")
    folder = tmp_path / "site" / "campaigns" / hostile.CAMPAIGN
    campaign = BeautifulSoup((folder / "index.html").read_text(encoding="utf-8"), "html.parser")
    decision = BeautifulSoup((folder / "decision.html").read_text(encoding="utf-8"), "html.parser")
    stated = campaign.select_one("#decision-link").get_text(" ", strip=True).split(":", 1)[1].strip()
    answer = decision.select_one("#answer p").get_text(" ", strip=True).split(" ", 1)[1]
    # #45: its CPU meets the question, so the answer (the same words on both pages) says so first
    assert stated == answer and stated.startswith("fp32-b8 · CPU AMD EPYC, 2 threads · torch 2.13.0+cpu meets the question "
                                                  "without a rental: ")


def test_an_unequal_item_warns_only_where_it_can_change_the_ranking(tmp_path, cli):
    """Regression for #37: a large red warning for a 3.00 USD item carried by an infeasible configuration only."""
    from tests import hostile

    runs = tmp_path / "runs"
    shutil.copytree(hostile.FIXTURE, runs)

    def unequal() -> list[str]:
        assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
        page = BeautifulSoup((tmp_path / "site" / "campaigns" / hostile.CAMPAIGN / "decision.html").read_text(encoding="utf-8"),
                             "html.parser")
        return page.select_one("#unequal")["class"]

    assert unequal() == ["warning"]  # the setup hours of the fixture: one feasible configuration carries them, two do not
    (expense,) = reading.load(runs).of_kind("expense")
    assert cli("void", expense["record_id"], "--reason", "entered twice", "--runs", runs)[0] == 0
    infeasible = "int8-b8 · CPU AMD EPYC, 2 threads · torch 2.13.0+cpu"
    code, _, err = cli("expense", "add", "--campaign", hostile.CAMPAIGN, "--amount", "3.00", "--currency", "USD",
                       "--justification", "storage for the int8 run", "--configuration", infeasible, "--runs", runs)
    assert code == 0, err
    assert unequal() == ["note"]


def test_chart_data_tables_head_their_columns_in_words_round_their_figures_and_mark_the_infeasible(tmp_path):
    """Regression for #37: data tables headed 'low_hours' with six decimals; the hours chart showed int8-b8 unmarked."""
    from tests import hostile

    build_site(runs=hostile.FIXTURE, out=tmp_path / "site", languages=("en", "id"))
    for folder, infeasible in (("", "(not feasible)"), ("id", "(tidak layak)")):
        base = tmp_path / "site" / folder / "campaigns" / hostile.CAMPAIGN
        for name in ("index.html", "decision.html"):
            page = BeautifulSoup((base / name).read_text(encoding="utf-8"), "html.parser")
            heads = [th.get_text() for th in page.select("figure.chart table thead th")]
            assert heads and not [head for head in heads if "_" in head], heads
            figures = [td.get_text() for td in page.select("#chart-durations table td, #chart-projected-hours table td")]
            assert figures and not [figure for figure in figures if re.fullmatch(r"-?[\d.,]+[.,]\d{5,}", figure)], figures
        decision = BeautifulSoup((base / "decision.html").read_text(encoding="utf-8"), "html.parser")
        texts = vega.texts(vega.drawn(vega.spec_of(decision, "projected-hours")))
        assert [label for label in texts if infeasible in label] == [f"int8-b8 {infeasible}"]
        # The machine every row shares is written once, above the rows, not on each (#37).
        assert texts.count("CPU AMD EPYC, 2 threads · torch 2.13.0+cpu") == 1
        assert not [text for text in texts if text.startswith("fp32-b1 ·")]


def test_a_plain_build_keeps_the_top_language_and_another_base_url_is_a_change(tmp_path, cli):
    """A site built Indonesian first is rebuilt Indonesian first by a plain build; the 404 page follows --base-url."""
    from tests import hostile

    site = tmp_path / "site"
    assert cli("build", "--runs", hostile.FIXTURE, "--out", site, "--lang", "id", "--lang", "en")[0] == 0
    code, _, err = cli("build", "--runs", hostile.FIXTURE, "--out", site)
    assert code == 0, err
    assert '<html lang="id">' in (site / "index.html").read_text(encoding="utf-8") and (site / "en" / "index.html").is_file()
    assert cli("build", "--runs", hostile.FIXTURE, "--out", site, "--lang", "id", "--lang", "en", "--base-url", "/team/")[0] == 0
    assert 'href="/team/assets/style.css"' in (site / "404.html").read_text(encoding="utf-8")
    assert 'href="/team/en/assets/style.css"' in (site / "en" / "404.html").read_text(encoding="utf-8")
