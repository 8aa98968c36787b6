"""One trial per card at the same time ([placement] mode = "per_card"): a thread and a model copy per card, each on its
own copy of the corpus, timed by its own clock on its own card, each card's record apart.

The forward passes release the GIL while CUDA works, so the cards' windows overlap as they would in separate processes;
what one process cannot keep apart (the host's peak RSS) is said in each record. The set is one step of the plan: every
card's record names the set, and a set interrupted on any card runs again whole (run.resume).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading

from iteralab.core.language import Text
from iteralab.machine import fatal
from iteralab.machine.phases import Interrupted, _torch, release
from iteralab.machine.placement import PER_CARD, declared_cards, placement_of
from iteralab.store import records

# Each thread's phases reset the process's peak RSS (clear_refs) when they start: the figure is the process's, shared.
HOST_SHARED = Text("peak resident set size of the runner process, which ran the set's cards at the same time: each card's "
                   "phase start resets it for the whole process, so it is not this card's alone and may miss a peak")
WAIT_S = 0.1  # the main thread wakes this often while the cards work, so that a signal reaches it at once


def declared(protocol: dict) -> bool:
    """Tell whether the campaign runs one trial per card at the same time."""
    return placement_of(protocol)["mode"] == PER_CARD


def devices_of(campaign) -> list[str]:
    """Return every device the campaign's trials use: each variant's, and under per_card every declared card."""
    return list(dict.fromkeys(card for variant in campaign.variants
                              for card in declared_cards(variant, campaign.protocol) or (variant.device,)))


@dataclasses.dataclass(frozen=True)
class OnCard:
    """The declared VARIANT run on CARD: its settings (and so its configuration) are the declared ones, its device the card."""

    variant: object
    card: str

    def __getattr__(self, name):
        return getattr(self.variant, name)

    @property
    def device(self) -> str:
        return self.card

    def config(self) -> dict:
        return self.variant.config()


class CardWriter:
    """Append one card's records one at a time (the runs file is shared), each naming its card and its set."""

    def __init__(self, signals, lock: threading.Lock, fields: dict, cards: list[str]):
        self.signals, self.lock, self.fields, self.cards = signals, lock, fields, cards
        self.trial = None  # the card's trial record, once written: a signal delivered as it is written still returns it

    def append(self, runs_dir, record: dict):
        record["per_card"] = dict(self.fields)
        if record["kind"] == "trial":
            self.trial = record
            if record["memory"].get("devices_used"):
                # The configuration is the set's cards (store.configuration); the trial's own card is per_card.card.
                record["memory"]["devices_used"] = list(self.cards)
                record["memory"]["host_rss_scope"] = HOST_SHARED
        with self.lock:
            return self.signals.append(runs_dir, record)


class CardProgress:
    """A card's silent progress: it stops the card's measured window at its next batch once the set is interrupted."""

    def __init__(self, stop: threading.Event, why: list):
        self.stop, self.why = stop, why

    def start(self, label: str, total: int):
        pass  # before the trial's start record: stopping here would leave the card without its row

    def attach(self, work):
        step = work.step

        def checked(encoded):
            self._check()
            return step(encoded)

        work.step = checked

    def done(self, status: str):
        pass

    def _check(self):
        if self.stop.is_set():
            raise Interrupted(self.why[0] if self.why else "SIGINT")


def _on_device(card: str):
    """Make CARD the thread's current device, so what torch puts on "cuda" (and empty_cache) is this card's."""
    cuda = _torch().cuda
    return cuda.device(card) if cuda.is_available() else contextlib.nullcontext()


def release_set(cards: list[str]) -> None:
    """Free what the set's trials held, once every card's window is over (#63): emptying one card's cache synchronises
    it, and torch empties every card's pool, so a card finishing first would stall the others' windows."""
    for card in cards:
        with _on_device(card):
            fatal.release_safely(release, card)


def run_step(execute, prepared, runs_dir, manifest, variant, repetition: int, sequence: int, signals, progress, *,
             retry_of: str | None = None) -> list[dict]:
    """Run one planned step with EXECUTE (runner.execute): one trial, or under per_card one per card at the same time."""
    protocol = prepared.campaign.protocol
    if not declared(protocol):
        return [execute(prepared, runs_dir, manifest, variant, repetition, sequence, signals, progress, retry_of=retry_of)]
    cards = list(placement_of(protocol)["devices"])
    group, lock, stop, why = records.new_id("set"), threading.Lock(), threading.Event(), []
    again = {"retry_of": retry_of} if retry_of else {}  # the set (or trial) this set runs again, whole
    trials: dict[str, dict] = {}
    failures: dict[str, BaseException] = {}

    ended = {card: threading.Event() for card in cards}

    def one(card: str):
        writer = CardWriter(signals, lock, {"set": group, "card": card, "cards": cards, **again}, cards)
        try:
            with _on_device(card):
                trials[card] = execute(prepared, runs_dir, manifest, OnCard(variant, card), repetition, sequence, writer,
                                       CardProgress(stop, why), keep_cache=True)
        except Interrupted as exc:  # delivered while this card appended its record: the others stop at their next batch
            why.append(exc.args[0])
            stop.set()
            if writer.trial is not None:  # written before the signal was delivered: the set's row all the same
                trials[card] = writer.trial
        except BaseException as exc:  # what escaped the trial's own recording: raised again in the main thread, never lost
            failures[card] = exc
            stop.set()
        finally:
            ended[card].set()

    progress.start(f"{sequence}/{len(prepared.plan)} {variant.name} rep {repetition} on {', '.join(cards)}", 0)
    _wait({card: threading.Thread(target=one, args=(card,), name=f"iteralab-{card}") for card in cards}, ended, stop, why)
    release_set(cards)
    progress.done(", ".join(f"{card} {trials[card]['status']}" for card in cards if card in trials))
    if failures:
        raise next(iter(failures.values()))
    if why and all(trial["status"] != "interrupted" for trial in trials.values()):
        raise Interrupted(why[0])  # the signal came as the last record was written: stop before the next set
    return [trials[card] for card in cards if card in trials]


def _wait(threads: dict, ended: dict, stop: threading.Event, why: list) -> None:
    """Start every card and wait until each has ended; a signal to the main thread stops each card at its next batch (one
    not started yet never starts) and still waits for each started card's record."""
    try:
        for thread in threads.values():
            thread.start()
    except Interrupted as exc:
        why.append(exc.args[0])
        stop.set()
    for card in [card for card, thread in threads.items() if thread.ident is not None]:  # started, even if cut short
        # Each card's own event, never Thread.join: an exception raised inside join (the signal's, in this thread) can
        # mark a thread that still runs as stopped (CPython's _wait_for_tstate_lock), and its record would be lost.
        while not ended[card].is_set():
            try:
                ended[card].wait(WAIT_S)
            except Interrupted as exc:
                why.append(exc.args[0])
                stop.set()
