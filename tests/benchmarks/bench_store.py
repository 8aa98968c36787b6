"""Record store: append rate with fsync and load rate into pandas, each against a bare baseline.

Run: .venv/bin/python -m tests.benchmarks.bench_store [--appends 2000] [--records 100000]
Appends go through records.append (lock, torn-tail check, one write, fsync); the baseline writes the
same lines to one open file without fsync. Loading reads, validates and de-duplicates every line and
builds the pandas tables; the baseline is orjson.loads of the same lines. Target: 100,000 trials loaded
in under 2 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import orjson


def main() -> None:
    from iteralab.store import reading, records
    from iteralab.store.trials import trial_table
    from iteralab.store.views import campaign_views
    from tests import factory

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--records", type=int, default=100_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ["ITERALAB_CACHE_DIR"] = str(Path(folder) / "cache")  # start cold, keep the user's cache out
        runs = Path(folder) / "runs"
        manifest = factory.manifest()
        trials = [factory.trial(manifest, f"b{i % 3}", sequence=i + 1) for i in range(options.appends)]
        start = time.perf_counter()
        for trial in trials:
            records.append(runs, trial)
        appended = time.perf_counter() - start
        start = time.perf_counter()
        with open(Path(folder) / "baseline.jsonl", "w", encoding="utf-8") as handle:
            for trial in trials:
                handle.write(json.dumps(trial, sort_keys=True) + "\n")
        baseline_write = time.perf_counter() - start
        print(f"append {options.appends} trials with fsync: {options.appends / appended:,.0f} records/s "
              f"({appended / baseline_write:.0f}x a buffered write without fsync)")

        big = Path(folder) / "big"
        path = records.records_file(big, "camp", "run-1")
        path.parent.mkdir(parents=True)
        lines = [json.dumps(manifest, sort_keys=True)]
        for index in range(options.records):
            trial = factory.trial(manifest, f"b{index % 3}", sequence=index + 1)
            lines.append(json.dumps(trial, sort_keys=True))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        start = time.perf_counter()
        import pandas  # noqa: F401  (its import is paid once per process, reported apart)

        imported = time.perf_counter() - start
        start = time.perf_counter()
        loaded = reading.load(big)
        validated = time.perf_counter() - start
        tables = [trial_table(view) for view in campaign_views(loaded)]  # the one trial table the site and decision read
        total = time.perf_counter() - start
        assert sum(len(table) for table in tables) == options.records and not loaded.problems
        start = time.perf_counter()
        for line in path.read_bytes().splitlines():
            orjson.loads(line)
        bare = time.perf_counter() - start
        start = time.perf_counter()
        warm_loaded = reading.load(big)
        warm = time.perf_counter() - start
        assert len(warm_loaded.records) == len(loaded.records)
        print(f"load {options.records:,} trials into pandas, first read: {total:.2f} s ({options.records / total:,.0f} records/s; "
              f"read+validate {validated:.2f} s, views and trial table {total - validated:.2f} s; importing pandas took {imported:.2f} s before); "
              f"{total / bare:.1f}x a bare orjson.loads of the same lines ({bare:.2f} s); target under 2 s")
        print(f"read again, prefix already validated on this machine: {warm:.2f} s ({warm / validated:.2f} of the first read)")


if __name__ == "__main__":
    main()
