"""The same question asked again (#35): a revision may change the model or the software, never the question."""

from __future__ import annotations

import json

import pytest

from iteralab.store import questions

DECISION = '\n[decision]\ncorpora = 2\nwindow_hours = 96\n{again}'


def _variants(attention: str) -> str:
    return "".join(f'\n[[variants]]\nname = "b{size}"\nseries = "batch"\nbatch_size = {size}\nattention = "{attention}"\n'
                   for size in (1, 4))


def _revision(tiny_campaign, name: str, attention: str, *, again: str | None = None, **changes):
    line = f'asks_again = "{again}"\n' if again else ""
    return tiny_campaign(name=name, repetitions=2, batch_sizes=(), extra_variants=_variants(attention) + DECISION.format(again=line),
                         **changes)


@pytest.fixture(scope="module")
def two_revisions(tmp_path_factory, tiny_model):
    """Two real tiny-model revisions of one question: the second asks the first again with eager attention."""
    from iteralab.cli import main
    from tests.tiny import corpus_rows, write_campaign, write_corpus

    root = tmp_path_factory.mktemp("revisions")
    corpus = write_corpus(root / "corpus.jsonl", corpus_rows())

    def campaign(**options):
        return write_campaign(root, tiny_model, corpus, **options)

    runs = root / "runs"
    assert main(["run", str(_revision(campaign, "tiny", "sdpa")), "--runs", str(runs), "--quiet"]) == 0
    assert main(["run", str(_revision(campaign, "tiny-r2", "eager", again="tiny")), "--runs", str(runs), "--quiet"]) == 0
    return root, runs, campaign, tiny_model


@pytest.mark.slow
def test_compare_names_exactly_the_changed_setting_and_says_whether_the_answer_changed(two_revisions, cli):
    runs = two_revisions[1]
    code, out, err = cli("compare", "tiny", "tiny-r2", "--runs", runs, "--json")
    assert code == 0, err
    found = json.loads(out)
    assert found["linked"] and found["question_differences"] == []
    assert {(change["key"], change["earlier"], change["later"]) for change in found["changes"]} == {
        ("variants.b1.attention", "sdpa", "eager"), ("variants.b4.attention", "sdpa", "eager")}
    assert [pair["configuration"].split(" · ")[0] for pair in found["configurations"]] == ["b1", "b4"]
    for pair in found["configurations"]:
        for side in ("earlier", "later"):
            assert pair[side]["median"] > 0 and pair[side]["ok"] == 2
        assert pair["separation"].startswith(("b1 (tiny) and b1 (tiny-r2)", "b4 (tiny) and b4 (tiny-r2)",
                                              "b1 (tiny", "b4 (tiny"))
    assert found["only_earlier"] == [] and found["only_later"] == []
    assert isinstance(found["answer_changed"], bool)
    assert found["answer"].startswith("The answer is unchanged" if not found["answer_changed"] else "The answer changed")
    code, text, _ = cli("compare", "tiny", "tiny-r2", "--runs", runs)
    assert code == 0 and "tiny-r2 asks the question of tiny again" in text and "variants.b1.attention: sdpa → eager" in text
    assert "The question is the same" in text and "measured window: median" in text
    code, said, _ = cli("compare", "tiny", "tiny-r2", "--runs", runs, "--lang", "id")
    assert code == 0 and "The question is the same" not in said and "variants.b1.attention: sdpa → eager" in said


@pytest.mark.slow
@pytest.mark.parametrize(("changes", "named"), [
    ({"accuracy": 0.5}, "thresholds.accuracy: 0.0 → 0.5"),
    ({"min_agreement": 0.5}, "min_agreement: 0.9 → 0.5"),
])
def test_asking_again_with_another_question_is_refused_naming_the_difference(two_revisions, cli, changes, named):
    _, runs, campaign, _ = two_revisions
    before = sorted((path, path.read_bytes()) for path in runs.rglob("*.jsonl"))
    code, _, err = cli("run", _revision(campaign, "tiny-r3", "eager", again="tiny", **changes), "--runs", runs, "--quiet")
    assert code == 1 and named in err and "a changed question" in err and "nothing was run" in err, err
    assert sorted((path, path.read_bytes()) for path in runs.rglob("*.jsonl")) == before


@pytest.mark.slow
def test_another_corpus_is_a_new_question_and_an_unknown_earlier_campaign_is_named(two_revisions, cli, tmp_path):
    from tests.tiny import corpus_rows, write_campaign, write_corpus

    _, runs, _, model = two_revisions
    other = write_corpus(tmp_path / "other.jsonl", corpus_rows()[:-1])  # one text fewer: another corpus fingerprint
    for name, again, said in (("tiny-other", "tiny", "corpus fingerprint: sha256:"),
                              ("tiny-lost", "no-such", "asks_again = 'no-such', but campaign no-such has no records")):
        path = write_campaign(tmp_path, model, other, name=name, repetitions=2, batch_sizes=(),
                              extra_variants=_variants("eager") + DECISION.format(again=f'asks_again = "{again}"\n'))
        code, _, err = cli("run", path, "--runs", runs, "--quiet")
        assert code == 1 and said in err, err


def test_the_question_is_the_workload_window_thresholds_tolerance_corpus_and_split():
    manifest = {"protocol": {"decision": {"corpora": 20, "window_hours": "96", "asks_again": "a"}, "thresholds": {"accuracy": 0.7},
                             "min_agreement": 0.98, "repetitions": 5},
                "corpus": {"fingerprint": "sha256:1", "split": "final"}}
    again = json.loads(json.dumps(manifest))
    again["protocol"]["repetitions"], again["protocol"]["decision"]["asks_again"] = 3, "b"
    assert questions.question_differences(manifest, again) == []  # repetitions and the link are not the question
    again["corpus"]["split"], again["protocol"]["decision"]["corpora"] = "tuning", 21
    assert questions.question_differences(manifest, again) == ["corpus split: final → tuning", "decision.corpora: 20 → 21"]
    assert questions.changes(manifest, again) == [{"key": "protocol.repetitions", "earlier": 5, "later": 3}]


def _page(path):
    from bs4 import BeautifulSoup

    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


@pytest.fixture(scope="module")
def revised_site(two_revisions, tmp_path_factory):
    from iteralab.site.build import build_site

    out = tmp_path_factory.mktemp("revised") / "site"
    build_site(runs=two_revisions[1], out=out, languages=("en", "id"))
    return out


@pytest.mark.slow
def test_the_question_page_lists_its_revisions_what_changed_and_charts_them(revised_site):
    from tests import vega

    for folder, changed in (("", "What changed since tiny"), ("id", "Yang berubah sejak tiny")):
        page = _page(revised_site / folder / "questions" / "tiny.html")
        assert [li["id"] for li in page.select("ol.revisions > li")] == ["revision-tiny", "revision-tiny-r2"]
        table = page.select_one("#revision-tiny-r2 table.changes")
        assert table.caption.get_text() == changed
        assert [[cell.get_text() for cell in row.select("th, td")] for row in table.tbody.select("tr")] == [
            ["variants.b1.attention", "sdpa", "eager"], ["variants.b4.attention", "sdpa", "eager"]]
        spec = vega.spec_of(page, "revision-medians")
        rows = spec["datasets"][spec["data"]["name"]]
        assert [(row["revision"], row["configuration"]) for row in rows] == [
            ("tiny", "b1"), ("tiny", "b4"), ("tiny-r2", "b1"), ("tiny-r2", "b4")]  # the machine is the chart's title
        assert vega.marks(vega.drawn(spec)) >= 2
        index = _page(revised_site / folder / "index.html")
        assert [a["href"] for a in index.select("#questions a")] == [
            "questions/tiny.html", "campaigns/tiny/decision.html", "campaigns/tiny-r2/decision.html"]


@pytest.mark.slow
def test_each_revision_links_the_one_before_and_after_and_its_bundle_names_the_earlier_manifest(revised_site, two_revisions):
    import hashlib
    import zipfile

    earlier = _page(revised_site / "campaigns" / "tiny" / "decision.html")
    assert [a["href"] for a in earlier.select("nav.revisions a")] == ["../../campaigns/tiny-r2/decision.html",
                                                                      "../../questions/tiny.html"]
    later = _page(revised_site / "campaigns" / "tiny-r2" / "index.html")
    assert [a["href"] for a in later.select("nav.revisions a")] == ["../../campaigns/tiny/decision.html",
                                                                    "../../questions/tiny.html"]
    with zipfile.ZipFile(revised_site / "campaigns" / "tiny-r2" / "evidence-tiny-r2.zip") as archive:
        question = json.loads(archive.read("tiny-r2-evidence/data/question.json"))
    with zipfile.ZipFile(revised_site / "campaigns" / "tiny" / "evidence-tiny.zip") as archive:
        manifest = archive.read(f"tiny-evidence/data/manifests/{question['asked_manifest']['record_id']}.json")
        assert not any(name.endswith("question.json") for name in archive.namelist())  # the first revision asks nothing again
    assert question["asks_again"] == "tiny" and question["question"] == "tiny"
    assert question["asked_manifest"]["sha256"] == hashlib.sha256(manifest).hexdigest()


@pytest.mark.slow
def test_the_feed_is_atom_in_each_language_the_same_bytes_again_with_a_changed_answer_when_there_is_one(revised_site, two_revisions,
                                                                                                        tmp_path):
    import feedparser

    from iteralab.site.build import build_site

    for folder, decision in (("", "Decision: "), ("id", "Keputusan: ")):
        data = (revised_site / folder / "feed.xml").read_bytes()
        parsed = feedparser.parse(data)
        assert not parsed.bozo and parsed.version == "atom10", parsed.get("bozo_exception")
        titles = [entry.title for entry in parsed.entries]
        assert [title for title in titles if title.startswith(decision)] == [
            f"{decision}Tiny test campaign (tiny)", f"{decision}Tiny test campaign (tiny-r2)"]
        page = _page(revised_site / folder / "questions" / "tiny.html")
        changed = any(line.get_text().startswith(("The answer changed", "Jawaban berubah"))  # as the page says
                      for line in page.select("#revision-tiny-r2 p"))
        assert len(titles) == 2 + changed
        assert parsed.feed.language == (folder or "en")
    build_site(runs=two_revisions[1], out=tmp_path / "again", languages=("en", "id"))
    assert (tmp_path / "again" / "feed.xml").read_bytes() == (revised_site / "feed.xml").read_bytes()
    assert (tmp_path / "again" / "id" / "feed.xml").read_bytes() == (revised_site / "id" / "feed.xml").read_bytes()


@pytest.mark.slow
def test_a_new_revision_renders_the_earlier_campaign_again_with_its_link(two_revisions, tmp_path):
    import shutil

    from iteralab.site.build import build_site

    runs = tmp_path / "runs"
    shutil.copytree(two_revisions[1] / "tiny", runs / "tiny")
    out = tmp_path / "site"
    build_site(runs=runs, out=out)
    assert not _page(out / "campaigns" / "tiny" / "index.html").select("nav.revisions")
    assert not (out / "questions").exists() or not list((out / "questions").iterdir())
    shutil.copytree(two_revisions[1] / "tiny-r2", runs / "tiny-r2")
    assert build_site(runs=runs, out=out)["rendered"] == ["tiny", "tiny-r2"]
    assert _page(out / "campaigns" / "tiny" / "index.html").select_one("nav.revisions a")["href"].endswith("tiny-r2/decision.html")
    shutil.rmtree(runs / "tiny-r2")
    build_site(runs=runs, out=out)
    assert not list((out / "questions").glob("*.html"))  # no question left: its page is gone too


@pytest.mark.slow
def test_the_question_page_and_the_revisions_links_open_offline_and_accessible_in_both_languages(revised_site, reader):
    from tests.test_browser import axe_violations, charts_drawn, interface_words

    for folder in ("", "id"):
        for relative in ("questions/tiny.html", "campaigns/tiny-r2/decision.html", "campaigns/tiny/index.html", "index.html"):
            page = reader.open((revised_site / folder / relative).as_uri())
            assert all(marks > 0 for marks in charts_drawn(page).values()), relative
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280, relative
            errors, outside = reader.errors, reader.outside
            assert errors == [] and outside == [], (relative, errors, outside)
            assert axe_violations(page) == [], (folder, relative)
            if folder:  # the Indonesian pages: no English interface word, the campaign's own title aside
                assert interface_words((revised_site / folder / relative).read_text(encoding="utf-8"),
                                       ("Tiny test campaign",)) == [], relative


@pytest.mark.slow
def test_the_command_line_bundle_of_a_revision_is_the_sites(two_revisions, revised_site, cli, tmp_path):
    code, _, err = cli("bundle", "tiny-r2", "--runs", two_revisions[1], "-o", tmp_path / "evidence.zip")
    assert code == 0, err
    assert (tmp_path / "evidence.zip").read_bytes() == (revised_site / "campaigns" / "tiny-r2" / "evidence-tiny-r2.zip").read_bytes()
