"""Where a campaign's rendering goes: milliseconds per campaign for each step of a one-process build.

Run: .venv/bin/python -m tests.benchmarks.bench_steps [--campaigns 20] [--trials 100]
Writes synthetic campaigns (as bench_build does), builds two others to warm the imports and the compiled templates, then
builds the campaigns into an empty folder on one process with each step timed: the trials page, the evidence bundle,
the decision, each template, the trial table and CSV, the charts (and each chart's spec), storing the campaign in the machine's store of
rendered campaigns (cold here: these campaigns were never built). Steps nest (a page's template inside its step), so
they do not add up to the total; the total is the baseline each step is a share of.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from pathlib import Path


def _timed(owner, name: str, totals: collections.Counter, label: str | None = None) -> None:
    """Replace OWNER.NAME by a wrapper that adds its time to TOTALS."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[label or name] += time.perf_counter() - start

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=20)
    parser.add_argument("--trials", type=int, default=100)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        os.environ["ITERALAB_CACHE_DIR"] = str(root / "cache")
        import jinja2

        from iteralab.evidence import bundle
        from iteralab.pages import charts
        from iteralab.site import campaign as pages
        from iteralab.site import stored
        from iteralab.site.build import build_site
        from iteralab.store.reading import load_table
        from tests.benchmarks.bench_build import make_runs

        # The first build warms what a worker has warm after its first campaign (imports, compiled templates), on other
        # campaigns: built on the timed ones, it would leave their very figures in the formatting caches.
        make_runs(root / "warm", 2, options.trials, first=options.campaigns)
        build_site(runs=root / "warm", out=root / "first", processes=1)
        make_runs(root / "runs", options.campaigns, options.trials)
        load_table(root / "runs")  # the record cache warm, as in a second build
        totals: collections.Counter = collections.Counter()
        for name in ("campaign_bundle", "decide", "trial_table", "trials_csv", "_trials_page", "campaign_charts",
                     "decision_charts", "campaign_views"):
            _timed(pages, name, totals)
        _timed(stored, "save", totals, "store the campaign (site/stored.py)")
        # A chart's own cost (#34): its rows put into its kind's Altair spec, and that written as JSON for the page
        # and for the bundle.
        _timed(charts, "spec", totals, "chart specs (rows into the spec)")
        _timed(charts, "in_script", totals, "chart specs as JSON in the page")
        _timed(bundle, "spec_json", totals, "chart specs as JSON in the bundle")
        render = jinja2.Template.render

        def rendered(template, *args, **kwargs):
            start = time.perf_counter()
            try:
                return render(template, *args, **kwargs)
            finally:
                totals[f"template {template.name}"] += time.perf_counter() - start

        jinja2.Template.render = rendered
        start = time.perf_counter()
        build_site(runs=root / "runs", out=root / "second", processes=1)
        total = time.perf_counter() - start
    per = 1000 / options.campaigns
    print(f"{options.campaigns} campaigns x {options.trials} trials on one process: {total * per:.1f} ms per campaign in all")
    for name, seconds in totals.most_common():
        if seconds * per >= 0.1:
            print(f"  {name:36s} {seconds * per:6.1f} ms  ({seconds / total:.0%} of the build)")


if __name__ == "__main__":
    main()
