"""Every number from another machine is read safely (#33): out of range is a named problem, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from importlib import resources

import pytest

from iteralab.cli import main
from iteralab.run.resume import start_record
from iteralab.store import reading, records
from tests import hostile

INT64_MAX = 2**63 - 1


def _integers(node, where=""):
    """Yield (where, schema) for every integer type in a schema."""
    if isinstance(node, dict):
        types = node.get("type")
        if types == "integer" or (isinstance(types, list) and "integer" in types):
            yield where, node
        for key, inner in node.items():
            yield from _integers(inner, f"{where}/{key}")
    elif isinstance(node, list):
        for index, inner in enumerate(node):
            yield from _integers(inner, f"{where}/{index}")


def test_every_integer_field_of_every_schema_has_bounds_a_64_bit_column_holds():
    """Regression for #33: a start record's sequence of 2^70 passed the schema and crashed the record cache."""
    folder = resources.files("iteralab.store") / "schemas"
    unbounded = []
    for kind in ("common", *records.KINDS):
        schema = json.loads((folder / f"{kind}.schema.json").read_text(encoding="utf-8"))
        for where, rule in _integers(schema):
            if "enum" in rule or "const" in rule:
                continue
            low, high = rule.get("minimum"), rule.get("maximum")
            if low is None or high is None or not -(2**63) <= low <= high <= INT64_MAX:
                unbounded.append(f"{kind}{where}: minimum {low}, maximum {high}")
    assert unbounded == []


def _records_with(raw: bytes) -> list[tuple[str, tuple, bytes]]:
    """Return, for every number of every kind of record the demo writes, that record with the number written as RAW."""
    loaded = reading.load(hostile.FIXTURE)
    manifest = loaded.of_kind("manifest")[0]
    trial = loaded.of_kind("trial")[0]
    start = start_record(manifest, trial["record_id"], trial["variant"], trial["repetition"], trial["sequence"])
    samples = {record["kind"]: record for record in loaded.records}
    samples["start"] = start
    lines = []
    for kind, record in sorted(samples.items()):
        for number, path in enumerate(hostile.numeric_paths(record)):
            # Another id each: a copy under the same id would be skipped before its numbers are read.
            renamed = {**record, "record_id": f"{record['record_id'][:-12]}{number:012x}"}
            lines.append((kind, path, hostile.with_raw_number(renamed, path, raw)))
    return lines


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("raw", [b"1180591620717411303424", b"-1180591620717411303424", b"-9223372036854775809", b"18446744073709551616", b"1e400",
                                 b"-1e400", b"-0", b"1.0", b"1e-400"])
def test_out_of_range_numbers_in_every_numeric_field_are_named_problems_never_tracebacks(tmp_path, raw):
    runs = tmp_path / "runs"
    shutil.copytree(hostile.FIXTURE, runs)
    changed = _records_with(raw)
    target = runs / hostile.CAMPAIGN / "records" / "run-numbers.jsonl"
    target.write_bytes(b"".join(line + b"\n" for _, _, line in changed))
    code, out, err = _run("check", str(runs), "--json")
    assert code in (0, 1), err
    named = {int(problem.split(":")[1]) for problem in json.loads(out)["problems"] if problem.startswith(f"{hostile.CAMPAIGN}/records/run-numbers.jsonl:")}
    if raw in (b"1e400", b"-1e400"):
        assert named == set(range(1, len(changed) + 1))  # beyond a double: the line is no JSON this product reads
    elif raw in (b"1180591620717411303424", b"-1180591620717411303424", b"18446744073709551616"):
        # Beyond 64 bits: every whole-number field of the schemas refuses it, by file, line and field.
        integers = [line for line, (_, path, _) in enumerate(changed, start=1) if _is_whole(changed[line - 1][0], path)]
        assert integers and set(integers) <= named
    for args in (["decide", hostile.CAMPAIGN, "--runs", str(runs)], ["decide", hostile.CAMPAIGN, "--runs", str(runs), "--json"],
                 ["build", "--runs", str(runs), "--out", str(tmp_path / "site"), "--processes", "1"],
                 ["bundle", hostile.CAMPAIGN, "--runs", str(runs), "-o", str(tmp_path / "evidence.zip")]):
        code, _, err = _run(*args)
        assert code == 0 or (code == 1 and len(err.strip().split("\n")) == 1), (args[0], err)


def _is_whole(kind: str, path: tuple) -> bool:
    """Say whether the demo's record of KIND holds a whole number (not a float) at PATH."""
    sample = {record["kind"]: record for record in reading.load(hostile.FIXTURE).records}.get(kind)
    if sample is None:
        return path[-1] in ("sequence", "repetition")  # the start record: its two numbers are both whole
    value = sample
    for key in path:
        value = value[key]
    return type(value) is int


def test_a_negative_zero_never_prints_a_minus_nor_makes_later_zeros_print_one():
    """Regression: the format caches key -0.0 and 0.0 alike (equal, one hash). After a record from another machine held
    -0, every zero formatted later in the build printed "-0" (a generation page's median of [0, 0] did, in the suite)."""
    from iteralab.pages.render import FORMATS, cell, fmt

    for kind in FORMATS:
        for code in ("en", "id"):
            said = [str(fmt(value, kind, code=code)) for value in (-0.0, 0.0, 0)]
            assert not any(text.lstrip().startswith("-") for text in said), (kind, code, said)
            assert "-" not in str(cell(-0.0, kind, code=code)).split(">", 1)[1][:2], (kind, code)
