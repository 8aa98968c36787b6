"""Site build: full build and no-change rebuild on synthetic campaigns, with peak memory.

Run: .venv/bin/python -m tests.benchmarks.bench_build [--sizes 10x100 100x100]
Each size is CAMPAIGNSxTRIALS_PER_CAMPAIGN; records are written with the real record store.
Reports seconds, trials per second and the no-change rebuild as a ratio of the full build.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path


def make_runs(folder: Path, campaigns: int, trials: int) -> None:
    import json

    from generator import records
    from tests import factory

    for index in range(campaigns):
        manifest = factory.manifest(f"camp{index:04d}", f"run-{index:04d}")
        lines = [json.dumps(manifest, sort_keys=True)]
        for number in range(trials):
            trial = factory.trial(manifest, f"b{number % 3}", seconds=1 + (number % 7) / 10, repetition=number // 3 + 1,
                                  sequence=number + 1)
            lines.append(json.dumps(trial, sort_keys=True))
        path = records.records_file(folder, manifest["campaign"], manifest["run_id"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    from generator.site import build_site

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10x100", "100x100"])
    options = parser.parse_args()
    for size in options.sizes:
        campaigns, trials = map(int, size.split("x"))
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            make_runs(root / "runs", campaigns, trials)
            start = time.perf_counter()
            build_site(runs=root / "runs", out=root / "site", chart_cache=root / "charts")
            full = time.perf_counter() - start
            start = time.perf_counter()
            result = build_site(runs=root / "runs", out=root / "site", chart_cache=root / "charts")
            again = time.perf_counter() - start
            assert result["rendered"] == []
        total = campaigns * trials
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{campaigns} campaigns x {trials} trials = {total} trials: full build {full:.1f} s ({total / full:.0f} trials/s), "
              f"no-change rebuild {again:.2f} s ({again / full:.3f} of the full build), process peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
