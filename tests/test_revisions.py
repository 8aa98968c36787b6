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
