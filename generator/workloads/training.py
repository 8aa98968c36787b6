"""What an adaptation's training loop keeps beside its model: the training order, its optimizer settings, the classifier
head's origin and the forward, backward and optimizer step summed over the measured window."""

from __future__ import annotations

import random
import time

from iteralab.core.language import Text

# [adaptation] shuffle: "once" (the split shuffled once with the seed, the order taken from its start again after its
# end, an update may hold entries from both ends) or "every_pass" (each pass over the split shuffled anew, seeded, and no
# update crossing from one pass into the next).
SHUFFLES = ("once", "every_pass")
ORDER_EVERY_PASS = Text("the training split shuffled with the protocol's seed for its first pass and anew for each later "
                        "pass (seeded by the seed and the pass's number); each update takes the next effective batch of "
                        "its pass: the entries left at a pass's end too few for a whole update are skipped, so no update "
                        "holds entries of two passes (the same examples in the same updates for every variant of the same "
                        "effective batch)")
# The settings a variant may set for itself; the others are the campaign's [adaptation] ones.
OPTIMIZER = ("optimizer", "learning_rate", "weight_decay")
HOST_TIMER = Text("host clock (perf_counter_ns) around each microbatch's forward and loss, its backward and each "
                  "update's optimizer step, summed over the measured window; tokenizing and moving a microbatch is "
                  "timed apart as data")
CUDA_TIMER = Text("CUDA events recorded on the stream around each microbatch's forward and loss, its backward and each "
                  "update's optimizer step, read after the window (never synchronised inside it) and summed; tokenizing "
                  "and moving a microbatch is host time, timed apart as data")
HEAD_LOADED = Text("loaded from the checkpoint")
HEAD_INITIALISED = Text("initialised for training ([adaptation] new_head = true), from torch's generator seeded with the "
                        "protocol's seed before the model loads")


def optimizer_settings(variant, settings: dict) -> dict:
    """Return the optimizer, learning rate, weight decay, schedule and clipping a trial trains with: the variant's own
    where it sets them, else the campaign's; ``set_by_variant`` names those the variant sets."""
    own = [key for key in OPTIMIZER if getattr(variant, key, None) is not None]
    found = {key: getattr(variant, key) if key in own else settings[key] for key in OPTIMIZER}
    return {**found, "schedule": settings["schedule"], "max_grad_norm": settings["max_grad_norm"], "set_by_variant": own}


def head(initialised: list[str], settings: dict, seed: int) -> dict:
    """Say where the classifier head a trial trains came from: loaded, or initialised (the weights, with the seed)."""
    if not initialised:
        return {"state": "loaded", "initialised_weights": [], "seed": None, "said": HEAD_LOADED}
    return {"state": "initialised", "initialised_weights": list(initialised), "seed": seed,
            "declared": bool(settings.get("new_head")), "said": HEAD_INITIALISED}


class TrainingOrder:
    """The training entries in the protocol's order, taken an update at a time (see SHUFFLES)."""

    def __init__(self, entries: list, seed: int, shuffle: str, effective: int):
        self.entries, self.seed, self.every_pass, self.effective = list(entries), seed, shuffle == "every_pass", effective
        self.passes, self.position, self.skipped, self.across = 0, 0, 0, 0
        self.order: list = []
        self._next_pass()

    def _next_pass(self) -> None:
        self.order = list(self.entries)
        # The first pass is the order "once" takes: the same examples in the first updates either way.
        random.Random(self.seed if self.passes == 0 else f"{self.seed}:pass{self.passes}").shuffle(self.order)
        self.passes, self.position = self.passes + 1, 0

    def begin_update(self) -> None:
        """Start an update: under every_pass, a new pass when this one has too few entries left for a whole update."""
        left = len(self.order) - self.position
        if self.every_pass and left < self.effective and self.effective <= len(self.order):
            self.skipped += left
            self._next_pass()
        elif not self.every_pass and self.position % len(self.order) + self.effective > len(self.order):
            self.across += 1  # "once": this update holds entries from the end and from the start again

    def take(self, size: int) -> list:
        """Return the next SIZE entries: from the start again after the end under "once", from a new pass otherwise."""
        chosen = []
        while len(chosen) < size:
            if self.every_pass and self.position == len(self.order):
                self._next_pass()
            chosen.append(self.order[self.position % len(self.order)])
            self.position += 1
        if not self.every_pass:
            self.passes = max(self.passes, (self.position - 1) // len(self.order) + 1)
        return chosen

    def record(self) -> dict:
        """Return what the trial's record says of its order: the rule, the passes begun, entries skipped, updates across."""
        return {"shuffle": "every_pass" if self.every_pass else "once", "passes": self.passes,
                "entries_skipped_at_pass_ends": self.skipped, "updates_across_passes": self.across}


class WindowTimers:
    """Sum the time of each part of the measured window's updates: host clocks on a CPU, CUDA events on a GPU.

    ``mark`` returns a boundary and ``lap`` adds the time since the last one to a part; on a GPU a boundary is an event
    recorded on the stream and the laps are read after the window, whose end the phase clock synchronises already.
    """

    PARTS = ("data", "forward", "backward", "optimizer_step")

    def __init__(self, device: str, enabled: bool = True):
        self.cuda, self.enabled = device.startswith("cuda"), enabled
        self.host_ns = dict.fromkeys(self.PARTS, 0)
        self.events: list[tuple[str, object, object]] = []
        self.counts = dict.fromkeys(self.PARTS, 0)

    def mark(self, on_host: bool = False):
        """Return a boundary: the host clock now, or (on a GPU, unless ON_HOST) an event recorded on the stream."""
        if not self.enabled:
            return None
        if self.cuda and not on_host:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter_ns()

    def lap(self, part: str, start, on_host: bool = False):
        """Add the time from START to now to PART; return now as the next boundary."""
        if not self.enabled:
            return None
        end = self.mark(on_host)
        self.counts[part] += 1
        if isinstance(end, int):
            self.host_ns[part] += end - start
        else:
            self.events.append((part, start, end))
        return end

    def record(self) -> dict:
        """Return each part's seconds summed over the window (read after it), how many times each was timed and how."""
        if not self.enabled:
            return {}
        seconds = {part: ns / 1e9 for part, ns in self.host_ns.items()}
        for part, start, end in self.events:  # complete by now: the clock synchronised at the window's end
            seconds[part] += start.elapsed_time(end) / 1e3
        return {**{f"{part}_s": seconds[part] for part in self.PARTS},
                "window_parts": {"timer": "cuda_events" if self.cuda else "host_clock",
                                 "how": CUDA_TIMER if self.cuda else HOST_TIMER, "timed": dict(self.counts)}}
