"""One model placed across cards (#44): declared in [placement], every card checked before timing, each card's peaks apart.

No GPU here: torch.cuda is stood in for (the hardware, not the code under test), as in test_devices.py.
"""

from __future__ import annotations

import itertools
import json
import sys
from types import SimpleNamespace

import pytest

from iteralab.core.errors import UserError
from iteralab.machine import devices, placement
from iteralab.machine import phases as trial
from iteralab.run.campaign import load_campaign
from iteralab.store import records
from iteralab.store.configuration import configuration_of
from tests import factory

ACROSS = '\n[placement]\nmode = "across_cards"\ndevices = ["cuda:0", "cuda:1"]\n'


def declared(path, table: str, device: str = "cuda:0"):
    text = path.read_text(encoding="utf-8").replace("batch_size = 1\n", f'batch_size = 1\ndevice = "{device}"\n', 1)
    path.write_text(text + table, encoding="utf-8")
    return path


class Cards:
    """Stands in for torch.cuda on a machine with COUNT cards, each with its own peaks; every call written down in order."""

    def __init__(self, count=2, events=None):
        self.count, self.events = count, [] if events is None else events

    def is_available(self):
        return True

    def device_count(self):
        return self.count

    def get_device_name(self, index):
        return "NVIDIA B200"

    def synchronize(self, device):
        self.events.append(f"synchronize {device}")

    def reset_peak_memory_stats(self, device):
        self.events.append(f"reset {device}")

    def max_memory_allocated(self, device):
        self.events.append(f"allocated {device}")
        return {"cuda:0": 5 * 2**30, "cuda:1": 7 * 2**30}[device]

    def max_memory_reserved(self, device):
        self.events.append(f"reserved {device}")
        return {"cuda:0": 6 * 2**30, "cuda:1": 8 * 2**30}[device]

    def get_device_properties(self, device):
        return SimpleNamespace(name="NVIDIA B200", total_memory=180 * 10**9)


def test_the_placement_is_read_strictly_and_only_a_declared_one_enters_the_fingerprint(tiny_campaign):
    plain = load_campaign(tiny_campaign())
    assert "placement" not in plain.protocol  # campaigns written before [placement] keep their fingerprint
    across = load_campaign(declared(tiny_campaign(name="across"), ACROSS))
    assert across.protocol["placement"] == {"mode": "across_cards", "devices": ["cuda:0", "cuda:1"]}
    assert load_campaign(declared(tiny_campaign(name="one"), '\n[placement]\nmode = "one_card"\n')).protocol[
        "placement"] == {"mode": "one_card"}
    # The dry run's plan says it, and nothing where the campaign declares none (its plan reads as before).
    assert placement.describe(plain.protocol) == []
    assert placement.describe(across.protocol)[0].startswith("Placement: one model across cuda:0, cuda:1 (transformers'")
    for table, message in [
        ('\n[placement]\nmode = "across_cards"\ndevices = ["cuda:0", "cuda:1"]\ndevice_map = "auto"\n', "unknown key(s) device_map"),
        ('\n[placement]\nmode = "pooled"\n', "'pooled' is not one of one_card, across_cards"),
        ('\n[placement]\nmode = "across_cards"\n', "devices: is required: the cards the model is placed across"),
        ('\n[placement]\nmode = "across_cards"\ndevices = ["cuda:0"]\n', "at least two: one card is mode = \"one_card\""),
        ('\n[placement]\nmode = "across_cards"\ndevices = ["cuda:0", "cuda:0"]\n', "different cards"),
        ('\n[placement]\nmode = "across_cards"\ndevices = ["gpu0", "gpu1"]\n', "must be a list of cards such as"),
        ('\n[placement]\nmode = "one_card"\ndevices = ["cuda:0", "cuda:1"]\n', "devices belong to mode = \"across_cards\""),
    ]:
        with pytest.raises(UserError, match="placement") as caught:
            load_campaign(declared(tiny_campaign(name="wrong"), table))
        assert message in str(caught.value)
    with pytest.raises(UserError) as caught:
        load_campaign(declared(tiny_campaign(name="elsewhere"), ACROSS, device="cuda:1"))
    assert "variant b1 has device = 'cuda:1', but its inputs go to the first card of the placement, cuda:0" in str(caught.value)


def test_every_card_of_the_placement_is_checked_and_initialised_before_timing(tiny_campaign):
    campaign = load_campaign(declared(tiny_campaign(), ACROSS))
    with pytest.raises(UserError) as caught:
        devices.check_devices(campaign, Cards(count=1))
    assert ("[placement] places variant b1 across cuda:0, cuda:1, but this machine has 1 CUDA device(s): cuda:0 (NVIDIA "
            "B200); cuda:1 is missing (nothing was timed)") in str(caught.value)
    devices.check_devices(campaign, Cards(count=2))
    events, ticks = [], iter([0, 10])
    cuda = Cards(events=events)
    cuda.is_initialized, cuda.init = (lambda: False), (lambda: events.append("init"))
    found = devices.initialise_devices(campaign, cuda, lambda: next(ticks))
    assert events == ["init", "synchronize cuda:0", "synchronize cuda:1"] and found["devices"] == ["cuda:0", "cuda:1"]


def test_a_phase_across_cards_waits_for_every_card_and_records_each_cards_peaks_apart(monkeypatch):
    events = []
    monkeypatch.setattr(trial, "_torch", lambda: SimpleNamespace(cuda=Cards(events=events)))
    clock_values = itertools.count(1_000, 4_000)
    monkeypatch.setattr(trial.time, "perf_counter_ns", lambda: events.append("timer") or next(clock_values))
    clock = trial.PhaseClock.over("cuda:0", ("cuda:0", "cuda:1"))
    with clock.phase("measured_window"):
        events.append("work")
    assert events == ["synchronize cuda:0", "synchronize cuda:1", "reset cuda:0", "reset cuda:1", "timer", "work",
                      "synchronize cuda:0", "synchronize cuda:1", "timer", "allocated cuda:0", "reserved cuda:0",
                      "allocated cuda:1", "reserved cuda:1"]
    measured = clock.phases["measured_window"]
    # Never summed: the phase's figure is the fullest card's, each card's beside it.
    assert (measured["gpu_peak_allocated_bytes"], measured["gpu_peak_reserved_bytes"]) == (7 * 2**30, 8 * 2**30)
    assert measured["gpu_cards"] == {"cuda:0": {"gpu_peak_allocated_bytes": 5 * 2**30, "gpu_peak_reserved_bytes": 6 * 2**30},
                                     "cuda:1": {"gpu_peak_allocated_bytes": 7 * 2**30, "gpu_peak_reserved_bytes": 8 * 2**30}}
    one = trial.PhaseClock("cuda:1")
    with one.phase("model_load"):
        pass
    assert "gpu_cards" not in one.phases["model_load"] and measured["duration_ns"] == 4_000  # one card: the record is as it always was


def test_the_trial_names_its_cards_and_the_configuration_follows_them(monkeypatch):
    monkeypatch.setattr(trial, "_torch", lambda: SimpleNamespace(cuda=Cards()))
    across = trial.gpu_memory_context("cuda:0", trial.HOST_RSS_PER_PHASE, ("cuda:0", "cuda:1"))
    alone = trial.gpu_memory_context("cuda", trial.HOST_RSS_PER_PHASE)
    assert across["devices_used"] == ["cuda:0", "cuda:1"] and "each card" in across["gpu_counters"]
    assert alone["devices_used"] == ["cuda:0"] and alone["gpu_counters"].endswith("this device only")
    manifest = factory.manifest(environment=factory.machine("NVIDIA B200", count=2))
    labels = []
    for memory in (across, alone):
        record = factory.trial(manifest, gpu=True)
        record["memory"] = json.loads(json.dumps({**record["memory"], **memory}, default=str))  # as written to disk
        assert records.validate(record) == []
        labels.append(configuration_of(record, manifest).hardware)
    assert labels == ["2× NVIDIA B200", "1 of 2× NVIDIA B200"]


def test_a_placement_that_left_a_card_empty_is_refused_and_accelerate_is_named_when_missing(monkeypatch):
    variant = SimpleNamespace(name="b1", device="cuda:0")
    protocol = {"placement": {"mode": "across_cards", "devices": ["cuda:0", "cuda:1"]}}
    split = SimpleNamespace(hf_device_map={"bert.embeddings": 0, "bert.encoder.layer.0": 0, "bert.encoder.layer.1": 1,
                                           "classifier": 1})
    assert placement.verify(split, variant, protocol) == {"cuda:0": 2, "cuda:1": 2}
    with pytest.raises(RuntimeError) as caught:
        placement.placed(SimpleNamespace(hf_device_map={"": 0}), variant, protocol, None)
    assert "put the model's modules on cuda:0 (1): cuda:1 holds none of it" in str(caught.value)
    with pytest.raises(RuntimeError, match="cpu is not a declared card"):
        placement.verify(SimpleNamespace(hf_device_map={"bert": 0, "encoder": 1, "classifier": "cpu"}), variant, protocol)
    monkeypatch.setattr(placement, "_cuda", lambda: Cards())
    options = placement.load_options(variant, protocol, "bf16-dtype")
    assert options["device_map"] == "balanced" and options["max_memory"] == {0: 180 * 10**9, 1: 180 * 10**9}
    assert "bf16-dtype" in options.values() and placement.load_options(SimpleNamespace(device="cuda"), {}, None) == {}
    monkeypatch.setitem(sys.modules, "accelerate", None)  # as on an image without it: importing it fails
    with pytest.raises(RuntimeError, match="needs the package accelerate: pip install accelerate"):
        placement.load_options(variant, protocol, None)


def test_a_model_across_cards_says_why_its_allocator_peak_is_not_read_instead_of_subtracting_one_cards_load():
    from iteralab.workloads import generated

    config = SimpleNamespace(to_dict=lambda: {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8})
    work = SimpleNamespace(protocol={"generation": {"max_new_tokens": 4, "kv_cache": True}}, longest_prompt=4,
                           padded_prompt=4, kv_bytes=3072,
                           variant=SimpleNamespace(precision="fp32", batch_size=2, device="cuda:0"),
                           model=SimpleNamespace(config=config), loaded_bytes=None)
    clock = SimpleNamespace(phases={"measured_window": {"gpu_peak_allocated_bytes": 7 * 2**30}})
    found = generated.kv_cache(clock, work)
    # The cache is measured by its tensors' bytes, across cards too (#63); the allocator's peak is one card's.
    assert found["measured_bytes"] == 3072 and found["allocator_peak_bytes"] is None
    assert found["allocator_peak_reason"].startswith(
        "not measured: the model is placed across cards, and each card's allocator counts only its own part")
    work.loaded_bytes = 5 * 2**30  # one card: the peak less what loading left allocated, kept beside the cache
    assert generated.kv_cache(clock, work)["allocator_peak_bytes"] == 2 * 2**30


def test_an_adaptation_is_not_placed_across_cards(tmp_path, tiny_model):
    from tests.tiny import write_adaptation_campaign

    path = write_adaptation_campaign(tmp_path, tiny_model)
    path.write_text(path.read_text(encoding="utf-8") + ACROSS, encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_campaign(path)
    assert "[placement] mode: across_cards places a model for inference; a campaign whose [workload] kind is 'adapt'" in str(
        caught.value)
