"""A campaign's kind of work in words (#42, part 2): what each kind does, and whether two campaigns answer one question.

The runner names the kind in every manifest (``[workload] kind``); ``store.views`` reads it back, a manifest written
before kinds existed as classify. The pages (through ``site.words``), ``decide``, ``compare`` and the evidence bundle
say it in these words. A kind this version has no words for is shown by its code, never guessed.
"""

from __future__ import annotations

from iteralab.core.language import Joined, Text

# What each kind of work does, one message each: a new kind is one line here and its translation.
WORK = {"classify": Text("label every text of a corpus with a fine-tuned classifier"),
        "generate": Text("generate text for every prompt of a corpus with a causal language model"),
        "adapt": Text("fine-tune a text classifier (all weights, a named subset or LoRA) and validate it"),
        "serve": Text("serve requests to an engine in another process at declared load levels, within a latency "
                      "objective")}
# The useful unit of the decision each kind names (the design's last row): a validated corpus unless said here. An
# adaptation delivers a validated adapted model (exported, hashed, accepted by the validation thresholds).
UNITS = {"adapt": "model", "serve": "request"}
CORPUS, MODEL, REQUEST = "corpus", "model", "request"


def unit_of(kinds) -> str:
    """Return the useful unit of a campaign whose manifests name KINDS: 'model' when every kind delivers models, 'request'
    when every kind serves (#64), else 'corpus' (no manifest yet, or kinds that disagree, keep the corpus: the figures
    are said as they always were)."""
    kinds = tuple(kinds)
    units = {UNITS.get(kind, CORPUS) for kind in kinds}
    return units.pop() if len(units) == 1 and units <= {MODEL, REQUEST} else CORPUS


def described(kind: str) -> Text | str:
    """Say one kind: 'classify — label every text of a corpus with ...'; an unknown kind by its code alone."""
    what = WORK.get(kind)
    return kind if what is None else Text("{kind} — {what}", kind=kind, what=what)


def kind_of_work(kinds) -> Text | str:
    """Say a campaign's kind of work from the kinds its manifests name (``CampaignView.kinds``): one, none yet, or
    several, which the runner never writes (the kind is part of the campaign) and which are said, never picked from."""
    kinds = tuple(kinds)
    if not kinds:
        return Text("not recorded: no run manifest yet")
    if len(kinds) == 1:
        return described(kinds[0])
    return Text("the manifests disagree ({kinds}); a campaign has one kind of work, so its figures mix runs that answer "
                "different questions", kinds=Joined("; ", [described(kind) for kind in kinds]))


def kind_line(kinds) -> Text:
    """Return 'Kind of work: classify — label every text ...', as pages, decide and the bundle say it."""
    return Text("Kind of work: {kind}", kind=kind_of_work(kinds))


def not_comparable(earlier: str, earlier_kinds, later: str, later_kinds) -> Text | None:
    """Say why two campaigns' answers cannot be set against each other when their kinds of work differ; None when both
    do one and the same kind (or one has no manifest yet, so no answer to set against the other)."""
    earlier_kinds, later_kinds = tuple(earlier_kinds), tuple(later_kinds)
    if not earlier_kinds or not later_kinds or len(set(earlier_kinds) | set(later_kinds)) == 1:
        return None
    return Text("Not comparable answers: {earlier} does {earlier_kind} and {later} does {later_kind}. Different kinds of "
                "work answer different questions (a validated corpus of one kind is not a validated corpus of the other): "
                "the figures below stand side by side, but neither answer replaces the other.", earlier=earlier,
                later=later, earlier_kind=Joined(", ", earlier_kinds), later_kind=Joined(", ", later_kinds))
