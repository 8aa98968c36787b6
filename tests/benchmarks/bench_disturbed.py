"""The demo's classifier on a quiet machine and on a busy one (#49): which trials are marked disturbed, and whether the
campaign page and `decide` say the spread is unstable.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m tests.benchmarks.bench_disturbed [--repetitions 3] [--loops 4]
Uses the demo's cached workspace (its fine-tuned MiniLM and final corpus of 1,000 reviews; the first call builds it) with
two of its variants, fp32-b8 and int8-b8, measured twice into two runs folders: once as it is (quiet: nothing started
beside it) and once with LOOPS busy processes (ordinary priority, any core, as another job on the machine would be)
running during the second round of repetitions only. Prints each trial's window, whether it was marked disturbed and
the figures read, then what decide and the campaign page said. Not a test: whether the "quiet" run is quiet depends on
what else the machine runs (its load average is printed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"
KEEP = ("fp32-b8", "int8-b8")


def campaign(workspace: Path, folder: Path, repetitions: int) -> Path:
    """The demo's campaign with two variants and REPETITIONS, written into FOLDER (paths point at the workspace)."""
    text = (workspace / "campaign.toml").read_text(encoding="utf-8")
    head, *variants = text.split("\n[[variants]]\n")
    head = head.replace('path = "final.jsonl"', f'path = "{(workspace / "final.jsonl").as_posix()}"')
    head = head.replace('path = "model"', f'path = "{(workspace / "model").as_posix()}"')
    head = head.replace("repetitions = 5", f"repetitions = {repetitions}").replace('reference_variant = "fp32-b1"',
                                                                                  f'reference_variant = "{KEEP[0]}"')
    kept = [v for v in variants if any(f'name = "{name}"' in v for name in KEEP)]
    path = folder / "campaign.toml"
    path.write_text(head + "".join("\n[[variants]]\n" + v for v in kept), encoding="utf-8")
    return path


def measure(campaign_file: Path, runs: Path, loops: int, variants: int) -> list[dict]:
    from iteralab.run.runner import run_campaign
    from iteralab.run.summary import Progress

    class Busy(Progress):
        """LOOPS busy processes during the second round's trials (sequences variants+1 .. 2*variants)."""

        def __init__(self):
            super().__init__(quiet=True)
            self.running = []

        def start(self, label, total):
            super().start(label, total)
            sequence = int(label.split("/")[0])
            if loops and variants < sequence <= 2 * variants and not self.running:
                self.running = [subprocess.Popen([sys.executable, "-c", LOOP]) for _ in range(loops)]
                print(f"  [{loops} busy loops started before trial {sequence}]", flush=True)
            elif sequence > 2 * variants and self.running:
                self.stop()
                print(f"  [busy loops stopped before trial {sequence}]", flush=True)

        def stop(self):
            for process in self.running:
                process.kill()
                process.wait()
            self.running = []

    progress = Busy()
    try:
        return run_campaign(campaign_file=campaign_file, runs_dir=runs, quiet=True, progress=progress).trials
    finally:
        progress.stop()


def report(name: str, trials: list[dict], runs: Path, site: Path) -> None:
    from iteralab.cli import main
    from iteralab.site.build import build_site

    print(f"\n== {name} (load average now {os.getloadavg()[0]:.2f}) ==")
    for trial in trials:
        host = trial["interference"]["host"]
        print(f"  {trial['sequence']:>2} {trial['variant']:<8} {trial['phases']['measured_window']['duration_ns'] / 1e9:7.3f} s"
              f"  other {host['other_cpu_share']:.2f}  waited {host['waited_share']:.2f}"
              f"  {'DISTURBED' if trial['interference']['disturbed'] else 'clean'}")
    build_site(runs=runs, out=site, quiet=True)
    page = next(site.glob("campaigns/*/index.html")).read_text(encoding="utf-8")
    said = 'class="unstable"' in page
    print(f"  campaign page: {'says unstable' if said else 'no unstable warning'}")
    print("  decide:")
    main(["decide", trials[0]["campaign"], "--runs", str(runs)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--loops", type=int, default=2 * (os.cpu_count() or 1))
    options = parser.parse_args()
    from iteralab.demos.classify import prepare_workspace

    workspace = prepare_workspace(log=print).parent
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        file = campaign(workspace, scratch, options.repetitions)
        for name, loops in (("quiet", 0), (f"busy: {options.loops} loops during round 2", options.loops)):
            runs = scratch / f"runs-{loops}"
            report(name, measure(file, runs, loops, len(KEEP)), runs, scratch / f"site-{loops}")


if __name__ == "__main__":
    main()
