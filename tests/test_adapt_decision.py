"""Adaptation campaigns (#43) in the decision, the trial table, compare and the evidence bundle: a real tiny BERT
fine-tuned through run (all weights at 8 and 4 × 2, LoRA at 8; two repetitions), then check, decide, build, bundle and
verify over its records, through the command line."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import shutil
import zipfile
from decimal import Decimal
from pathlib import Path

import pytest

from iteralab.evidence.bundle import bag_files, zip_bytes
from iteralab.run.runner import run_campaign
from iteralab.store import adaptation, reading
from iteralab.store.trials import CSV_COLUMNS, phases_of, trial_table, trials_csv
from iteralab.store.views import campaign_views
from tests.tiny import build_model, write_adaptation_campaign

FIXTURES = Path(__file__).parent / "fixtures" / "demo-runs"
RTX_4090 = {"index": 0, "name": "NVIDIA GeForce RTX 4090", "total_memory_bytes": 24 * 10**9}


@pytest.fixture(scope="module")
def adapted_once(tmp_path_factory):
    """Run the tiny adaptation campaign once for the module (and, for compare, a second one whose threshold no model
    meets, one repetition); each test copies the runs folder."""
    folder = tmp_path_factory.mktemp("adapted")
    model = build_model(folder / "model")
    for name, repetitions, accuracy in (("tiny-adapt", 2, 0.0), ("tiny-adapt-strict", 1, 0.99)):
        result = run_campaign(campaign_file=write_adaptation_campaign(folder, model, name=name, repetitions=repetitions,
                                                                      accuracy=accuracy),
                              runs_dir=folder / "runs", quiet=True)
        assert not result.interrupted and [t["status"] for t in result.trials] == ["ok"] * 3 * repetitions, \
            [t["error"] for t in result.trials]
    return folder / "runs"


@pytest.fixture
def runs(adapted_once, tmp_path):
    return shutil.copytree(adapted_once, tmp_path / "runs")


def _records(runs: Path, campaign: str) -> list[dict]:
    return [record for record in reading.load(runs).records if record["campaign"] == campaign]


def _on_a_4090(runs: Path, campaign: str) -> str:
    """Say in the run's manifest that its machine had an RTX 4090 beside the CPU the variants ran on (the variants say
    device = cpu, so their configurations stay the CPU's): a rental of that card can then pay for the run. Return the
    run id. The only change to the records the runner wrote."""
    (path,) = (runs / campaign / "records").glob("*.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert first["kind"] == "manifest"
    first["environment"].update(gpus=[RTX_4090], gpu_count=1, gpus_reason=None)
    path.write_text("\n".join([json.dumps(first, sort_keys=True), *lines[1:]]) + "\n", encoding="utf-8")
    return first["run_id"]


def _rent(cli, runs: Path, campaign: str, *run_ids: str) -> None:
    start = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(microsecond=0).isoformat()
    linked = [option for run_id in run_ids for option in ("--run", run_id)]
    code, _, err = cli("rental", "add", "--campaign", campaign, "--gpu", "rtx-4090", "--lots", "1", "--days", "3",
                       "--start", start, *linked, "--runs", runs)
    assert code == 0, err


@pytest.mark.slow
def test_check_decide_build_bundle_and_verify_take_an_adaptation_campaign(runs, tmp_path, cli):
    assert cli("check", runs)[0] == 0
    code, out, err = cli("decide", "tiny-adapt", "--runs", runs)
    assert code == 0, err
    assert "Kind of work: adapt — fine-tune a text classifier (all weights, a named subset or LoRA) and validate it" in out
    assert "Question: 1 validated model like the campaign's" in out and "assumes one model and no window" in out
    assert out.count("s per validated model (time to the validated model)") == 3 and "per corpus" not in out
    assert out.count("validated models 1 (validated model ") == 3 and "deliverables" not in out
    assert "lora: updates per second " in out and out.count("all: updates per second ") == 2
    code, _, err = cli("build", "--runs", runs, "--out", tmp_path / "site")
    assert code == 0, err
    bundle = tmp_path / "evidence.zip"
    assert cli("bundle", "tiny-adapt", "-o", bundle, "--runs", runs)[0] == 0
    code, out, _ = cli("verify", bundle)
    assert code == 0 and "valid" in out
    code, out, _ = cli("trials", "tiny-adapt", "--runs", runs)
    assert code == 0 and out.count("  accepted  ") == 6 and out.count("  model ") == 6


@pytest.mark.slow
def test_the_bundle_holds_the_training_split_and_every_exports_hashes_but_not_the_weights(runs, tmp_path, cli):
    records = _records(runs, "tiny-adapt")
    (manifest,) = [r for r in records if r["kind"] == "manifest"]
    trials = [r for r in records if r["kind"] == "trial"]
    bundle = tmp_path / "evidence.zip"
    assert cli("bundle", "tiny-adapt", "-o", bundle, "--runs", runs)[0] == 0
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        data = {name.removeprefix("tiny-adapt-evidence/data/"): archive.read(name) for name in names}
    split = manifest["training_split"]
    place = "inputs/" + Path(split["path"]).name
    assert place != "inputs/" + Path(manifest["corpus"]["path"]).name and "inputs/" + Path(manifest["corpus"]["path"]).name in data
    assert data[place] == (runs / split["path"]).read_bytes()
    assert hashlib.sha256(data[place]).hexdigest() == split["file_sha256"]
    assert len(data[place].decode("utf-8").splitlines()) == split["entries"] == 40
    exports = json.loads(data["models/exports.json"])
    assert exports["weights_in_this_bundle"] is False and len(exports["exports"]) == len(trials) == 6
    for trial, export in zip(trials, exports["exports"], strict=True):
        assert export["trial_id"] == trial["record_id"] and export["sha256"] == trial["adaptation"]["export"]["sha256"]
        for file in export["files"]:  # the hashes let an archivist check the model kept beside the runs folder
            kept = runs / export["path"] / file["name"]
            assert hashlib.sha256(kept.read_bytes()).hexdigest() == file["sha256"] and kept.stat().st_size == file["bytes"]
    assert not [name for name in names if "/models/" in name and not name.endswith(("exports.json", "README.txt"))]
    assert not [name for name in names if name.endswith((".safetensors", ".bin"))]
    assert "are not in this bundle" in data["models/README.txt"].decode("utf-8")
    assert sorted(exports["validated_models"]) == sorted(s.label for s in campaign_views(reading.load(runs))[0].variants)
    # verify checks the training split against its manifest: altered, it is named
    altered = tmp_path / "altered.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(altered, "w") as target:
        for name in source.namelist():
            target.writestr(name, source.read(name) + (b"x" if name.endswith(place) else b""))
    code, out, _ = cli("verify", altered)
    assert code == 1 and f"data/{place}: altered" in out
    # an exports.json whose hashes no longer match the records is named even in a bag whose checksums were made again
    listed = json.loads(data["models/exports.json"])
    listed["exports"][1]["files"][0]["sha256"] = "0" * 64
    data["models/exports.json"] = json.dumps(listed).encode("utf-8")
    rebagged = tmp_path / "rebagged.zip"
    payload = {name: content for name, content in data.items() if not name.startswith("tiny-adapt-evidence/")}
    rebagged.write_bytes(zip_bytes("tiny-adapt-evidence", bag_files("tiny-adapt-evidence-en", payload, "2026-12-06")))
    code, out, _ = cli("verify", rebagged)
    assert code == 1 and out.strip() == (f"data/models/exports.json: the export of trial {trials[1]['record_id']} differs "
                                         "from its record's (adaptation.export)")


@pytest.mark.slow
def test_cost_per_validated_model_is_spend_over_models_and_repetitions_are_not_extra_models(runs, cli):
    run_id = _on_a_4090(runs, "tiny-adapt")
    _rent(cli, runs, "tiny-adapt", run_id)
    code, out, err = cli("decide", "tiny-adapt", "--runs", runs, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["unit"] == "model" and len(report["ranked"]) == 3 and not report["infeasible"]
    for row in report["ranked"]:
        observed = row["observed"]
        assert row["trials"] == {"ok": 2} and row["accepted_trials"] == 2  # two accepted repetitions ...
        assert observed["validated_models"] == 1  # ... are one model
        assert observed["spend"] == "47.14" and observed["cost_per_validated_model"] == "47.14"
        assert "deliverables" not in observed and "cost_per_validated_corpus" not in observed
        assert observed["validated_model"]["trial_id"].startswith("trial-") and len(observed["validated_model"]["sha256"]) == 64
        figures = row["adaptation"]
        assert figures["updates_per_s"]["median"] > 0 and figures["time_to_validated_model_s"]["median"] > 0
        assert figures["memory"]["estimate"]["label"] == "estimate"
        assert figures["memory"]["measured"]["gpu_peak_reserved_bytes"]["value"] is None  # a CPU run: empty, with its reason
        assert "no GPU" in figures["memory"]["measured"]["gpu_peak_reserved_bytes"]["reason"]
    (view,) = [v for v in campaign_views(reading.load(runs)) if v.name == "tiny-adapt"]
    cost = view.cost()  # the campaign's: its spend over its three validated models, one per configuration
    assert cost["unit"] == "model" and cost["deliverables"] == 3
    assert cost["cost_per_validated_corpus"] == Decimal("15.71")


@pytest.mark.slow
def test_without_an_accepted_model_the_cost_is_undefined_with_its_reason_and_compare_sets_the_figures_apart(runs, cli):
    _rent(cli, runs, "tiny-adapt-strict", _on_a_4090(runs, "tiny-adapt-strict"))
    code, out, err = cli("decide", "tiny-adapt-strict", "--runs", runs, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert not report["ranked"] and len(report["infeasible"]) == 3
    for row in report["infeasible"]:
        assert row["observed"]["validated_models"] == 0 and row["observed"]["cost_per_validated_model"] is None
        assert row["observed"]["cost_reason"].startswith("undefined: no validated model")
        assert any(condition.startswith("quality: 1 of 1 successful trials not accepted (accuracy 0.5")
                   for condition in row["conditions_failed"])
    (view,) = [v for v in campaign_views(reading.load(runs)) if v.name == "tiny-adapt-strict"]
    assert view.cost()["cost_per_validated_corpus"] is None and view.cost()["reason"].startswith("undefined: no validated model")
    code, out, err = cli("compare", "tiny-adapt", "tiny-adapt-strict", "--runs", runs)
    assert code == 0, err
    assert out.count("time to the validated model (s): median ") == 3 and out.count("updates per second: median ") == 3
    assert out.count("validation accuracy: median 0.500 → median 0.500") == 3
    assert out.count("memory: estimate ") == 3 and "bytes (host_peak_rss_bytes)" in out
    assert out.count("cost per validated model: ") == 3 and "cost per validated corpus" not in out
    code, out, _ = cli("compare", "tiny-adapt", "tiny-adapt-strict", "--runs", runs, "--json")
    pairs = json.loads(out)["configurations"]
    assert [pair["earlier"]["unit"] for pair in pairs] == ["model"] * 3
    assert all(pair["later"]["validated_model"] is None and pair["earlier"]["validated_model"] for pair in pairs)


@pytest.mark.slow
def test_deliver_refuses_an_adaptation_trial_its_model_counts_by_itself(runs, cli):
    trial = next(r for r in _records(runs, "tiny-adapt") if r["kind"] == "trial")
    code, _, err = cli("deliver", "--campaign", "tiny-adapt", "--trial", trial["record_id"], "--runs", runs)
    assert code != 0 and "is an adaptation" in err and "nothing was recorded" in err
    assert not [r for r in _records(runs, "tiny-adapt") if r["kind"] == "deliverable"]


@pytest.mark.slow
def test_the_trial_table_of_an_adaptation_has_its_phases_and_figures(adapted_once):
    (view,) = [v for v in campaign_views(reading.load(adapted_once)) if v.name == "tiny-adapt"]
    table = trial_table(view)
    rows = list(csv.DictReader(io.StringIO(trials_csv(table))))
    header = trials_csv(table).splitlines()[0].split(",")
    assert header[:len(CSV_COLUMNS)] == CSV_COLUMNS and header[len(CSV_COLUMNS):len(CSV_COLUMNS) + 5] == [
        "first_forward_s", "first_backward_s", "first_update_s", "validation_s", "export_s"]
    assert "prefill_s" not in header  # no generation column in an adaptation campaign
    for row, trial in zip(rows, view.trials, strict=True):
        block = trial["adaptation"]
        assert float(row["first_backward_s"]) == pytest.approx(trial["phases"]["first_backward"]["duration_ns"] / 1e9, abs=1e-6)
        assert float(row["updates_per_s"]) == block["updates_per_s"] and int(row["updates"]) == 4
        assert float(row["time_to_validated_model_s"]) == block["time_to_validated_model_s"]
        assert int(row["trainable_parameters"]) == block["parameters"]["trainable_parameters"]
        assert int(row["memory_estimate_total_bytes"]) == block["memory"]["estimate"]["total_bytes"]
        assert row["gpu_peak_reserved_bytes"] == "" and int(row["host_peak_rss_bytes"]) > 0  # a CPU: empty, never 0
        assert row["export_sha256"] == block["export"]["sha256"] and int(row["export_bytes"]) == block["export"]["bytes"]
        assert float(row["validation_loss"]) == block["losses"]["validation"] and row["warmup_s"] == ""
        assert int(row["effective_batch"]) == 8 and row["method"] == trial["variant_config"]["method"]
    # the decision's unit of time is the time to the validated model; one-time seconds are those it does not hold
    first = view.trials[0]
    assert table["window_s"][0] == first["adaptation"]["time_to_validated_model_s"]
    assert table["one_time_s"][0] == pytest.approx(sum(first["phases"][p]["duration_ns"] or 0 for p in adaptation.OUTSIDE_MODEL
                                                      if p in first["phases"]) / 1e9)
    assert phases_of(first) == ("environment_check", "model_load", "compilation", "first_forward", "first_backward",
                                "first_update", "measured_window", "validation", "export", "evaluation", "writing_results")


def test_a_classification_campaigns_trials_csv_keeps_its_columns_and_order():
    (view,) = campaign_views(reading.load(FIXTURES))
    text = trials_csv(trial_table(view))
    assert text.splitlines()[0].split(",") == [
        "record_id", "run_id", "created_at", "configuration", "variant", "hardware", "software", "series", "repetition",
        "sequence", "status", "failed_phase", "error", "entries_expected", "entries_completed", "measured_window_s",
        "environment_check_s", "model_load_s", "compilation_s", "warmup_s", "evaluation_s", "writing_results_s",
        "throughput_entries_per_s", "ids_match", "accuracy", "macro_f1", "agreement", "corpus_accepted",
        "predictions_sha256", "protocol_fingerprint", "excluded_by", "exclusion_rule", "retry_of",
        "disturbed", "disturbance"]  # every campaign's two columns of #49, empty for trials recorded before it
    assert all(len(row) == 35 for row in csv.reader(io.StringIO(text)))
    assert phases_of(view.trials[0]) == ("environment_check", "model_load", "compilation", "warmup", "measured_window",
                                         "evaluation", "writing_results")


def _asks_again(runs: Path, campaign: str, asked: str) -> None:
    """Make CAMPAIGN's manifest ask ASKED's question again (protocol.decision.asks_again), as a revision's campaign file
    would: the only change to the records the runner wrote."""
    (path,) = (runs / campaign / "records").glob("*.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["protocol"]["decision"] = {"corpora": 1, "window_hours": "72", "asks_again": asked}
    path.write_text("\n".join([json.dumps(first, sort_keys=True), *lines[1:]]) + "\n", encoding="utf-8")


def _texts(cells) -> list[str]:
    return [cell.get_text(" ", strip=True) for cell in cells]


@pytest.mark.slow
def test_every_page_of_an_adaptation_campaign_speaks_of_validated_models_never_of_corpora(runs, tmp_path, cli):
    from bs4 import BeautifulSoup

    from iteralab.decision.report import decision_report
    from iteralab.decision.revisions import configuration_name

    _rent(cli, runs, "tiny-adapt", _on_a_4090(runs, "tiny-adapt"))
    _asks_again(runs, "tiny-adapt-strict", "tiny-adapt")
    notes = tmp_path / "notes"
    assert cli("note", "new", "tiny-adapt", "--runs", runs, "--notes", notes)[0] == 0
    assert cli("build", "--runs", runs, "--out", tmp_path / "site")[0] == 0
    report = decision_report(campaign="tiny-adapt", runs=runs)
    site = tmp_path / "site"

    def page(*parts):
        return BeautifulSoup(site.joinpath(*parts).read_text(encoding="utf-8"), "html.parser")

    # The decision page: the cost column, the details' models and each repetition's time to the validated model.
    decision = page("campaigns", "tiny-adapt", "decision.html")
    assert "Cost per validated model" in _texts(decision.select("table.decision thead th"))
    details = _texts(decision.select("table.decision-details thead th"))
    assert "Validated models" in details and "Time to the validated model, run order" in details
    for row in report.ranked:
        tr = decision.find(id=f"detail-{row.key}")
        shown = [float(link.get_text().removesuffix(" s")) for link in tr.select("a.duration")]
        expected = [adaptation.model_seconds(t) for t in row.summary.trials if t["status"] == "ok"]
        assert shown == pytest.approx(expected, abs=5e-4) and len(shown) == 2
        assert _texts(tr.find_all("td"))[2] == "1"  # two repetitions, one validated model
    assert "the time to the validated model × the models each lot trains" in decision.find(id="projection-rule").get_text()
    assert "Cost per validated corpus" not in decision.get_text() and "per corpus" not in decision.get_text()
    # The campaign page's cost: validated models and the cost per validated model, one per configuration.
    campaign = page("campaigns", "tiny-adapt", "index.html")
    cost = campaign.find(id="cost")
    assert [dt.get_text() for dt in cost.select("dl.cost dt")][-2:] == ["Validated models", "Cost per validated model"]
    assert cost.find(id="deliverables").get_text() == "3"
    assert "by its validated model; repetitions are not extra models" in cost.find(id="cost-per-corpus").get_text()
    assert "corpus" not in cost.get_text().lower() and "corpora" not in cost.get_text()
    # The bundle's own page: validated models, and that the weights are not in the bundle.
    with zipfile.ZipFile(site / "campaigns" / "tiny-adapt" / "evidence-tiny-adapt.zip") as archive:
        (index,) = [name for name in archive.namelist() if name.endswith("/data/index.html")]
        bundle = BeautifulSoup(archive.read(index).decode("utf-8"), "html.parser")
    said = " ".join(bundle.get_text().split())
    assert "validated models: 3;" in said and "cost per validated model, only where" in said
    assert "accepted deliverables" not in said and "cost per validated corpus" not in said
    models = bundle.find(id="models").get_text()
    assert "are not in this bundle" in models and "models/README.txt" in models
    # Each trial's line on the trials page: its validated model accepted, not a corpus.
    trials = page("campaigns", "tiny-adapt", "trials.html")
    metas = [meta.get_text(" ", strip=True) for meta in trials.select("article.trial p.meta")]
    assert len(metas) == 6 and all("validated model accepted: yes" in meta and "corpus" not in meta for meta in metas)
    # The decision note's draft: each ranked configuration's median time to the validated model.
    draft = (notes / "tiny-adapt-decision.md").read_text(encoding="utf-8")
    for row in report.ranked:
        assert f"- **{row.label}**: median {row.window_seconds[1]:.3f} s per validated model (time to the validated model)" in draft
    assert "per corpus" not in draft
    # The question's page: the median time to the validated model of each revision, not a measured window.
    question = page("questions", "tiny-adapt.html")
    assert question.select_one("#chart-revision-medians") is None
    table = question.select_one("#chart-revision-model-times table")
    medians = {(cells[0], cells[1]): float(cells[2]) for cells in (_texts(tr.find_all("td")) for tr in table.select("tbody tr"))}
    # Every row ran on this machine: the table names it once, in its caption, and its rows by variant (#45).
    machine = configuration_name(report.rows[0]).split(" · ", 1)[1]
    assert machine in table.caption.get_text() and not any(machine in name for _, name in medians)
    for row in report.rows:
        variant, row_machine = configuration_name(row).split(" · ", 1)
        assert row_machine == machine
        assert medians[("tiny-adapt", variant)] == pytest.approx(round(row.window_seconds[1], 3))
    assert "median measured window" not in question.get_text().lower()


def test_a_classification_bundle_page_keeps_its_deliverables_wording(tmp_path, cli):
    runs = shutil.copytree(FIXTURES, tmp_path / "runs")
    bundle = tmp_path / "evidence.zip"
    assert cli("bundle", "demo-rotten-tomatoes", "-o", bundle, "--runs", runs)[0] == 0
    with zipfile.ZipFile(bundle) as archive:
        (index,) = [name for name in archive.namelist() if name.endswith("/data/index.html")]
        said = " ".join(archive.read(index).decode("utf-8").split())
    assert "accepted deliverables:" in said and "cost per validated corpus, only where" in said
    assert "validated model" not in said and 'id="models"' not in said
