"""The runner on a tiny random BERT: protocol, rotation, failures as rows, records."""

from __future__ import annotations

import csv
import io
import json
import signal
import time

import pytest

from iteralab.core.files import sha256_file
from iteralab.run import runner
from iteralab.run.campaign import rotation
from iteralab.store import reading
from iteralab.workloads import classify
from iteralab.workloads.metrics import check_ids
from tests.conftest import run_module


def test_rotation_is_a_latin_square_led_by_the_reference():
    plan = rotation(["b1", "b4", "b8"], 5, "b1")
    rounds = [[name for name, _ in plan[index:index + 3]] for index in range(0, 15, 3)]
    assert rounds == [["b1", "b4", "b8"], ["b4", "b8", "b1"], ["b8", "b1", "b4"], ["b1", "b4", "b8"], ["b4", "b8", "b1"]]
    assert {name for name, repetition in plan if repetition == 2} == {"b1", "b4", "b8"}
    assert rotation(["b4", "b8", "b1"], 1, "b1")[0] == ("b1", 1)


def test_dry_run_prints_the_plan_without_writing(tiny_campaign, tmp_path, cli):
    campaign = tiny_campaign(repetitions=3)
    code, out, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [step["variant"] for step in data["plan"]] == ["b1", "b4", "b8", "b4", "b8", "b1", "b8", "b1", "b4"]
    assert sum(data["bucket_counts"].values()) == 24
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_campaign_writes_manifest_trials_and_checkable_predictions(tiny_campaign, tmp_path, cli):
    runs = tmp_path / "runs"
    code, out, err = cli("run", tiny_campaign(), "--runs", runs)
    assert code == 0, err
    assert "b1" in out and "Records:" in out
    loaded = reading.load(runs)
    assert loaded.problems == []
    manifests, trials = loaded.of_kind("manifest"), loaded.of_kind("trial")
    assert len(manifests) == 1 and len(trials) == 6
    manifest = manifests[0]
    # Part of #21: the run ends by naming its id and where its trial ids are.
    assert f"Run id: {manifest['run_id']} (for rental add --run)" in out
    assert f"Trial ids: iteralab trials tiny --run {manifest['run_id']}" in out
    assert len(loaded.of_kind("start")) == 6  # one start before each trial (#20)
    assert manifest["environment"]["gpus"] is None and "no CUDA" in manifest["environment"]["gpus_reason"]
    assert set(manifest["model"]["files_sha256"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
    for record in trials:
        assert record["status"] == "ok" and record["id_check"]["ids_match"]
        assert record["protocol_fingerprint"] == manifest["protocol_fingerprint"]
        assert record["memory"]["gpu_capacity_bytes"] is None and "no GPU" in record["memory"]["gpu_memory_reason"]
        assert all("gpu_peak_allocated_bytes" not in phase for phase in record["phases"].values())
        assert record["phases"]["compilation"]["duration_ns"] is None
        assert record["phases"]["measured_window"]["duration_ns"] > 0
        path = runs / record["predictions"]["path"]
        assert sha256_file(path) == record["predictions"]["sha256"]
        with open(path, encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        gold = {row["id"]: row["label"] for row in map(json.loads, (tmp_path / "corpus.jsonl").read_text().splitlines())}
        recomputed = sum(row["label"] == gold[row["id"]] for row in rows) / len(rows)
        assert record["quality"]["overall"]["accuracy"] == pytest.approx(recomputed)
        assert record["quality"]["overall"]["agreement"] is not None
    code, _, _ = cli("check", runs)
    assert code == 0


def test_ids_check_catches_a_dropped_and_a_duplicated_prediction():
    expected = ["a", "b", "c", "d"]
    dropped = check_ids(expected, ["a", "b", "c"])
    assert not dropped["ids_match"] and dropped["missing"] == {"count": 1, "first": ["d"]}
    duplicated = check_ids(expected, ["a", "b", "c", "d", "b"])
    assert not duplicated["ids_match"] and duplicated["duplicates"] == {"count": 1, "first": ["b"]}
    assert check_ids(expected, ["a", "b", "c", "x"])["unexpected"]["first"] == ["x"]
    assert check_ids(expected, list(expected))["ids_match"]


@pytest.mark.slow
def test_a_changed_protocol_is_refused(tiny_campaign, tmp_path, cli):
    runs = tmp_path / "runs"
    assert cli("run", tiny_campaign(repetitions=1, batch_sizes=(1,)), "--runs", runs, "--quiet")[0] == 0
    before = sorted((path, path.read_bytes()) for path in runs.rglob("*.jsonl"))
    code, _, err = cli("run", tiny_campaign(repetitions=1, batch_sizes=(1,), accuracy=0.5), "--runs", runs)
    assert code == 1 and "is a new campaign: set campaign" in err
    assert sorted((path, path.read_bytes()) for path in runs.rglob("*.jsonl")) == before


@pytest.mark.parametrize(("content", "message"), [
    ('{"id": "a", "text": "good"}\n{"id": "a", "text": "bad"}\n', ":2: id 'a' is a duplicate of line 1"),
    ('{"id": "", "text": "good"}\n', ":1: missing or empty id"),
    ('{"text": "good"}\n', ":1: missing or empty id"),
    ('{"id": "a", "text": "good"}\n{"id": "b", "text": "  "}\n', ":2: id 'b' has a missing or empty text"),
    ('{"id": "a", "text": "good"}\n{"id": "b"}\n', ":2: id 'b' has a missing or empty text"),
    ('{"id": "a", "text": "good"\n', ":1: not valid JSON"),
])
def test_bad_corpora_are_refused_with_line_and_id_before_loading_the_model(tiny_model, tmp_path, cli, content, message):
    from tests.tiny import write_campaign

    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(content, encoding="utf-8")
    code, _, err = cli("run", write_campaign(tmp_path, tiny_model, corpus), "--runs", tmp_path / "runs", "--dry-run")
    assert code == 1 and message in err and "bad.jsonl" in err and "Traceback" not in err


def test_invalid_utf8_corpus_is_refused_with_its_line(tiny_model, tmp_path, cli):
    from tests.tiny import write_campaign

    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(b'{"id": "a", "text": "good"}\n{"id": "b", "text": "caf\xe9"}\n')
    code, _, err = cli("run", write_campaign(tmp_path, tiny_model, corpus), "--runs", tmp_path / "runs")
    assert code == 1 and "bad.jsonl:2: not valid UTF-8" in err


@pytest.mark.parametrize(("edit", "message"), [
    (("batch_size = 4", "batch_size = 0"), "batch_size: must be at least 1"),
    (("batch_size = 4", 'batch_size = "four"'), "batch_size: must be a whole number"),
    (('series = "batch"\nbatch_size = 8', 'series = "batch"\nbatch_size = 8\nprecision = "fp8"'), "'fp8' is not one of fp32, bf16, fp16"),
    (("max_length = 24", "max_lenght = 24"), "max_length: is required (found max_lenght: check the spelling)"),
    (('reference_variant = "b1"', 'reference_variant = "b2"'), "'b2' is not a declared variant"),
    (("[protocol.warmup]", "[protocol.warm]"), "[protocol] warmup: is required"),
])
def test_bad_campaign_files_name_table_and_key(tiny_campaign, tmp_path, cli, edit, message):
    campaign = tiny_campaign()
    campaign.write_text(campaign.read_text().replace(*edit), encoding="utf-8")
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 1 and message in err, err


def test_a_model_folder_without_config_fails_clearly_offline(tiny_campaign, tmp_path, cli):
    campaign = tiny_campaign()
    campaign.write_text(campaign.read_text().replace('[model]\npath = "', '[model]\npath = "missing-'), encoding="utf-8")
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 1 and "nothing is downloaded" in err


def failing_on_third_trial(real_load, calls, make_error):
    """Wrap load_model so the third trial's model raises MAKE_ERROR() at its third measured batch."""

    def load(model_dir, variant, protocol):
        tokenizer, model = real_load(model_dir, variant, protocol)
        calls["trial"] += 1
        if calls["trial"] == 3:
            real_forward, batches = model.forward, {"n": 0}

            def forward(*args, **kwargs):
                batches["n"] += 1
                if batches["n"] == 1 + 3:  # one warm-up batch, then the 3rd measured batch
                    raise make_error()
                return real_forward(*args, **kwargs)

            model.forward = forward
        return tokenizer, model

    return load


@pytest.mark.slow
def test_an_ordinary_exception_is_an_error_row_and_the_campaign_goes_on(tiny_campaign, tmp_path, monkeypatch):
    """Regression for #13: the status "error" path had no test."""
    monkeypatch.setattr(classify, "load_model", failing_on_third_trial(classify.load_model, {"trial": 0},
                                                                     lambda: ValueError("bad tensor shape (injected)")))
    # Without stages: they load the model too, and the count of loads picks the trial that fails.
    result = runner.run_campaign(campaign_file=tiny_campaign(repetitions=2), runs_dir=tmp_path / "runs", quiet=True,
                                 stages=False)
    failed = result.trials[2]
    assert (failed["variant"], failed["status"], failed["failed_phase"]) == ("b8", "error", "measured_window")
    assert failed["entries_completed"] == 16 and failed["entries_expected"] == 24
    assert "ValueError" in failed["error"] and "bad tensor shape (injected)" in failed["error"]
    assert failed["predictions"] is None and not failed["corpus_accepted"] and failed["throughput_entries_per_s"] is None
    assert [t["status"] for t in result.trials] == ["ok", "ok", "error", "ok", "ok", "ok"]


@pytest.mark.slow
def test_out_of_memory_at_the_kth_batch_is_recorded_and_the_next_trial_runs(tiny_campaign, tmp_path, monkeypatch):
    """Injected into the model's forward (a dependency), not into the runner under test."""
    import torch

    real_load = classify.load_model
    calls = {"trial": 0}

    monkeypatch.setattr(classify, "load_model", failing_on_third_trial(
        real_load, calls, lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")))
    result = runner.run_campaign(campaign_file=tiny_campaign(repetitions=2), runs_dir=tmp_path / "runs", quiet=True,
                                 stages=False)
    statuses = [(t["variant"], t["status"]) for t in result.trials]
    assert statuses[2] == ("b8", "oom") and len(statuses) == 6
    failed = result.trials[2]
    assert failed["failed_phase"] == "measured_window"
    assert failed["entries_completed"] == 16  # two batches of 8 before the third failed
    assert "OutOfMemoryError" in failed["error"] and failed["predictions"] is None and not failed["corpus_accepted"]
    assert failed["phases"]["evaluation"]["duration_ns"] is None
    assert "not reached" in failed["phases"]["evaluation"]["reason"]
    assert all(t["status"] == "ok" for t in result.trials[3:])
    assert len(reading.load(tmp_path / "runs").of_kind("trial")) == 6


@pytest.mark.slow
def test_sigterm_is_recorded_as_interrupted_and_nothing_is_lost(tiny_model, tmp_path, warm_iteralab):
    """A signal during a trial records it as interrupted; one during a record write lets that record finish first."""
    from tests.tiny import corpus_rows, write_campaign, write_corpus

    corpus = write_corpus(tmp_path / "long.jsonl", corpus_rows(300))  # trials long enough to be hit mid-way
    campaign = write_campaign(tmp_path, tiny_model, corpus, repetitions=200, batch_sizes=(1,))
    outcomes = []
    for attempt in range(3):
        runs = tmp_path / f"runs-{attempt}"
        process = warm_iteralab(["run", campaign, "--runs", runs, "--quiet"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(runs.glob("tiny/records/*.jsonl"))
            if files and files[0].read_text().count("\n") >= 3:
                break
            time.sleep(0.05)
        time.sleep(0.15)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        assert "Interrupted" in out
        loaded = reading.load(runs)
        assert loaded.problems == []
        trials = loaded.of_kind("trial")
        assert all(t["status"] == "ok" for t in trials[:-1]) and len(trials) >= 2
        outcomes.append(trials[-1])
        if trials[-1]["status"] == "interrupted":
            break
    interrupted = outcomes[-1]
    assert interrupted["status"] == "interrupted" and "SIGTERM" in interrupted["error"], [t["status"] for t in outcomes]
    assert interrupted["failed_phase"] in ("environment_check", "model_load", "warmup", "measured_window", "evaluation",
                                           "writing_results")
    # Regression for #13: entries completed are what the measured window finished, batch 1: a count below the corpus.
    if interrupted["failed_phase"] == "measured_window":
        assert 0 <= interrupted["entries_completed"] < interrupted["entries_expected"] == 300
    elif interrupted["failed_phase"] in ("environment_check", "model_load", "warmup"):
        assert interrupted["entries_completed"] == 0
    else:
        assert interrupted["entries_completed"] == 300


def test_cuda_variant_without_gpu_is_refused_before_any_record(tiny_campaign, tmp_path, cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    campaign = tiny_campaign(extra_variants='\n[[variants]]\nname = "gpu"\nbatch_size = 8\ndevice = "cuda"\n')
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs")
    assert code == 1 and "no CUDA device" in err and not (tmp_path / "runs").exists()


def test_run_refuses_unknown_campaign_file(tmp_path, cli):
    code, _, err = cli("run", tmp_path / "none.toml")
    assert code == 1 and "does not exist" in err


def test_entry_point_runs_as_module(tmp_path):
    result = run_module("--version")
    assert result.returncode == 0 and "iteralab" in result.stdout


@pytest.mark.slow
def test_runner_killed_at_random_points_keeps_every_written_record(tiny_campaign, tmp_path, cli, warm_iteralab):
    """SIGKILL mid-campaign, three times at different moments: earlier bytes never change, only a torn tail is reported."""
    import random

    runs = tmp_path / "runs"
    campaign = tiny_campaign(repetitions=100, batch_sizes=(1, 4))
    rng = random.Random(3)
    snapshot: dict = {}  # every records file as it was after the previous kill

    def contents():
        return {path: path.read_bytes() for path in sorted(runs.glob("tiny/records/*.jsonl"))}

    for _ in range(3):
        process = warm_iteralab(["run", campaign, "--runs", runs, "--quiet"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(data.count(b"\n") for data in contents().values()) < \
                sum(data.count(b"\n") for data in snapshot.values()) + 3:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.4))  # somewhere inside a trial or a record write
        flushed = contents()  # what the runner had written just before the kill: it may only grow after this
        process.kill()
        process.wait()
        after = contents()
        # Regression for #13: every earlier file byte for byte, the killed run's file from its first byte on.
        for path, data in snapshot.items():
            assert after[path] == data, f"{path.name} changed after its run ended"
        for path, data in flushed.items():
            assert after[path].startswith(data), f"{path.name} lost bytes it held before the kill"
        current = [path for path in after if path not in snapshot]
        assert len(current) == 1, "each run writes its own file"
        loaded = reading.load(runs)
        assert all("incomplete last line" in problem for problem in loaded.problems), loaded.problems
        complete = sum(data.count(b"\n") for data in after.values())
        assert len(loaded.records) == complete  # every complete line read back as a record
        assert loaded.of_kind("manifest") and len(loaded.of_kind("trial")) >= 1
        snapshot = after
    code, out, _ = cli("check", runs)
    assert "Traceback" not in out and code in (0, 1)


@pytest.mark.slow
def test_torch_compile_variant_times_compilation_apart(tiny_campaign, tmp_path):
    """compile = true compiles in its own phase on the first batch (torch.compile on the CPU, gcc)."""
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1, 4),
                             extra_variants='\n[[variants]]\nname = "b4c"\nbatch_size = 4\ncompile = true\n')
    result = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True)
    compiled = next(t for t in result.trials if t["variant"] == "b4c")
    assert compiled["status"] == "ok", compiled["error"]
    assert compiled["phases"]["compilation"]["duration_ns"] > 0
    plain = next(t for t in result.trials if t["variant"] == "b4")
    assert plain["phases"]["compilation"]["duration_ns"] is None
    assert compiled["quality"]["overall"]["agreement"] == 1.0


@pytest.mark.slow
def test_a_second_run_is_compared_with_the_first_runs_reference(tiny_campaign, tmp_path):
    campaign = tiny_campaign(repetitions=1, batch_sizes=(1, 4))
    first = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True)
    second = runner.run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True)
    reference_id = first.trials[0]["record_id"]
    assert first.trials[0]["variant"] == "b1"
    assert {t["quality"]["reference"]["trial_id"] for t in first.trials + second.trials} == {reference_id}
    assert len(reading.load(tmp_path / "runs").of_kind("manifest")) == 2


def test_every_campaign_file_mistake_is_listed_at_once_and_as_json_with_json(tiny_campaign, tmp_path, cli):
    """Part of #21: a campaign file reported only its first error, and --json errors were plain text."""
    campaign = tiny_campaign()
    text = campaign.read_text()
    for old, new in (("batch_size = 4", "batch_size = 0"), ("max_length = 24", "max_lenght = 24"),
                     ('reference_variant = "b1"', 'reference_variant = "b2"'), ("seed = ", "seed = 'x' #")):
        assert old in text
        text = text.replace(old, new, 1)
    campaign.write_text(text, encoding="utf-8")
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    lines = err.splitlines()
    assert code == 1 and lines[0] == f"iteralab run: error: {campaign}: 5 mistakes, each to fix:", err
    assert lines[1:] == [
        "  - [variants.2] batch_size: must be at least 1, not 0",
        "  - [protocol] max_length: is required (found max_lenght: check the spelling)",
        "  - [protocol] seed: must be a whole number, not 'x'",
        "  - [protocol] reference_variant: 'b2' is not a declared variant",
        "  - [protocol] unknown key(s) max_lenght (did you mean max_length?); check the spelling",
    ]
    code, out, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run", "--json")
    error = json.loads(err)
    assert (code, out, error["command"], error["exit_status"]) == (1, "", "run", 1)
    assert error["error"].startswith(f"{campaign}: 5 mistakes, each to fix:\n  - [variants.2] batch_size")
    code, _, err = cli("decide", "nope", "--runs", tmp_path, "--json")
    assert code == 1 and json.loads(err)["error"].startswith("campaign nope has no records")


def test_a_missing_corpus_names_its_full_path_and_the_rule(tiny_campaign, tmp_path, cli):
    campaign = tiny_campaign()
    campaign.write_text(campaign.read_text().replace('path = "', 'path = "finall', 1), encoding="utf-8")
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 1 and "does not exist (a campaign file's paths are relative to its folder)" in err, err
    assert f"iteralab run: error: corpus file {tmp_path.resolve()}/finall" in err  # the full path, not "finall..."


def test_an_empty_variants_list_is_named_with_its_key(tiny_campaign, tmp_path, cli):
    campaign = tiny_campaign()
    text = campaign.read_text()
    campaign.write_text("variants = []\n" + text[:text.index("[[variants]]")], encoding="utf-8")  # a top-level key
    code, _, err = cli("run", campaign, "--runs", tmp_path / "runs", "--dry-run")
    assert code == 1 and "[campaign file] variants: declare at least one [[variants]] table" in err, err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Inference:
    completed = 0
    progress_total, progress_unit = None, "entries"

    def step(self, encoded):
        self.completed += encoded
        return encoded


@pytest.mark.parametrize("quiet", [False, True])
def test_the_progress_bar_counts_the_window_on_a_terminal_and_is_silent_when_piped_or_quiet(quiet):
    """Regression for #33: the hand-written bar became tqdm's; piped output stays quiet, the window is not wrapped."""
    from iteralab.run.summary import Progress

    for stream in (_Terminal(), io.StringIO()):
        progress, inference = Progress(quiet=quiet, stream=stream), _Inference()
        step = inference.step
        progress.start("3/6 b4 rep 1", 10)
        progress.attach(inference)
        for _ in range(5):
            inference.step(2)
        if progress.enabled:
            assert (progress.bar.n, progress.bar.total) == (10, 10)  # drawn at most every 0.2 s, counted at every batch
        progress.done("ok")
        shown = stream.getvalue()
        if quiet or not stream.isatty():
            assert shown == "" and inference.step == step
        else:
            assert "3/6 b4 rep 1:" in shown and "/10 [" in shown and shown.endswith("3/6 b4 rep 1                     ok\n")
