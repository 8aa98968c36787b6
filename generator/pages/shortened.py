"""Name a campaign's shared machine once per table and each configuration by its variant (#45)."""

from __future__ import annotations

import dataclasses

from iteralab.pages.charts import shared_part
from iteralab.store.views import CampaignView


@dataclasses.dataclass(frozen=True)
class Shortened:
    """A campaign view whose configurations are named by their variants, the machine they share, and the renaming."""

    view: CampaignView
    machine: str | None  # hardware · software of every configuration, or None where they differ (a merged campaign)
    names: dict[str, str]  # full label -> variant name

    def short(self, label) -> str:
        """Return LABEL by its variant's name where the machine is said once, else as it is."""
        return self.names.get(label, label) if isinstance(label, str) else label


def shortened(view: CampaignView) -> Shortened:
    """Return VIEW with its configurations named by their variants where every one ran on the same machine and software.

    A label reads 'fp32-b1 · CPU … · torch …': on a page of one machine that tail was the same in every row and every
    sentence (over 20 times on the demo's campaign page). Where the machines differ, each label stays whole, as it must.
    """
    labels = [variant.label for variant in view.variants]
    names, machine = shared_part(labels)
    if machine is None:
        return Shortened(view, None, {})
    variants = tuple(dataclasses.replace(variant, label=name) for variant, name in zip(view.variants, names, strict=True))
    return Shortened(dataclasses.replace(view, variants=variants), machine, dict(zip(labels, names, strict=True)))
