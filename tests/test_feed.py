"""The Atom feeds against RFC 4287 itself (#48): read by a validator no one here wrote, each feed was invalid (no author)
and its self link relative. These checks are the RFC's, not feedparser's, which reads an invalid feed all the same."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from iteralab.core import language
from iteralab.site import published
from iteralab.site.build import build_site
from tests import hostile

ATOM = "{http://www.w3.org/2005/Atom}"
XML_BASE = "{http://www.w3.org/XML/1998/namespace}base"
PUBLISHED_AT = "https://example.org/team/site/"


def _absolute(reference: str) -> bool:
    return bool(urlsplit(reference).scheme)


def _date_problems(element, where: str) -> list[str]:
    text = element.text or ""
    try:  # RFC 4287 3.3: an RFC 3339 date-time, its zone given
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return [f"{where}: {text!r} is not an RFC 3339 date"]
    return [] if "T" in text and moment.tzinfo else [f"{where}: {text!r} lacks its time or zone"]


def _one(parent, name: str, where: str, problems: list[str]):
    found = parent.findall(ATOM + name)
    if len(found) != 1:
        problems.append(f"{where}: {len(found)} atom:{name}, one required")
    return found[0] if found else None


def _named(author) -> bool:
    name = author.find(ATOM + "name")
    return name is not None and bool((name.text or "").strip())


def rfc4287_problems(data: bytes, location: str) -> list[str]:
    """Return what breaks RFC 4287 in the feed DATA fetched from LOCATION (an absolute URL), and every self link that is
    not absolute once xml:base is applied (4.2.7.2: the address a reader finds the feed at again)."""
    root = ET.fromstring(data)
    if root.tag != ATOM + "feed":
        return [f"the root element is {root.tag}, not atom:feed"]
    problems: list[str] = []
    for name in ("id", "title", "updated"):  # 4.1.1
        _one(root, name, "feed", problems)
    entries = root.findall(ATOM + "entry")
    # 4.1.1: a feed MUST contain one or more atom:author elements, unless all of its entries contain one.
    if not any(_named(author) for author in root.findall(ATOM + "author")):
        bare = [index for index, entry in enumerate(entries) if not any(_named(a) for a in entry.findall(ATOM + "author"))]
        if bare or not entries:
            problems.append(f"no atom:author with a name on the feed, nor on entries {bare}")
    ids = []
    for index, entry in enumerate(entries):  # 4.1.2
        where = f"entry {index}"
        for name in ("id", "title", "updated"):
            _one(entry, name, where, problems)
        if entry.find(ATOM + "content") is None and not [link for link in entry.findall(ATOM + "link")
                                                          if link.get("rel", "alternate") == "alternate"]:
            problems.append(f"{where}: neither atom:content nor an alternate link")
        ids += [element.text or "" for element in entry.findall(ATOM + "id")]
        problems += [problem for element in entry.findall(ATOM + "updated") for problem in _date_problems(element, where)]
    problems += [problem for element in root.findall(ATOM + "updated") for problem in _date_problems(element, "feed")]
    feed_ids = [element.text or "" for element in root.findall(ATOM + "id")]
    # 4.2.6: an id is a permanent, universally unique, absolute IRI; two entries with one id are the same entry.
    problems += [f"id {value!r} is not an absolute IRI" for value in feed_ids + ids if not _absolute(value)]
    problems += [f"id {value!r} is shared by {ids.count(value)} entries" for value in sorted(set(ids)) if ids.count(value) > 1]
    for element, link in _links(root, location):
        if link.get("href") is None:  # 4.2.7.1
            problems.append(f"a link in {element} has no href")
        elif link.get("rel") == "self" and not _absolute(_resolved(link, location, with_location=False)):
            problems.append(f"self link {link.get('href')!r} is not absolute, nor made so by an absolute xml:base")
    return problems


def _links(root, location: str):
    for parent in [root, *root.findall(ATOM + "entry")]:
        for link in parent.findall(ATOM + "link"):
            yield parent.tag.removeprefix(ATOM), link


def _resolved(link, location: str, *, with_location: bool = True) -> str:
    """Resolve LINK's href against the xml:base in scope (the root's, in this feed) and, WITH_LOCATION, the document's."""
    base = link.get(XML_BASE) or ""
    href = urljoin(base, link.get("href")) if base else link.get("href")
    return urljoin(location, href) if with_location else href


def _in_site(url: str, published_at: str, site: Path) -> Path:
    """Return the file of SITE that URL, under PUBLISHED_AT, names."""
    assert url.startswith(published_at), url
    return site / urlsplit(url).path.removeprefix(urlsplit(published_at).path)


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """The demo's records built twice, English and Indonesian: without --base-url, and published at PUBLISHED_AT."""
    root = tmp_path_factory.mktemp("feeds")
    for folder, base_url in (("plain", None), ("published", PUBLISHED_AT)):
        assert build_site(runs=hostile.FIXTURE, out=root / folder, languages=("en", "id"), base_url=base_url)["failed"] == {}
    return root


@pytest.mark.parametrize("folder", ["", "id"])
def test_a_feed_built_without_a_base_url_meets_rfc_4287_and_its_links_resolve_in_the_site(sites, folder):
    """Regression for #48: no author anywhere (4.1.1) and a relative self link. A site that does not know its address
    gives no self link (a relative one is found nowhere once the feed is handed on); its other links resolve against
    wherever the feed is served from, to pages of the site."""
    site = sites / "plain"
    # Served from any host and path: the links resolve below it.
    location = f"https://somewhere.example/any/path/{folder + '/' if folder else ''}{published.FEED}"
    data = (site / folder / published.FEED).read_bytes()
    assert rfc4287_problems(data, location) == []
    root = ET.fromstring(data)
    assert [link for _, link in _links(root, location) if link.get("rel") == "self"] == []
    assert [author.find(ATOM + "name").text for author in root.findall(ATOM + "author")] == ["IteraGPU Lab"]
    entries = root.findall(ATOM + "entry")
    assert entries
    for _, link in _links(root, location):
        target = _in_site(_resolved(link, location).split("#")[0], "https://somewhere.example/any/path/", site)
        assert target.is_file(), link.get("href")


@pytest.mark.parametrize("folder", ["", "id"])
def test_a_feed_published_at_a_full_address_names_itself_there(sites, folder):
    site = sites / "published"
    address = f"{PUBLISHED_AT}{folder + '/' if folder else ''}"
    data = (site / folder / published.FEED).read_bytes()
    assert rfc4287_problems(data, address + published.FEED) == []
    root = ET.fromstring(data)
    assert [link.get("href") for _, link in _links(root, "") if link.get("rel") == "self"] == [address + published.FEED]
    for _, link in _links(root, ""):  # every link absolute, each to a page of its own language's folder
        assert link.get("href").startswith(address)
        assert _in_site(link.get("href").split("#")[0], PUBLISHED_AT, site).is_file(), link.get("href")


def test_a_path_without_a_host_gives_no_self_link_and_links_from_that_path(tmp_path):
    """--base-url /team/site/ tells the path, not the host: the feed's links start at the path, and no self link is made
    up (the W3C validator warns of a relative one)."""
    with language.speaking("en"):
        data = published.feed_bytes(_summaries(), _answers(), [], {}, "/team/site/")
    root = ET.fromstring(data)
    assert rfc4287_problems(data, "https://example.org/team/site/feed.xml") == []
    assert [link.get("href") for _, link in _links(root, "")] == ["/team/site/index.html",
                                                                  "/team/site/campaigns/a/decision.html",
                                                                  "/team/site/campaigns/b/decision.html"]


def _summaries() -> dict:
    return {"a": {"title": "First", "last_at": "2026-10-01T09:00:00Z"},
            "b": {"title": "Asked again", "last_at": "2026-10-03T09:00:00Z"}}


def _answers() -> dict:
    return {"a": "Rent one RTX 4090", "b": "Rent one RTX 6000 Ada"}


@pytest.mark.parametrize("code", ["en", "id"])
def test_every_entry_has_its_own_id_a_decision_and_a_changed_answer_of_one_revision_included(code):
    """A revision that changes the answer gives two entries, its decision and the changed answer, updated by the same
    records at the same instant (which RFC 4287 allows, and the W3C validator's note on equal atom:updated values says
    needs no action): their ids differ, and differ from the other language's."""
    asked = [{"question": "a", "title": "First", "revisions": [
        {"name": "a", "before": None, "answer_changed": False, "summary": _summaries()["a"]},
        {"name": "b", "before": "a", "answer_changed": True, "summary": _summaries()["b"]}]}]
    feeds = {}
    for said in ("en", "id"):
        with language.speaking(said):
            feeds[said] = published.feed_bytes(_summaries(), _answers(), asked, {}, PUBLISHED_AT)
    data = feeds[code]
    assert rfc4287_problems(data, PUBLISHED_AT + published.FEED) == []
    entries = ET.fromstring(data).findall(ATOM + "entry")
    assert len(entries) == 3
    others = {entry.find(ATOM + "id").text for entry in ET.fromstring(feeds["id" if code == "en" else "en"]).findall(ATOM + "entry")}
    assert not others & {entry.find(ATOM + "id").text for entry in entries}


def test_the_checks_find_what_the_validator_found():
    """The checks above are not vacuous: the feed as it was (no author, a relative self link) and shared ids fail them."""
    with language.speaking("en"):
        data = published.feed_bytes(_summaries(), _answers(), [], {}, PUBLISHED_AT).decode("utf-8")
    old = data.replace("<author><name>IteraGPU Lab</name></author>", "").replace(
        f'href="{PUBLISHED_AT}{published.FEED}" rel="self"', f'href="{published.FEED}" rel="self"')
    ids = [part.split("</id>")[0] for part in data.split("<entry>")[1:] for part in [part.split("<id>")[1]]]
    shared = data.replace(ids[1], ids[0])
    assert rfc4287_problems(old.encode(), PUBLISHED_AT + published.FEED) == [
        "no atom:author with a name on the feed, nor on entries [0, 1]",
        "self link 'feed.xml' is not absolute, nor made so by an absolute xml:base"]
    assert rfc4287_problems(shared.encode(), PUBLISHED_AT + published.FEED) == [f"id {ids[0]!r} is shared by 2 entries"]
