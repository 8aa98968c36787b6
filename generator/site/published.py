"""The pages of questions asked again and the site's Atom feed (#35): what a reviewer reads, or subscribes to, to see
whether a decision still holds."""

from __future__ import annotations

import datetime as dt
import html
import re
import uuid

from iteralab.core import language
from iteralab.core.language import Text
from iteralab.pages.figures import chart
from iteralab.pages.questions import chart_rows, of_models
from iteralab.pages.render import jinja_environment, visible_controls
from iteralab.site.output import Writer
from iteralab.store.questions import shown_value

FEED = "feed.xml"
AUTHOR = "IteraGPU Lab"  # the publisher, as every page's footer names it


def write_questions(writer: Writer, asked: list[dict], answers: dict, common: dict) -> None:
    """Write one page per question asked again: its revisions in time order, what changed, and two charts."""
    env = jinja_environment()
    for page in asked:
        medians, spend = chart_rows(page)
        charts = []
        if medians and of_models(page):
            charts.append(chart("revision-model-times", Text("Median time to the validated model per revision"),
                                Text("Each line is one configuration; each point its median time to the validated model in "
                                     "one revision, the revisions in the order they were run."), medians))
        elif medians:
            charts.append(chart("revision-medians", Text("Median measured window per revision"),
                                Text("Each line is one configuration; each point its median measured window in one revision, "
                                     "the revisions in the order they were run."), medians))
        if spend:
            charts.append(chart("revision-spend", Text("Planned package spend per revision"),
                                Text("Each line is one configuration; each point the planned package spend of one revision, "
                                     "by the catalog of the build. Configurations on hardware the catalog does not price "
                                     "have no point."), spend))
        name = f"questions/{page['question']}.html"
        writer.write(name, env.get_template("question.html").render(root="../", page=name, question=page, answers=answers,
                                                                    charts=charts, shown_value=shown_value, **common))
    written = {f"{page['question']}.html" for page in asked}
    folder = writer.out / "questions"
    for stale in sorted(folder.glob("*.html")) if folder.is_dir() else []:
        if stale.name not in written:  # a question no campaign asks any more: its page would be left stale
            stale.unlink()


def _xml(text) -> str:
    """Return TEXT as XML 1.0 can carry it: a control character or a lone surrogate from a record becomes U+FFFD, and a
    bidirectional control is shown as its code point (as on the pages), so a feed reader shows the text as recorded."""
    return visible_controls(re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]", "\ufffd", str(text)))


def _html(text) -> str:
    """Return TEXT for an entry's summary, which feedgenerator declares type="html": escaped as HTML here, then as XML by
    feedgenerator, so that a reader that unescapes the XML finds text, never markup (#60: a CPU model string holding
    '"><img src=x onerror=alert(1)>' reached feedparser as an <img>)."""
    return html.escape(_xml(text), quote=False)


def _moment(text: str | None) -> dt.datetime:
    found = dt.datetime.fromisoformat((text or "1980-01-01T00:00:00Z").replace("Z", "+00:00"))
    return found if found.tzinfo else found.replace(tzinfo=dt.UTC)


def _entry_id(*parts: str) -> str:
    # A URN that names the entry whatever host serves the site: the same records give the same ids.
    return uuid.uuid5(uuid.NAMESPACE_URL, "iteralab:" + ":".join(parts)).urn


def self_link(base: str) -> str | None:
    """Return the feed's own address when BASE is a full one (scheme and host), else None: no self link.

    A self link is how a reader finds the feed again once the address it was fetched from is forgotten, so it must be
    absolute, or resolvable against an absolute xml:base (RFC 4287 4.2.7.2; the W3C feed validator warns of a relative
    one). A site built without --base-url, or with a path only, does not know its host: it promises no address. Its
    other links stay relative and resolve against the feed's own location (RFC 3986 5.1.3), as a page's do.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    return f"{base}{FEED}" if parts.scheme in ("http", "https") and parts.netloc else None


def feed_bytes(summaries: dict, answers: dict, asked: list[dict], failed: dict, base: str) -> bytes:
    """Return the Atom feed: an entry per campaign's decision and per changed answer, in the current language.

    BASE: the address the site is published at ('' keeps every link relative to the feed). Dated by the records, so
    the same records give the same bytes.
    """
    import feedgenerator

    class Feed(feedgenerator.Atom1Feed):
        def latest_post_date(self):
            # feedgenerator dates a feed without entries now: dated by the records instead, it stays reproducible.
            return max((item["updateddate"] for item in self.items), default=_moment(None))

    code = language.current()
    # RFC 4287 4.1.1: a feed whose entries name no author names one itself: the site's publisher.
    feed = Feed(title=Text("IteraGPU Lab: decisions and changed answers").say(code), link=f"{base}index.html",
                description=Text("Each campaign's decision, and each question whose answer changed when it was asked "
                                 "again.").say(code),
                language=code, feed_url=self_link(base), feed_guid=_entry_id(code, "feed"), author_name=AUTHOR)
    for name, summary in sorted(summaries.items()):
        if name in failed or not summary.get("last_at"):
            continue
        feed.add_item(title=_xml(Text("Decision: {title} ({name})", title=summary["title"], name=name).say(code)),
                      link=f"{base}campaigns/{name}/decision.html", description=_html(answers.get(name, "")),
                      unique_id=_entry_id(code, "decision", name, summary["last_at"]), pubdate=_moment(summary["last_at"]),
                      updateddate=_moment(summary["last_at"]))
    for page in asked:
        for revision in page["revisions"]:
            if revision["answer_changed"]:
                at = revision["summary"].get("last_at")
                feed.add_item(title=_xml(Text("The answer changed: {title} ({name})", title=page["title"],
                                              name=revision["name"]).say(code)),
                              link=f"{base}questions/{page['question']}.html#revision-{revision['name']}",
                              description=_html(Text("{name} asks the question of {before} again; its answer: {answer}",
                                                    name=revision["name"], before=revision["before"],
                                                    answer=str(answers.get(revision["name"], ""))).say(code)),
                              unique_id=_entry_id(code, "changed", revision["name"], at or ""), pubdate=_moment(at),
                              updateddate=_moment(at))
    return feed.writeString("utf-8").encode("utf-8")
