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
