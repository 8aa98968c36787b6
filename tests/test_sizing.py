"""Memory sizing: the seed figures, units, KV cache, and the parameter count read without loading weights."""

from __future__ import annotations

import json
import struct

import pytest

from iteralab.core.errors import UserError
from iteralab.money.sizing import kv_cache_bytes, kv_shape, read_architecture

# config.json as the hub's files write them: GPT-2 names, Llama with grouped-query attention and its own head_dim,
# Qwen2 without head_dim (hidden size ÷ heads), and an encoder (the MiniLM the demo ships is a BERT).
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 3072, "head_dim": 128,
         "num_attention_heads": 24, "num_hidden_layers": 28, "num_key_value_heads": 8, "max_position_embeddings": 131072}
QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "max_position_embeddings": 32768}
BERT = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384, "num_attention_heads": 12,
        "num_hidden_layers": 6, "is_decoder": False, "max_position_embeddings": 512}


def size(cli, *args):
    code, out, err = cli("size", *args, "--json")
    return code, json.loads(out) if code == 0 else err


def test_seven_billion_parameters_at_16_bit_with_a_6_gib_reserve(cli):
    code, out, _ = cli("size", "--params", "7e9", "--bits", "16", "--reserve-gib", "6")
    assert code == 0
    assert "weights only 14,000,000,000 B = 14.00 GB = 13.04 GiB; envelope 19.04 GiB" in out
    assert "your assumption" in out


def test_table_gives_the_seed_rows_and_marks_4_bit_theoretical(cli):
    code, data = size(cli, "--params", "7e9", "--reserve-gib", "6", "--table")
    assert code == 0
    rows = {row["bits"]: (row["weights_gib"], row["envelope_gib"], row["note"]) for row in data["rows"]}
    assert {bits: row[:2] for bits, row in rows.items()} == {
        32: ("26.08", "32.08"), 16: ("13.04", "19.04"), 8: ("6.52", "12.52"), 4: ("3.26", "9.26")}
    assert rows[4][2].startswith("theoretical") and rows[16][2] is None
    assert data["rows"][0]["weights_bytes"] == 28_000_000_000


def test_cards_are_candidates_to_check_or_to_confirm_never_guaranteed(cli):
    code, data = size(cli, "--params", "7e9", "--bits", "16", "--reserve-gib", "6")
    assert code == 0
    cards = {card["gpu"]: card for card in data["cards"]}
    assert cards["rtx-4090"]["status"] == "candidate to check"
    assert (cards["rtx-4090"]["capacity_gb"], cards["rtx-4090"]["capacity_gib"]) == ("24", "22.35")
    assert cards["b200"]["status"] == "to confirm" and cards["b200"]["capacity_gib"] is None
    code, data = size(cli, "--params", "7e9", "--bits", "32", "--reserve-gib", "6")
    assert {card["gpu"]: card["status"] for card in data["cards"]}["rtx-4090"] == "does not cover"


def test_kv_cache_is_its_own_line():
    assert kv_cache_bytes(layers=32, kv_heads=8, head_dim=128, tokens=4096, sequences=1, bits=16) == 536_870_912


def test_kv_from_flags_and_missing_architecture_is_a_usage_error(cli):
    code, data = size(cli, "--params", "7e9", "--kv", "--tokens", "4096", "--sequences", "1", "--layers", "32",
                      "--kv-heads", "8", "--head-dim", "128")
    assert code == 0 and data["kv_cache"]["bytes"] == 536_870_912 and data["kv_cache"]["gib"] == "0.50"
    code, err = size(cli, "--params", "7e9", "--kv", "--tokens", "4096", "--sequences", "1")
    assert code == 2 and "--layers, --kv-heads, --head-dim" in err


def model_folder(folder, config):
    """A model folder as save_pretrained leaves it: config.json and a (small) safetensors file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    header = json.dumps({"wte.weight": {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 48]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(48))
    return folder


@pytest.mark.parametrize(("config", "shape", "context"), [
    (GPT2, (12, 12, 64), 1024),  # head dim = n_embd 768 / n_head 12; as many KV heads as heads
    (LLAMA, (28, 8, 128), 131072),  # grouped-query: 8 KV heads for 24 query heads; head_dim given (not 3072 / 24)
    (QWEN, (24, 2, 64), 32768),  # no head_dim: hidden size 896 // 14 heads
], ids=["gpt2", "llama-gqa", "qwen2"])
def test_kv_cache_of_a_decoder_read_from_its_config_json(cli, tmp_path, config, shape, context):
    folder = model_folder(tmp_path / "model", config)
    written = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    layers, kv_heads, head_dim = shape
    assert kv_shape(written) == {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim}
    expected = 2 * layers * kv_heads * head_dim * 4096 * 8 * 2  # keys and values, 4096 tokens, 8 sequences, 2 bytes
    code, data = size(cli, "--model", folder, "--kv", "--tokens", "4096", "--sequences", "8")
    assert code == 0, data
    assert (data["kv_cache"]["layers"], data["kv_cache"]["kv_heads"], data["kv_cache"]["head_dim"]) == shape
    assert data["kv_cache"]["bytes"] == expected and data["kv_cache"]["context_limit"] == context
    assert (data["kv_cache"]["note"] is None) == (context >= 4096)
    code, data = size(cli, "--model", folder, "--kv", "--tokens", "100", "--sequences", "3", "--kv-bits", "8")
    assert data["kv_cache"]["bytes"] == 2 * layers * kv_heads * head_dim * 100 * 3 * 1


def test_tokens_beyond_gpt2_positions_are_said_beside_the_estimate(cli, tmp_path):
    code, out, _ = cli("size", "--model", model_folder(tmp_path / "gpt2", GPT2), "--kv", "--tokens", "4096", "--sequences", "1")
    assert code == 0
    assert "2 x 12 layers x 12 KV heads x 64 head dim x 4096 tokens x 1 sequences x 2 bytes = 150,994,944 B" in out
    assert "beyond the model's context limit of 1024 tokens" in out


@pytest.mark.parametrize("config", [
    BERT,
    {"architectures": ["RobertaForSequenceClassification"], "model_type": "roberta", "num_hidden_layers": 12},
    {"architectures": ["DistilBertForMaskedLM"], "model_type": "distilbert", "n_layers": 6, "n_heads": 12, "dim": 768},
    {"model_type": "xlm-roberta", "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768},
], ids=["bert", "roberta", "distilbert", "xlm-roberta"])
def test_an_encoder_has_no_kv_cache_and_size_says_so(cli, tmp_path, config):
    assert kv_shape(config) is None
    folder = model_folder(tmp_path / "encoder", config)
    code, _, err = cli("size", "--model", folder, "--kv", "--tokens", "512", "--sequences", "8")
    assert code == 2 and "Traceback" not in err
    assert f"iteralab size: error: {folder} holds an encoder" in err and "keeps no KV cache" in err
    code, data = size(cli, "--model", folder, "--kv", "--tokens", "512", "--sequences", "8", "--layers", "6",
                      "--kv-heads", "12", "--head-dim", "32")
    assert code == 2 and "no KV cache" in data and "kv_cache" not in data
    code, data = size(cli, "--model", folder)  # the weights are still sized
    assert code == 0 and data["parameters"] == 12 and data["kv_cache"] is None


def test_a_decoder_marked_as_such_is_not_taken_for_an_encoder():
    assert kv_shape({**BERT, "architectures": ["BertLMHeadModel"], "is_decoder": True}) == {
        "layers": 6, "kv_heads": 12, "head_dim": 32}
    assert kv_shape({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "text_config": QWEN}) == {
        "layers": 24, "kv_heads": 2, "head_dim": 64}


@pytest.mark.parametrize(("config", "field"), [
    ({key: value for key, value in LLAMA.items() if key != "num_hidden_layers"}, "num_hidden_layers"),
    ({key: value for key, value in QWEN.items() if key != "hidden_size"}, "hidden_size"),
    ({key: value for key, value in GPT2.items() if key != "n_head"}, "n_head"),
    ({**GPT2, "n_embd": 770}, "n_embd"),
], ids=["layers", "hidden-size", "gpt2-heads", "gpt2-width"])
def test_a_decoder_config_without_its_shape_names_the_missing_field(cli, tmp_path, config, field):
    with pytest.raises(UserError, match=field):
        kv_shape(config)
    folder = model_folder(tmp_path / "model", config)
    code, err = size(cli, "--model", folder, "--kv", "--tokens", "16", "--sequences", "1")
    assert code == 2 and field in err and "--kv needs" in err and "Traceback" not in err
    code, data = size(cli, "--model", folder, "--kv", "--tokens", "16", "--sequences", "1", "--layers", "2",
                      "--kv-heads", "3", "--head-dim", "5")
    assert code == 0 and data["kv_cache"]["bytes"] == 2 * 2 * 3 * 5 * 16 * 1 * 2


@pytest.mark.slow
def test_the_estimate_equals_the_cache_transformers_keeps(tmp_path):
    """A real tiny GPT-2 and a grouped-query Qwen2, saved by transformers: the keys and values they cache after a
    forward pass hold exactly the bytes the formula gives from their config.json."""
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    transformers.utils.logging.disable_progress_bar()
    models = {"gpt2": GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=50, n_positions=64,
                                                 bos_token_id=0, eos_token_id=0)),
              "qwen2": Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                                    hidden_size=32, intermediate_size=64, vocab_size=50))}
    for name, model in models.items():
        model.save_pretrained(tmp_path / name)
        shape = kv_shape(json.loads((tmp_path / name / "config.json").read_text(encoding="utf-8")))
        with torch.no_grad():
            cache = model.eval()(torch.randint(0, 50, (3, 7)), use_cache=True).cache
        kept = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
        assert kept == kv_cache_bytes(**shape, tokens=7, sequences=3, bits=32), name


def test_training_mode_lists_items_without_a_multiplier(cli):
    code, out, _ = cli("size", "--params", "1e9", "--mode", "training")
    assert code == 0
    for item in ("gradients", "optimizer state", "activations", "buffers"):
        assert f"- {item}:" in out
    assert "no hidden multiplier" in out


@pytest.mark.parametrize(("args", "status"), [(("--params", "seven"), 1), (("--params", "1.5"), 1), ((), 2),
                                              (("--params", "7e9", "--reserve-gib", "-1"), 2)])
def test_bad_sizing_input_is_a_clear_error(cli, args, status):
    code, _, err = cli("size", *args)
    assert code == status and "Traceback" not in err


def test_demo_encoder_parameters_from_safetensors_match_loading_it_in_torch():
    from transformers import AutoModel

    from iteralab.demos.classify import locate_inputs

    base, _ = locate_inputs()
    architecture = read_architecture(base)
    model = AutoModel.from_pretrained(base, local_files_only=True)
    assert architecture.parameters == sum(p.numel() for p in model.parameters())
    assert architecture.encoder and (architecture.layers, architecture.kv_heads, architecture.head_dim) == (None, None, None)


@pytest.mark.slow
def test_the_dynamic_int8_estimate_follows_what_quantization_converts_within_a_tenth_of_the_real_state(cli):
    """#44: --bits 8 counts every parameter at a byte; dynamic int8 converts Linear layers only (MiniLM: half its weights)."""
    from transformers import AutoModel

    from iteralab.demos.classify import locate_inputs
    from iteralab.money.quantized import dynamic_int8_bytes, state_bytes
    from iteralab.workloads.classify import quantize

    base, _ = locate_inputs()
    found = dynamic_int8_bytes(base)
    real = state_bytes(quantize(AutoModel.from_pretrained(base, local_files_only=True)))
    assert abs(found["bytes"] - real) <= real / 10, (found, real)
    assert found["int8_parameters"] + found["fp32_parameters"] == 22_713_216  # every parameter counted once
    code, out, _ = cli("size", "--model", base, "--quantization", "dynamic-int8", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["quantized"]["bytes"] == found["bytes"]
    code, out, _ = cli("size", "--model", base, "--bits", "8", "--json")
    assert json.loads(out)["rows"][0]["weights_bytes"] < real / 2  # the old estimate: every parameter at a byte


def test_quantization_without_a_model_says_what_it_needs(cli):
    code, _, err = cli("size", "--params", "7e9", "--quantization", "dynamic-int8")
    assert code == 2 and "--quantization needs --model" in err
