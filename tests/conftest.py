"""Shared helpers: run the real CLI in-process or as a subprocess."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# One torch thread per test process, set before anything imports torch; the runs and processes the tests start inherit
# it. pytest -n auto already gives each core a worker, and a second OpenMP thread per worker only waits: on 2 cores a
# tiny campaign's run took 4.5 s of CPU with 2 threads and 1.4 s with 1 (12.5 s against 2.3 s for the tiny GPT-2), most
# of it OpenMP threads spinning for a core the other worker held. A run records the setting (environment.threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
from hypothesis import settings

from iteralab.cli import main

# Speed is measured in tests/benchmarks, never by a test: Hypothesis's default 200 ms deadline per example failed an
# example that was slow only because the machine was busy (the first one also loads Babel's CLDR data).
settings.register_profile("iteralab", deadline=None)
settings.load_profile("iteralab")

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
AXE = Path(__file__).resolve().parent / ".axe" / "node_modules" / "axe-core" / "axe.min.js"

ROOT = Path(__file__).resolve().parent.parent


_CREATED_CACHE: list[str] = []


def pytest_configure(config):
    """Keep the tests' caches (validated record prefixes, demo model) out of the user's cache folder."""
    import tempfile

    if "ITERALAB_CACHE_DIR" not in os.environ:
        _CREATED_CACHE.append(tempfile.mkdtemp(prefix="iteralab-test-cache-"))
        os.environ["ITERALAB_CACHE_DIR"] = _CREATED_CACHE[-1]
    # A test that builds twice and compares must render twice: a copy from the store of rendered campaigns would make
    # "the same bytes" true by construction. The store's own tests (test_stored.py, and two builds at once) turn it on.
    os.environ["ITERALAB_CAMPAIGN_STORE_MB"] = "0"


def pytest_unconfigure(config):
    """Remove the cache folder this run made: every run left one in /tmp, up to 238 MB each (12 GB over 2,155 runs).

    Only the process that made it removes it (pytest-xdist's workers share their controller's), and the variable goes
    with it, so that a later run in the same process (mutmut's fork server runs pytest many times) makes its own.
    """
    while _CREATED_CACHE:
        shutil.rmtree(_CREATED_CACHE.pop(), ignore_errors=True)
        os.environ.pop("ITERALAB_CACHE_DIR", None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under mutmut, run a mutant's test files cheapest first, each file's tests in their own order.

    mutmut stops a mutant's run at the first failing test (-x) but hands pytest the tests in no set order: a mutant that
    a 5 ms test kills often waited for the fuzz and hostile-record tests first (56 s of the selection's 156 s). Files
    stay whole, so a module's fixtures are still made once. The durations are those mutmut measured in its stats run.
    """
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    stats = Path("mutmut-stats.json")  # mutmut runs the tests from its mutants/ folder
    durations = json.loads(stats.read_text(encoding="utf-8")).get("duration_by_test", {}) if stats.is_file() else {}
    cost: dict[str, float] = {}
    for item in items:
        cost[str(item.path)] = cost.get(str(item.path), 0.0) + durations.get(item.nodeid, 0.0)
    items.sort(key=lambda item: cost[str(item.path)])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Collect what the test left, then freeze what survives it, so that later collections never walk it again.

    A full collection walks every tracked object, and a test worker holds torch's, transformers', pandas' and every
    module fixture's: the two workers' automatic full collections took 22 to 26 s of CPU a suite run (about 75 ms each,
    over 300 of them), 2.4 s with this (#50). Frozen objects are still freed when their last reference goes; only a
    cycle among them stays, which a worker's memory can afford. The runner keeps a heap its caller froze frozen.
    """
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def cli(capsys):
    """Run iteralab in-process; return (exit status, stdout, stderr)."""

    def run(*args):
        code = main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def run_module(*args, cwd=None, env=None, timeout=120):
    """Run ``python -m iteralab`` as a user would, in a subprocess."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "iteralab", *map(str, args)],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="session")
def warm_iteralab():
    """Start `python -m iteralab` as forks of one interpreter that imported torch once (tests/forked.py): start(args)."""
    from tests.forked import Zygote

    zygote = Zygote()
    yield zygote.start
    zygote.close()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A randomly initialised 1-layer BERT saved on disk (shared by the session, never modified)."""
    from tests.tiny import build_model

    return build_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def tiny_campaign(tmp_path, tiny_model):
    """Write a tiny corpus and campaign; return a function to write more campaign files."""
    from tests.tiny import corpus_rows, write_campaign, write_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows())

    def make(**options):
        return write_campaign(tmp_path, tiny_model, corpus, **options)

    return make


@pytest.fixture(scope="session")
def chromium_path():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        # Never a skip: make test installs Debian's chromium, so its absence is a broken setup.
        pytest.fail("Chromium is not installed: run make test (it installs Debian's chromium) or apt-get install chromium")
    if not AXE.is_file():
        pytest.fail(f"axe-core is not installed at {AXE}: run make test (it installs the npm package axe-core)")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    """One headless Chromium for the module: each test opens its own pages in it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Reader:
    """One browser page that opens the pages of a site in turn, as a reader following links would: a new page per
    document costs a renderer's start (about 0.3 s here), and each document parsed axe-core and vega-embed afresh.
    axe-core is there in every document from its start (as an init script: not run, only defined). Each open() starts
    the lists of console errors, page errors, dialogs and requests leaving file:// again."""

    def __init__(self, browser):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.add_init_script(path=str(AXE))
        self.page = self.context.new_page()
        self.errors, self.outside, self.dialogs = [], [], []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.on("request", lambda request: self.outside.append(request.url)
                     if not request.url.startswith("file://") else None)

    def open(self, url: str, *, width: int = 1280):
        """Open URL at WIDTH × 900 px once it has loaded, with empty lists; return the page."""
        self.page.set_viewport_size({"width": width, "height": 900})
        for seen in (self.errors, self.outside, self.dialogs):
            seen.clear()
        self.page.goto(url, wait_until="load")
        return self.page

    def close(self):
        self.context.close()


@pytest.fixture
def reader(browser):
    """A Reader of the session's browser, closed after the test."""
    opened = Reader(browser)
    yield opened
    opened.close()


def watched_page(browser, *, width: int = 1280):
    """Open a page that records console errors, page errors and every request leaving file://; return the three."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors, outside = [], []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: outside.append(request.url) if not request.url.startswith("file://") else None)
    return page, errors, outside
