"""The decision question, as the campaign file stated it before any timing."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from iteralab.core.language import Figure, Text
from iteralab.decision.kinds import CORPUS, MODEL, REQUEST, unit_of
from iteralab.store.views import CampaignView


@dataclass(frozen=True)
class Question:
    """The decision question as the campaign file stated it before any timing."""

    declared: bool
    corpora: int | None
    entries: int | None
    window_hours: Decimal | None
    window_start: str | None
    window_end: str | None
    time_zone: str | None
    deadline: str | None
    deadline_hours: Decimal | None
    budget: Decimal | None
    unit: str = CORPUS  # the useful unit the campaign's kind of work delivers: a validated corpus, or a validated model

    @property
    def missing(self) -> list[str]:
        """Name the parts of the question the campaign file left out."""
        if not self.declared:
            if self.unit == MODEL:
                return [Text("the whole [decision] table (workload, access window, deadline, budget): one model assumed, "
                             "no window")]
            return [Text("the whole [decision] table (workload, access window, deadline, budget): one corpus assumed, no window")]
        found = []
        if self.window_hours is None:
            found.append(Text("the access window (window_start and window_end, or window_hours)"))
        if self.deadline_hours is None:
            found.append(Text("a deadline (optional)"))
        if self.budget is None:
            found.append(Text("a budget ceiling (optional)"))
        return found

    @property
    def limit_hours(self) -> Decimal | None:
        """Return the hours the work must fit in: the window, or the deadline when it comes first."""
        limits = [hours for hours in (self.window_hours, self.deadline_hours) if hours is not None]
        return min(limits) if limits else None

    def workload(self, corpus_entries: int | None) -> str:
        """Describe the production workload in words."""
        if self.unit == REQUEST:  # a serving campaign's workload is its declared load, stated with its objective (#64)
            return Text("requests at the campaign's declared load, within its latency objective (see the serving "
                        "question)")
        if self.unit == MODEL:  # [decision] corpora counts the models wanted: each trained and validated apart
            if (self.corpora or 1) == 1:
                return Text("1 validated model like the campaign's (trained, validated and exported)")
            return Text("{count} validated models like the campaign's, each trained, validated and exported apart",
                        count=self.corpora)
        if self.entries is not None:
            if corpus_entries:
                return Text("{entries} entries ({times} × the campaign's corpus), processed as one stream",
                            entries=Figure(self.entries), times=Figure(self.entries / corpus_entries, 2, grouped=False))
            return Text("{entries} entries, processed as one stream", entries=Figure(self.entries))
        if self.corpora == 1:
            return Text("{count} corpus like the campaign's", count=self.corpora)
        return Text("{count} independent corpora like the campaign's", count=self.corpora)


def question_of(view: CampaignView) -> Question:
    """Read the decision question from the campaign's protocol (absent in campaign files without [decision])."""
    stated = (view.protocol or {}).get("decision")
    unit = unit_of(getattr(view, "kinds", ()))  # a view without manifests names no kind: a corpus
    if not stated:
        return Question(False, 1, None, None, None, None, None, None, None, None, unit)

    def number(key):
        return None if stated.get(key) is None else Decimal(str(stated[key]))

    return Question(True, stated.get("corpora"), stated.get("entries"), number("window_hours"), stated.get("window_start"),
                    stated.get("window_end"), stated.get("time_zone"), stated.get("deadline"), number("deadline_hours"),
                    number("budget"), unit)
