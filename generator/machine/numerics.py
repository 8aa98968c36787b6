"""The numerics flags a trial's results and memory depend on, read as torch 2.4 to 2.13 has them (#63).

TF32 has two APIs: the legacy flags (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
torch.set_float32_matmul_precision) and, from torch 2.9, fp32_precision (torch.backends.fp32_precision, and per backend:
cuda.matmul, cudnn, cudnn.conv, cudnn.rnn), which transformers' enable_tf32 sets. Once the new API has set them, reading
a legacy flag raises RuntimeError: each is read through the new API where it exists, the legacy one otherwise, and what
cannot be read is None with its reason. The fingerprint is over the flags that change results, not those that change
only memory (the allocator's configuration) or speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
OVERRIDE_VARIABLES = ("NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
# What changes the numbers a trial computes; the rest (allocator, uninitialised memory filled) changes memory or speed.
RESULT_FLAGS = ("deterministic_algorithms", "cudnn_deterministic", "cudnn_benchmark", "tf32_matmul", "tf32_cudnn",
                "fp32_precision", "bf16_reduced_precision_reduction", "fp16_reduced_precision_reduction", "sdp_backends",
                "tf32_override")


def _torch():
    import torch

    return torch


def _read(getter):
    """Return GETTER's value, or None where this torch lacks it or refuses to read it (mixed TF32 APIs)."""
    try:
        return getter()
    except (AttributeError, RuntimeError):
        return None


def fp32_precision(torch) -> dict:
    """The new API's settings ('ieee', 'tf32' or 'none': not set there), each backend's; empty before torch 2.9."""
    getters = {"generic": lambda: torch.backends.fp32_precision,
               "matmul": lambda: torch.backends.cuda.matmul.fp32_precision,
               "cudnn": lambda: torch.backends.cudnn.fp32_precision,
               "cudnn_conv": lambda: torch.backends.cudnn.conv.fp32_precision,
               "cudnn_rnn": lambda: torch.backends.cudnn.rnn.fp32_precision}
    found = {name: _read(getter) for name, getter in getters.items()}
    return {name: str(value) for name, value in found.items() if value is not None}


def _effective(new: dict, *chain: str) -> bool | None:
    """TF32 as the new API sets it: the most specific backend not left at 'none' decides; None where none is set."""
    for name in chain:
        if new.get(name) not in (None, "none"):
            return new[name] == "tf32"
    return None


def tf32(torch) -> dict:
    """TF32 on matmul and cuDNN, the float32 matmul precision, the new API's settings, and why any is unread."""
    new = fp32_precision(torch)
    matmul = _read(lambda: bool(torch.backends.cuda.matmul.allow_tf32))
    cudnn = _read(lambda: bool(torch.backends.cudnn.allow_tf32))
    precision = _read(torch.get_float32_matmul_precision)
    said = _effective(new, "matmul", "generic")
    matmul = said if said is not None else matmul
    said = _effective(new, "cudnn_conv", "cudnn", "generic")
    cudnn = said if said is not None else cudnn
    reasons = {name: "torch refused to read it (the legacy and the fp32_precision APIs were both used)"
               for name, value in (("tf32_matmul", matmul), ("tf32_cudnn", cudnn), ("float32_matmul_precision", precision))
               if value is None}
    return {"tf32_matmul": matmul, "tf32_cudnn": cudnn, "float32_matmul_precision": precision, "fp32_precision": new,
            "reasons": reasons}


def sdp_backends(torch) -> dict:
    """Which scaled-dot-product attention backends torch may choose (False: turned off)."""
    cuda = torch.backends.cuda
    names = {"flash": "flash_sdp_enabled", "mem_efficient": "mem_efficient_sdp_enabled", "math": "math_sdp_enabled",
             "cudnn": "cudnn_sdp_enabled"}
    return {name: _read(lambda attribute=attribute: bool(getattr(cuda, attribute)())) for name, attribute in names.items()}


def _fill_uninitialized(torch) -> bool | None:
    with contextlib.suppress(ImportError, AttributeError):
        import torch.utils.deterministic as deterministic

        return bool(deterministic.fill_uninitialized_memory)
    return None


def flags(torch=None, environ=None) -> dict:
    """Every flag the manifest records, as torch has it now."""
    torch = torch or _torch()
    environ = os.environ if environ is None else environ
    matmul = torch.backends.cuda.matmul
    found = tf32(torch)
    return {
        "deterministic_algorithms": _read(torch.are_deterministic_algorithms_enabled),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "fill_uninitialized_memory": _fill_uninitialized(torch),
        **{key: found[key] for key in ("tf32_matmul", "tf32_cudnn", "float32_matmul_precision", "fp32_precision")},
        "bf16_reduced_precision_reduction": _read(lambda: bool(matmul.allow_bf16_reduced_precision_reduction)),
        "fp16_reduced_precision_reduction": _read(lambda: bool(matmul.allow_fp16_reduced_precision_reduction)),
        "sdp_backends": sdp_backends(torch),
        "allocator_config": {name: environ.get(name) for name in ALLOCATOR_VARIABLES},
        "tf32_override": {name: environ.get(name) for name in OVERRIDE_VARIABLES},
        "flags_reasons": found["reasons"],
    }


def fingerprint(found: dict) -> str:
    """sha256 of the flags that change results (RESULT_FLAGS), as the manifest records them."""
    canonical = json.dumps({key: found.get(key) for key in RESULT_FLAGS}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
