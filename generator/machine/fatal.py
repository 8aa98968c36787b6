"""A fatal GPU error poisons the process: its CUDA context is lost, and every later trial in it would fail too (#63).

After an illegal memory access, a device-side assert or a launch failure, every later CUDA call in the process raises
(torch.cuda.empty_cache included). The trial that hit it keeps its record (written before any memory is released); the
process is marked, later trials are not started in it, and `iteralab run --resume` runs them in a fresh process.
"""

from __future__ import annotations

from iteralab.core.errors import UserError
from iteralab.core.language import Text

# Sticky errors of the CUDA and HIP runtimes (cudaErrorIllegalAddress, cudaErrorAssert, cudaErrorLaunchFailure, ...):
# the context cannot be used again. Out of memory is not one of them.
STICKY = ("illegal memory access", "illegal address", "device-side assert", "unspecified launch failure",
          "misaligned address", "illegal instruction", "uncorrectable ecc", "hardware stack error", "launch timed out",
          "launch failure")
_STATE: dict[str, str | None] = {"reason": None}


def is_fatal(error: BaseException) -> bool:
    """Tell whether ERROR is a sticky CUDA or HIP error (torch raises it as AcceleratorError, or RuntimeError before 2.8)."""
    said = f"{type(error).__name__}: {error}".lower()
    runtime = "cuda error" in said or "hip error" in said or "hiperror" in said or "acceleratorerror" in said
    return runtime and any(marker in said for marker in STICKY)


def mark(error: BaseException, trial_id: str | None = None) -> bool:
    """Mark the process as poisoned when ERROR is fatal; tell whether it was."""
    if not is_fatal(error):
        return False
    if _STATE["reason"] is None:
        where = f"trial {trial_id}" if trial_id else "releasing a trial's memory"
        _STATE["reason"] = f"{where} hit a fatal GPU error ({type(error).__name__}: {str(error).strip().splitlines()[0][:200]})"
    return True


def poisoned() -> str | None:
    """Why this process can no longer run a trial on a GPU, or None."""
    return _STATE["reason"]


def stopped(remaining: int, warnings: list | None = None, warn=None) -> Text:
    """Say that the run stopped in a poisoned process, and how to run the REMAINING trials; add it to WARNINGS and give
    it to WARN too."""
    said = Text("{reason}: this process's CUDA context is lost, so the run stops here and its {count} remaining trials "
                "were not started; run iteralab run --resume with the same campaign to run them in a fresh process",
                reason=_STATE["reason"], count=remaining)
    if warnings is not None:
        warnings.append(said)
    if warn:
        warn(said)
    return said


def refuse() -> None:
    """Refuse to prepare a run in a poisoned process (a demo or a notebook running campaigns one after another)."""
    if _STATE["reason"]:
        raise UserError(f"{_STATE['reason']}: this process's CUDA context is lost and cannot run another trial; start a "
                        "new process (iteralab run --resume continues the run that stopped)")


def release_safely(release, device: str, trial_id: str | None = None) -> None:
    """Call RELEASE(DEVICE); a fatal GPU error there poisons the process instead of losing the run."""
    try:
        release(device)
    except Exception as error:
        if not mark(error, trial_id):
            raise


def forget() -> None:
    """Clear the mark (tests)."""
    _STATE["reason"] = None
