"""What dynamic int8 quantization really converts: torch.nn.Linear weights to int8, every other weight kept in fp32."""

from __future__ import annotations

from pathlib import Path

from iteralab.core.errors import UserError

FORMULA = ("Linear weights × 1 byte + one fp32 scale and zero point per Linear layer + every other parameter "
           "(embeddings, norms, biases, Conv1D) × 4 bytes")


def _meta_model(model_dir: Path):
    """Build the checkpoint's architecture on the meta device: its modules, without reading or allocating a weight."""
    import torch
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read the model's config.json in {model_dir}: {str(error).splitlines()[0]}") from None
    names = list(getattr(config, "architectures", None) or [])
    model_class = getattr(transformers, names[0], None) if names else None
    if model_class is None:
        raise UserError(f"{model_dir}/config.json names no architecture transformers knows ({names or 'none'}): "
                        "--quantization needs the model's class to tell its Linear layers from the rest")
    with torch.device("meta"):
        return model_class(config)


def dynamic_int8_bytes(model_dir: Path) -> dict:
    """Count what quantize_dynamic({nn.Linear}, qint8) turns to int8 and what it leaves in fp32; return bytes with both."""
    import torch

    model = _meta_model(Path(model_dir))
    linear_weights, linear_layers, kept = 0, 0, 0
    converted = set()
    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear:
            linear_layers += 1
            linear_weights += module.weight.numel()
            converted.add(f"{name}.weight" if name else "weight")
    for name, parameter in model.named_parameters(remove_duplicate=True):
        if name not in converted:
            kept += parameter.numel()  # embeddings, norms, biases (kept fp32 by the quantized Linear), other layers
    total = linear_weights + linear_layers * 8 + kept * 4
    return {"quantization": "dynamic-int8", "linear_layers": linear_layers, "int8_parameters": linear_weights,
            "fp32_parameters": kept, "bytes": total, "formula": FORMULA,
            "kept_share": round(kept / (kept + linear_weights), 4) if kept + linear_weights else None}


def describe(found: dict) -> str:
    """Say the dynamic int8 estimate in one line."""
    return (f"dynamic int8: {found['int8_parameters']:,} Linear weights at 1 byte in {found['linear_layers']} layers, "
            f"{found['fp32_parameters']:,} other parameters kept at 4 bytes ({found['kept_share']:.1%} of them) = "
            f"{found['bytes']:,} B ({FORMULA})")


def state_bytes(model) -> int:
    """Sum the bytes of a loaded (possibly quantized) model's state: tensors and the packed int8 weights."""
    import torch

    def size(value) -> int:
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, tuple | list):
            return sum(size(item) for item in value)
        return 0

    return sum(size(value) for value in model.state_dict().values())

