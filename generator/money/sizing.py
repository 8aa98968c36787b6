"""Memory sizing: weights, reserve and KV cache in bytes, GB and GiB, against the catalog's cards."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

from iteralab.core.errors import UsageError, UserError
from iteralab.money.catalog import GIB, Catalog
from iteralab.money.quantized import describe as describe_quantized
from iteralab.money.quantized import dynamic_int8_bytes

TABLE_BITS = (32, 16, 8, 4)
THEORETICAL_NOTE = "theoretical: quantization metadata (scales, zero points) and layers kept in other formats are not counted"
TRAINING_ITEMS = (
    ("gradients", "one per trainable parameter, in the gradient precision you use"),
    ("optimizer state", "depends on the optimizer (e.g. Adam keeps two moments per parameter) and its precision"),
    ("activations", "kept for the backward pass; grow with batch size, sequence length and checkpointing choices"),
    ("buffers", "framework workspace, communication buffers, fragmentation"),
)

# Where size --mode training points: the campaign that measures what it can only list.
MEASURED_TRAINING = ("an adaptation campaign ([workload] kind = \"adapt\") times each phase with its memory peaks "
                     "beside this estimate; see the manual's page on adaptation, docs/adapt.md")


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


# Model types that are encoders only: they attend over the whole input at once and keep no KV cache.
ENCODER_TYPES = frozenset({
    "albert", "bert", "big_bird", "camembert", "canine", "convbert", "data2vec-text", "deberta", "deberta-v2", "distilbert",
    "electra", "ernie", "esm", "flaubert", "funnel", "ibert", "layoutlm", "layoutlmv2", "layoutlmv3", "longformer", "luke",
    "megatron-bert", "mobilebert", "modernbert", "mpnet", "nezha", "nomic_bert", "rembert", "roberta", "roberta-prelayernorm",
    "roformer", "squeezebert", "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod",
})
DECODER_ARCHITECTURES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def _text(config: dict) -> dict:
    """The language model's part of a config: its text_config where it nests one (vision-language models)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) and nested else config


def is_encoder(config: dict) -> bool:
    """True for an encoder-only model: not marked is_decoder, no generating architecture, and an encoder model_type."""
    inner = _text(config)
    architectures = [*(config.get("architectures") or ()), *(inner.get("architectures") or ())]
    if inner.get("is_decoder") is True or any(str(name).endswith(DECODER_ARCHITECTURES) for name in architectures):
        return False
    return inner.get("model_type") in ENCODER_TYPES or config.get("model_type") in ENCODER_TYPES


def _field(config: dict, name: str) -> int:
    value = config.get(name)
    if value is None:
        raise UserError(f"the model's config.json has no {name}, needed for the KV cache shape")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"the model's config.json gives {name} = {value!r}; a positive whole number is needed")
    return value


def _per_head(config: dict, width_name: str, heads_name: str) -> int:
    width, heads = _field(config, width_name), _field(config, heads_name)
    if width % heads:
        raise UserError(f"the model's config.json gives {width_name} = {width}, not a multiple of {heads_name} = {heads}")
    return width // heads


def kv_shape(config: dict) -> dict | None:
    """Return {"layers", "kv_heads", "head_dim"} read from a model's config.json content, or None for an encoder (no KV cache)."""
    if is_encoder(config):
        return None
    config = _text(config)
    if config.get("model_type") == "gpt2" or ("n_layer" in config and "num_hidden_layers" not in config):
        heads = _field(config, "n_head")  # GPT-2 names: keys and values have as many heads as queries
        kv_heads = 1 if config.get("multi_query") else heads
        width = "n_embd" if "n_embd" in config or "hidden_size" not in config else "hidden_size"
        return {"layers": _field(config, "n_layer"), "kv_heads": kv_heads, "head_dim": _per_head(config, width, "n_head")}
    layers, heads = _field(config, "num_hidden_layers"), _field(config, "num_attention_heads")
    kv_heads = _field(config, "num_key_value_heads") if config.get("num_key_value_heads") is not None else heads
    head_dim = (_field(config, "head_dim") if config.get("head_dim") is not None
                else _per_head(config, "hidden_size", "num_attention_heads"))
    return {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim}


def context_limit(config: dict) -> int | None:
    """The longest sequence the model's positions cover (n_positions or max_position_embeddings), when stated."""
    config = _text(config)
    value = config.get("n_positions", config.get("max_position_embeddings"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class Architecture:
    """What a local model's files say about its size and attention shape (None where config.json does not give it)."""

    parameters: int
    layers: int | None
    kv_heads: int | None
    head_dim: int | None
    source: str
    encoder: bool = False
    shape_note: str | None = None  # why the attention shape could not be read
    context: int | None = None


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
    if not config_file.is_file():
        return Architecture(safetensors_parameters(model_dir), None, None, None, str(model_dir),
                            shape_note=f"{config_file} does not exist")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{config_file}: not valid JSON") from None
    if not isinstance(config, dict):
        raise UserError(f"{config_file}: not a JSON object")
    shape, note, encoder = {}, None, is_encoder(config)
    try:
        shape = kv_shape(config) or {}
    except UserError as error:
        note = f"{config_file}: {error}"
    if encoder:
        architectures = ", ".join(map(str, config.get("architectures") or ())) or "not named"
        note = (f"{model_dir} holds an encoder (config.json: model_type {_text(config).get('model_type')!r}, "
                f"architectures {architectures}, not a decoder)")
    return Architecture(safetensors_parameters(model_dir), shape.get("layers"), shape.get("kv_heads"), shape.get("head_dim"),
                        str(model_dir), encoder=encoder, shape_note=note, context=context_limit(config))


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


def _reserve_bytes(text: str) -> tuple[Decimal, Decimal]:
    try:
        reserve_gib = Decimal(str(text))
    except InvalidOperation:
        raise UsageError(f"--reserve-gib {text!r} is not a number") from None
    if not reserve_gib.is_finite() or reserve_gib < 0:
        raise UsageError("--reserve-gib must be zero or more")
    return reserve_gib, reserve_gib * Decimal(GIB)


def _kv(options: dict, architecture: Architecture | None) -> dict:
    if architecture and architecture.encoder:
        raise UsageError(f"{architecture.shape_note}: an encoder reads its whole input at once and keeps no KV cache, "
                         "so there is none to estimate; drop --kv")
    shape = {key: options.get(key) or (getattr(architecture, key) if architecture else None) for key in ("layers", "kv_heads", "head_dim")}
    missing = [f"--{key.replace('_', '-')}" for key in ("tokens", "sequences") if options.get(key) is None]
    missing += [f"--{key.replace('_', '-')}" for key, value in shape.items() if value is None]
    if missing:
        because = f" ({architecture.shape_note})" if architecture and architecture.shape_note else ""
        raise UsageError(f"--kv needs {', '.join(missing)}{because}")
    size = kv_cache_bytes(**shape, tokens=options["tokens"], sequences=options["sequences"], bits=options["bits"])
    limit = architecture.context if architecture else None
    return {**shape, "tokens": options["tokens"], "sequences": options["sequences"], "bits": options["bits"],
            "bytes": int(size), "mib": f"{size / 2**20:,.2f}", "gib": str(gib(size)), "context_limit": limit,
            "note": (f"--tokens {options['tokens']} is beyond the model's context limit of {limit} tokens (config.json)"
                     if limit and options["tokens"] > limit else None)}


def estimate(*, params: str | None, model: Path | None, bits: int, reserve_gib: str, table: bool, kv: dict | None,
             training: bool, catalog: Catalog, quantization: str | None = None) -> dict:
    """Compute weights, envelope, KV cache and card fit; every figure as exact text.

    QUANTIZATION "dynamic-int8" counts what the runner's variant converts (Linear weights to int8, the rest fp32),
    read from MODEL's architecture, instead of every parameter at BITS.
    """
    if quantization and model is None:
        raise UsageError("--quantization needs --model: which weights are Linear layers is read from the model")
    architecture = read_architecture(model) if model else None
    parameters = architecture.parameters if architecture else parse_count(params, "--params")
    reserve_text, reserve = _reserve_bytes(reserve_gib)
    cache_line = _kv(kv, architecture) if kv else None
    rows = []
    for row_bits in (TABLE_BITS if table else (bits,)):
        weights = weights_bytes(parameters, row_bits)
        rows.append({"bits": row_bits, "weights_bytes": int(weights), "weights_gb": str(gb(weights)), "weights_gib": str(gib(weights)),
                     "envelope_gib": str(gib(weights + reserve)), "envelope_gb": str(gb(weights + reserve)),
                     "note": THEORETICAL_NOTE if row_bits == 4 else None})
    quantized = dynamic_int8_bytes(model) if quantization else None
    weights = Decimal(quantized["bytes"]) if quantized else weights_bytes(parameters, bits)
    need = weights + reserve + (cache_line["bytes"] if cache_line else 0)
    cards = [{**card, "capacity_gb": None if card["capacity_gb"] is None else str(card["capacity_gb"]),
              "capacity_gib": None if card["capacity_gib"] is None else str(card["capacity_gib"])} for card in card_fit(catalog, need)]
    return {"parameters": parameters,
            "parameters_source": f"read from the safetensors headers in {architecture.source}" if architecture else "given",
            "bits": bits, "reserve_gib": str(reserve_text), "rows": rows, "kv_cache": cache_line, "need_per_gpu_gib": str(gib(need)),
            "cards": cards, "training_items": [item for item, _ in TRAINING_ITEMS] if training else None,
            "quantized": quantized}


def describe(result: dict) -> str:
    """Write an estimate as the lines the CLI prints."""
    lines = [f"Parameters: {result['parameters']:,} ({result['parameters_source']})"]
    for row in result["rows"]:
        lines.append(f"{row['bits']:>2} bit: weights only {row['weights_bytes']:,} B = {row['weights_gb']} GB = {row['weights_gib']} GiB; "
                     f"envelope {row['envelope_gib']} GiB ({row['envelope_gb']} GB)" + (f"  [{row['note']}]" if row["note"] else ""))
    lines.append(f"Reserve: {result['reserve_gib']} GiB, your assumption (never computed from the model)"
                 + ("; none given: add --reserve-gib for activations, workspace and fragmentation" if not Decimal(result["reserve_gib"]) else ""))
    kv = result["kv_cache"]
    if kv:
        lines.append(f"KV cache: 2 x {kv['layers']} layers x {kv['kv_heads']} KV heads x {kv['head_dim']} head dim x {kv['tokens']} tokens "
                     f"x {kv['sequences']} sequences x {kv['bits'] / 8:g} bytes = {kv['bytes']:,} B = {kv['mib']} MiB = {kv['gib']} GiB "
                     "(on top of the envelope)" + (f"  [{kv['note']}]" if kv["note"] else ""))
    if result.get("quantized"):
        lines.append(describe_quantized(result["quantized"]) + "; the per-GPU need below counts this instead of the bits")
    weights_as = "dynamic int8" if result.get("quantized") else f"{result['bits']} bit"
    lines.append(f"Per GPU at {weights_as}{' with KV cache' if kv else ''}: {result['need_per_gpu_gib']} GiB needed "
                 "(a model is never assumed to split across cards; GB = 10^9 B, GiB = 2^30 B)")
    for card in result["cards"]:
        capacity = f"{card['capacity_gb']} GB = {card['capacity_gib']} GiB" if card["capacity_gb"] is not None else "capacity not stated"
        lines.append(f"  {card['name']} ({capacity}): {card['status']}: {card['note']}")
    if result["training_items"]:
        lines.append("Training adds items to document one by one (no hidden multiplier is applied):")
        lines.extend(f"  - {item}: {why}" for item, why in TRAINING_ITEMS)
        lines.append(f"To measure them instead: {MEASURED_TRAINING}")
    return "\n".join(lines)
