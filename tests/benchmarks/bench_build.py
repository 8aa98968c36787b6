"""Site build: full build and no-change rebuild on synthetic campaigns, with peak memory.

Run: .venv/bin/python -m tests.benchmarks.bench_build [--sizes 10x100 100x100] [--real runs [--runs-per-campaign 4] [--distinct-predictions]]
     .venv/bin/python -m tests.benchmarks.bench_build --sizes 1000 --real runs --campaign demo-rotten-tomatoes [--commands]
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

With --campaign NAME (and --real RUNS), the folder is the one ../shared/bench/scale.sh measures: NAME copied whole
CAMPAIGNS times (--sizes 1000), each copy holding every run file of NAME --runs-per-campaign times under fresh ids, with
their start records; prediction files hard-linked where the file system allows, corpus copies copied (``replicate``, as
replicate.py does). The demo's classification campaign gives 1,000 campaigns of 4 runs of 25 trials, about 204,000
records. With --commands, the cold build, the no-change rebuild and one campaign appended are first timed as whole
`iteralab build` commands, each a fresh process (its imports counted, as a user meets it), every cache empty before
the cold one: scale.sh's three figures, beside the in-process ones (which then start with the page cache warm).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import resource
import shutil
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


# Every record id kind (KIND-YYYYMMDDTHHMMSSZ-HEX12), as replicate.py remaps them.
RECORD_ID = re.compile(r"\b([a-z]+(?:-[A-Za-z0-9.]+)*-\d{8}T\d{6}Z-)([0-9a-f]{12})\b")


def replicate(source: Path, campaign: str, out: Path, count: int, repeats: int = 4, first: int = 0) -> None:
    """Copy CAMPAIGN of the runs folder SOURCE COUNT times into OUT, as ../shared/bench/replicate.py does.

    Copy k is campaign CAMPAIGN-kNNNNN (records, paths and folder renamed) and holds every run file of CAMPAIGN REPEATS
    times, as if it had been run REPEATS times on one machine; every record id gets a new HEX12 derived from k and the
    repeat. Rentals, deliverables and receipts are left out; prediction files are hard-linked where possible, corpus
    copies copied (a hard link would change the change time of every copy, which the no-change check reads).
    """
    base = source / campaign
    run_files = []
    for path in sorted((base / "records").glob("*.jsonl")):
        text = path.read_text(encoding="utf-8")
        if '"kind": "manifest"' in text or '"kind":"manifest"' in text:
            run_files.append((path.name, text))
    if not run_files:
        raise SystemExit(f"{base}: no run file with a manifest to copy; run make demo first")
    for index in range(first, first + count):
        name = f"{campaign}-k{index:05d}"
        target = out / name
        (target / "records").mkdir(parents=True, exist_ok=True)
        for sub in ("inputs", "predictions"):
            (target / sub).mkdir(exist_ok=True)
        for repeat in range(repeats):
            tag = f"k{index:05d}r{repeat}"

            def remap(text: str, tag: str = tag, name: str = name) -> str:
                text = RECORD_ID.sub(lambda found: found.group(1) + hashlib.sha256(f"{found.group(2)}{tag}".encode()).hexdigest()[:12],
                                     text)
                return text.replace(campaign, name)

            for file_name, text in run_files:
                (target / "records" / remap(file_name)).write_text(remap(text), encoding="utf-8")
            for sub in ("inputs", "predictions"):
                if not (base / sub).is_dir():
                    continue
                for path in (base / sub).iterdir():
                    copy = target / sub / remap(path.name)
                    if copy.exists():
                        continue
                    if sub == "inputs":
                        shutil.copy2(path, copy)
                        continue
                    try:
                        os.link(path, copy)
                    except OSError:
                        shutil.copy2(path, copy)


def add(real: Path | None, runs: Path, campaigns: int, trials: int, first: int = 0, runs_per_campaign: int = 1,
        distinct: bool = False, campaign: str | None = None) -> None:
    """Add CAMPAIGNS campaigns, numbered from FIRST: copies of REAL's CAMPAIGN (as replicate.py makes them), copies of
    REAL's first run (as RUNS_PER_CAMPAIGN runs), or synthetic ones."""
    if real and campaign:
        replicate(real, campaign, runs, campaigns, runs_per_campaign, first)
    elif real:
        copy_real_runs(runs, campaigns, trials, real, first, runs_per_campaign, distinct)
    else:
        make_runs(runs, campaigns, trials, first)


def command() -> list[str]:
    """Return the `iteralab` command a user runs: the venv's console script beside this Python, else python -m iteralab."""
    script = Path(sys.executable).with_name("iteralab")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "iteralab"]


def whole_commands(real: Path, campaign: str, runs: Path, site: Path, campaigns: int, repeats: int) -> dict:
    """Time `iteralab build` as whole commands, as scale.sh does: cold (every cache empty), no change, one campaign
    appended; each a fresh process. Return each one's seconds and the load average before it; the folder is left as
    it was."""
    figures = {}
    environment = {**os.environ, "ITERALAB_CACHE_DIR": tempfile.mkdtemp(prefix="iteralab-commands-")}
    environment.pop("ITERALAB_CAMPAIGN_STORE_MB", None)
    shutil.rmtree(site, ignore_errors=True)
    build = [*command(), "build", "--runs", str(runs), "--out", str(site)]
    try:
        for name in ("cold", "no-change", "appended"):
            if name == "appended":
                replicate(real, campaign, runs, 1, repeats, campaigns)  # the next copy, as scale.sh adds it
            load = os.getloadavg()[0]
            start = time.perf_counter()
            subprocess.run(build, check=True, env=environment, stdout=subprocess.DEVNULL)
            figures[name] = (time.perf_counter() - start, load)
    finally:
        shutil.rmtree(runs / f"{campaign}-k{campaigns:05d}", ignore_errors=True)
        shutil.rmtree(environment["ITERALAB_CACHE_DIR"], ignore_errors=True)
        shutil.rmtree(site, ignore_errors=True)
    return figures


def trial_count(runs: Path) -> int:
    """Return the trial records under RUNS (read from the record cache, warm after a build)."""
    from iteralab.store.reading import load_table

    return int((load_table(runs).frame["kind"] == "trial").sum())


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
    parser.add_argument("--campaign", metavar="NAME",
                        help="with --real: copy this campaign whole, each copy holding its run files --runs-per-campaign "
                             "times, as ../shared/bench/scale.sh does (a size is then a number of campaigns)")
    parser.add_argument("--commands", action="store_true",
                        help="with --campaign: first time whole `iteralab build` commands (cold, no change, one appended)")
    options = parser.parse_args()
    if options.campaign and not options.real:
        parser.error("--campaign copies a campaign of --real RUNS")
    if options.commands and not options.campaign:
        parser.error("--commands times the folder --campaign makes")
    if len(options.sizes) > 1:
        # One process per size: each size's peak memory is its own.
        for size in options.sizes:
            real = ["--real", str(options.real), "--runs-per-campaign", str(options.runs_per_campaign),
                    *(["--distinct-predictions"] if options.distinct_predictions else []),
                    *(["--campaign", options.campaign] if options.campaign else []),
                    *(["--commands"] if options.commands else [])] if options.real else []
            subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_build", "--sizes", size, *real], check=True)
        return
    for size in options.sizes:
        campaigns, trials = (int(size.split("x")[0]), 0) if options.campaign else map(int, size.split("x"))
        commands = {}
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            os.environ["ITERALAB_CACHE_DIR"] = str(root / "cache")  # every cache starts cold, the user's are left alone
            os.environ.pop("ITERALAB_CAMPAIGN_STORE_MB", None)
            add(options.real, root / "runs", campaigns, trials, runs_per_campaign=options.runs_per_campaign,
                distinct=options.distinct_predictions, campaign=options.campaign)
            bare = bare_parse(root / "runs")
            if options.commands:  # first, while every cache is empty: scale.sh's three figures
                commands = whole_commands(options.real, options.campaign, root / "runs", root / "commands-site", campaigns,
                                          options.runs_per_campaign)
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
            # one more campaign, as a new run adds it
            add(options.real, root / "runs", 1, trials, campaigns, options.runs_per_campaign, options.distinct_predictions,
                options.campaign)
            start = time.perf_counter()
            result = build_site(runs=root / "runs", out=root / "site")
            appended = time.perf_counter() - start
            assert len(result["rendered"]) == 1, result["rendered"]
            if options.campaign:  # every copy holds the same trials, the one appended too
                trials = trial_count(root / "runs") // (campaigns + 1)
        total = campaigns * trials
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        distinct = ", every prediction file distinct" if options.distinct_predictions else ""
        kind = (f"copies of {options.real / options.campaign} (scale.sh's layout: {options.runs_per_campaign} copies of its runs "
                f"per campaign, with their start records)" if options.campaign else
                f"real records from {options.real} ({options.runs_per_campaign} runs per campaign, with start records{distinct})"
                if options.real else "synthetic records")
        print(f"{kind}: {campaigns} campaigns x {trials} trials = {total} trials on {processes} process(es): "
              f"full build {full:.1f} s ({total / full:.0f} trials/s), no-change rebuild {again:.2f} s "
              f"({again / full:.3f} of the full build), full build into an empty folder with the caches warm "
              f"{warm:.1f} s (with the campaign store off, every campaign rendered again: {rendered:.1f} s), "
              f"one campaign appended {appended:.2f} s; peak RSS {peak:.0f} MiB"
              + (f" (largest worker {workers:.0f} MiB)" if processes > 1 else "")
              + f"; baseline in the same run: a bare orjson parse of every records line {bare:.2f} s")
        if commands:
            print("whole `iteralab build` commands, as scale.sh times them (load average before each): "
                  + ", ".join(f"{name} {seconds:.2f} s ({load:.1f})" for name, (seconds, load) in commands.items())
                  + f" (goals: cold 60 s, no-change 0.3 s, appended 1.5 s); {' '.join(command())}")


if __name__ == "__main__":
    main()
