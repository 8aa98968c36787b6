"""Merged folders (#33): check and cold build of a folder with copies, as ratios of the same folder without them.

Run: .venv/bin/python -m tests.benchmarks.bench_copies --real RUNS [--size 1000x100] [--runs-per-campaign 4]
Three folders of real records (bench_build's copies of RUNS' first run, with start records, as the runner writes them):
- clean: CAMPAIGNS campaigns, each as several run files;
- copied: the same, with every run file present once more under another name (identical content), as a folder
  merged with its own backup holds them;
- reused: the copied folder with 1 % of the copied records given other content under the same id (ids reused by
  another tool): each is named as a problem, file and line.
Each is checked (``iteralab check --json``, in-process) with an empty cache folder, then again with it warm, and built
with every cache empty (the campaign store off). Target: copied and reused within 1.3x of clean. Every figure of one
run comes from the same process, one after another.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def copy_every_run_file(runs: Path, reuse_every: int = 0) -> int:
    """Write each records file under RUNS again beside itself; with REUSE_EVERY, every Nth record changed. Return the changed."""
    from iteralab.store.reading import record_files

    changed = 0
    for number, path in enumerate(record_files(runs)):
        lines = path.read_bytes().split(b"\n")[:-1]
        if reuse_every:
            for index, line in enumerate(lines):
                if (number * len(lines) + index) % reuse_every == 0:
                    record = json.loads(line)
                    record["created_at"] = "2000-01-01T00:00:00.000000Z"  # another tool's record under the same id
                    lines[index] = json.dumps(record, sort_keys=True).encode()
                    changed += 1
        path.with_name(path.stem + ".copy.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return changed


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def check(runs: Path) -> dict:
    from iteralab.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["check", str(runs), "--json"])
    return json.loads(out.getvalue())


def measure(root: Path, name: str, runs: Path) -> dict:
    """Check RUNS cold and warm, then build it cold; each in a cache folder of its own."""
    from iteralab.site.build import build_site

    os.environ["ITERALAB_CACHE_DIR"] = str(root / f"cache-{name}")
    cold, checked = timed(lambda: check(runs))
    warm, _ = timed(lambda: check(runs))
    os.environ["ITERALAB_CACHE_DIR"] = str(root / f"cache-build-{name}")
    build, _ = timed(lambda: build_site(runs=runs, out=root / f"site-{name}"))
    return {"check_cold": cold, "check_warm": warm, "build_cold": build, "records": checked["records"],
            "problems": len(checked["problems"])}


def main() -> None:
    from tests.benchmarks.bench_build import bare_parse, copy_real_runs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, required=True, metavar="RUNS", help="a runs folder with a real run (after make demo)")
    parser.add_argument("--size", default="1000x100", help="CAMPAIGNSxTRIALS_PER_CAMPAIGN")
    parser.add_argument("--runs-per-campaign", type=int, default=4)
    options = parser.parse_args()
    campaigns, trials = map(int, options.size.split("x"))
    os.environ["ITERALAB_CAMPAIGN_STORE_MB"] = "0"  # every build renders: a copy from the store would hide the reading
    import pandas  # noqa: F401  (imports are paid once, before any timing)
    import pyarrow  # noqa: F401

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        clean = root / "clean"
        copy_real_runs(clean, campaigns, trials, options.real, runs=options.runs_per_campaign)
        copied, reused = root / "copied", root / "reused"
        shutil.copytree(clean, copied)
        copy_every_run_file(copied)
        shutil.copytree(clean, reused)
        changed = copy_every_run_file(reused, reuse_every=100)
        bare = bare_parse(clean)
        os.environ["ITERALAB_CACHE_DIR"] = str(root / "cache-warm-up")
        check(options.real)  # validators compiled, modules imported: the first folder timed pays nothing the others don't
        figures = {name: measure(root, name, runs) for name, runs in (("clean", clean), ("copied", copied), ("reused", reused))}
    base = figures["clean"]
    print(f"{campaigns} campaigns x {trials} real trials as {options.runs_per_campaign} runs each; "
          f"bare orjson parse of the clean folder {bare:.2f} s")
    for name, row in figures.items():
        ratios = ", ".join(f"{step} {row[step]:.2f} s ({row[step] / base[step]:.2f}x clean)"
                           for step in ("check_cold", "check_warm", "build_cold"))
        print(f"  {name}: {row['records']} records kept, {row['problems']} problems; {ratios}")
    print(f"  reused: {changed} copied records given other content")


if __name__ == "__main__":
    main()
