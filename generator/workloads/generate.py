"""Generate: write an output for every prompt of a corpus with a causal language model, decoding as the protocol says."""

from __future__ import annotations

import copy
import time
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.declared.corpus import load_corpus
from iteralab.declared.model_check import check_loads
from iteralab.declared.tables import Table
from iteralab.machine.phases import InBatch, batches, locate, torch_dtype
from iteralab.machine.placement import cards, load_options, placed
from iteralab.store.trials import PHASES as TRIAL_PHASES
from iteralab.workloads import batched, generated, lengths
from iteralab.workloads.batched import Batched
from iteralab.workloads.classify import quantize

KIND = "generate"
DESCRIPTION = "generate text for every prompt of a corpus with a causal language model"
MEASURED_WINDOW = Text("read corpus, build prompts, tokenize, host-to-device transfer, generate, decode outputs to text "
                       "on host")
THRESHOLD_METRICS = ("reference_match",)
# Prefill and decode are phases of their own, after the window and never subtracted from it.
PHASES = (*TRIAL_PHASES[:5], "prefill", "decode", *TRIAL_PHASES[5:])
STAGE_PHASES = ("tokenize", "prefill", "decode")
COUNTED_PHASES = ("measured_window", "prefill", "decode", "evaluation", "writing_results")
read_variant, inputs = batched.read_variant, batched.inputs
QUESTION_UNIT = batched.QUESTION_UNIT
STOP = Text("the end-of-sequence token, or max_new_tokens")
evaluate_outputs, write_outputs, read_outputs = generated.evaluate_outputs, generated.write_outputs, generated.read_outputs


def read_settings(top, base=None) -> dict:
    """Read [generation]: prompt template, padding side, decoding (greedy, or sampling with listed seeds), KV cache."""
    table = Table(top.get("generation", dict), "generation", top.source, top.errors)
    template = table.get("prompt_template", str, default="{text}")
    if template != "chat" and template.count("{text}") != 1:
        table.note("prompt_template", f"{template!r} must hold {{text}} exactly once, or be \"chat\" (the tokenizer's "
                                      "chat template, the text as the user's message)")
    settings = {
        "prompt_template": template,
        "padding_side": table.get("padding_side", str, default="left", choices=("left", "right")),
        "max_new_tokens": table.get("max_new_tokens", int, minimum=1),
        "kv_cache": table.get("kv_cache", bool, default=True),
        "reference_metric": table.get("reference_metric", str, default="normalised", choices=generated.REFERENCE_METRICS),
        "stop": STOP,
        "decoding": "greedy", "sampling": None,
    }
    if "sampling" in table.data:
        settings.update(decoding="sampling", sampling=_sampling(Table(table.get("sampling", dict), "generation.sampling",
                                                                      top.source, top.errors)))
    table.finish()
    return {"generation": settings}


def _sampling(table: Table) -> dict:
    seeds = table.data.get("seeds")
    table.used.add("seeds")
    if not isinstance(seeds, list) or not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) \
            or len(set(seeds)) != len(seeds):
        table.note("seeds", "sampling needs the list of shared seeds, fixed before timing, e.g. seeds = [1, 2, 3]; "
                            "each seed's outputs are kept apart")
    sampling = {"seeds": seeds if isinstance(seeds, list) else [],
                "temperature": table.get("temperature", float, default=1.0),
                "top_p": table.get("top_p", float, default=1.0)}
    if not sampling["temperature"] > 0:
        table.note("temperature", "must be more than 0")
    if not 0 < sampling["top_p"] <= 1:
        table.note("top_p", "must be more than 0 and at most 1")
    table.finish()
    return sampling


def passes(protocol: dict) -> int:
    """Return how many times the measured window goes over the corpus: once, or once per listed sampling seed."""
    return len(generated.seeds(protocol))


def check_model(model_dir: Path, config: dict, protocol: dict) -> dict:
    """Refuse a folder that is no causal LM with its tokenizer and an end-of-sequence token; say what loading said."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    need = "a causal language model (saved as ...ForCausalLM or ...LMHeadModel) with its tokenizer"
    found, model = check_loads(model_dir, config, AutoModelForCausalLM, set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()),
                               "a causal language model", need)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    eos = _eos_ids(model, tokenizer)
    vocabulary = model.get_output_embeddings().weight.shape[0]
    if not eos or any(not 0 <= token < vocabulary for token in eos):
        raise UserError(f"model folder {model_dir}: neither its generation config nor its tokenizer names an "
                        f"end-of-sequence token within its vocabulary of {vocabulary} (found: {eos or 'none'}), so no "
                        "output could stop before max_new_tokens; set eos_token_id in generation_config.json (or the "
                        "tokenizer's eos_token) and save the folder again")
    if protocol["generation"]["prompt_template"] == "chat" and not getattr(tokenizer, "chat_template", None):
        raise UserError(f"model folder {model_dir}: [generation] prompt_template = \"chat\", but its tokenizer has no "
                        "chat template; write the template in the campaign instead, e.g. prompt_template = \"{text}\"")
    pad = tokenizer.pad_token_id
    return {**found, "eos_token_ids": eos, "pad_token_id": eos[0] if pad is None else pad,
            "pad_token": "the tokenizer's own" if pad is not None else Text("the end-of-sequence token (the tokenizer has no "
                                                                            "padding token)")}


def _eos_ids(model, tokenizer) -> list[int]:
    for value in (getattr(model.generation_config, "eos_token_id", None), model.config.eos_token_id,
                  tokenizer.eos_token_id):
        if value is not None:
            return [int(v) for v in (value if isinstance(value, list) else [value])]
    return []


def check_corpus(corpus, model: dict, campaign) -> None:
    """Refuse thresholds on reference outputs when the corpus carries none, and a prompt limit plus max_new_tokens beyond
    the model's positions (#61)."""
    if campaign.protocol["thresholds"] and not corpus.labelled:
        raise UserError(f"{campaign.source}: [protocol] thresholds on {', '.join(campaign.protocol['thresholds'])} need a "
                        f"reference output (label) for every entry, but {campaign.corpus_path} has entries without one; a "
                        "campaign without thresholds runs too: leave [protocol.thresholds] out")
    lengths.refuse_beyond(campaign, lambda: _prompt_tokens(campaign, corpus),
                          campaign.protocol["generation"]["max_new_tokens"])


def _prompt_tokens(campaign, corpus) -> dict[str, int]:
    from transformers import AutoTokenizer

    return count_tokens(AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True), campaign.protocol,
                        corpus.entries)


def check_variants(variants, protocol: dict) -> list[str]:
    """Refuse right padding where a prompt is padded (#61): a decoder-only model continues each row after its last
    position, so the padding would sit between a shorter prompt and its new tokens and change its output."""
    settings = protocol.get("generation") or {}
    if settings.get("padding_side") != "right":
        return []
    every = protocol.get("padding") == "max_length"
    padded = [variant.name for variant in variants if every or variant.batch_size > 1]
    if not padded:
        return []
    why = "padding = \"max_length\" pads every prompt" if every else "batch_size above 1 pads the shorter prompts of a batch"
    return [f"[generation] padding_side: \"right\" with variant(s) {', '.join(padded)} ({why}): a decoder-only model "
            "generates after each row's last position, so right padding puts padding tokens between a prompt and its new "
            "tokens and its outputs differ from the same prompt alone (transformers' own warning of it never reaches the "
            "pages); use padding_side = \"left\" (the default), which left-pads and gives every row the output it has "
            "at batch 1"]


def manifest_fields(campaign) -> dict:
    """Return the model's positions beside the longest sequence the protocol lets through (#61)."""
    return {"context": lengths.record(campaign, campaign.protocol["generation"]["max_new_tokens"])}


def plan_lines(prepared) -> list[str]:
    """Say how prompts are counted and cut, and what the model's positions hold (#61)."""
    protocol = prepared.campaign.protocol
    context = lengths.record(prepared.campaign, protocol["generation"]["max_new_tokens"])
    fits = (f"the model holds {context['positions']} positions ({context['read_from']})" if context["positions"]
            else str(context["reason"]))
    return [f"Prompts: max_length {protocol['max_length']} counts every prompt token (the template and the special "
            f"tokens the tokenizer adds); a longer prompt is cut on the tokenizer's truncation_side, "
            f"{_cut_side(prepared.campaign)}; length buckets count the prompt before any cut. Longest sequence "
            f"{context['longest_sequence']} tokens (max_length + max_new_tokens); {fits}"]


def _cut_side(campaign) -> str:
    from transformers import AutoTokenizer

    side = AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True).truncation_side
    return "right: its end goes, the template's end with it" if side == "right" else "left: its start goes"


def load_model(model_dir, variant, protocol: dict):
    """Load tokenizer and causal LM from a local folder with the variant's precision and backends."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # What loading says was kept in the manifest by the model check; each trial loading again would only repeat it.
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    dtype = torch_dtype(variant.precision)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, attn_implementation=variant.attention,
                                                 **load_options(variant, protocol, dtype))
    model.eval()
    model = placed(model, variant, protocol, dtype)
    if variant.quantization == "dynamic-int8":
        model = quantize(model)
    return tokenizer, model


def prompts(tokenizer, protocol: dict, texts: list[str]) -> list[str]:
    """Put each text into the campaign's prompt template."""
    template = protocol["generation"]["prompt_template"]
    if template == "chat":
        return [tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                              add_generation_prompt=True) for text in texts]
    return [template.replace("{text}", text) for text in texts]


def count_tokens(tokenizer, protocol: dict, entries) -> dict[str, int]:
    """Count each entry's prompt tokens as the model sees them."""
    chat = protocol["generation"]["prompt_template"] == "chat"
    encoded = tokenizer(prompts(tokenizer, protocol, [entry.text for entry in entries]), add_special_tokens=not chat)
    return {entry.id: len(ids) for entry, ids in zip(entries, encoded["input_ids"], strict=True)}


class Work(Batched):
    """Generate for every prompt the way the protocol says, counting completed outputs."""

    def __init__(self, tokenizer, model, variant, protocol: dict):
        import torch
        from transformers import GenerationConfig

        self.tokenizer, self.model, self.variant, self.protocol = tokenizer, model, variant, protocol
        settings = protocol["generation"]
        tokenizer.padding_side = settings["padding_side"]
        eos = _eos_ids(model, tokenizer)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(eos[0])
        sampling = settings["sampling"] or {}
        self.config = GenerationConfig(
            max_new_tokens=settings["max_new_tokens"], do_sample=bool(sampling), num_beams=1, eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id, use_cache=settings["kv_cache"],
            **({"temperature": sampling["temperature"], "top_p": sampling["top_p"], "top_k": 0} if sampling else {}))
        # Every setting the campaign leaves open takes transformers' neutral default here, so a model folder's own
        # generation_config.json (a repetition penalty, a temperature) cannot change the declared decoding.
        self.config.update(**self.config._get_default_generation_params(), defaults_only=True)
        self.eos = set(eos)
        self.completed, self.generate_ns, self.window_batches, self.longest_prompt = 0, 0, [], 0
        # The model's forward passes in the generate call under way: the first is the prefill, each later one a decode
        # step, so a failure names which (#61). A counter, read only when a call fails.
        self.forwards = [0]
        model.register_forward_pre_hook(_counter(self.forwards), prepend=True)  # counted before any other hook runs
        self.padded_prompt, self.kv_bytes, self.measuring = 0, None, False  # the KV cache's tokens and bytes (#63)
        # One card's allocator: a model placed across cards splits its cache over them, so nothing is subtracted there.
        cuda = variant.device.startswith("cuda") and len(cards(variant, protocol)) == 1
        self.loaded_bytes = torch.cuda.memory_allocated(variant.device) if cuda else None

    def compile(self) -> None:
        import torch

        self.model.forward = torch.compile(self.model.forward)

    def encode(self, texts: list[str]):
        padding = "max_length" if self.protocol["padding"] == "max_length" else "longest"
        chat = self.protocol["generation"]["prompt_template"] == "chat"
        encoded = self.tokenizer(prompts(self.tokenizer, self.protocol, texts), padding=padding, truncation=True,
                                 max_length=self.protocol["max_length"], return_tensors="pt", add_special_tokens=not chat)
        return {key: value.to(self.variant.device) for key, value in encoded.items()}

    def generate(self, encoded, max_new_tokens: int | None = None):
        """Generate for one encoded batch; return each row's new token ids on the host."""
        import torch

        config = self.config
        if max_new_tokens is not None:
            config = copy.deepcopy(self.config)
            config.max_new_tokens = config.min_new_tokens = max_new_tokens
        self.forwards[0] = 0
        try:
            with torch.inference_mode():
                found = self.model.generate(**encoded, generation_config=config, return_dict_in_generate=True)
        except Exception as exc:
            count = self.forwards[0]
            locate(exc, generation_phase="prefill" if count <= 1 else "decode", decode_step=count - 1 if count > 1 else None)
            raise
        if self.measuring:  # the cache's own bytes: tensor sizes, read without waiting for the device
            cache = generated.cache_bytes(generated.returned_cache(found))
            self.kv_bytes = cache if self.kv_bytes is None or (cache or 0) > self.kv_bytes else self.kv_bytes
        return found.sequences[:, encoded["input_ids"].shape[1]:].cpu().tolist()

    def output(self, new_ids: list[int]) -> tuple[list[int], str]:
        """Cut a row's new tokens after its first end-of-sequence token; say why it stopped."""
        for index, token in enumerate(new_ids):
            if token in self.eos:
                return new_ids[:index + 1], "eos"
        return new_ids, "max_new_tokens"

    def step(self, encoded):
        """Run one encoded batch through the model (the warm-up's unit)."""
        return self.generate(encoded)

    def stage(self, clock, encoded) -> int:
        """Run one encoded validation batch untimed: prefill (one new token), then decode every row to max_new_tokens,
        the end-of-sequence token held back (min_new_tokens), so the stage holds the longest sequence it claims (#61);
        return the new tokens each row generated."""
        new_tokens = self.protocol["generation"]["max_new_tokens"]
        with clock.phase("prefill"):
            self.generate(encoded, 1)
        with clock.phase("decode"):
            self.generate(encoded, new_tokens)
        return new_tokens

    def measured(self, corpus_path) -> list[dict]:
        """Read the corpus, build prompts, tokenize, transfer, generate and decode every output to text on the host."""
        import torch

        entries = list(load_corpus(corpus_path).entries)
        if self.variant.length_sorted:
            entries = self.order(entries, count_tokens(self.tokenizer, self.protocol, entries))
        outputs, cuda = [], self.variant.device.startswith("cuda")
        self.measuring = True
        for seed in generated.seeds(self.protocol):
            if seed is not None:
                torch.manual_seed(seed)
            for batch in batches(entries, self.variant.batch_size):
                with InBatch(batch) as where:  # a failure names the batch's ids and prompt tokens (#61)
                    encoded = where.encoded(self.encode([entry.text for entry in batch]))
                    started = time.perf_counter_ns()
                    rows = self.step(encoded)
                    if cuda:
                        torch.cuda.synchronize(self.variant.device)
                self.generate_ns += time.perf_counter_ns() - started
                if seed == generated.seeds(self.protocol)[0]:
                    self.window_batches.append((batch, encoded))
                lengths = encoded["attention_mask"].sum(dim=1).tolist()
                self.longest_prompt = max(self.longest_prompt, *lengths)
                self.padded_prompt = max(self.padded_prompt, encoded["input_ids"].shape[1])
                for entry, new_ids, prompt_tokens in zip(batch, rows, lengths, strict=True):
                    tokens, stop = self.output(new_ids)
                    outputs.append({"id": entry.id, "seed": seed, "prompt_tokens": int(prompt_tokens),
                                    "text": self.tokenizer.decode(tokens, skip_special_tokens=True),
                                    "new_tokens": len(tokens), "stop_reason": stop, "token_ids": tokens})
                self.completed += len(batch)
        self.measuring = False
        return outputs

    def after_window(self, clock, outputs, place) -> list:
        """Time prefill apart (one new token per batch, as optimum-benchmark does); derive decode from the window."""
        with clock.phase("prefill"):
            for batch, encoded in self.window_batches:
                with InBatch(batch) as where:
                    self.generate(where.encoded(encoded), 1)
        self.window_batches = []
        generated.decode_phase(clock, self, outputs)
        return outputs

    def figures(self, clock, outputs) -> dict:
        """Return tokens in and out, tokens per second, prefill and decode times, and the KV cache beside its estimate."""
        return {"generation": generated.figures(clock, self, outputs)}


def _counter(forwards: list[int]):
    """Return a forward pre-hook that counts the model's forward passes into FORWARDS[0]."""
    def count(module, args):
        forwards[0] += 1

    return count
