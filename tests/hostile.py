"""Structural fuzzing of real records (#24): copies of the demo's runs folder, 1-3 records changed, still valid JSON.

Each changed folder goes through load, check, decide, build and bundle in-process, as the CLI runs them; anything
but a one-line user error is a crash, reported with the place it came from. The long run (README) is

    .venv/bin/python -m tests.hostile --folders 10000 --seed 1

A crash names its folder: ``--seed 1 --only INDEX`` runs that one again.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "demo-runs"
CAMPAIGN = "demo-rotten-tomatoes"
# What a hand edit, another tool or an older version could leave in a field: every JSON type, edge numbers included.
REPLACEMENTS = (None, 0, -1, 1, 2.5, -0.5, 0.99, 10**6, 10**30, 1e300, "", "x", "2026-13-45", "<b>bold</b>", "NaN", "cuda:1",
                "cuda", "short", "fp32-b1", "ok", [], [1, "a"], {}, {"a": 1}, {"device": None}, True, False)
# Numbers JSON allows that json.dumps never writes (#33): beyond 64 bits (orjson reads them as floats), beyond a double
# (1e400: infinity), a negative zero, a whole number written as a float. Written raw into a numeric field's place.
RAW_NUMBERS = (b"1180591620717411303424", b"-1180591620717411303424", b"18446744073709551616", b"9223372036854775808",
               b"-9223372036854775809", b"1e400", b"-1e400", b"1e-400", b"-0", b"-0.0", b"1.0", b"0.0", b"2.5e3")
RAW_MARK = "\u0000raw-number\u0000"


@dataclass
class Tally:
    """What a fuzz run saw: folders, changes, records that stayed schema-valid after a change, and crashes by place."""

    folders: int = 0
    changes: Counter = field(default_factory=Counter)
    valid_changed: int = 0
    exits: Counter = field(default_factory=Counter)
    crashes: dict = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        """Count OTHER's folders, changes, exits and crashes in this tally too."""
        self.folders += other.folders
        self.changes.update(other.changes)
        self.valid_changed += other.valid_changed
        self.exits.update(other.exits)
        for place, seen in other.crashes.items():
            self.crashes.setdefault(place, seen)

    def crash(self, step: str, folder: int, error: BaseException) -> None:
        """Count a traceback once per place: the step and the line of iteralab that raised it."""
        from iteralab.core.errors import failure_reason

        reason = failure_reason(error)
        place = f"{step}: {type(error).__name__}{reason[reason.rfind(' at '):] if ' at ' in reason else ''}"
        self.crashes.setdefault(place, (folder, reason))


def _paths(value, prefix=()):
    """Yield the path of every field and list item inside VALUE."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield (*prefix, key)
        yield from _paths(inner, (*prefix, key))


def change_record(record: dict, rng: random.Random) -> tuple[dict, str]:
    """Return a copy of RECORD with one field removed or replaced by a value of another type, and what was done."""
    copy = json.loads(json.dumps(record))
    path = rng.choice(list(_paths(copy)))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    if rng.random() < 0.3:
        del holder[path[-1]]
        return copy, "removed"
    holder[path[-1]] = rng.choice(REPLACEMENTS)
    return copy, "replaced"


def numeric_paths(record: dict) -> list[tuple]:
    """Return the path of every number in RECORD (booleans are not numbers here)."""
    def holder_value(path):
        value = record
        for key in path:
            value = value[key]
        return value

    return [path for path in _paths(record)
            if isinstance(holder_value(path), int | float) and not isinstance(holder_value(path), bool)]


def with_raw_number(record: dict, path: tuple, raw: bytes) -> bytes:
    """Return RECORD as a JSON line with the number at PATH written as RAW, byte for byte."""
    copy = json.loads(json.dumps(record))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = RAW_MARK
    return json.dumps(copy).encode("utf-8").replace(json.dumps(RAW_MARK).encode(), raw)


def change_number(record: dict, rng: random.Random) -> bytes | None:
    """Return RECORD with one of its numbers written as one of RAW_NUMBERS, or None when it holds no number."""
    paths = numeric_paths(record)
    return with_raw_number(record, rng.choice(paths), rng.choice(RAW_NUMBERS)) if paths else None


def change_folder(runs: Path, rng: random.Random, tally: Tally) -> None:
    """Change 1-3 records of the records files under RUNS in place, each line staying valid JSON."""
    from iteralab.store import records

    files = sorted(runs.rglob("records/*.jsonl"))
    lines = {path: path.read_bytes().split(b"\n")[:-1] for path in files}
    places = [(path, number) for path in files for number in range(len(lines[path]))]
    for path, number in rng.sample(places, rng.randint(1, 3)):
        if rng.random() < 0.1:
            lines[path].insert(number, lines[path][number])
            tally.changes["repeated"] += 1
            continue
        if rng.random() < 0.2:
            raw = change_number(json.loads(lines[path][number]), rng)
            if raw is not None:
                lines[path][number] = raw
                tally.changes["raw number"] += 1
                continue
        changed, how = change_record(json.loads(lines[path][number]), rng)
        tally.changes[how] += 1
        tally.valid_changed += not records.validate(changed)
        lines[path][number] = json.dumps(changed).encode("utf-8")
    for path, content in lines.items():
        path.write_bytes(b"".join(line + b"\n" for line in content))


def _commands(runs: Path, work: Path) -> list[tuple[str, list[str]]]:
    # The site sits beside the work folders, so every folder's build shares one chart cache (base/.iteralab-cache).
    site = work.parent / f"{work.name}-site"
    return [
        ("check", ["check", str(runs), "--json"]),
        ("decide", ["decide", CAMPAIGN, "--runs", str(runs)]),
        ("decide --json", ["decide", CAMPAIGN, "--runs", str(runs), "--json"]),
        ("build", ["build", "--runs", str(runs), "--out", str(site), "--processes", "1"]),
        ("bundle", ["bundle", CAMPAIGN, "--runs", str(runs), "-o", str(work / "evidence.zip")]),
        ("rental list", ["rental", "list", "--campaign", CAMPAIGN, "--runs", str(runs)]),
    ]


def try_folder(seed: int, index: int, base: Path) -> Tally:
    """Copy the fixture, change it as (SEED, INDEX) says, and run every reading command over it, counting crashes."""
    from iteralab.cli import main

    tally = Tally(folders=1)
    rng = random.Random(f"{seed}/{index}")  # one folder is reproducible alone: --seed S --only INDEX
    work = base / f"folder-{index}"
    runs = work / "runs"
    shutil.copytree(FIXTURE, runs)
    change_folder(runs, rng, tally)
    for step, args in _commands(runs, work):
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(args)
        except Exception as error:  # counting crashes is the point
            tally.crash(step, index, error)
            continue
        tally.exits[(step, code)] += 1
        if code not in (0, 1) or (code == 1 and len(err.getvalue().strip().split("\n")) != 1):
            tally.crashes.setdefault(f"{step}: exit {code}", (index, err.getvalue()[:300]))
    shutil.rmtree(work)
    shutil.rmtree(work.parent / f"{work.name}-site", ignore_errors=True)
    return tally


def _slice(job: tuple[int, list[int], str]) -> Tally:
    seed, indexes, base = job
    total = Tally()
    for index in indexes:
        total.add(try_folder(seed, index, Path(base)))
    return total


def fuzz(*, folders: int, seed: int, processes: int = 1, only: list[int] | None = None) -> Tally:
    """Fuzz FOLDERS changed copies of the fixture (or the ONLY ones) with SEED on PROCESSES; return the tally."""
    import multiprocessing

    indexes = only if only is not None else list(range(folders))
    with tempfile.TemporaryDirectory() as base:
        jobs = [(seed, indexes[start::processes], base) for start in range(processes)]
        if processes == 1:
            return _slice(jobs[0])
        # Spawned, not forked: the test process may run threads (torch) that a fork would copy mid-lock.
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            total = Tally()
            for part in pool.map(_slice, jobs):
                total.add(part)
            return total


def together(*, campaigns: int, seed: int) -> tuple[int, str, int, list[str]]:
    """Put CAMPAIGNS changed copies into one runs folder as campaigns of their own and build it once.

    Return the exit status, the last line of stderr, how many campaign pages were written and which are missing.
    """
    from iteralab.cli import main

    tally = Tally()
    with tempfile.TemporaryDirectory() as base:
        runs = Path(base) / "runs"
        for index in range(campaigns):
            name = f"fuzz-{index:04d}"
            for source in FIXTURE.rglob("*"):
                if source.is_file():
                    # New ids and names per copy, the same records otherwise: ids end '…Z-<hex>', paths name the campaign.
                    target = runs / str(source.relative_to(FIXTURE)).replace(CAMPAIGN, name).replace("Z-", f"Z-{index:04d}")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    data = source.read_bytes()
                    if source.suffix == ".jsonl":
                        data = data.replace(CAMPAIGN.encode(), name.encode()).replace(b"Z-", f"Z-{index:04d}".encode())
                    target.write_bytes(data)
            change_folder(runs / name, random.Random(f"{seed}/together/{index}"), tally)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["build", "--runs", str(runs), "--out", str(Path(base) / "site")])
        pages = sorted(p.parent.name for p in (Path(base) / "site" / "campaigns").glob("*/index.html"))
        missing = sorted(set(f"fuzz-{index:04d}" for index in range(campaigns)) - set(pages))
        return code, err.getvalue().strip()[-300:], len(pages), missing


def charts_failing_for(campaign: str):
    """Return a stand-in for the campaign page's charts that fails for CAMPAIGN as a renderer's bug would."""
    from iteralab.site import campaign as pages

    draw = pages.campaign_charts

    def charts(view):
        if view.name == campaign:
            raise ZeroDivisionError("division by zero")
        return draw(view)

    return charts


def describe(tally: Tally, seconds: float) -> str:
    """Summarise a fuzz run in a few lines."""
    lines = [f"{tally.folders} folders in {seconds:.0f} s; changes: {dict(tally.changes)}; "
             f"schema-valid changed records: {tally.valid_changed}",
             "exit codes: " + ", ".join(f"{step} {code}: {n}" for (step, code), n in sorted(tally.exits.items())),
             f"crashes: {len(tally.crashes)} place(s)"]
    lines += [f"  {place} (folder {folder}): {message}" for place, (folder, message) in sorted(tally.crashes.items())]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folders", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", type=int, nargs="*", metavar="INDEX", help="run only these folders (as a crash names them)")
    parser.add_argument("--together", type=int, metavar="N", help="instead: N changed campaigns in one runs folder, one build")
    options = parser.parse_args()
    started = time.perf_counter()
    if options.together:
        status, error, built, absent = together(campaigns=options.together, seed=options.seed)
        print(f"{options.together} changed campaigns in one runs folder, one build in {time.perf_counter() - started:.0f} s: "
              f"exit {status}, {built} campaign pages written, missing: {absent or 'none'}; stderr: {error or 'empty'}")
        sys.exit(0 if status == 0 and not absent else 1)
    result = fuzz(folders=options.folders, seed=options.seed, processes=options.processes, only=options.only)
    print(describe(result, time.perf_counter() - started))
    sys.exit(1 if result.crashes else 0)
