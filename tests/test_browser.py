"""Each page type opened from file:// in real headless Chromium: no console error, no request elsewhere."""

from __future__ import annotations

import shutil

import pytest

from generator import records
from generator.site import build_site
from tests import factory

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def chromium_path():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        # Never a skip: make test installs Debian's chromium, so its absence is a broken setup.
        pytest.fail("Chromium is not installed: run make test (it installs Debian's chromium) or apt-get install chromium")
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    runs = root / "runs"
    manifest = factory.manifest(model_name="<script>alert(1)</script>")
    records.append(runs, manifest)
    for repetition in range(1, 6):
        records.append(runs, factory.trial(manifest, "b1", seconds=1 + repetition / 10, repetition=repetition, sequence=repetition))
    records.append(runs, factory.trial(manifest, "b8", status="oom", failed_phase="measured_window", entries_completed=8, error="OOM"))
    notes = root / "notes"
    notes.mkdir()
    (notes / "decision.md").write_text("---\ncampaign: camp\ndecision: Keep b1\ndate: 2026-10-01\nauthor: QA\n---\nBody.\n",
                                       encoding="utf-8")
    out = root / "site"
    build_site(runs=runs, out=out, notes=notes, chart_cache=root / "charts")
    return out


def page_paths(site):
    trial_page = sorted((site / "campaigns" / "camp" / "trials").glob("*.html"))[0]
    return {"index": site / "index.html", "campaign": site / "campaigns" / "camp" / "index.html", "trial": trial_page,
            "note": site / "notes" / "decision.html", "catalog": site / "catalog.html"}


@pytest.mark.slow
def test_every_page_type_loads_offline_without_errors(site, chromium_path, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS)
        try:
            for name, path in page_paths(site).items():
                page = browser.new_page()
                errors, outside = [], []
                page.on("console", lambda message, errors=errors: errors.append(message.text) if message.type == "error" else None)
                page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
                page.on("request", lambda request, outside=outside: outside.append(request.url)
                        if not request.url.startswith("file://") else None)
                page.goto(path.as_uri(), wait_until="load")
                assert page.title(), name
                screenshot = tmp_path / f"{name}.png"
                page.screenshot(path=str(screenshot), full_page=True)
                assert screenshot.stat().st_size > 1000
                assert errors == [], (name, errors)
                assert outside == [], (name, outside)
                page.close()
        finally:
            browser.close()
