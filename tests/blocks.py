"""Hostile values in the blocks of a generation, an adaptation or a serving campaign (#62, #64): the fields come from
the schemas.

Each copy of a real tiny campaign of each kind has one field under a trial's ``generation``, ``adaptation`` or
``serving`` object (or its ``variant_config.engine_args``), or under its manifest's ``protocol.generation``,
``protocol.adaptation``, ``protocol.serving`` or ``training_split``, replaced by a hostile value or removed. The fields
are every property the schemas declare there (so a field added to a schema is fuzzed too), and every one the fixtures'
records hold (a list's first item standing for all). check must name each copy it refuses
by its field; the copies the schemas accept become campaigns of one runs folder, read once by each reader, which must
never raise. The long run (every field with every value; --alone: each copy in a runs folder of its own):

    .venv/bin/python -m tests.blocks --all

The fixtures (tests/fixtures/generate-runs, adapt-runs, serve-runs) are the runs folders, records, predictions, exports
and kept serving files, of tests/tiny.py's campaigns run once: write_generation_campaign(folder, build_causal_lm(...),
write_corpus(..., corpus_rows(12)), repetitions=1), write_adaptation_campaign(folder, build_model(...), repetitions=1)
and write_serving_campaign(folder, build_causal_lm(...), ..., variants=(("plain", ()), ("cb", (continuous batching
arguments))), requests=6) (tiny-serve: levels 1 and 2, transformers serve and AIPerf). Written again
by a newer runner, they hold its new fields, which test_fuzz then asks the schemas to type.
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
import traceback
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
BASES = {"generate": (FIXTURES / "generate-runs", "tiny-generate"), "adapt": (FIXTURES / "adapt-runs", "tiny-adapt"),
         "serve": (FIXTURES / "serve-runs", "tiny-serve")}
# (kind of campaign, record kind, the block's path in the record)
BLOCKS = (("generate", "trial", ("generation",)), ("generate", "manifest", ("protocol", "generation")),
          ("adapt", "trial", ("adaptation",)), ("adapt", "manifest", ("protocol", "adaptation")),
          ("adapt", "manifest", ("training_split",)), ("serve", "trial", ("serving",)),
          ("serve", "manifest", ("protocol", "serving")), ("serve", "trial", ("variant_config", "engine_args")))
REMOVED = "<removed>"
HOSTILE = (None, 0, -1, 1e308, "", "x" * 5000, [], {}, True, "../../../../etc", "NaN", "\u202e", {"a": {"b": [1, None]}},
           REMOVED)


def _schema(name: str) -> dict:
    from importlib import resources

    return json.loads((resources.files("iteralab.store") / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8"))


def _resolve(node: dict, own: str) -> tuple[dict, str]:
    """Follow NODE's $refs; return the node and the schema it lies in (a "#/..." inside it is that schema's)."""
    while "$ref" in node:
        target, _, pointer = node["$ref"].partition("#")
        own = (target or own).removesuffix(".schema.json")
        document = _schema(own)
        for part in pointer.strip("/").split("/") if pointer.strip("/") else ():
            document = document[part]
        node = {**document, **{k: v for k, v in node.items() if k != "$ref"}}
    return node, own


def schema_paths(node: dict, own: str, prefix: tuple = (), shared: dict | None = None,
                 anchor: tuple = ((), 0)) -> list[tuple]:
    """Return the path of every property NODE (a schema) declares below it, list items as index 0. SHARED, when given,
    gets each path's place inside the innermost definition ($ref) it lies in: a serving level's figures sit in levels
    and under capacity, a quantile six times in each, and the places of one definition's field share one key."""
    if "$ref" in node:
        anchor = ((own, node["$ref"]), len(prefix))
    (node, own), found = _resolve(node, own), []
    for part in (*node.get("allOf", ()), *node.get("anyOf", ()), *node.get("oneOf", ())):
        found += schema_paths(part, own, prefix, shared, anchor)
    inside = [*(node.get("properties") or {}).items(),
              *([(0, node["items"])] if isinstance(node.get("items"), dict) else [])]
    for key, inner in inside:
        if shared is not None:  # an object's field; a list's item is its own (None): names lists differ in use
            shared.setdefault((*prefix, key), (anchor[0], (*prefix, key)[anchor[1]:]) if key != 0 else None)
        found += [(*prefix, key), *schema_paths(inner, own, (*prefix, key), shared, anchor)]
    return found


def record_paths(value, prefix: tuple = ()) -> list[tuple]:
    """Return the path of every field and list item inside VALUE."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [path for key, inner in items for path in ((*prefix, key), *record_paths(inner, (*prefix, key)))]


def declared(record_kind: str, block: tuple, shared: dict | None = None) -> list[tuple]:
    """Return the path of every field the schema of RECORD_KIND declares in BLOCK (the block's own path first); fill
    SHARED, when given, with each path's key (schema_paths) by its path from the record's top."""
    node, own = _schema(record_kind), record_kind
    for part in block:
        node, own = _resolve(node, own)
        node = (node.get("properties") or {}).get(part, {})
    inside: dict = {}
    found = [block, *((*block, *path) for path in schema_paths(node, own, shared=inside,
                                                                anchor=((record_kind, block), 0)))]
    if shared is not None:
        shared.update({(*block, *path): key or ((record_kind, block), path) for path, key in inside.items()})
    return found


def held(kind: str, record_kind: str, block: tuple) -> list[tuple]:
    """Return the path of every field the fixture's records of RECORD_KIND hold in BLOCK (a list's first item for all)."""
    return [(*block, *path) for line in _lines(kind) if line[2] == record_kind
            for path in record_paths(_get(json.loads(line[3]), block) or {})
            if not any(isinstance(key, int) and key for key in path)]


def fields(*, once: bool = False) -> list[tuple[str, str, tuple]]:
    """Return (kind of campaign, record kind, path) for every field of every block, from the schemas and the records;
    ONCE: a field of a definition used in several places in its first place only (the others hold the same values)."""
    found = {}
    for kind, record_kind, block in BLOCKS:
        shared: dict = {}
        for path in [*declared(record_kind, block, shared), *held(kind, record_kind, block)]:
            key = (kind, record_kind, *shared[path]) if once and path in shared else (kind, record_kind, path)
            found.setdefault(key, (kind, record_kind, path))
    return list(found.values())


def _get(record, path):
    for key in path:
        if (isinstance(record, dict) and key in record) or (isinstance(record, list) and isinstance(key, int) and key < len(record)):
            record = record[key]
        else:
            return None
    return record


@dataclass
class Copy:
    """One hostile copy: which campaign kind, which record (its index among that kind's), which field, which value."""

    kind: str
    record_kind: str
    path: tuple
    value: object
    nth: int = 0
    name: str = ""

    def describe(self) -> str:
        """Say what was changed, in a line."""
        shown = repr(self.value) if len(repr(self.value)) < 40 else repr(self.value)[:37] + "..."
        return f"{self.name}: {self.kind} {self.record_kind} #{self.nth} {'.'.join(map(str, self.path))} = {shown}"


def sample(*, seed: int = 62, extra: int = 60, every: bool = False) -> list[Copy]:
    """Every field once with a rotating hostile value, then EXTRA (field, value) pairs drawn with SEED (EVERY: all)."""
    known = fields()
    rng = random.Random(seed)
    if every:
        pairs = [(found, value) for found in known for value in HOSTILE]
    else:  # the extra pairs are drawn from every place, so a shared definition's other places are drawn too
        pairs = [(found, HOSTILE[index % len(HOSTILE)]) for index, found in enumerate(fields(once=True))]
        pairs += [(rng.choice(known), rng.choice(HOSTILE)) for _ in range(extra)]
    return [Copy(kind, record_kind, path, value, nth=index) for index, ((kind, record_kind, path), value) in enumerate(pairs)]


def _apply(record: dict, copy: Copy) -> bool:
    """Change RECORD as COPY says; False when the field's holder is absent (nothing to change)."""
    holder, key = _get(record, copy.path[:-1]), copy.path[-1]
    present = (isinstance(holder, dict) and key in holder) or \
        (isinstance(holder, list) and isinstance(key, int) and key < len(holder))
    if not present and (copy.value is REMOVED or not isinstance(holder, dict)):
        return False
    if copy.value is REMOVED:
        del holder[key]
    else:
        holder[key] = json.loads(json.dumps(copy.value))
    return True


@cache
def _lines(kind: str) -> tuple[tuple[Path, int, str, str], ...]:
    folder, campaign = BASES[kind]  # the campaign's own records: the copies are of it alone
    return tuple((path, number, json.loads(line)["kind"], line) for path in sorted((folder / campaign).glob("records/*.jsonl"))
                 for number, line in enumerate(path.read_text().splitlines(), 1))


def changed(copy: Copy) -> tuple[Path, int, dict] | None:
    """Return (records file of the fixture, line number, the record changed as COPY says), or None when the field's
    holder is absent (nothing to change)."""
    found = [(path, number, line) for path, number, kind, line in _lines(copy.kind) if kind == copy.record_kind]
    path, number, line = found[copy.nth % len(found)]
    record = json.loads(line)
    return (path, number, record) if _apply(record, copy) else None


def names_field(problem: str, copy: Copy) -> bool:
    """Tell whether PROBLEM (what check says of a line) names the field COPY changed, or the key it removed."""
    dotted, holder = ".".join(map(str, copy.path)), ".".join(map(str, copy.path[:-1])) or "record"
    return any(part.startswith((f"{dotted}:", f"{dotted}.", f"{holder}: '{copy.path[-1]}' is a required property"))
               for part in problem.split("; "))


def split(copies: list[Copy]) -> tuple[list[tuple[Copy, str]], list[Copy]]:
    """Return the copies check names, each with its problem, and those it finds valid (absent fields left out)."""
    named, valid = [], []
    for copy in copies:
        found = changed(copy)
        if found is not None:
            problem = problem_of(found[2])
            if problem:
                named.append((copy, problem))
            else:
                valid.append(copy)
    return named, valid


def problem_of(record: dict) -> str | None:
    """Return what check says of RECORD's line ('field: message; ...', as the loader joins them), or None when valid."""
    from iteralab.store import records

    return "; ".join(records.validate(json.loads(json.dumps(record)))) or None


def place(copies: list[Copy], runs: Path) -> list[Copy]:
    """Write each copy into RUNS as a campaign of its own (fz-NNNN), its ids and paths renamed; return those placed."""
    placed = []
    for index, copy in enumerate(copies):
        found = changed(copy)
        if found is None:
            continue
        source, number, record = found
        folder, campaign = BASES[copy.kind]
        copy.name = name = f"fz-{index:04d}"
        target = runs / name
        # Linked, not copied, where the file system allows: the records files alone are written anew.
        shutil.copytree(folder / campaign, target, ignore=shutil.ignore_patterns("records"), copy_function=_link)
        for path in list(target.rglob("*")):
            if "Z-" in path.name:
                path.rename(path.with_name(path.name.replace("Z-", f"Z-{index:04d}")))
        (target / "records").mkdir()
        for path in sorted((folder / campaign / "records").glob("*.jsonl")):
            lines = path.read_text().splitlines()
            if path == source:
                lines[number - 1] = json.dumps(record, ensure_ascii=False)
            text = "".join(line + "\n" for line in lines).replace(f"{campaign}/", f"{name}/")
            text = text.replace(f'"{campaign}"', f'"{name}"').replace("Z-", f"Z-{index:04d}")
            (target / "records" / path.name.replace("Z-", f"Z-{index:04d}")).write_text(text, encoding="utf-8")
        placed.append(copy)
    return placed


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@dataclass
class Outcome:
    """What the readers did over a runs folder of copies: the problems check listed, and each raise by reader."""

    problems: list = field(default_factory=list)
    raised: dict = field(default_factory=dict)

    def fail(self, reader: str, campaign: str, error: BaseException | str) -> None:
        """Keep one raise of READER for CAMPAIGN ('*' for the whole folder), with where it came from."""
        if isinstance(error, BaseException):
            where = traceback.extract_tb(error.__traceback__)[-1]
            error = f"{type(error).__name__}: {str(error)[:200]} at {Path(where.filename).name}:{where.lineno}"
        self.raised.setdefault((reader, campaign), error)


def _cli(*args) -> tuple[int, str, str]:
    from iteralab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(arg) for arg in args])
    return code, out.getvalue(), err.getvalue()


def _steps(opened, runs: Path, name: str) -> list:
    from iteralab.decision.text import describe_report
    from iteralab.store import listing

    steps = [("trials --json", lambda: _cli("trials", name, "--runs", runs, "--json"))]
    if opened is not None:  # the text of iteralab trials and decide, from the views the API read (a second read costs)
        view = opened._views[name]
        steps += [(".decide", lambda: opened.decide(name)), ("decision report", lambda: describe_report(opened._report(name))),
                  ("trials", lambda: listing.describe_trials(view, listing.trial_rows(view)))]
    return steps


def read_all(runs: Path, campaigns: list[str], site: Path) -> Outcome:
    """Run check, then every reader over RUNS: the API's tables and decisions, the decision report, build and trials."""
    from iteralab.api import open_runs
    from iteralab.site.build import build_site
    from iteralab.store import reading

    outcome = Outcome(problems=reading.load(runs).problems)
    try:
        opened = open_runs(runs)
        for what in ("trials", "campaigns", "problems"):
            getattr(opened, what)
    except Exception as error:  # a raise is what this counts
        outcome.fail("open_runs", "*", error)
        opened = None
    for name in campaigns:
        for reader, step in _steps(opened, runs, name):
            try:
                result = step()
            except Exception as error:  # a raise is what this counts
                outcome.fail(reader, name, error)
                continue
            if isinstance(result, tuple) and (result[0] not in (0, 1) or "Traceback" in result[2]):
                outcome.fail(reader, name, f"exit {result[0]}: {result[2][-300:]}")
    try:
        built = build_site(runs=runs, out=site, languages=("en",), processes=1)
        for name, reason in built["failed"].items():
            outcome.fail("build", name, reason)
    except Exception as error:  # a raise is what this counts
        outcome.fail("build", "*", error)
    return outcome


def run(copies: list[Copy], base: Path) -> tuple[list[Copy], Outcome]:
    """Place COPIES under BASE and read them all; return those placed and what the readers did."""
    runs = base / "runs"
    runs.mkdir(parents=True)
    placed = place(copies, runs)
    return placed, read_all(runs, [copy.name for copy in placed], base / "site")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all", action="store_true", help="every field with every value (else each field once, and more)")
    parser.add_argument("--seed", type=int, default=62)
    parser.add_argument("--alone", action="store_true", help="read each copy in a runs folder of its own, named ones too")
    options = parser.parse_args()
    named, valid = split(sample(seed=options.seed, every=options.all))
    groups = [[copy] for copy, _ in named] + [[copy] for copy in valid] if options.alone else [valid]
    raised, places = set(), {}
    for group in groups:
        with tempfile.TemporaryDirectory() as base:
            placed, outcome = run(group, Path(base))
        for (reader, campaign), error in outcome.raised.items():
            broken = [copy for copy in placed if campaign in ("*", copy.name)]
            raised.update(id(copy) for copy in broken)
            places.setdefault(f"{reader}: {error.split(' at ')[-1] if ' at ' in error else error[:80]}",
                              f"{broken[0].describe() if broken else campaign} -- {error}")
    print(f"{len(named) + len(valid)} copies; named by check: {len(named)} (the field named: "
          f"{sum(names_field(problem, copy) for copy, problem in named)}); raised in a reader: {len(raised)}; "
          f"{len(places)} place(s)")
    for where, example in sorted(places.items()):
        print(f"  {where}\n      {example}")
    return 1 if places else 0


if __name__ == "__main__":
    sys.exit(main())
