"""Serving campaigns end to end (#64): the runner starts a real `transformers serve` engine for each trial, drives NVIDIA
AIPerf against it level by level, records every request with its id, and leaves no engine running."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from iteralab.core.files import cache_root
from iteralab.run.runner import run_campaign
from iteralab.serving import engine as engines
from iteralab.serving import load_generator
from iteralab.store import reading
from tests.tiny import build_causal_lm, corpus_rows, write_corpus, write_serving_campaign

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def processes_holding(text: str) -> list[int]:
    """Return the live processes whose command line holds TEXT."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") and \
                    (entry / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def gone(text: str, seconds: float = 15) -> bool:
    """Wait up to SECONDS for every process holding TEXT to end."""
    deadline = time.monotonic() + seconds
    while processes_holding(text) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not processes_holding(text)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Run a 2-repetition serving campaign whose first trial's engine is killed as its first level starts."""
    folder = tmp_path_factory.mktemp("serve")
    model = build_causal_lm(folder / "lm", word="good")
    corpus = write_corpus(folder / "corpus.jsonl", corpus_rows(6))
    campaign = write_serving_campaign(folder, model, corpus, repetitions=2, levels=(1, 2), requests=4)
    real, killed = load_generator.run_level, []

    def killing_the_first_engine(**arguments):
        if not killed:  # the first trial's engine dies as its first level begins: every request of it fails
            engine = engines._started[-1]
            os.killpg(engine.process.pid, signal.SIGKILL)
            engine.process.wait()
            killed.append(engine.process.pid)
        return real(**arguments)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load_generator, "run_level", killing_the_first_engine)
        result = run_campaign(campaign_file=campaign, runs_dir=folder / "runs", quiet=True, stages=False)
    return folder, model, result


def test_a_serving_trial_records_every_request_with_its_id_and_no_engine_outlives_the_run(served):
    """Every planned request is a row with its corpus id, the file's hash is the record's, the levels rotate across
    repetitions, and no engine or load generator is left running."""
    folder, model, result = served
    ok = [trial for trial in result.trials if trial["status"] == "ok"]
    assert len(ok) == 1
    trial = ok[0]
    levels = trial["serving"]["levels"]
    assert [level["level"] for level in levels] == [2, 1]  # repetition 2 starts where repetition 1 ended
    rows = [json.loads(line) for line in (folder / "runs" / trial["predictions"]["path"]).read_text().split("\n") if line]
    assert hashlib.sha256((folder / "runs" / trial["predictions"]["path"]).read_bytes()).hexdigest() == \
        trial["predictions"]["sha256"]
    assert sorted((row["level"], row["id"]) for row in rows) == sorted(
        (level, f"doc-{index:03d}") for level in (1, 2) for index in range(4))
    assert all(row["status"] == "ok" and row["output_text"] == "good good good good" and row["output_tokens"] == 4
               for row in rows)
    assert trial["id_check"]["ids_match"] and trial["corpus_accepted"]
    assert trial["serving"]["engine"]["started_by_runner"] and trial["serving"]["engine"]["ready_s"] > 0
    assert trial["phases"]["model_load"]["duration_ns"] > 0 and trial["phases"]["engine_stop"]["completed"]
    assert gone(str(model))  # neither the engine (it serves the folder) nor a load generator (its tokenizer) is left
    left = sorted(str(path) for path in (cache_root() / "load-generator").glob("*/*"))
    assert left == []  # AIPerf's files lie beside the requests, or nowhere


def test_an_engine_killed_during_a_level_fails_its_trial_with_a_row_per_request_and_the_next_trial_restarts(served):
    """Killing the engine during a level gives rows for the failed requests, a failed trial at that phase, and a
    restart for the next trial."""
    folder, _, result = served
    failed, restarted = result.trials
    assert failed["status"] == "error" and failed["failed_phase"] == "measured_window"
    assert "the engine exited during load level" in failed["error"]
    rows = [json.loads(line) for line in (folder / "runs" / failed["predictions"]["path"]).read_text().split("\n") if line]
    assert len(rows) == 4 and all(row["status"] == "error" and row["error"] for row in rows)
    assert restarted["status"] == "ok" and restarted["serving"]["engine"]["ready_s"] > 0


def test_check_finds_no_problem_and_decide_answers_per_million_accepted_tokens(served, cli):
    """The records pass check, and decide names the capacity and why the cost is undefined on a CPU."""
    folder, _, _ = served
    assert reading.load(folder / "runs").problems == []
    code, out, err = cli("decide", "tiny-serve", "--runs", folder / "runs")
    assert code == 0, err
    assert "serves up to level 2 within the objective" in out
    assert "1 other trial(s) failed" in out  # the repetition whose engine was killed is said beside the level reached
    assert "cost per million accepted output tokens is undefined: not in the catalog: CPU" in out
    # A failed trial (its engine killed, its rows all errors) and an ok one on the same pages, built without a word.
    code, out, err = cli("build", "--runs", folder / "runs", "--out", folder / "site")
    assert code == 0 and "Traceback" not in err, err
    assert "requests.csv" in (folder / "site" / "campaigns" / "tiny-serve" / "index.html").read_text()


def test_a_campaign_against_a_url_records_that_the_runner_did_not_start_the_engine(tmp_path):
    """engine = "url": the runner reads /v1/models, measures, and leaves the user's engine (another process) running."""
    model = build_causal_lm(tmp_path / "lm", word="bad")
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(3))
    port = engines.free_port()
    users = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", str(model), "--host",
                              "127.0.0.1", "--port", str(port), "--device", "cpu"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.3)
        campaign = write_serving_campaign(tmp_path, model, corpus, name="tiny-url", levels=(1,), requests=3,
                                          engine="url", url=f"http://127.0.0.1:{port}")
        result = run_campaign(campaign_file=campaign, runs_dir=tmp_path / "runs", quiet=True, stages=False)
        assert users.poll() is None  # the runner never stops an engine it did not start
    finally:
        os.killpg(users.pid, signal.SIGKILL)
        users.wait()
    trial = result.trials[0]
    assert trial["status"] == "ok", trial["error"]
    assert trial["serving"]["engine"]["started_by_runner"] is False
    assert trial["serving"]["engine"]["ready_s"] is None
    assert {row["id"] for row in map(json.loads, (tmp_path / "runs" / trial["predictions"]["path"]).read_text()
                                     .split("\n")[:-1])} == {"doc-000", "doc-001", "doc-002"}


def test_ctrl_c_during_a_level_leaves_no_engine_and_no_load_generator(tmp_path):
    """SIGINT to `iteralab run` while AIPerf sends requests: the trial is recorded as interrupted and nothing it started
    runs on."""
    model = build_causal_lm(tmp_path / "lm", word="good")
    corpus = write_corpus(tmp_path / "corpus.jsonl", corpus_rows(4))
    campaign = write_serving_campaign(tmp_path, model, corpus, name="tiny-stopped", levels=(1,), requests=400)
    runner = subprocess.Popen([sys.executable, "-m", "iteralab", "run", str(campaign), "--runs", str(tmp_path / "runs"),
                               "--quiet", "--no-stages"], cwd=ROOT,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "ITERALAB_CACHE_DIR": str(tmp_path / "cache")},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    mine = f"--tokenizer {model}"  # this test's load generator (AIPerf names the model's folder as its tokenizer)
    deadline = time.monotonic() + 240
    while not processes_holding(mine) and time.monotonic() < deadline and runner.poll() is None:
        time.sleep(0.2)
    assert processes_holding(mine), runner.communicate(timeout=30)[0]
    runner.send_signal(signal.SIGINT)
    output = runner.communicate(timeout=120)[0].decode()
    assert gone(str(model)), output  # the engine serves the folder, the load generator counts with it: neither is left
    trials = reading.load(tmp_path / "runs").of_campaign("tiny-stopped", "trial")
    assert [trial["status"] for trial in trials] == ["interrupted"]
