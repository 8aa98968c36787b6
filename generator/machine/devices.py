"""Check a campaign's devices and determinism against this machine before any model loads or any timing."""

from __future__ import annotations

import os
import time

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.machine import numerics
from iteralab.machine.placement import PER_CARD, declared_cards, placement_of

# cuBLAS gives reproducible results under torch.use_deterministic_algorithms only with one of these workspaces.
CUBLAS_WORKSPACES = (":4096:8", ":16:8")


def _torch_cuda():
    import torch

    return torch.cuda


INITIALISATION = Text("torch.cuda.is_available() (which initialises the driver), torch.cuda.init() and the first "
                      "synchronisation of each device the variants use (which creates its context), timed before anything "
                      "else in the process touches CUDA: paid once per process, so once per run (and again by each "
                      "resumption)")
# What runs recorded before INITIALISATION named torch.cuda.is_available(): their records still say it, and a page says
# a recorded wording in the reader's language only while the catalogs hold it (`make translations` keeps what the code
# names, and drops the rest).
INITIALISATION_RECORDED_BEFORE = Text("torch.cuda.init() and the first synchronisation of each device the variants use "
                                      "(which creates its context), timed before anything else in the process touches "
                                      "CUDA: paid once per process, so once per run (and again by each resumption)")


def initialise_devices(campaign, cuda=None, clock=time.perf_counter_ns) -> dict:
    """Time CUDA's initialisation on the devices the variants use, once, before the checks and the manifest touch them."""
    used = sorted({_index(card) for variant in campaign.variants for card in declared_cards(variant, campaign.protocol)})
    if not used:
        return {"duration_ns": None, "devices": [], "reason": Text("no variant runs on a GPU")}
    cuda = cuda or _torch_cuda()
    if cuda.is_initialized():
        return {"duration_ns": None, "devices": [], "reason": Text(
            "CUDA was initialised earlier in this process (another run in the same Python process): not paid again")}
    start = clock()  # before is_available(): asking it initialises the driver, the first part of the cost (#63)
    if not cuda.is_available():
        return {"duration_ns": None, "devices": [], "reason": Text("torch sees no CUDA device here")}
    cuda.init()
    count = cuda.device_count()
    devices = [f"cuda:{index}" for index in used if index < count]  # a missing one is refused next, naming the others
    for device in devices:
        cuda.synchronize(device)
    return {"duration_ns": clock() - start, "devices": devices, "what": INITIALISATION}


def _index(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def device_findings(campaign, cuda=None) -> list[dict]:
    """Each variant's device, found on this machine or missing with why (never raises; CUDA stands in for tests)."""
    cuda = cuda or _torch_cuda()
    available = cuda.is_available()
    count = cuda.device_count() if available else 0
    there = ", ".join(f"cuda:{index} ({cuda.get_device_name(index)})" for index in range(count)) or "none"
    findings = []
    for variant in campaign.variants:
        problem = None
        placed = declared_cards(variant, campaign.protocol)
        missing = [card for card in placed if _index(card) >= count]
        if variant.device.startswith("cuda"):
            if not available:
                problem = (f"{campaign.source}: variant {variant.name} asks for {variant.device}, but torch sees no CUDA "
                           "device here; run it on a GPU machine or set device = \"cpu\"")
            elif _index(variant.device) >= count:
                problem = (f"{campaign.source}: variant {variant.name} asks for {variant.device}, but this machine has "
                           f"{count} CUDA device(s): {there}; set device to one of them (nothing was timed)")
            elif missing:  # a model placed across cards needs every one of them (#44)
                how = "runs variant {} on each of" if placement_of(campaign.protocol)["mode"] == PER_CARD else "places variant {} across"
                problem = (f"{campaign.source}: [placement] {how.format(variant.name)} {', '.join(placed)}, but "
                           f"this machine has {count} CUDA device(s): {there}; {', '.join(missing)} is missing (nothing was "
                           "timed)")
        findings.append({"variant": variant.name, "device": variant.device, "found": problem is None,
                         "problem": problem})
    return findings


def check_devices(campaign, cuda=None) -> None:
    """Refuse a variant whose device this machine lacks, naming the devices there are (CUDA stands in for tests)."""
    for finding in device_findings(campaign, cuda):
        if finding["problem"]:
            raise UserError(finding["problem"])


def _hip() -> bool:
    import torch

    return bool(getattr(torch.version, "hip", None))


def determinism_problem(campaign, environ=None, hip: bool | None = None) -> str | None:
    """Why deterministic = true cannot hold on this campaign's CUDA variants here, or None (never raises). On ROCm
    (HIP), cuBLAS's workspace setting means nothing (hipBLAS and rocBLAS do not read it): nothing is demanded there."""
    environ = os.environ if environ is None else environ
    cuda = [variant.name for variant in campaign.variants if variant.device.startswith("cuda")]
    if cuda and (_hip() if hip is None else hip):
        return None
    if campaign.protocol["deterministic"] and cuda and environ.get("CUBLAS_WORKSPACE_CONFIG") not in CUBLAS_WORKSPACES:
        return (f"{campaign.source}: [protocol] deterministic = true, but CUBLAS_WORKSPACE_CONFIG is "
                f"{environ.get('CUBLAS_WORKSPACE_CONFIG') or 'not set'}: cuBLAS is not deterministic on CUDA "
                f"without it (variants {', '.join(cuda)}); run with CUBLAS_WORKSPACE_CONFIG=:4096:8 in the "
                "environment, or set deterministic = false (a new protocol)")
    return None


def check_determinism(campaign, environ=None) -> None:
    """Refuse deterministic = true on CUDA without the cuBLAS workspace that makes it hold, saying what to set."""
    problem = determinism_problem(campaign, environ)
    if problem:
        raise UserError(problem)


def determinism(protocol: dict) -> dict:
    """Describe the determinism and numerics the trials run under, as torch has them (for the manifest): read after
    apply_determinism, each flag through the API this torch offers (numerics.flags)."""
    requested = protocol["deterministic"]
    flags = numerics.flags()
    return {
        "requested": requested,
        "how": Text("torch.use_deterministic_algorithms(True, warn_only=True): an operation without a deterministic "
                    "implementation warns instead of failing, so results are requested deterministic, not guaranteed")
        if requested else Text("not requested"),
        "guaranteed": False,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        **flags,
        "numerics_fingerprint": numerics.fingerprint(flags),
    }


def applied_determinism(protocol: dict) -> dict:
    """Set determinism as the protocol says, then describe it as torch has it (the manifest's determinism)."""
    apply_determinism(protocol)
    return determinism(protocol)


def check_environment(variant, protocol: dict) -> None:
    """Refuse a missing CUDA device; seed and set determinism as the protocol says (a trial's first phase)."""
    import torch

    if variant.device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"{variant.device} is not available")
    apply_determinism(protocol)


def apply_determinism(protocol: dict) -> None:
    """Seed torch and set its deterministic algorithms, cuDNN's included, as the protocol says."""
    import torch

    torch.manual_seed(protocol["seed"])
    torch.use_deterministic_algorithms(protocol["deterministic"], warn_only=True)
    # Both ways: a deterministic campaign earlier in the same process left cuDNN deterministic (#63).
    torch.backends.cudnn.deterministic = bool(protocol["deterministic"])
    if protocol["deterministic"]:
        torch.backends.cudnn.benchmark = False
