"""A team's own corpus as it is (#45): integer gold labels read through the model's id2label, CSV columns by name."""

from __future__ import annotations

import csv

import pytest

from iteralab.core.errors import UserError
from iteralab.declared.corpus import load_corpus
from iteralab.run.campaign import load_campaign
from iteralab.run.runner import run_campaign
from iteralab.run.starter import dry_run, to_fill_in, write_starter
from iteralab.workloads.classify import gold_labels
from tests.tiny import corpus_rows, write_campaign, write_corpus, write_generation_campaign

NAMES = ["neg", "pos"]  # the tiny model's id2label: 0 → neg, 1 → pos


def _rows(count: int = 9) -> list[dict]:
    # Two thirds pos: an accuracy read against swapped names would differ from the true one (k/9 is never 1/2).
    return [{**row, "label": "neg" if index % 3 == 0 else "pos"} for index, row in enumerate(corpus_rows(count, seed=4))]


def _one_trial(folder, model, corpus, **corpus_keys):
    """Write a campaign of one variant and one repetition; CORPUS_KEYS go into its [corpus] table."""
    path = write_campaign(folder, model, corpus, repetitions=1, batch_sizes=(1,), min_agreement=0.0)
    named = "".join(f'{key} = "{value}"\n' for key, value in corpus_keys.items())
    path.write_text(path.read_text(encoding="utf-8").replace('split = "final"\n', f'split = "final"\n{named}', 1),
                    encoding="utf-8")
    return path


def _accuracy_against(record, runs, gold: dict[str, str]) -> float:
    with open(runs / record["predictions"]["path"], encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return sum(row["label"] == gold[row["id"]] for row in rows) / len(rows)


def test_integer_gold_labels_are_read_as_the_models_label_names_in_a_real_run(tmp_path, tiny_model):
    rows = _rows()
    numbered = [{**row, "label": NAMES.index(row["label"])} for row in rows]  # JSON numbers: 0 and 1
    corpus = write_corpus(tmp_path / "tickets.jsonl", numbered)
    result = run_campaign(campaign_file=_one_trial(tmp_path, tiny_model, corpus), runs_dir=tmp_path / "runs", quiet=True,
                          stages=False)
    [trial] = result.trials
    assert trial["status"] == "ok"
    overall = trial["quality"]["overall"]
    # Scored against the names the ids stand for, so the accuracy verdict is read as it would be with names written.
    assert overall["accuracy"] == pytest.approx(_accuracy_against(trial, tmp_path / "runs", {r["id"]: r["label"] for r in rows}))
    [accuracy] = [verdict for verdict in trial["quality"]["verdicts"] if verdict["metric"] == "accuracy"]
    assert accuracy["passed"] and accuracy["value"] == overall["accuracy"]  # threshold 0: scored, not "no gold labels"
    # A CSV's digits are ids too; the corpus's fingerprint is the one it always had (the labels as written).
    table = tmp_path / "tickets.csv"
    table.write_text("id,text,label\n" + "".join(f"{r['id']},{r['text']},{r['label']}\n" for r in numbered), encoding="utf-8")
    assert set(gold_labels(load_corpus(table), NAMES, table).values()) == {"neg", "pos"}
    assert load_corpus(table).fingerprint == load_corpus(corpus).fingerprint


def test_names_win_when_every_integer_label_is_also_a_label_name_and_fingerprints_hold(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", [{"id": "a", "text": "good", "label": 0}, {"id": "b", "text": "bad", "label": 1}])
    # A model whose labels are named "1" and "0" (id 0 is called "1"): the names are read, as before integer labels.
    assert gold_labels(load_corpus(corpus), ["1", "0"], corpus) == {"a": "0", "b": "1"}
    assert gold_labels(load_corpus(corpus), NAMES, corpus) == {"a": "neg", "b": "pos"}
    # The fingerprint iteralab gave these two corpora before integer labels were read (labels hashed as written).
    old = "sha256:619772298bfacfdfa2459ce62a85d077639504a736ffc4069338d4772866d8ec"
    named = write_corpus(tmp_path / "n.jsonl", [{"id": "a", "text": "good movie", "label": "pos"},
                                                {"id": "b", "text": "dull plot", "label": 0}])
    assert load_corpus(named).fingerprint == old
    (tmp_path / "n.csv").write_text("id,text,label\na,good movie,pos\nb,dull plot,0\n", encoding="utf-8")
    assert load_corpus(tmp_path / "n.csv").fingerprint == old


def test_an_integer_label_that_is_no_class_id_is_refused_before_timing_naming_the_mapping(tmp_path, tiny_model):
    rows = [{**row, "label": index % 3} for index, row in enumerate(corpus_rows(6, seed=2))]  # 2 is no class id
    corpus = write_corpus(tmp_path / "tickets.jsonl", rows)
    with pytest.raises(UserError) as refused:
        run_campaign(campaign_file=_one_trial(tmp_path, tiny_model, corpus), runs_dir=tmp_path / "runs", quiet=True,
                     stages=False)
    said = str(refused.value)
    assert said.startswith(f"{corpus}: id 'doc-002' has gold label 2, a whole number that is no class id of the model")
    assert 'id2label is 0 → "neg", 1 → "pos": write each gold label as one of these names, or as its id (0 to 1)' in said
    assert not (tmp_path / "runs").exists()  # nothing was timed or recorded
    # A JSON string "2" is a name, never an id: it is refused as an unknown label, as it always was.
    strings = write_corpus(tmp_path / "strings.jsonl", [{**row, "label": str(row["label"])} for row in rows])
    assert all(not entry.label_is_number for entry in load_corpus(strings).entries)


def test_a_csv_corpus_with_its_own_column_names_runs(tmp_path, tiny_model, cli):
    rows = _rows()
    corpus = tmp_path / "tickets.csv"
    with open(corpus, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ticket_no", "body", "queue", "category"])
        writer.writerows([row["id"], row["text"], "support", row["label"]] for row in rows)
    campaign_file = _one_trial(tmp_path, tiny_model, corpus, id_column="ticket_no", text_column="body",
                               label_column="category")
    result = run_campaign(campaign_file=campaign_file, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    [trial] = result.trials
    assert trial["status"] == "ok" and trial["id_check"]["ids_match"]
    assert trial["quality"]["overall"]["accuracy"] == pytest.approx(
        _accuracy_against(trial, tmp_path / "runs", {r["id"]: r["label"] for r in rows}))
    code, out, err = cli("check", tmp_path / "runs")  # the manifest's protocol with its named columns is a valid record
    assert code == 0, out + err
    # The named columns are part of the protocol (so of its fingerprint); a campaign naming none has no such key.
    assert load_campaign(campaign_file).protocol["corpus_columns"] == {
        "id": "ticket_no", "text": "body", "label": "category"}
    plain = write_campaign(tmp_path / "runs", tiny_model, write_corpus(tmp_path / "plain.jsonl", rows), name="plain")
    assert "corpus_columns" not in load_campaign(plain).protocol


def test_a_named_column_missing_from_the_header_is_refused_naming_the_file_and_its_columns(tmp_path, tiny_model):
    corpus = tmp_path / "tickets.csv"
    corpus.write_text("ticket_no,body,label\nt1,good movie,pos\n", encoding="utf-8")
    campaign_file = _one_trial(tmp_path, tiny_model, corpus, id_column="ticket_no", text_column="body",
                               label_column="category")
    with pytest.raises(UserError) as refused:
        run_campaign(campaign_file=campaign_file, runs_dir=tmp_path / "runs", quiet=True, stages=False)
    assert str(refused.value).startswith(f'{corpus}:1: missing column(s) category; a corpus CSV needs id, text and '
                                         'optionally label, and its header has the columns "ticket_no", "body", "label"')
    # A column name that another part already reads is refused in the campaign file, before the corpus is opened.
    twice = _one_trial(tmp_path, tiny_model, corpus, text_column="id")
    with pytest.raises(UserError, match=r"\[corpus\] text_column: 'id' must be a column's name that no other part"):
        load_campaign(twice)
    # Only a classification reads named columns: a generation campaign naming one is refused in its campaign file.
    generate = write_generation_campaign(tmp_path, tiny_model, corpus)
    generate.write_text(generate.read_text(encoding="utf-8").replace('split = "final"\n', 'split = "final"\ntext_column = "body"\n'),
                        encoding="utf-8")
    with pytest.raises(UserError, match=r"\[corpus\] text_column: named columns are read by classify campaigns; a generate"):
        load_campaign(generate)
    # JSON Lines read the same names as keys.
    lines = write_corpus(tmp_path / "t.jsonl", [{"ticket_no": "t1", "body": "good movie", "category": "pos"}])
    assert load_corpus(lines, {"id": "ticket_no", "text": "body", "label": "category"}).entries[0].label == "pos"
    with pytest.raises(UserError, match=r"t.jsonl:1: id 't1' has a missing or empty text$"):
        load_corpus(lines, {"id": "ticket_no"})
    with pytest.raises(UserError, match=r"t.jsonl:1: missing or empty id \(column 'number'\); "):
        load_corpus(lines, {"id": "number"})


def test_init_on_a_csv_with_other_column_names_guesses_them_and_then_runs_dry(tmp_path, tiny_model):
    """#60: the columns were left to FILL IN, so the corpus could not be read and its buckets stayed at defaults."""
    corpus = tmp_path / "tickets.csv"
    corpus.write_text("ticket_no,body,category\n" + "".join(f"{r['id']},{r['text']},{r['label']}\n" for r in _rows()),
                      encoding="utf-8")
    path = write_starter(kind="classify", out=tmp_path / "tickets.toml", model=tiny_model, corpus=corpus)
    assert to_fill_in(path) == []
    assert load_campaign(path).protocol["corpus_columns"] == {"id": "ticket_no", "text": "body", "label": "category"}
    would_run, plan = dry_run(path, tmp_path / "runs")
    assert would_run and "Campaign tickets: 9 entries (3 short, 3 medium, 3 long)" in plan, plan
