"""What every trial shares: phases timed apart, memory per phase, failures described, memory released."""

from __future__ import annotations

import contextlib
import gc
import resource
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from iteralab.core.language import Text
from iteralab.machine.placement import devices_used
from iteralab.store.trials import PHASES

# Sentences the records hold in English; each is a message of the catalog, so a page can say it in another language.
HOST_RSS_PER_PHASE = Text("peak resident set size of the runner process during the phase (VmHWM, reset at phase start)")
HOST_RSS_LIFETIME = Text("peak resident set size of the runner process since it started (getrusage ru_maxrss): "
                         "this kernel cannot reset the peak per phase")
CLEAR_REFS = "/proc/self/clear_refs"
PER_CARD_COUNTERS = ("torch.cuda.max_memory_allocated / max_memory_reserved of each card, reset at each phase start, bytes; "
                     "the phase's figure is the fullest card's, each card's in gpu_cards (their memory is not one space)")


def reset_host_peak() -> bool:
    """Reset the process's peak RSS to its current RSS (Linux 4.0+); tell whether it worked."""
    try:
        with open(CLEAR_REFS, "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _status_bytes(field: str) -> int | None:
    """Read one of /proc/self/status's memory fields (kB) in bytes, or None where it cannot be read."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def host_rss() -> int | None:
    """Return the process's resident set size now, in bytes (None where /proc cannot tell)."""
    return _status_bytes("VmRSS:")


def host_peak_rss() -> int:
    """Return the peak RSS in bytes since the last reset (or since start when resets are impossible)."""
    peak = _status_bytes("VmHWM:")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class TrialPlace(NamedTuple):
    """Where a trial writes its files: the runs folder, its campaign and its id."""

    runs_dir: Path
    campaign: str
    trial_id: str


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the runner; the trial is recorded as interrupted."""

# One model loads at a time in this process. transformers' loading replaces torch.nn.init's functions with empty ones
# and puts back what it found: two loads at once ([placement] per_card, a thread per card) put back the empty ones, and
# every model built later in the process kept its weights uninitialised (#44; a later test's tiny GPT-2 generated
# other tokens). Under per_card a card's model_load phase includes its wait for the other card's load.
LOADING = threading.Lock()


def _torch():
    import torch

    return torch


def out_of_memory_errors() -> tuple:
    """Return the exception types torch raises when a device runs out of memory."""
    torch = _torch()
    return tuple({getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError), torch.cuda.OutOfMemoryError})


@dataclass
class PhaseClock:
    """Time phases with perf_counter_ns, synchronising CUDA before start and stop."""

    device: str
    phases: dict = field(default_factory=dict)
    current: str | None = None
    host_scope: str = HOST_RSS_PER_PHASE
    # A model placed across cards: each one synchronised, reset and read apart (#44). Not an argument: the public
    # PhaseClock(device) keeps its signature; the runner builds a clock over several cards with PhaseClock.over.
    cards: tuple[str, ...] = field(default=(), init=False)

    @classmethod
    def over(cls, device: str, cards: tuple[str, ...]) -> PhaseClock:
        """Return a clock for a trial on DEVICE whose model is on CARDS (the device alone, or a placement's cards)."""
        clock = cls(device)
        clock.cards = tuple(cards)
        return clock

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def devices(self) -> tuple[str, ...]:
        """Return the devices the clock waits for and reads: the placement's cards, else the trial's device."""
        return self.cards if len(self.cards) > 1 else (self.device,)

    def _sync(self):
        if self.cuda:
            for device in self.devices:
                _torch().cuda.synchronize(device)

    @contextlib.contextmanager
    def phase(self, name: str):
        """Time one phase; on CUDA reset and read the peak memory counters around it."""
        torch = _torch()
        self.current = name
        if self.cuda:
            self._sync()
            for device in self.devices:
                torch.cuda.reset_peak_memory_stats(device)
        if not reset_host_peak():
            self.host_scope = HOST_RSS_LIFETIME
        # The baseline: what the process held before the phase (the interpreter and torch, before a model loads).
        at_start = host_rss()
        start = time.perf_counter_ns()
        completed, where = False, None
        try:
            yield
            completed = True
        except BaseException as exc:
            where = failed_at(exc)  # the batch's ids and tokens, a generation's prefill or decode step (#61)
            raise
        finally:
            if completed:
                self._sync()
            self.phases[name] = {"duration_ns": time.perf_counter_ns() - start, "completed": completed,
                                 "host_rss_at_start_bytes": at_start, **self._memory(), **({"failed_at": where} if where else {})}

    def rate(self, units: int) -> float | None:
        """UNITS per second of the measured window, or None where it has no duration."""
        duration = self.phases["measured_window"]["duration_ns"]
        return units / (duration / 1e9) if duration else None

    def skip(self, name: str, reason: str):
        """Record a phase that does not apply to this variant."""
        self.phases[name] = {"duration_ns": None, "reason": reason}

    def _memory(self) -> dict:
        memory = {"host_peak_rss_bytes": host_peak_rss()}
        if self.cuda:
            torch = _torch()
            each = {device: {"gpu_peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
                             "gpu_peak_reserved_bytes": torch.cuda.max_memory_reserved(device)} for device in self.devices}
            # Cards' memory is not one space: the phase's figure is the fullest card's, each card's kept beside it.
            for key in ("gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes"):
                memory[key] = max(peaks[key] for peaks in each.values())
            if len(each) > 1:
                memory["gpu_cards"] = each
        return memory

    def finish(self, failed_phase: str | None, order: tuple[str, ...] = PHASES) -> dict:
        """Fill in the phases of ORDER never reached, each with its reason."""
        for name in order:
            if name not in self.phases:
                self.phases[name] = {"duration_ns": None, "reason": Text("not reached: the trial stopped in {failed_phase}",
                                                                                      failed_phase=failed_phase)}
        return {name: self.phases[name] for name in order}


def torch_dtype(precision: str):
    """Return the torch dtype a variant's precision names."""
    torch = _torch()
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def weights_dtypes(model) -> dict[str, int] | None:
    """How many parameter values the loaded MODEL holds in each dtype ('float32': 4386432), as it will run."""
    counts: dict[str, int] = {}
    with contextlib.suppress(AttributeError, TypeError):  # a stand-in model without parameters
        for parameter in model.parameters():
            name = str(parameter.dtype).removeprefix("torch.")
            counts[name] = counts.get(name, 0) + parameter.numel()
    return counts or None


def gpu_memory_context(device: str, host_scope: str, cards: tuple[str, ...] = ()) -> dict:
    """Describe the GPU memory counters for this device (the placement's CARDS, when across several), or why there are none."""
    torch = _torch()
    if device.startswith("cuda") and torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(device)
        used = devices_used(cards or (device,))  # the configuration says "1 of 2×" from it (#44)
        counters = ("torch.cuda.max_memory_allocated / max_memory_reserved, reset at each phase start, bytes, this device only"
                    if len(used) == 1 else PER_CARD_COUNTERS)
        return {"device": device, "gpu_name": properties.name, "gpu_capacity_bytes": properties.total_memory,
                "gpu_memory_reason": None, "host_rss_scope": host_scope, "gpu_counters": counters, "devices_used": used}
    return {"device": device, "gpu_name": None, "gpu_capacity_bytes": None,
            "gpu_memory_reason": Text("no GPU: the variant runs on {device}", device=device), "host_rss_scope": host_scope,
            "gpu_counters": None}


def batches(items: list, size: int) -> list[list]:
    """Split ITEMS into consecutive batches of SIZE; only the last may be shorter."""
    return [items[start:start + size] for start in range(0, len(items), size)]


def describe(exc: BaseException) -> str:
    """Say an exception in one line: its type, message and where it was raised, then the batch it failed on and, in a
    generation, whether in prefill or at which decode step (#61)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame else ""
    found = failed_at(exc)
    return f"{type(exc).__name__}: {str(exc).strip()[:500]}{where}" + (f"; {said_at(found)}" if found else "")


# Where a failure happened, carried by the exception from the code that knows it to the phase clock and describe().
FAILED_AT = "_iteralab_failed_at"
SHOWN_IDS = 16  # the ids a failure names; the record keeps up to MAX_IDS, and says how many the batch held
MAX_IDS = 64


def locate(exc: BaseException, **where) -> None:
    """Add WHERE (entry ids, token counts, a generation's phase and decode step) to what EXC says of where it was raised;
    the innermost code's words win, so a batch's caller cannot overwrite the step generate() named."""
    found = dict(getattr(exc, FAILED_AT, None) or {})
    for key, value in where.items():
        if value is not None:
            found.setdefault(key, value)
    with contextlib.suppress(AttributeError, TypeError):  # an exception type that takes no attribute keeps its message
        setattr(exc, FAILED_AT, found)


def failed_at(exc: BaseException) -> dict | None:
    """Return where EXC was raised as `locate` recorded it, or None."""
    found = getattr(exc, FAILED_AT, None)
    return dict(found) if isinstance(found, dict) and found else None


def token_span(encoded) -> dict | None:
    """Return an encoded batch's tokens: the fewest and most of its rows (attention mask), and its padded width."""
    with contextlib.suppress(Exception):  # after a device error the tensors may not be readable: nothing is said then
        lengths = encoded["attention_mask"].sum(dim=1).tolist()
        return {"min": int(min(lengths)), "max": int(max(lengths)), "padded_to": int(encoded["input_ids"].shape[1])}
    return None


class InBatch:
    """Name a batch in any failure raised inside it: its entries' ids and, once encoded (`encoded`), its token counts.

    Nothing is read while the batch runs: the token counts are read from the encoded batch only when it failed.
    """

    def __init__(self, entries):
        self.ids, self.batch = [entry.id for entry in entries], None

    def encoded(self, encoded):
        """Keep the encoded batch, to read its token counts should it fail; return it."""
        self.batch = encoded
        return encoded

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback_) -> bool:
        if isinstance(exc, Exception):
            locate(exc, entries=len(self.ids), entry_ids=self.ids[:MAX_IDS],
                   tokens=token_span(self.batch) if self.batch is not None else None)
        return False


def said_at(found: dict) -> str:
    """Say where a failure happened, in the words a trial's error keeps: 'in decode step 5, on a batch of 4 entries
    (doc-001, doc-004, doc-007, doc-010) of 12 to 20 tokens, padded to 20'."""
    parts = []
    if found.get("generation_phase") == "decode":
        parts.append(f"in decode step {found.get('decode_step')} (new token {(found.get('decode_step') or 0) + 1})")
    elif found.get("generation_phase") == "prefill":
        parts.append("in prefill")
    ids = found.get("entry_ids") or []
    if ids:
        count = found.get("entries") or len(ids)
        shown = ", ".join(str(entry_id) for entry_id in ids[:SHOWN_IDS]) + (f" and {count - SHOWN_IDS} more" if count > SHOWN_IDS else "")
        tokens = found.get("tokens")
        span = (f" of {tokens['min']} to {tokens['max']} tokens, padded to {tokens['padded_to']}"
                if isinstance(tokens, dict) and tokens.get("min") != tokens.get("max") else
                f" of {tokens['max']} tokens, padded to {tokens['padded_to']}" if isinstance(tokens, dict) else "")
        parts.append(f"on a batch of {count} {'entry' if count == 1 else 'entries'} ({shown}){span}")
    return ", ".join(parts)


@contextlib.contextmanager
def settled_heap():
    """Collect once, then keep what is alive now (torch, transformers, the campaign) out of every later collection.

    release() collects after each trial so that a model caught in a reference cycle is gone before the next one loads.
    A full collection walks every tracked object: with torch and transformers imported that took 0.3 s a trial here,
    longer than a tiny trial's work. Frozen (gc.freeze), the objects that outlive every trial are not walked again; the
    trial's own objects still are. Unfrozen at the end, so a process that runs campaigns one after another (the demo)
    collects as usual between them; a heap its caller froze stays frozen (the test workers freeze theirs after each
    test, and a thaw here made every later collection walk all of it again).
    """
    frozen_by_caller = gc.get_freeze_count() > 0
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_by_caller:
            gc.unfreeze()


def release(device: str) -> None:
    """Free what a finished or failed trial held (a serving engine it started too, #64), so the next trial starts clean."""
    engines = sys.modules.get("iteralab.serving.engine")  # only a serving trial imports it: no other kind pays for it
    if engines is not None:
        engines.stop_all()
    gc.collect()
    if device.startswith("cuda"):
        _torch().cuda.empty_cache()
