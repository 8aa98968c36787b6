"""Memory sizing: weights, reserve and KV cache in bytes, GB and GiB, against the catalog's cards."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

from generator.catalog import GIB, Catalog
from generator.errors import UserError

TABLE_BITS = (32, 16, 8, 4)
THEORETICAL_NOTE = "theoretical: quantization metadata (scales, zero points) and layers kept in other formats are not counted"
TRAINING_ITEMS = (
    ("gradients", "one per trainable parameter, in the gradient precision you use"),
    ("optimizer state", "depends on the optimizer (e.g. Adam keeps two moments per parameter) and its precision"),
    ("activations", "kept for the backward pass; grow with batch size, sequence length and checkpointing choices"),
    ("buffers", "framework workspace, communication buffers, fragmentation"),
)


def gib(value: int | Decimal) -> Decimal:
    """Bytes to GiB (2^30), two places, half up."""
    return (Decimal(value) / Decimal(GIB)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def gb(value: int | Decimal) -> Decimal:
    """Bytes to GB (10^9), two places, half up."""
    return (Decimal(value) / Decimal(10**9)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def parse_count(text: str, what: str) -> int:
    """Read a whole count written as 7e9, 7000000000 or 7_000_000_000."""
    try:
        value = Decimal(str(text).replace("_", ""))
    except InvalidOperation:
        raise UserError(f"{what} {text!r} is not a number") from None
    if not value.is_finite() or value <= 0 or value != value.to_integral_value():
        raise UserError(f"{what} {text!r} must be a positive whole number")
    return int(value)


def weights_bytes(parameters: int, bits: int) -> Decimal:
    """Parameters × bits ÷ 8, exactly."""
    return Decimal(parameters) * Decimal(bits) / Decimal(8)


def kv_cache_bytes(*, layers: int, kv_heads: int, head_dim: int, tokens: int, sequences: int, bits: int = 16) -> Decimal:
    """2 (keys and values) × layers × KV heads × head dim × tokens × sequences × bytes per value."""
    return Decimal(2 * layers * kv_heads * head_dim * tokens * sequences) * Decimal(bits) / Decimal(8)


@dataclass(frozen=True)
class Architecture:
    """What a local model's files say about its size and attention shape."""

    parameters: int
    layers: int | None
    kv_heads: int | None
    head_dim: int | None
    source: str


def safetensors_parameters(model_dir: Path) -> int:
    """Count parameters from the safetensors headers without loading any weight."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise UserError(f"{model_dir} has no *.safetensors file to count parameters from")
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise UserError(f"{path}: too short to be a safetensors file")
            (length,) = struct.unpack("<Q", raw)
            if length > 100 * 2**20:
                raise UserError(f"{path}: header length {length} is implausible; the file is not safetensors")
            try:
                header = json.loads(handle.read(length))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise UserError(f"{path}: the safetensors header is not valid JSON") from None
        for name, tensor in header.items():
            # 64-bit integer and boolean tensors are buffers (position ids, masks), not weights.
            if name == "__metadata__" or tensor.get("dtype") in ("I64", "U64", "BOOL"):
                continue
            count = 1
            for dimension in tensor["shape"]:
                count *= dimension
            total += count
    return total


def read_architecture(model_dir: Path) -> Architecture:
    """Read the parameter count (safetensors) and attention shape (config.json) of a local model."""
    model_dir = Path(model_dir)
    config_file = model_dir / "config.json"
    config = {}
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UserError(f"{config_file}: not valid JSON") from None
    config = config.get("text_config", config)
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads and config.get("hidden_size") else None)
    return Architecture(safetensors_parameters(model_dir), config.get("num_hidden_layers"),
                        config.get("num_key_value_heads", heads), head_dim, str(model_dir))


def card_fit(catalog: Catalog, need_bytes: Decimal) -> list[dict]:
    """Per GPU of the catalog: candidate to check, does not cover, or to confirm (capacity not stated)."""
    rows = []
    for gpu in sorted(catalog.gpus.values(), key=lambda g: g.slug):
        if gpu.memory_per_card_gb is None:
            status, capacity = "to confirm", None
            note = "the catalog does not state its memory: confirm the capacity per card with the provider"
        else:
            capacity = gpu.memory_per_card_gb * Decimal(10**9)
            covers = capacity >= need_bytes
            status = "candidate to check" if covers else "does not cover"
            note = ("nominal capacity covers the estimate: measure before relying on it" if covers
                    else f"{gib(capacity)} GiB per card is below the estimate")
        rows.append({"gpu": gpu.slug, "name": gpu.name, "cards_per_lot": gpu.cards_per_lot,
                     "capacity_gb": gpu.memory_per_card_gb,
                     "capacity_gib": None if capacity is None else gib(capacity), "status": status, "note": note})
    return rows
