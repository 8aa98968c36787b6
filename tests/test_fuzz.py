"""Property tests: every malformed input gives a clear error or a listed problem, never a traceback or a lost record."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iteralab.core.errors import UserError
from iteralab.declared.corpus import load_corpus
from iteralab.money.catalog import parse_catalog
from iteralab.run.campaign import load_campaign
from iteralab.store import reading, records
from tests import blocks, factory
from tests.tiny import CAMPAIGN

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

text_values = st.one_of(
    st.text(max_size=40), st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
nasty_strings = st.one_of(
    st.text(max_size=60), st.sampled_from(["<script>alert(1)</script>", "\x00\x1b[31m", "&amp;<b>", "\u202e\ufeff", "a" * 5000]))


def expect_clear(function, *args):
    """Run FUNCTION; it may succeed or raise UserError, nothing else: one line, or a campaign file's list of mistakes."""
    try:
        return function(*args)
    except UserError as error:
        first, *rest = str(error).strip().split("\n")
        assert first
        assert not rest or (first.endswith("mistakes, each to fix:") and all(line.startswith("  - [") for line in rest))
        return None


@FUZZ
@given(st.binary(max_size=400))
def test_any_bytes_as_a_corpus_give_a_corpus_or_a_clear_error(data):
    with tempfile.TemporaryDirectory() as folder:
        for suffix in (".jsonl", ".csv"):
            path = Path(folder) / f"corpus{suffix}"
            path.write_bytes(data)
            expect_clear(load_corpus, path)


@FUZZ
@given(st.lists(st.fixed_dictionaries({}, optional={"id": text_values, "text": text_values, "label": text_values}), max_size=6))
def test_corpus_rows_with_wrong_types_are_refused_or_read(rows):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        corpus = expect_clear(load_corpus, path)
        if corpus is not None:
            assert all(entry.id and entry.text.strip() for entry in corpus.entries)
            assert len({entry.id for entry in corpus.entries}) == len(corpus.entries)


@pytest.mark.parametrize(("data", "ids"), [
    (b"\xef\xbb\xbf" + b'{"id": "a", "text": "bom"}\n', "a"),
    (b'{"id": "a", "text": "crlf"}\r\n{"id": "b", "text": "x"}\r\n', "a,b"),
    (b'{"id": "a", "text": "' + b"w " * 5_000_000 + b'"}\n', "a"),
])
def test_corpus_edge_cases_are_read(tmp_path, data, ids):
    """Regression for #13: these must load; a refusal (e.g. of the BOM) fails the test, whatever its message."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    corpus = load_corpus(path)
    assert ",".join(corpus.ids) == ids
    assert len(corpus.entries[0].text) == len(json.loads(data.removeprefix(b"\xef\xbb\xbf").split(b"\n")[0])["text"])


def test_an_empty_corpus_is_refused_with_its_path(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"")
    with pytest.raises(UserError) as error:
        load_corpus(path)
    assert str(error.value) == f"{path}: the corpus has no entries"


REPLACEMENTS = st.sampled_from(["0", "-1", '"x"', "true", "[]", "{}", "1e309", '""', "3.5", '"rest"', '"fp8"', "nan"])


def mutate(lines: list[str], data) -> list[str]:
    """Replace the value of, or delete, one to three lines of a TOML file."""
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        if "=" in lines[index] and data.draw(st.booleans()):
            lines[index] = lines[index].split("=")[0] + "= " + data.draw(REPLACEMENTS)
        else:
            del lines[index]
    return lines


@FUZZ
@given(st.data())
def test_mutated_campaign_files_give_a_campaign_or_a_clear_error(data):
    text = CAMPAIGN.format(name="fuzz", corpus="c.jsonl", model="m", repetitions=2, accuracy=0.5, min_agreement=0.9,
                           variants='\n[[variants]]\nname = "b1"\nbatch_size = 1\n')
    lines = mutate(text.splitlines(), data)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.toml"
        path.write_text("\n".join(lines), encoding="utf-8")
        expect_clear(load_campaign, path)


@FUZZ
@given(st.lists(st.one_of(
    st.binary(max_size=80),
    st.builds(lambda record, key, value: json.dumps({**record, key: value}, default=str).encode(),
              st.just(factory.rental()), st.sampled_from(["kind", "schema_version", "total", "lots", "record_id", "receipt",
                                                          "campaign", "created_at"]), text_values),
    st.builds(lambda cut: json.dumps(factory.rental()).encode()[:cut], st.integers(0, 300)),
), max_size=5))
def test_corrupt_record_lines_are_listed_and_never_lose_the_good_record(lines):
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        good = factory.rental()
        path = records.append(runs, good)
        with open(path, "ab") as handle:
            for line in lines:
                handle.write(line.replace(b"\n", b" ") + b"\n")
        before = path.read_bytes()
        loaded = reading.load(runs)
        assert good["record_id"] in {record["record_id"] for record in loaded.records}
        for problem in loaded.problems:
            assert problem.startswith(f"camp/records/{good['run_id']}.jsonl:")
        records.append(runs, factory.rental())
        assert path.read_bytes().startswith(before)


@FUZZ
@given(st.lists(st.lists(st.one_of(st.text(max_size=8), st.sampled_from(["rtx-4090", "3", "7", "30", "-1", "1.999", "USD", ""])),
                         min_size=0, max_size=9), max_size=4))
def test_any_catalog_gives_a_catalog_or_a_clear_error(rows):
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["catalog_version", "gpu", "gpu_name", "cards_per_lot", "memory_per_card_gb", "days", "price_per_lot", "currency"])
    writer.writerows(rows)
    catalog = expect_clear(parse_catalog, buffer.getvalue(), "fuzz.csv")
    if catalog is not None:
        assert all(price.price_per_lot >= 0 and price.days in (3, 7, 30) for price in catalog.prices.values())


@FUZZ
@given(st.data())
def test_mutated_qualification_sheets_give_sheets_or_a_clear_error(data):
    from importlib import resources

    from iteralab.decision.qualification import qualify
    from iteralab.money.catalog import load_catalog

    text = (resources.files("iteralab") / "data" / "qualification" / "demo-rtx-4090.toml").read_text()
    lines = mutate(text.splitlines(), data)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "sheet.toml").write_text("\n".join(lines), encoding="utf-8")
        expect_clear(qualify, Path(folder), reading.Loaded(), load_catalog())


@settings(max_examples=8, deadline=None)
@given(title=nasty_strings, variant=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True), error=nasty_strings,
       model=nasty_strings)
def test_record_strings_never_reach_a_page_unescaped(title, variant, error, model):
    from bs4 import BeautifulSoup

    from iteralab.site.build import build_site

    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder) / "runs"
        manifest = factory.manifest(title=title, model_name=model)
        records.append(runs, manifest)
        records.append(runs, factory.trial(manifest, variant))
        records.append(runs, factory.trial(manifest, variant, status="error", failed_phase="model_load", error=error, sequence=2))
        # Both languages: a record's words reach an Indonesian page through other code (its messages are filled in).
        build_site(runs=runs, out=Path(folder) / "site", languages=("en", "id"))
        assert (Path(folder) / "site" / "id" / "index.html").is_file()
        for path in (Path(folder) / "site").rglob("*.html"):
            page = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
            # The one script run inline is the 404 page's own (it leads an old trial link to trials.html), the same in
            # every build; the charts' specs are JSON, never run, with no '<' a record could end them with (#34).
            inline = [script for script in page.find_all("script") if not script.get("src")]
            specs = [script for script in inline if script.get("type") == "application/json" and "<" not in script.string]
            assert len(inline) - len(specs) == (path.name == "404.html") and page.find("b") is None, path


def _set_path(record: dict, path: tuple, value) -> dict:
    """Return a deep copy of RECORD with the field at PATH replaced by VALUE."""
    copy = json.loads(json.dumps(record))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return copy


def _paths(value, prefix=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from _paths(inner, (*prefix, key))


TRIAL = factory.trial(factory.manifest())
TRIAL_PATHS = sorted(_paths(TRIAL))


@FUZZ
@given(st.sampled_from(TRIAL_PATHS), st.one_of(text_values, st.integers(-(2**70), 2**70), st.just(-1), st.just(0)))
def test_the_compiled_check_agrees_with_the_reference_validator(path, value):
    """Regression for #7: records are accepted on jsonschema-rs's yes, so it must never be laxer than jsonschema."""
    record = _set_path(TRIAL, path, value)
    compiled = records._fast_validators()["trial"].is_valid(record)
    validators = records._validators()
    reference = not list(validators["common"].iter_errors(record)) and not list(validators["trial"].iter_errors(record))
    if isinstance(value, float) and math.isnan(value):
        # jsonschema lets NaN through "minimum"/"maximum", jsonschema-rs does not: stricter is safe (a NaN is refused on
        # write anyway, since no JSON writer emits it). Hypothesis found it on 2026-12-03.
        assert compiled is False
    else:
        assert compiled == reference


@FUZZ
@given(st.sampled_from(["rule", "trials", "document", "checked_configurations", "exclusion_id", "reason", "kind"]), text_values,
       st.sampled_from(["exclusion", "withdrawal"]))
def test_changed_exclusions_and_withdrawals_are_listed_or_applied_never_a_crash(key, value, kind):
    """Regression for #19: exclusion records go through the same schemas, checks and views as every other kind."""
    from iteralab.decision.report import decide
    from iteralab.money.catalog import load_catalog
    from iteralab.store.views import campaign_views

    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        manifest = factory.manifest()
        trial = factory.trial(manifest)
        for record in (manifest, trial):
            records.append(runs, record)
        exclusion = records.make_record("exclusion", campaign="camp", run_id="run-x", rule="r", trials=[trial["record_id"]],
                                        document={"text": "t"}, checked_configurations=[])
        withdrawal = records.make_record("withdrawal", campaign="camp", run_id="run-x", exclusion_id=exclusion["record_id"],
                                         reason="r")
        changed = {**(exclusion if kind == "exclusion" else withdrawal), key: value}
        path = records.records_file(runs, "camp", "run-x")
        lines = [exclusion, changed] if kind == "withdrawal" else [changed]
        path.write_text("".join(json.dumps(line, default=str) + "\n" for line in lines), encoding="utf-8")
        loaded = reading.load(runs)
        (view,) = campaign_views(loaded)
        assert view.failure is None
        decide(view, load_catalog())
        if records.validate(changed):
            assert any(problem.startswith("camp/records/run-x.jsonl:") for problem in loaded.problems)
        assert set(view.excluded) <= {trial["record_id"]}


def test_the_schemas_type_every_field_of_a_generation_or_adaptation_block():
    """Regression for #62: the blocks were not checked at all; every field a record of each kind (generation,
    adaptation, serving: #64) holds has a type."""
    for kind, record_kind, block in blocks.BLOCKS:
        assert set(blocks.held(kind, record_kind, block)) - set(blocks.declared(record_kind, block)) == set(), block


def test_a_hostile_field_of_a_generation_or_adaptation_block_is_named_by_check_or_read_by_every_reader(tmp_path):
    """Regression for #62: copies of a real campaign of each kind, one field under a trial's generation or adaptation
    object, or its manifest's protocol.generation, protocol.adaptation or training_split, replaced by a hostile value or
    removed: check named 0 of them, and 68 generate and 162 adapt copies raised in open_runs, .trials, .decide, build,
    decide or iteralab trials. A serving campaign's (#64) trial serving object, variant_config.engine_args and manifest
    protocol.serving are fuzzed the same way. The fields come from the schemas (and the fixtures' records): each once,
    with a rotating value (a definition used in several places, as a serving level's figures and its quantiles are, in
    its first place), then 40 drawn with a seed from every place. tests/blocks.py --all tries every field, in every
    place, with every value.

    Each copy check names must name the field (file, line and field through the loader, for a few); the others (the
    values the schemas accept) are campaigns of one runs folder, which every reader reads without raising."""
    named, valid = blocks.split(blocks.sample(extra=40))
    assert {copy.kind for copy, _ in named} == {copy.kind for copy in valid} == {"generate", "adapt", "serve"}
    assert [(copy.describe(), problem) for copy, problem in named if not blocks.names_field(problem, copy)] == []
    assert len(named) >= 200 and len(valid) >= 25, (len(named), len(valid))  # 251 and 33 at this seed
    shown = [copy for copy, _ in named[::40]]
    placed, outcome = blocks.run([*valid, *shown], tmp_path)
    assert outcome.raised == {}
    for copy in shown:
        assert any(problem.startswith(f"{copy.name}/records/") and blocks.names_field(problem.split(": ", 1)[1], copy)
                   for problem in outcome.problems), copy.describe()
    assert len(placed) == len(valid) + len(shown)


@pytest.mark.parametrize(("path", "value", "field"), [
    (("adaptation", "export", "path"), "../../../../etc", "adaptation.export.path"),
    (("adaptation", "export", "path"), "/etc", "adaptation.export.path"),
    (("adaptation", "export", "path"), "tiny-adapt/models/" + "x" * 300, "adaptation.export.path"),
    (("training_split", "path"), "x" * 5000, "training_split.path"),
    (("training_split", "path"), "tiny-adapt/../../etc/passwd", "training_split.path"),
])
def test_a_path_out_of_the_runs_folder_is_refused_wherever_a_record_names_one(path, value, field):
    """Regression for #62: an export path of '../../../../etc' passed check and reached the trial page and the bundle;
    a training split's 5,000-character path stopped the build with 'File name too long'."""
    record_kind = "manifest" if path[0] == "training_split" else "trial"
    problem = blocks.problem_of(blocks.changed(blocks.Copy("adapt", record_kind, path, value))[2])
    assert problem is not None and problem.startswith(f"{field}: ") and len(problem) < 250, problem
    # Beyond 4,096 characters the schema refuses it (its message cut at 200 characters); below, the path's own check.
    assert len(value) > 4096 or "must be a path relative to the runs folder, without '..'" in problem


@pytest.mark.parametrize(("kind", "record_kind", "path", "named"), [
    ("generate", "manifest", ("protocol", "generation", "max_new_tokens"), "protocol.generation: 'max_new_tokens' is a"),
    ("generate", "manifest", ("protocol", "generation"), "protocol: 'generation' is a"),
    ("adapt", "manifest", ("training_split",), "record: 'training_split' is a"),
    ("adapt", "manifest", ("protocol", "adaptation", "optimizer"), "protocol.adaptation: 'optimizer' is a"),
    ("adapt", "trial", ("adaptation", "export", "sha256"), "adaptation.export: 'sha256' is a"),
    ("adapt", "trial", ("adaptation", "effective_batch", "devices"), "adaptation.effective_batch: 'devices' is a"),
    ("generate", "trial", ("generation", "kv_cache"), "generation: 'kv_cache' is a"),
])
def test_a_field_a_reader_needs_is_required_where_its_kind_writes_it(kind, record_kind, path, named):
    """Regression for #62: a manifest's protocol.generation without max_new_tokens stopped the page build
    (UndefinedError), an effective batch without devices raised KeyError on the campaign page."""
    problem = blocks.problem_of(blocks.changed(blocks.Copy(kind, record_kind, path, blocks.REMOVED))[2])
    assert f"{named} required property" in (problem or "").split("; "), problem


def test_trials_json_never_waits_for_the_text(tmp_path, monkeypatch, cli):
    """Regression for #62: iteralab trials --json failed where the text could not be said, built before the format was
    chosen."""
    from iteralab.store import listing

    def unsaid(*args):
        raise AssertionError("the text was built for --json")

    monkeypatch.setattr(listing, "describe_trials", unsaid)
    monkeypatch.setattr(listing, "describe_runs", unsaid)
    runs = shutil.copytree(blocks.BASES["adapt"][0], tmp_path / "runs")
    for command in ("trials", "runs"):
        code, out, err = cli(command, "tiny-adapt", "--runs", runs, "--json")
        assert code == 0, err
        assert json.loads(out)["campaign"] == "tiny-adapt"
