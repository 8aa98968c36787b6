"""Rules of store/configuration.py that the mutation run (#62) found no selected test holding."""

import pytest

from iteralab.store import configuration


@pytest.mark.parametrize(("value", "said"), [(True, "on"), (False, "off"), (None, "not set"), (8, "8"), ("sdpa", "sdpa")])
def test_a_setting_is_said_as_a_reader_reads_it(value, said):
    """Regression for #62: a flag is on or off, an unset setting "not set", any other as written."""
    assert str(configuration.setting_text(value)) == said


@pytest.mark.parametrize(("partition", "said"), [
    ({"whole_card": False, "kind": "mig", "profile": "1g.10gb"}, "MIG 1g.10gb"),
    ({"whole_card": False, "kind": "compute_partition", "profile": "CPX"}, "compute partition CPX"),
    ({"whole_card": False, "kind": "slice", "profile": "half"}, "slice half"),
    ({"whole_card": False, "profile": "half"}, "None half"),
    ({"whole_card": True, "kind": "mig", "profile": "7g.80gb"}, None),
    ({"kind": "mig", "profile": "1g.10gb"}, None),
    ("mig", None),
])
def test_a_part_of_a_card_is_named_by_its_kind_and_profile(partition, said):
    """Regression for #62: a MIG slice or compute partition is named for a reader; a kind the product does not know is
    shown as recorded; a whole card, or a partition that does not say it is not one, is no part."""
    assert configuration._partition({"name": "NVIDIA H100 80GB HBM3", "partition": partition}) == said


@pytest.mark.parametrize(("named", "across", "cards"), [(["cuda:0"], False, 1), (["cuda:0", "cuda:1"], True, 2),
                                                       (None, False, 2)])
def test_a_model_is_across_cards_only_when_its_trial_names_more_than_one(named, across, cards):
    """Regression for #62: a trial that names the one card it used is not "placed across cards" (a lot of one card is
    then plannable); two named cards are."""
    gpus = [{"index": index, "name": "NVIDIA GeForce RTX 4090"} for index in range(2)]
    manifest = {"environment": {"gpus": gpus, "libraries": {"torch": "2.13.0"}, "cpu": {"model": "EPYC"}}}
    trial = {"variant": "v", "variant_config": {"device": "cuda:0"}, "memory": {"devices_used": named}}
    found = configuration.configuration_of(trial, manifest)
    assert (found.device, found.across, found.cards) == ("gpu", across, cards)
