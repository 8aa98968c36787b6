"""A part of a card is never priced as the whole card whose name it carries. Regression for #63 (item 9): an H100 MIG
slice or an MI300X compute partition was matched to the catalog by name, and so priced as a whole card."""

from __future__ import annotations

from iteralab.decision import report as decision
from iteralab.money.catalog import parse_catalog
from iteralab.store import reading, records
from iteralab.store.configuration import catalog_card, configuration_of
from iteralab.store.views import campaign_views
from tests import factory

CATALOG = parse_catalog("catalog_version,gpu,gpu_name,cards_per_lot,memory_per_card_gb,days,price_per_lot,currency\n"
                        "v9,h100,H100,1,80,3,300.00,USD\nv9,mi300x,MI300X,1,192,3,400.00,USD\n", "test.csv")
MIG = {"kind": "mig", "profile": "3g.40gb", "whole_card": False, "source": "torch's device name"}
CPX = {"kind": "compute_partition", "profile": "CPX", "memory": "NPS4", "whole_card": False, "source": "amd-smi static"}


def _manifest(name: str, split: dict | None):
    environment = factory.machine(name, cuda="13.0", driver="580.65.06")
    if split:
        environment["gpus"][0]["partition"] = split
    return factory.manifest("camp", "run-1", environment=environment)


def test_a_mig_slice_and_a_compute_partition_are_not_the_whole_cards_the_catalog_prices():
    for name, split, whole in (("NVIDIA H100 80GB HBM3 MIG 3g.40gb", MIG, "h100"), ("AMD Instinct MI300X", CPX, "mi300x")):
        manifest = _manifest(name, split)
        trial = factory.trial(manifest, "b1", gpu=True)
        sliced = configuration_of(trial, manifest)
        assert catalog_card(CATALOG, sliced) is None
        assert split["profile"] in sliced.hardware
        whole_manifest = _manifest(name, None)
        assert catalog_card(CATALOG, configuration_of(factory.trial(whole_manifest, "b1", gpu=True), whole_manifest)).slug == whole
    # A whole card's key is the one it had before partitions were recorded.
    manifest = _manifest("AMD Instinct MI300X", None)
    assert "(" not in configuration_of(factory.trial(manifest, "b1", gpu=True), manifest).hardware


def test_the_decision_says_why_a_slice_has_no_plan(tmp_path):
    manifest = _manifest("NVIDIA H100 80GB HBM3 MIG 3g.40gb", MIG)
    for record in (manifest, *[factory.trial(manifest, "b1", repetition=n, sequence=n, gpu=True) for n in (1, 2)]):
        records.append(tmp_path, record)
    (view,) = campaign_views(reading.load(tmp_path))
    (row,) = decision.decide(view, CATALOG).rows
    assert row.plan is None
    assert str(row.plan_reason) == ("no plan: NVIDIA H100 80GB HBM3 MIG 3g.40gb is a part of a card (MIG 3g.40gb), and "
                                    "catalog v9 prices whole cards")
    assert "bagian dari sebuah kartu (MIG 3g.40gb)" in row.plan_reason.say("id")
