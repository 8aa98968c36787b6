"""A campaign says its kind of work in [workload] kind (#42, part 2); a campaign without it classifies, as before."""

from __future__ import annotations

import pytest

from iteralab.core.errors import UserError
from iteralab.run.campaign import load_campaign, protocol_fingerprint
from iteralab.store import reading
from tests.test_cache import FIXTURE
from tests.tiny import write_campaign


@pytest.fixture
def campaign_file(tmp_path):
    """A valid campaign file (its model and corpus need not exist to be read)."""
    return write_campaign(tmp_path, tmp_path / "model", tmp_path / "corpus.jsonl")


def rewritten(path, before: str, after: str):
    text = path.read_text(encoding="utf-8")
    assert before in text
    path.write_text(text.replace(before, after, 1), encoding="utf-8")
    return path


def refusal(path) -> str:
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    return str(caught.value)


def test_a_campaign_without_workload_classifies_with_the_fingerprint_it_had(campaign_file):
    plain = load_campaign(campaign_file)
    declared = load_campaign(rewritten(campaign_file, "[corpus]", '[workload]\nkind = "classify"\n\n[corpus]'))
    assert plain.kind == declared.kind == "classify"
    assert plain.protocol == declared.protocol
    assert protocol_fingerprint(plain.protocol, "sha256:c") == protocol_fingerprint(declared.protocol, "sha256:c")


def test_records_written_before_workload_existed_read_and_check_as_they_did():
    """The checked-in demo records have no workload in their manifests: every one is still valid."""
    loaded = reading.load(FIXTURE)
    assert loaded.problems == []
    manifests = loaded.of_kind("manifest")
    assert manifests and all("workload" not in manifest for manifest in manifests)


KINDS = ("classify (label every text of a corpus with a fine-tuned classifier); generate (generate text for every prompt "
         "of a corpus with a causal language model); adapt (fine-tune a text classifier (all weights, a named subset or "
         "LoRA) and validate it); serve (requests to a serving engine in another process, at load levels declared before "
         "timing)")


def test_an_unknown_kind_names_the_kinds_there_are(campaign_file):
    said = refusal(rewritten(campaign_file, "[corpus]", '[workload]\nkind = "summarise"\n\n[corpus]'))
    assert said == f"{campaign_file}: [workload] kind: 'summarise' is not a kind of work; the kinds there are: {KINDS}"


@pytest.mark.parametrize(("before", "after", "where"), [
    ("[corpus]", 'task = "text-generation"\n\n[corpus]', "campaign file"),
    ('[model]\n', '[model]\ntask = "text-generation"\n', "model"),
])
def test_a_task_key_points_to_workload_kind_instead_of_reading_like_a_typo(campaign_file, before, after, where):
    """Regression for #42: `task = "text-generation"` was told "unknown key(s) task; check the spelling"."""
    said = refusal(rewritten(campaign_file, before, after))
    assert said == f"{campaign_file}: [{where}] unknown key task: the kind of work is [workload] kind"
