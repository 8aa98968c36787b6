"""Record store: append rate with fsync and load rate into pandas, each against a bare baseline.

Run: .venv/bin/python -m tests.benchmarks.bench_store [--appends 2000] [--records 100000]
Appends go through records.append (lock, torn-tail check, one write, fsync); the baseline writes the
same lines to one open file without fsync. Loading builds the record table (one pandas row per record) with the
columnar cache cold (every line parsed, checked and cached), then warm; baselines, in the same process: orjson.loads
of the same lines, and orjson.loads plus the schema check. Targets (#22): warm at most 1 s and 0.3x the bare parse,
cold at most 1.3x the parse plus check.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
        import pandas  # noqa: F401  (imports are paid once per process, before any timing)
        import pyarrow  # noqa: F401

        start = time.perf_counter()
        for line in path.read_bytes().split(b"\n"):
            if line:
                orjson.loads(line)
        bare = time.perf_counter() - start
        start = time.perf_counter()
        for line in path.read_bytes().split(b"\n"):
            if line:
                records.validate(orjson.loads(line))
        checked = time.perf_counter() - start
        start = time.perf_counter()
        cold = reading.load_table(big)  # the record table into pandas, every line parsed, checked and cached
        cold_s = time.perf_counter() - start
        assert (cold.frame["kind"] == "trial").sum() == options.records and not cold.problems
        start = time.perf_counter()
        warm = reading.load_table(big)  # the same from the columnar cache
        warm_s = time.perf_counter() - start
        assert warm.frame.equals(cold.frame)
        start = time.perf_counter()
        loaded = warm.loaded()  # every nested record read back from its line (the build does this per changed campaign)
        nested = time.perf_counter() - start
        start = time.perf_counter()
        tables = [trial_table(view) for view in campaign_views(loaded)]
        views = time.perf_counter() - start
        assert sum(len(table) for table in tables) == options.records
        print(f"bare orjson.loads of the {options.records + 1:,} lines: {bare:.2f} s; with the schema check: {checked:.2f} s")
        print(f"load {options.records:,} trials into pandas, cache cold: {cold_s:.2f} s, {cold_s / checked:.2f}x the bare parse "
              f"and check (target at most 1.3x)")
        print(f"load {options.records:,} trials into pandas, cache warm: {warm_s:.2f} s, {warm_s / bare:.2f}x the bare parse "
              f"(target at most 1 s and 0.3x)")
        print(f"then every nested record read back from its line: {nested:.2f} s; campaign views and trial tables {views:.2f} s; "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")

if __name__ == "__main__":
    main()
