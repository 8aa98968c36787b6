"""What was actually tested together: variant settings × observed hardware × software stack."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from functools import cached_property

from iteralab.core.language import Text
from iteralab.money.catalog import Catalog, Gpu


@dataclass(frozen=True)
class Configuration:
    """One configuration: trials are only ever pooled within one of these."""

    variant: str
    settings: tuple  # the variant's settings as sorted (key, value) pairs
    device: str  # "gpu", "cpu" or "unknown"
    gpu_name: str | None
    gpu_count: int
    cpu_model: str | None
    threads: int | None
    torch: str | None
    accelerator_runtime: str | None  # "CUDA 12.8", "HIP 6.2" or None on a CPU build
    driver: str | None
    unknown_reason: str | None = None
    # The cards the trials used where fewer than the machine's gpu_count; None when they used them all or the records
    # do not say (written before trials named their devices): the label, key and plan are then the machine's, as before.
    cards_used: int | None = None
    # Its cards must be one lot: one model placed across them ([placement] across_cards), or one trial per card at once
    # (per_card).
    across: bool = False
    # A part of a card (an NVIDIA MIG slice, an AMD compute partition), as the manifest recorded it: never priced as the
    # whole card whose name it carries (#63).
    partition: str | None = None


    @property
    def cards(self) -> int:
        """Return the cards the measurement used: those named by the trials, else the machine's."""
        return self.gpu_count if self.cards_used is None else self.cards_used

    @property
    def hardware(self) -> str:
        """Describe the hardware the trials ran on, as the manifest observed it."""
        named = f"{self.gpu_name} ({self.partition})" if self.partition and self.partition not in self.gpu_name else self.gpu_name
        if self.device == "gpu" and self.cards_used is not None:
            return f"{self.cards_used} of {self.gpu_count}× {named}"
        if self.device == "gpu":
            return f"{self.gpu_count}× {named}"
        if self.device == "cpu":
            threads = f", {self.threads} threads" if self.threads else ""
            return f"CPU {self.cpu_model or 'model not read'}{threads}"
        return f"unknown hardware ({self.unknown_reason})"

    @property
    def software(self) -> str:
        """Describe the software stack: torch, accelerator runtime and driver."""
        parts = [f"torch {self.torch or 'version not read'}"]
        if self.accelerator_runtime:
            parts.append(self.accelerator_runtime)
        if self.driver:
            parts.append(f"driver {self.driver}")
        return " · ".join(parts)

    @cached_property  # asked for hundreds of times per campaign page; the fields never change
    def key(self) -> str:
        """Return a stable identifier usable in file names, HTML ids and CSV cells."""
        placed = ["across"] if self.across else []  # only then: every other key stays as it was
        canonical = json.dumps([self.variant, self.settings, self.hardware, self.software, *placed], sort_keys=True, default=str)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{self.variant}-{self.gpu_name or self.device}").strip("-").lower()
        return f"{slug}-{hashlib.sha256(canonical.encode()).hexdigest()[:8]}"

    def label(self, detailed: bool = False) -> str:
        """Name it for a reader: variant · hardware · torch (runtime and driver too when DETAILED)."""
        stack = self.software if detailed else f"torch {self.torch or 'version not read'}"
        return f"{self.variant} · {self.hardware} · {stack}"

    @cached_property
    def aliases(self) -> tuple[str, ...]:
        """Return the key and labels it had before trials named their cards, when naming them changed its label."""
        if self.cards_used is None and not self.across:
            return ()
        before = dataclasses.replace(self, cards_used=None, across=False)
        own = (self.key, self.label(), self.label(detailed=True))
        return tuple(name for name in (before.key, before.label(), before.label(detailed=True)) if name not in own)


def setting_text(value) -> str:
    """Say a variant setting as a reader reads it: a flag on or off, an unset one as not set, others as written."""
    if isinstance(value, bool):
        return Text("on") if value else Text("off")
    return Text("not set") if value is None else str(value)


def _runtime(environment: dict) -> str | None:
    if environment.get("cuda_version"):
        return f"CUDA {environment['cuda_version']}"
    if environment.get("hip_version"):
        return f"HIP {environment['hip_version']}"
    return None


def devices_used(trial: dict) -> list[str] | None:
    """Return the CUDA devices a trial says it used, or None where its record does not say (written before #44)."""
    named = (trial.get("memory") or {}).get("devices_used")
    return list(dict.fromkeys(named)) if isinstance(named, list) else None


def _fewer_cards(trial: dict, count: int) -> int | None:
    """Return how many of the machine's COUNT cards the trial used, only when it names them and they are fewer."""
    named = devices_used(trial)
    return len(named) if named and len(named) < count else None


def configuration_of(trial: dict, manifest: dict | None) -> Configuration:
    """Return the configuration of TRIAL from its variant settings and its run's manifest."""
    config = trial.get("variant_config") or {}
    settings = tuple(sorted((key, value) for key, value in config.items() if key != "series"))
    if manifest is None:
        return Configuration(trial["variant"], settings, "unknown", None, 0, None, None, None, None, None,
                             f"manifest {trial.get('manifest_id')} of run {trial.get('run_id')} is missing")
    environment = manifest.get("environment") or {}
    libraries = environment.get("libraries") or {}
    cpu = environment.get("cpu") or {}
    threads = (environment.get("threads") or {}).get("torch_intra_op") or cpu.get("usable_cores")
    common = {"torch": libraries.get("torch"), "accelerator_runtime": _runtime(environment)}
    device = str(config.get("device"))  # none stated: the runner's default, the CPU (the last return)
    gpus = environment.get("gpus") or []
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        used = next((gpu for gpu in gpus if gpu.get("index") == index), gpus[index] if index < len(gpus) else None)
        if used is None:
            return Configuration(trial["variant"], settings, "unknown", None, 0, cpu.get("model"), threads, **common,
                                 driver=environment.get("driver_version"),
                                 unknown_reason=f"the manifest lists no GPU {index} for device {device}")
        count = sum(1 for gpu in gpus if gpu.get("name") == used.get("name"))
        named = devices_used(trial)
        # One trial per card at the same time ([placement] per_card, #44): the set's cards are said even when they are
        # every card of the machine ("2 of 2×"), so the label says how the lot was used.
        together = len(named) if named and isinstance(trial.get("per_card"), dict) else None
        return Configuration(trial["variant"], settings, "gpu", used.get("name"), count, cpu.get("model"), threads, **common,
                             driver=environment.get("driver_version"), cards_used=together or _fewer_cards(trial, count),
                             across=len(named or ()) > 1, partition=_partition(used))
    # A variant on the CPU ran on the CPU, even on a machine with GPUs: the GPUs did not take part.
    return Configuration(trial["variant"], settings, "cpu", None, 0, cpu.get("model"), threads, torch=common["torch"],
                         accelerator_runtime=None, driver=None)


def _partition(gpu: dict) -> str | None:
    split = gpu.get("partition")
    if not isinstance(split, dict) or split.get("whole_card") is not False:
        return None
    kind = {"mig": "MIG", "compute_partition": "compute partition"}.get(split.get("kind"), str(split.get("kind")))
    return f"{kind} {split.get('profile')}"


def _tokens(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower()))


def card_matches(card: Gpu, observed_name: str | None) -> bool:
    """Tell whether a GPU name reported by torch is the catalog's card."""
    return name_matches(card.name, observed_name)


def name_matches(catalog_name: str, observed_name: str | None) -> bool:
    """Tell whether every word of a catalog name or slug ('RTX 4090', 'rtx-4090') appears in a name torch reported."""
    # torch reports "NVIDIA GeForce RTX 4090" for the catalog's "RTX 4090", "NVIDIA RTX 6000 Ada Generation" for
    # "RTX 6000 Ada"; an older "Quadro RTX 6000" lacks "ada" and is not that card.
    return bool(observed_name) and _tokens(catalog_name) <= _tokens(observed_name)


def catalog_card(catalog: Catalog, configuration: Configuration) -> Gpu | None:
    """Return the catalog card a GPU configuration ran on, or None (CPU, unknown, or a card the catalog lacks)."""
    if configuration.device != "gpu" or configuration.partition:
        return None
    matches = [card for card in catalog.gpus.values() if card_matches(card, configuration.gpu_name)]
    # The most specific name wins: "RTX 6000 Ada" over a hypothetical "RTX 6000".
    return max(matches, key=lambda card: len(_tokens(card.name)), default=None)


def manifest_gpus(manifest: dict) -> list[str]:
    """Return the GPU names a run's manifest observed."""
    return [gpu.get("name") or "" for gpu in (manifest.get("environment") or {}).get("gpus") or []]
