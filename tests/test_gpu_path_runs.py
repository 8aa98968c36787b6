"""The first hour on a rented GPU (#63), the parts a run exercises: the dtype a model loads in, a record kept after a fatal
CUDA error, the KV cache measured as the cache, and a per_card set that releases memory once, after every card's window.

No GPU: the tiny models run on the CPU; torch.cuda is stood in for where a card is needed (as in
tests/test_multicard_per_card.py), and the fatal error is raised where CUDA raises it, by torch.cuda.empty_cache.
"""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace

import pytest
import torch

from iteralab.core.errors import UserError
from iteralab.machine import devices, fatal, phases, placement
from iteralab.run import per_card, runner
from iteralab.store import reading, records
from iteralab.workloads import adapting, generated
from tests.test_multicard_per_card import PER_CARD
from tests.test_multicard_per_card import two_cards as two_cards  # the stand-in machine with two B200 cards
from tests.test_multicard_placement import declared

ILLEGAL = "CUDA error: an illegal memory access was encountered"


@pytest.fixture(autouse=True)
def healthy_process():
    fatal.forget()
    yield
    fatal.forget()


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory):
    """The tiny BERT saved in bf16, as a checkpoint published in bf16 is."""
    from transformers import BertForSequenceClassification

    from tests.tiny import build_model

    folder = build_model(tmp_path_factory.mktemp("bf16") / "bert")
    BertForSequenceClassification.from_pretrained(folder).to(torch.bfloat16).save_pretrained(folder)
    return folder


def test_an_fp32_adaptation_of_a_bf16_checkpoint_trains_fp32_weights(bf16_checkpoint):
    """3: transformers 5 keeps a checkpoint's saved dtype when none is given: the fp32 variant trained in bf16."""
    variant = SimpleNamespace(attention="sdpa", method="all", device="cpu", precision="fp32")
    _, model = adapting.load_model(bf16_checkpoint, variant, {"seed": 1, "adaptation": {"labels": None, "subset": None,
                                                                                        "lora": None}})
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
    assert list(phases.weights_dtypes(model)) == ["float32"]  # what the trial record says it loaded


def test_every_kind_loads_in_the_variants_precision_on_one_card_too():
    options = placement.load_options(SimpleNamespace(device="cpu"), {}, torch.bfloat16)
    assert list(options.values()) == [torch.bfloat16]  # not the checkpoint's own dtype, then a cast


def test_a_trial_records_the_dtypes_its_weights_hold_and_the_schema_describes_it():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2).to(torch.bfloat16))
    assert phases.weights_dtypes(model) == {"float32": 8, "bfloat16": 6}
    trial = records.make_record("trial", campaign="c", run_id="r", weights_dtypes={"float32": -1})
    assert any("weights_dtypes" in problem for problem in records.validate(trial))


@pytest.mark.slow
def test_a_fatal_cuda_error_keeps_the_record_stops_the_run_and_resume_runs_the_rest(tiny_campaign, tmp_path, monkeypatch):
    """4: empty_cache raised before the record was written: the trial was lost and the run aborted."""
    campaign, runs = tiny_campaign(name="fatal", repetitions=1, batch_sizes=(1, 4)), tmp_path / "runs"
    released, said = [], []

    def poisoned_release(device):
        released.append(device)
        raise RuntimeError(ILLEGAL)  # what torch.cuda.empty_cache raises once the context is lost

    monkeypatch.setattr(runner, "release", poisoned_release)
    result = runner.run_campaign(campaign_file=campaign, runs_dir=runs, quiet=True, stages=False, warn=said.append)
    assert [trial["status"] for trial in result.trials] == ["ok"] and released == ["cpu"]
    written = [r for r in reading.load(runs).of_campaign("fatal") if r["kind"] == "trial"]
    assert [t["record_id"] for t in written] == [result.trials[0]["record_id"]]  # written before the release raised
    assert "1 remaining trials were not started" in result.poisoned and said[-1] == result.poisoned
    assert ILLEGAL in fatal.poisoned()
    with pytest.raises(UserError, match="CUDA context is lost and cannot run another trial"):
        runner.prepare(campaign, runs)
    fatal.forget()  # a fresh process
    monkeypatch.setattr(runner, "release", phases.release)
    resumed = runner.run_campaign(campaign_file=campaign, runs_dir=runs, quiet=True, stages=False, resume=True)
    assert [trial["status"] for trial in resumed.trials] == ["ok"] and resumed.poisoned is None
    assert {t["sequence"] for t in [*written, *resumed.trials]} == {1, 2}


def test_only_sticky_gpu_errors_poison_the_process():
    assert fatal.is_fatal(RuntimeError(ILLEGAL)) and fatal.is_fatal(RuntimeError("CUDA error: device-side assert triggered"))
    assert not fatal.is_fatal(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not fatal.is_fatal(ValueError("an illegal memory access in the corpus file"))  # not CUDA's
    assert fatal.mark(RuntimeError("HIP error: an illegal memory access was encountered"), "trial-1")
    assert fatal.poisoned().startswith("trial trial-1 hit a fatal GPU error")


def test_the_kv_cache_is_the_bytes_of_its_tensors_and_its_estimate_counts_the_padded_prompt(tmp_path):
    """5: the 'measurement' was the window's allocator peak less the memory after loading, the estimate the longest real
    prompt; the cache itself is what generate returns, the padding included."""
    from transformers import AutoModelForCausalLM

    from tests.tiny import build_causal_lm

    model = AutoModelForCausalLM.from_pretrained(build_causal_lm(tmp_path / "gpt2"))
    ids = torch.ones((3, 10), dtype=torch.long)
    with torch.inference_mode():
        found = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                               do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    layers, heads, size = model.config.n_layer, model.config.n_head, model.config.n_embd // model.config.n_head
    assert generated.cache_bytes(generated.returned_cache(found)) == 2 * layers * heads * size * (10 + 3) * 3 * 4
    work = SimpleNamespace(protocol={"generation": {"max_new_tokens": 4, "kv_cache": True}}, longest_prompt=6,
                           padded_prompt=10, kv_bytes=4992, loaded_bytes=5 * 2**20,
                           variant=SimpleNamespace(precision="fp32", batch_size=3, device="cuda:0"), model=model)
    clock = SimpleNamespace(phases={"measured_window": {"gpu_peak_allocated_bytes": 9 * 2**20}})
    kv = generated.kv_cache(clock, work)
    assert kv["tokens"] == 14 and kv["longest_prompt_tokens"] == 6  # the padded prompt, then max_new_tokens
    assert kv["measured_bytes"] == 4992 and kv["allocator_peak_bytes"] == 4 * 2**20  # each named as what it is
    assert "the cache itself" in kv["measured_as"] and "not the cache's size" in kv["allocator_peak_as"]


def test_a_per_card_set_empties_the_cache_once_after_every_cards_window(tiny_campaign, tmp_path, two_cards, monkeypatch):
    """6: each card emptied the cache when its trial ended, synchronising while the other card's window still ran."""
    cuda = devices._torch_cuda()
    open_windows, at_release, written = set(), [], threading.Event()
    empty = cuda.empty_cache

    def watched_empty():
        at_release.append(sorted(open_windows))
        empty()

    monkeypatch.setattr(cuda, "empty_cache", watched_empty)
    append = per_card.CardWriter.append

    def noting(self, runs_dir, record):
        found = append(self, runs_dir, record)
        if record["kind"] == "trial" and self.fields["card"] == "cuda:0":
            written.set()
        return found

    monkeypatch.setattr(per_card.CardWriter, "append", noting)
    measure = runner._measure  # the stand-in's: the card's clock, the work on the CPU

    def tracked(prepared, runs_dir, variant, trial_id, clock, progress, got):
        phase = clock.phase

        @contextlib.contextmanager
        def window(name):
            with phase(name):
                if name != "measured_window":
                    yield
                    return
                open_windows.add(clock.device)
                try:
                    if clock.device == "cuda:1":
                        written.wait(20)  # cuda:0 ends its whole trial while cuda:1 is still inside its window
                    yield
                finally:
                    open_windows.discard(clock.device)

        clock.phase = window
        measure(prepared, runs_dir, variant, trial_id, clock, progress, got)

    monkeypatch.setattr(runner, "_measure", tracked)
    campaign = declared(tiny_campaign(name="sets", batch_sizes=(1,), repetitions=1), PER_CARD)
    result = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert [trial["status"] for trial in result.trials] == ["ok", "ok"] and written.is_set()
    assert at_release and all(windows == [] for windows in at_release), at_release
    assert {"empty_cache cuda:0", "empty_cache cuda:1"} <= set(two_cards.events)
