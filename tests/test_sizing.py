"""Memory sizing: the seed figures, units, KV cache, and the parameter count read without loading weights."""

from __future__ import annotations

import json

import pytest

from iteralab.money.sizing import kv_cache_bytes, read_architecture


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

    from iteralab.demo import locate_inputs

    base, _ = locate_inputs()
    architecture = read_architecture(base)
    model = AutoModel.from_pretrained(base, local_files_only=True)
    assert architecture.parameters == sum(p.numel() for p in model.parameters())
    assert (architecture.layers, architecture.kv_heads, architecture.head_dim) == (6, 12, 32)
