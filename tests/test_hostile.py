"""Records from any machine never crash the product, one campaign's failure stays in it, a full disk is one line (#24)."""

from __future__ import annotations

import json
import shutil

import pytest

from iteralab.store import reading, records
from tests import factory, hostile


def test_changed_real_records_give_problems_never_tracebacks():
    """Regression for #24: 500 changed copies of the demo's records ended in tracebacks from 11 places."""
    tally = hostile.fuzz(folders=200, seed=24, processes=2)
    assert tally.folders == 200
    assert tally.crashes == {}, hostile.describe(tally, 0)
    # The generator must reach every kind of change, and changes the schemas accept, or the test proves nothing.
    assert set(tally.changes) == {"removed", "replaced", "repeated"}
    assert tally.valid_changed >= 20, hostile.describe(tally, 0)
    assert tally.exits[("check", 1)] >= 100  # most changes break a schema: check lists them and exits 1
    for step in ("decide", "decide --json", "build", "bundle"):
        assert tally.exits[(step, 0)] == 200, hostile.describe(tally, 0)  # the campaign still decides, builds and bundles


@pytest.mark.parametrize(("path", "value", "field"), [
    (("quality", "verdicts", 0, "threshold"), "0.73", "quality.verdicts.0.threshold"),
    (("variant_config", "batch_size"), {"n": 8}, "variant_config.batch_size"),
    (("variant_config", "device"), "cuda:x", "variant_config.device"),
    (("id_check",), {"expected": 1000}, "id_check"),
    (("memory",), {"host_rss_scope": "process"}, "memory"),
    (("phases", "warmup", "host_peak_rss_bytes"), -1, "phases.warmup.host_peak_rss_bytes"),
    (("quality", "buckets", "short", "accuracy"), [0.8], "quality.buckets.short.accuracy"),
    (("throughput_entries_per_s",), "fast", "throughput_entries_per_s"),
])
def test_a_trial_that_breaks_what_the_views_read_is_named_by_field(tmp_path, path, value, field):
    runs = tmp_path / "runs"
    shutil.copytree(hostile.FIXTURE, runs)
    records_file = next(runs.rglob("records/run-vm-*.jsonl"))
    lines = records_file.read_bytes().split(b"\n")
    trial = json.loads(lines[1])
    holder = trial
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    lines[1] = json.dumps(trial).encode()
    records_file.write_bytes(b"\n".join(lines))
    loaded = reading.load(runs)
    assert [problem.split(": ")[:2] for problem in loaded.problems] == [[f"{hostile.CAMPAIGN}/records/{records_file.name}:2", field]]
    assert trial["record_id"] not in {record["record_id"] for record in loaded.records}


def test_records_of_every_earlier_shape_stay_valid():
    """The tightened schemas accept the fixture's real records and the factory's minimal ones: nothing valid before is lost."""
    loaded = reading.load(hostile.FIXTURE)
    assert loaded.problems == [] and len(loaded.records) == 23
    manifest = factory.manifest()
    for record in (manifest, factory.trial(manifest), factory.trial(manifest, status="oom", failed_phase="warmup"),
                   factory.rental(), factory.deliverable("camp", factory.trial(manifest))):
        assert records.validate(record) == [], record["kind"]
