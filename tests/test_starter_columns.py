"""#60: a starter for a corpus whose columns have other names, what the dry run says of a starter left unfinished, and
the messages of a misspelt key and of a gold label the model lacks."""

from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import pytest

from iteralab.core.errors import UserError
from iteralab.declared.corpus import guess_columns
from iteralab.run.campaign import load_campaign
from iteralab.run.starter import describe_init, dry_run, init_campaign, to_fill_in, write_starter
from tests.tiny import corpus_rows


def _feedback(path: Path, count: int = 30, labels=("neg", "pos")) -> Path:
    """Write a CSV as a team exports it: review_no, body, verdict and source, texts of three lengths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review_no", "body", "verdict", "source"])
        for index, row in enumerate(corpus_rows(count, seed=3)):
            writer.writerow([1000 + index, row["text"], labels[index % len(labels)], ("web", "app")[index % 2 == 0]])
    return path


def test_init_guesses_the_columns_says_so_sizes_the_buckets_and_names_the_path_as_given(tmp_path, tiny_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _feedback(Path("data/feedback.csv"))
    data = init_campaign(kind="classify", out=Path("campaigns/feedback.toml"), runs_dir=Path("runs"), model=tiny_model,
                         corpus=Path("data/feedback.csv"))
    assert {part: found["column"] for part, found in data["columns"].items()} == {
        "id": "review_no", "text": "body", "label": "verdict"}
    said = describe_init(data)
    assert "  id: review_no (guessed: a value of its own on each of the 30 rows)" in said
    assert "  label: verdict (guessed: 2 values: neg, pos, all labels of the model; source has few values too)" in said
    path = Path("campaigns/feedback.toml")
    text = path.read_text(encoding="utf-8")
    # The command of its first comment runs from the folder init ran in.
    assert text.splitlines()[1] == "# Check it with: iteralab run campaigns/feedback.toml --dry-run"
    written = tomllib.loads(text)
    assert {key: value for key, value in written["corpus"].items() if key.endswith("_column")} == {
        "id_column": "review_no", "text_column": "body", "label_column": "verdict"}
    # The texts were read: max_length is the longest entry, and the buckets cut the corpus in thirds.
    assert written["protocol"]["truncation"] == "refuse" and written["protocol"]["max_length"] == 32
    assert written["protocol"]["buckets"] == {"short": 6, "medium": 24, "long": "rest"}
    assert "# length buckets at the corpus's thirds of token counts" in text and to_fill_in(path) == []
    assert data["would_run"] and "Campaign feedback: 30 entries (10 short, 10 medium, 10 long)" in data["dry_run"]


def test_columns_given_by_name_are_taken_and_one_the_header_lacks_is_refused(tmp_path, tiny_model):
    corpus = _feedback(tmp_path / "feedback.csv", labels=("neg", "pos", "neg"))
    path = write_starter(kind="classify", out=tmp_path / "given.toml", model=tiny_model, corpus=corpus,
                         id_column="review_no", text_column="body", label_column="verdict")
    assert 'label_column = "verdict"                # as given' in path.read_text(encoding="utf-8")
    with pytest.raises(UserError, match=r"feedback.csv:1: no column 'category' for the label; the header has review_no, "
                                        r"body, verdict, source$"):
        write_starter(kind="classify", out=tmp_path / "wrong.toml", corpus=corpus, label_column="category")
    with pytest.raises(UserError, match="give --corpus too"):
        write_starter(kind="classify", out=tmp_path / "alone.toml", text_column="body")


def test_the_guess_takes_the_models_labels_first_and_the_fewest_values_without_them(tmp_path):
    corpus = tmp_path / "c.csv"
    corpus.write_text("n,channel,text_body,rating\n" + "".join(
        f"{index},{('mail', 'web', 'app')[index % 3]},{'a long enough text ' * 3}{index},{('bad', 'good')[index % 2]}\n"
        for index in range(12)), encoding="utf-8")
    assert guess_columns(corpus).named == {"id": "n", "text": "text_body", "label": "rating"}  # 2 values before 3
    assert guess_columns(corpus, labels=["mail", "web", "app"]).named["label"] == "channel"
    unlabelled = tmp_path / "u.jsonl"
    unlabelled.write_text("".join(f'{{"key": "k{index}", "words": "some words {index}"}}\n' for index in range(5)),
                          encoding="utf-8")
    assert guess_columns(unlabelled).named == {"id": "key", "text": "words"}


def test_without_a_model_the_buckets_are_defaults_and_say_so(tmp_path):
    path = write_starter(kind="classify", out=tmp_path / "plain.toml", corpus=_feedback(tmp_path / "feedback.csv"))
    text = path.read_text(encoding="utf-8")
    assert "thirds" not in text and "length buckets in tokens: defaults, not sized from a corpus" in text
    assert [line.split(": ", 1)[1].split(" =")[0] for line in to_fill_in(path)] == ["path", "max_length"]


def test_a_leftover_fill_in_stops_the_dry_run_naming_its_line(tmp_path, tiny_model):
    corpus = _feedback(tmp_path / "feedback.csv")
    path = write_starter(kind="classify", out=tmp_path / "left.toml", model=tiny_model, corpus=corpus)
    assert dry_run(path, tmp_path / "runs")[0]
    lines = path.read_text(encoding="utf-8").split("\n")
    number = next(index for index, line in enumerate(lines, start=1) if line.startswith("repetitions"))
    lines[number - 1] = "repetitions = 5  # FILL IN: how many times each variant runs"
    path.write_text("\n".join(lines), encoding="utf-8")
    would_run, said = dry_run(path, tmp_path / "runs")
    assert not would_run
    assert said == (f"{path}: [campaign file] line {number} still says FILL IN (repetitions = 5 # FILL IN: how many times "
                    "each variant runs): give your value, then delete the words FILL IN")


def test_an_unknown_key_is_given_the_closest_valid_key(tmp_path, tiny_model):
    corpus = _feedback(tmp_path / "feedback.csv")
    path = write_starter(kind="classify", out=tmp_path / "typo.toml", model=tiny_model, corpus=corpus)
    path.write_text(path.read_text(encoding="utf-8").replace("repetitions = 5", "repetitons = 5").replace(
        'padding = "longest"', 'padding = "longest"\nbatchsize = 3'), encoding="utf-8")
    with pytest.raises(UserError) as refused:
        load_campaign(path)
    assert "[protocol] unknown key(s) batchsize, repetitons (did you mean repetitions?); check the spelling" in str(
        refused.value)


def test_a_gold_label_the_model_lacks_is_refused_naming_the_entry_and_its_line(tmp_path, tiny_model):
    corpus = _feedback(tmp_path / "feedback.csv")
    rows = corpus.read_text(encoding="utf-8").split("\n")
    rows[3] = rows[3].replace(",neg,", ",maybe,").replace(",pos,", ",maybe,")  # line 4 of the file: review 1002
    rows[7] = rows[7].replace(",neg,", ",Neg,").replace(",pos,", ",Neg,")
    corpus.write_text("\n".join(rows), encoding="utf-8")
    path = write_starter(kind="classify", out=tmp_path / "gold.toml", model=tiny_model, corpus=corpus,
                         label_column="verdict")
    would_run, said = dry_run(path, tmp_path / "runs")
    assert not would_run
    assert said.startswith(f"{corpus}:4: id '1002' has gold label 'maybe', which is not a label of the model (neg, pos); "
                           "2 entries have a label the model lacks ('Neg', 'maybe')"), said


def test_init_takes_the_columns_by_name_from_the_command_line(tmp_path, tiny_model, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _feedback(Path("data/feedback.csv"))
    code, _, err = cli("init", "campaigns/named.toml", "--model", tiny_model, "--corpus", "data/feedback.csv",
                         "--id-column", "review_no", "--text-column", "body", "--label-column", "source", "--json")
    assert code == 0, err
    written = tomllib.loads(Path("campaigns/named.toml").read_text(encoding="utf-8"))
    assert (written["corpus"]["id_column"], written["corpus"]["label_column"]) == ("review_no", "source")
    code, _, err = cli("init", "campaigns/wrong.toml", "--model", tiny_model, "--corpus", "data/feedback.csv",
                       "--label-column", "category")
    assert code == 1 and "no column 'category' for the label" in err
