"""Site build: full build and no-change rebuild on synthetic campaigns, with peak memory.

Run: .venv/bin/python -m tests.benchmarks.bench_build [--sizes 10x100 100x100] [--real runs [--runs-per-campaign 4] [--distinct-predictions]]
Each size is CAMPAIGNSxTRIALS_PER_CAMPAIGN; records are written with the real record store. With --real RUNS, every
campaign is instead a copy of the first run found in RUNS (real records and prediction files, e.g. after make demo) with
fresh ids, its trials repeated with fresh ids up to TRIALS_PER_CAMPAIGN and split over several runs, each a file with
its manifest and a start record before each trial, as the runner writes them today. The bare orjson parse of the same
folder is printed beside the figures: this machine's speed moves by the hour.
Durations and accuracies are drawn per campaign, so every campaign has charts of its own (none cached),
and every trial has its own prediction file of 100 entries, which the site copies and bundles.
Reports seconds, trials per second, the no-change rebuild as a ratio of the full build, a second full build into an
empty folder with the machine's caches warm (the record cache, the compiled templates and the store of rendered
campaigns), a third one with the campaign store turned off (every campaign rendered again from the warm record
cache), and a build after one more campaign is added. Every cache starts empty (in the temporary folder).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_runs(folder: Path, campaigns: int, trials: int, first: int = 0) -> None:
    import json

    from iteralab.store import records
    from tests import factory

    for index in range(first, first + campaigns):
        # Figures differ from campaign to campaign, as real ones do, so no chart is reused from another campaign.
        rng = random.Random(index)
        manifest = factory.manifest(f"camp{index:04d}", f"run-{index:04d}")
        lines = [json.dumps(manifest, sort_keys=True)]
        for number in range(trials):
            trial = factory.trial(manifest, f"b{number % 3}", seconds=round(1 + rng.random(), 6), repetition=number // 3 + 1,
                                  sequence=number + 1, accuracy=round(0.7 + rng.random() / 4, 4))
            for phase in trial["phases"].values():
                phase["host_peak_rss_bytes"] = rng.randrange(200, 400) * 2**20
            # A prediction file per trial, as the runner writes (100 entries): the site copies it and bundles it.
            predictions = "id,label,score\n" + "".join(
                f"e{entry:04d},{rng.choice(('fresh', 'rotten'))},{rng.random():.6f}\n" for entry in range(100))
            relative = f"{manifest['campaign']}/predictions/{trial['record_id']}.csv"
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_text(predictions, encoding="utf-8")
            trial["predictions"] = {"path": relative, "sha256": hashlib.sha256(predictions.encode()).hexdigest()}
            lines.append(json.dumps(trial, sort_keys=True))
        path = records.records_file(folder, manifest["campaign"], manifest["run_id"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def copy_real_runs(folder: Path, campaigns: int, trials: int, source: Path, first: int = 0, runs: int = 1,
                   distinct: bool = False) -> None:
    """Write CAMPAIGNS copies of SOURCE's first run as RUNS runs each, TRIALS trials in all per campaign.

    Each run is a file as the runner writes it today: its manifest, then a start record before each trial (copied from
    SOURCE where it has them, made with the runner's own function where an older run lacks them). Figures and
    prediction files are the real ones; campaign, run and record ids are fresh. DISTINCT: every trial's prediction file
    gets content of its own (its last score's digits extended), as a GPU whose kernels are not deterministic may write;
    a CPU run's repetitions write the same file.
    """
    import json
    import shutil

    from iteralab.run.resume import start_record
    from iteralab.store import reading, records

    loaded = reading.load(source)
    manifest = loaded.of_kind("manifest")[0]
    real = [t for t in loaded.of_kind("trial") if t["manifest_id"] == manifest["record_id"]]
    starts = {s["trial_id"]: s for s in loaded.of_kind("start") if s["manifest_id"] == manifest["record_id"]}
    if not real:
        raise SystemExit(f"{source}: its first run has no trial to copy; run make demo first")
    per_run = -(-trials // runs)
    for index in range(first, first + campaigns):
        name = f"real{index:04d}"
        for run in range(runs):
            run_id = f"run-real-{index:04d}-{run}"
            copy = {**manifest, "campaign": name, "run_id": run_id, "record_id": records.new_id("manifest")}
            lines = [json.dumps(copy, sort_keys=True)]
            for number in range(run * per_run, min(trials, (run + 1) * per_run)):
                trial = dict(real[number % len(real)])
                trial.update(campaign=name, run_id=run_id, manifest_id=copy["record_id"], record_id=records.new_id("trial"),
                             sequence=number - run * per_run + 1, repetition=number // len(real) + 1)
                start = dict(starts.get(real[number % len(real)]["record_id"]) or start_record(
                    copy, trial["record_id"], trial["variant"], trial["repetition"], trial["sequence"]))
                start.update(campaign=name, run_id=run_id, manifest_id=copy["record_id"], record_id=records.new_id("start"),
                             trial_id=trial["record_id"], sequence=trial["sequence"], repetition=trial["repetition"])
                if trial.get("predictions"):
                    relative = f"{name}/predictions/{trial['record_id']}.csv"
                    (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                    if distinct:
                        data = (source / trial["predictions"]["path"]).read_bytes().rstrip(b"\n") + b"%07d\n" % number
                        (folder / relative).write_bytes(data)
                        trial["predictions"] = {**trial["predictions"], "path": relative,
                                                "sha256": hashlib.sha256(data).hexdigest()}
                    else:
                        shutil.copyfile(source / trial["predictions"]["path"], folder / relative)
                        trial["predictions"] = {**trial["predictions"], "path": relative}
                lines += [json.dumps(start, sort_keys=True), json.dumps(trial, sort_keys=True)]
            path = records.records_file(folder, name, run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        corpus = source / manifest["corpus"]["path"]
        if corpus.is_file():
            (folder / name / "inputs").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(corpus, folder / name / "inputs" / corpus.name)


def add(real: Path | None, runs: Path, campaigns: int, trials: int, first: int = 0, runs_per_campaign: int = 1,
        distinct: bool = False) -> None:
    """Add CAMPAIGNS campaigns, numbered from FIRST: copies of REAL's first run (as RUNS_PER_CAMPAIGN runs), or synthetic ones."""
    if real:
        copy_real_runs(runs, campaigns, trials, real, first, runs_per_campaign, distinct)
    else:
        make_runs(runs, campaigns, trials, first)


def bare_parse(runs: Path) -> float:
    """Return the seconds one process takes to read and orjson-parse every line of every records file under RUNS."""
    import orjson

    from iteralab.store.reading import record_files

    start = time.perf_counter()
    for path in record_files(runs):
        for line in path.read_bytes().split(b"\n"):
            if line:
                orjson.loads(line)
    return time.perf_counter() - start


def main() -> None:
    from iteralab.site.build import build_site

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10x100", "100x100"])
    parser.add_argument("--real", type=Path, metavar="RUNS", help="copy the first run of this runs folder, not synthetic records")
    parser.add_argument("--runs-per-campaign", type=int, default=4, metavar="N",
                        help="with --real: each campaign's trials as N runs, each with its manifest and start records")
    parser.add_argument("--distinct-predictions", action="store_true",
                        help="with --real: every trial's prediction file of its own content (a CPU run's repetitions write "
                             "the same one; a GPU's may not)")
    options = parser.parse_args()
    if len(options.sizes) > 1:
        # One process per size: each size's peak memory is its own.
        for size in options.sizes:
            real = ["--real", str(options.real), "--runs-per-campaign", str(options.runs_per_campaign),
                    *(["--distinct-predictions"] if options.distinct_predictions else [])] if options.real else []
            subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_build", "--sizes", size, *real], check=True)
        return
    for size in options.sizes:
        campaigns, trials = map(int, size.split("x"))
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            os.environ["ITERALAB_CACHE_DIR"] = str(root / "cache")  # every cache starts cold, the user's are left alone
            os.environ.pop("ITERALAB_CAMPAIGN_STORE_MB", None)
            add(options.real, root / "runs", campaigns, trials, runs_per_campaign=options.runs_per_campaign,
                distinct=options.distinct_predictions)
            bare = bare_parse(root / "runs")
            start = time.perf_counter()
            first = build_site(runs=root / "runs", out=root / "site")
            full = time.perf_counter() - start
            if first["failed"]:
                raise SystemExit(f"{len(first['failed'])} campaign(s) failed, e.g. {next(iter(first['failed'].items()))}")
            processes = first["processes"]
            start = time.perf_counter()
            result = build_site(runs=root / "runs", out=root / "site")
            again = time.perf_counter() - start
            assert result["rendered"] == [], (result["rendered"][:5], result["failed"])
            start = time.perf_counter()
            build_site(runs=root / "runs", out=root / "fresh")
            warm = time.perf_counter() - start
            os.environ["ITERALAB_CAMPAIGN_STORE_MB"] = "0"
            start = time.perf_counter()
            build_site(runs=root / "runs", out=root / "rendered")
            rendered = time.perf_counter() - start
            del os.environ["ITERALAB_CAMPAIGN_STORE_MB"]
            add(options.real, root / "runs", 1, trials, campaigns, options.runs_per_campaign, options.distinct_predictions)  # one more campaign, as a new run adds it
            start = time.perf_counter()
            result = build_site(runs=root / "runs", out=root / "site")
            appended = time.perf_counter() - start
            assert len(result["rendered"]) == 1, result["rendered"]
        total = campaigns * trials
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        distinct = ", every prediction file distinct" if options.distinct_predictions else ""
        kind = (f"real records from {options.real} ({options.runs_per_campaign} runs per campaign, with start records{distinct})"
                if options.real else "synthetic records")
        print(f"{kind}: {campaigns} campaigns x {trials} trials = {total} trials on {processes} process(es): "
              f"full build {full:.1f} s ({total / full:.0f} trials/s), no-change rebuild {again:.2f} s "
              f"({again / full:.3f} of the full build), full build into an empty folder with the caches warm "
              f"{warm:.1f} s (with the campaign store off, every campaign rendered again: {rendered:.1f} s), "
              f"one campaign appended {appended:.2f} s; peak RSS {peak:.0f} MiB"
              + (f" (largest worker {workers:.0f} MiB)" if processes > 1 else "")
              + f"; baseline in the same run: a bare orjson parse of every records line {bare:.2f} s")


if __name__ == "__main__":
    main()
