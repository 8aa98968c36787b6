"""A run is resumed only under the numerics flags it ran with. Regression for #63 (item 8): the flags that change
results were recorded with their fingerprint, but --resume compared only the machine and the software."""

from __future__ import annotations

import pytest

from iteralab.core.errors import UserError
from iteralab.run import runner
from iteralab.store import records
from tests.tiny import corpus_rows, write_campaign, write_corpus


def test_a_run_started_under_other_numerics_flags_is_not_resumed(tiny_model, tmp_path):
    campaign = write_campaign(tmp_path, tiny_model, write_corpus(tmp_path / "corpus.jsonl", corpus_rows()),
                              repetitions=1, batch_sizes=(1,))
    same, other = tmp_path / "same", tmp_path / "other"
    manifest = runner._manifest(runner.prepare(campaign, same))
    records.append(same, manifest)
    assert runner.prepare(campaign, same, resume=True).resumption is not None  # the same flags: resumed
    changed = {**manifest, "determinism": {**manifest["determinism"], "tf32_matmul": not manifest["determinism"]["tf32_matmul"],
                                           "numerics_fingerprint": "sha256:" + "0" * 64}}
    records.append(other, changed)
    with pytest.raises(UserError, match=r"cannot resume run .*: the numerics flags that change results differ "
                                        r"\(tf32_matmul (True|False) in the run, (True|False) here\)"):
        runner.prepare(campaign, other, resume=True)
