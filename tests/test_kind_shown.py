"""Every page, decide, compare, the runs listing and the evidence bundle say the campaign's kind of work (#42, part 2).

Records written before kinds existed (the checked-in demo records) read as classify; a campaign whose manifests disagree
says so instead of picking one; a kind this version has no words for is shown by its code.
"""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest
from bs4 import BeautifulSoup

from iteralab.site.build import build_site
from iteralab.store import reading, records
from iteralab.store.questions import changes, question_differences
from iteralab.store.views import campaign_views
from tests import factory
from tests.test_cache import FIXTURE

DEMO = "demo-rotten-tomatoes"
CLASSIFY = "Kind of work: classify — label every text of a corpus with a fine-tuned classifier"
GENERATE = "Kind of work: generate — generate text for every prompt of a corpus with a causal language model"
KLASIFIKASI = ("Jenis pekerjaan: classify — memberi label pada setiap teks dari suatu korpus dengan pengklasifikasi hasil "
               "fine-tuning")


# What a generation manifest's protocol holds, as the runner writes it (the schema requires it of a generate manifest).
GENERATION = {"decoding": "greedy", "kv_cache": True, "max_new_tokens": 4, "padding_side": "left",
              "prompt_template": "{text} ->", "reference_metric": "normalised", "sampling": None,
              "stop": "the end-of-sequence token, or max_new_tokens"}


def _of_kind(kind: str | None, campaign: str, run_id: str, **options) -> dict:
    manifest = factory.manifest(campaign, run_id, **options)
    if kind is not None:
        manifest["workload"] = {"kind": kind}
    if kind == "generate":
        manifest["protocol"]["generation"] = dict(GENERATION)
    return manifest


def _campaign(folder, campaign: str, kinds: tuple, *, decision: dict | None = None) -> list[dict]:
    """Append a campaign with one run per kind in KINDS (None: a manifest without workload), two trials each."""
    manifests = []
    for number, kind in enumerate(kinds, start=1):
        manifest = _of_kind(kind, campaign, f"run-{campaign}-{number}", decision=decision)
        records.append(folder, manifest)
        for repetition in (1, 2):
            records.append(folder, factory.trial(manifest, "b1", seconds=1.0 + repetition / 10, repetition=repetition,
                                                 sequence=repetition))
        manifests.append(manifest)
    return manifests


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The demo's records of before kinds, a generate campaign asked again, one whose manifests disagree, one unknown."""
    folder = tmp_path_factory.mktemp("kinds") / "runs"
    shutil.copytree(FIXTURE, folder)
    _campaign(folder, "gen", ("generate",), decision={"corpora": 2, "window_hours": "96"})
    _campaign(folder, "gen-r2", ("generate",), decision={"corpora": 2, "window_hours": "96", "asks_again": "gen"})
    _campaign(folder, "mixed", (None, "generate"))
    _campaign(folder, "odd", ("summarise",))
    return folder


@pytest.fixture(scope="module")
def site(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("kinds-site") / "site"
    build_site(runs=runs, out=out, languages=("en", "id"), processes=1)
    return out


def _page(path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def _line(page: BeautifulSoup, anchor: str = "kind-of-work") -> str:
    return page.find(id=anchor).get_text(" ", strip=True)


def test_records_without_workload_read_as_classify_and_disagreeing_manifests_name_every_kind(runs):
    manifests = reading.load(runs / DEMO).of_kind("manifest")
    assert manifests and all("workload" not in manifest for manifest in manifests)  # written before kinds existed
    views = {view.name: view for view in campaign_views(reading.load(runs))}
    assert views[DEMO].kinds == ("classify",)
    assert views["gen"].kinds == ("generate",)
    assert views["mixed"].kinds == ("classify", "generate")  # said, never picked from
    assert views["odd"].kinds == ("summarise",)


@pytest.mark.parametrize("name", ["index.html", "decision.html", "trials.html", "qualification.html"])
def test_every_page_of_a_campaign_says_its_kind_of_work_in_both_languages(site, name):
    assert _line(_page(site / "campaigns" / DEMO / name)) == CLASSIFY
    assert _line(_page(site / "campaigns" / "gen" / name)) == GENERATE
    assert _line(_page(site / "id" / "campaigns" / DEMO / name)) == KLASIFIKASI


def test_a_disagreement_is_said_and_an_unknown_kind_is_shown_by_its_code(site):
    mixed = _line(_page(site / "campaigns" / "mixed" / "decision.html"))
    assert mixed.startswith("Kind of work: the manifests disagree (classify — label every text")
    assert "; generate — generate text for every prompt" in mixed and "a campaign has one kind of work" in mixed
    assert _line(_page(site / "campaigns" / "odd" / "index.html")) == "Kind of work: summarise"


def test_the_index_has_a_kind_column_and_the_question_page_names_each_revisions_kind(site):
    for folder, heading, described in (("", "Kind of work", "generate — generate text for every prompt"),
                                       ("id", "Jenis pekerjaan", "generate — menghasilkan teks untuk setiap prompt")):
        index = _page(site / folder / "index.html" if folder else site / "index.html")
        columns = [th.get_text() for th in index.select("table thead th")]
        assert columns[1] == heading
        rows = {row.th.small.get_text(): row.find_all("td")[0].get_text() for row in index.select("table tbody tr")}
        assert rows["gen"].startswith(described) and rows["odd"] == "summarise"
        assert rows[DEMO].startswith("classify — ")
    question = _page(site / "questions" / "gen.html")
    assert _line(question, "kind-of-work-gen") == _line(question, "kind-of-work-gen-r2") == GENERATE


def test_the_evidence_bundle_names_the_kind_in_bag_info_decision_json_and_its_page(site):
    with zipfile.ZipFile(site / "campaigns" / "gen" / "evidence-gen.zip") as archive:
        info = archive.read("gen-evidence/bag-info.txt").decode("utf-8")
        decision = json.loads(archive.read("gen-evidence/data/decision.json"))
        page = BeautifulSoup(archive.read("gen-evidence/data/index.html"), "html.parser")
        text = archive.read("gen-evidence/data/decision.txt").decode("utf-8")
    assert "Kind-Of-Work: generate\n" in info
    assert decision["kinds"] == ["generate"] and decision["kind_of_work"].startswith("generate — generate text")
    assert _line(page) == GENERATE and GENERATE in text
    with zipfile.ZipFile(site / "campaigns" / "mixed" / "evidence-mixed.zip") as archive:
        assert "Kind-Of-Work: classify\nKind-Of-Work: generate\n" in archive.read("mixed-evidence/bag-info.txt").decode()


def test_decide_names_the_kind_in_text_and_json(runs, cli):
    code, out, err = cli("decide", DEMO, "--runs", runs)
    assert code == 0, err
    assert CLASSIFY in out.splitlines()
    code, out, err = cli("decide", "gen", "--runs", runs, "--json")
    assert code == 0, err
    assert json.loads(out)["kinds"] == ["generate"]
    code, out, _ = cli("decide", DEMO, "--runs", runs, "--lang", "id")
    assert KLASIFIKASI in out.splitlines()


def test_compare_says_a_generate_and_a_classify_campaign_are_not_comparable_answers(runs, cli):
    code, out, err = cli("compare", DEMO, "gen", "--runs", runs)
    assert code == 0, err
    lines = out.splitlines()
    assert f"{DEMO}: {CLASSIFY}" in lines and f"gen: {GENERATE}" in lines
    assert (f"Not comparable answers: {DEMO} does classify and gen does generate. Different kinds of work answer "
            "different questions") in out
    assert "kind of work: classify → generate" in out  # the question differs, and says how
    assert lines[-1] == "The answers are not compared: the two campaigns do different kinds of work."
    found = json.loads(cli("compare", DEMO, "gen", "--runs", runs, "--json")[1])
    assert found["comparable"] is False and found["answer_changed"] is None
    assert found["kinds"] == {"earlier": ["classify"], "later": ["generate"]}
    same = json.loads(cli("compare", "gen", "gen-r2", "--runs", runs, "--json")[1])
    assert same["comparable"] is True and same["not_comparable"] is None and same["question_differences"] == []


def test_a_manifest_without_workload_asks_the_same_question_as_a_classify_one():
    """Records of before kinds stay revisions of today's classify campaigns; the kind is the question, never a change."""
    old, new = factory.manifest(), _of_kind("classify", "camp", "run-2")
    assert question_differences(old, new) == [] and changes(old, new) == []
    generate = _of_kind("generate", "camp", "run-3")
    assert question_differences(old, generate) == ["kind of work: classify → generate"]


def test_the_runs_listing_names_each_runs_kind(runs, cli):
    code, out, err = cli("runs", "mixed", "--runs", runs)
    assert code == 0, err
    assert [line.split("; ")[1] for line in out.splitlines()] == ["kind of work classify", "kind of work generate"]
