"""AIPerf as the serving load generator, driven against real `transformers serve` engines of tiny models."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from iteralab.core.errors import UserError
from iteralab.serving import load_generator
from iteralab.serving.aiperf_stream import read_records
from iteralab.serving.load_generator import Level, LoadGeneratorFailed, find_aiperf, run_level
from tests.tiny import WORDS, build_causal_lm

pytestmark = pytest.mark.slow

PROMPTS = [(f"doc-{index}", " ".join(WORDS[index:index + 3 + index])) for index in range(4)]
GOOD = 5  # "good": the word the speaking model always says


def tiny_lm(folder: Path, *, speaks: bool) -> Path:
    """Save a tiny GPT-2 that always says "good" (SPEAKS) or always ends at once, with a tokenizer that knows the words."""
    import torch
    from transformers import BertTokenizerFast, GPT2LMHeadModel

    build_causal_lm(folder, always_end=True)
    if speaks:
        model = GPT2LMHeadModel.from_pretrained(folder)
        with torch.no_grad():
            model.lm_head.weight.zero_()
            model.lm_head.weight[GOOD] = 1.0
        model.save_pretrained(folder)
    # tiny.py's tokenizer, built from a vocabulary file, holds only the special tokens under transformers 5: every word
    # would be [UNK] and every generated word decode to nothing.
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    BertTokenizerFast(vocab={word: index for index, word in enumerate(vocab)}, eos_token="[SEP]",
                      bos_token="[CLS]").save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A `transformers serve` in its own process group, serving FORCED only or any model folder asked for."""

    def __init__(self, log: Path, forced: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [str(Path(sys.executable).parent / "transformers"), "serve", *([str(forced)] if forced else []),
                   "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        with open(log, "wb") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                            start_new_session=True)

    def wait_ready(self, timeout_s: float = 180) -> Server:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"transformers serve exited {self.process.returncode}:\n{self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return self
            time.sleep(0.3)
        pytest.fail(f"transformers serve was not ready in {timeout_s} s:\n{self.log.read_text()[-2000:]}")

    def requests_logged(self) -> int:
        return self.log.read_text(errors="replace").count("POST /v1/completions")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Start the module's engines at once: one serving both tiny models, and one to be killed mid-level."""
    folder = tmp_path_factory.mktemp("engines")
    speaking = tiny_lm(folder / "speaking", speaks=True)
    ending = tiny_lm(folder / "ending", speaks=False)
    shared = Server(folder / "shared.log")
    doomed = Server(folder / "doomed.log", forced=speaking)
    try:
        yield {"server": shared.wait_ready(), "speaking": speaking, "ending": ending, "doomed": doomed}
    finally:
        shared.kill()
        doomed.kill()


def level(engines, tmp_path, model: Path, *, server=None, **options):
    arguments = {"aiperf": find_aiperf(), "url": (server or engines["server"]).url, "model_name": str(model),
                 "tokenizer_dir": model, "prompts": PROMPTS, "level": Level("concurrency", 2), "requests": 6,
                 "warmup_requests": 2, "max_tokens": 4, "seed": 1, "out_dir": tmp_path / "level", "timeout_s": 300}
    return run_level(**{**arguments, **options})


def test_a_level_gives_one_row_per_request_in_order_with_the_warmup_apart(engines, tmp_path):
    run = level(engines, tmp_path, engines["speaking"])
    # 6 requests over 4 prompts: the profiling phase starts at the first prompt and cycles
    assert [row["id"] for row in run.rows] == ["doc-0", "doc-1", "doc-2", "doc-3", "doc-0", "doc-1"]
    assert Counter(row["id"] for row in run.rows) == Counter({"doc-0": 2, "doc-1": 2, "doc-2": 1, "doc-3": 1})
    assert [row["id"] for row in run.warmup_rows] == ["doc-2", "doc-3"]
    assert {row["phase"] for row in run.warmup_rows} == {"warmup"}
    assert {row["phase"] for row in run.rows} == {"profiling"}
    for row in run.rows:
        assert tuple(row) == load_generator.ROW_FIELDS
        assert (row["level"], row["arrival"], row["status"], row["error"], row["empty_output"]) == (
            2, "concurrency", "ok", None, False)
        assert row["http_status"] == 200 and row["finish_reason"] == "length"
        assert row["output_tokens"] == 4 and row["output_text"] == "good good good good"
        # the server's count: [CLS], the prompt's words, [SEP]
        assert row["prompt_tokens"] == len(dict(PROMPTS)[row["id"]].split()) + 2
        assert 0 < row["ttft_ms"] <= row["latency_ms"]
        assert row["chunk_times_ms"][0] == pytest.approx(row["ttft_ms"])
        assert row["chunk_times_ms"] == sorted(row["chunk_times_ms"])
        assert row["sent_ns"] < row["first_token_ns"] <= row["end_ns"]
        assert row["token_ids"] is None and row["chunk_tokens"] is None
    sends = [row["sent_ns"] for row in run.rows]
    assert run.duration_s == pytest.approx((max(row["end_ns"] for row in run.rows) - min(sends)) / 1e9)
    assert max(row["end_ns"] for row in run.warmup_rows) <= min(sends)
    assert run.wall_s > run.duration_s > 0 and run.client_cpu_s > 0
    assert run.artifacts.is_dir() and run.command[1] == "profile"


def test_an_output_with_no_text_is_an_empty_output_not_a_failure(engines, tmp_path, monkeypatch):
    """Also: a level leaves nothing in the temporary folder (AIPerf left an aiperf_mmap_* folder there each level)."""
    temporary = Path(tempfile.mkdtemp(prefix="lg-", dir="/tmp"))  # short: AIPerf's sockets go in it
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # Python read TMPDIR once
    try:
        # open loop (Poisson arrivals at 20 requests/s), the other kind of level
        run = level(engines, tmp_path, engines["ending"], requests=4, warmup_requests=1, level=Level("poisson", 20))
        left = sorted(str(path.relative_to(temporary)) for path in temporary.rglob("*"))
        assert left == [], left
    finally:
        shutil.rmtree(temporary)
    assert "--arrival-pattern" in run.command and run.command[run.command.index("--arrival-pattern") + 1] == "poisson"
    assert {row["level"] for row in run.rows} == {20} and {row["arrival"] for row in run.rows} == {"poisson"}
    assert [row["id"] for row in run.rows] == ["doc-0", "doc-1", "doc-2", "doc-3"]
    for row in run.rows:
        assert (row["status"], row["error"], row["empty_output"], row["output_text"]) == ("ok", None, True, "")
        assert row["finish_reason"] == "stop" and row["output_tokens"] == 1 and row["http_status"] == 200
        assert row["ttft_ms"] is None and row["latency_ms"] > 0


def test_aiperf_that_records_nothing_is_its_failure_not_the_engines(engines, tmp_path, monkeypatch):
    """A temporary folder whose path is too long for AIPerf's sockets: AIPerf fails to start yet exits 0. The level
    was every request "no record"; it is AIPerf's failure, with its log. Such a folder is not given to AIPerf."""
    long = tmp_path / ("x" * 60)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    assert load_generator._short_temporary_folder() == "/tmp"
    monkeypatch.setattr(load_generator, "_short_temporary_folder", lambda: str(long))
    with pytest.raises(LoadGeneratorFailed, match=r"(?s)recording no request.*longer than 107 characters"):
        level(engines, tmp_path, engines["speaking"], requests=2, warmup_requests=0)
    assert list(long.iterdir()) == []


def test_a_server_killed_mid_level_gives_error_rows_and_no_gap(engines, tmp_path):
    doomed = engines["doomed"].wait_ready()
    threading.Thread(target=kill_after, args=(doomed, 5), daemon=True).start()
    run = level(engines, tmp_path, engines["speaking"], server=doomed, requests=10, warmup_requests=1,
                max_tokens=8, level=Level("concurrency", 1))
    assert [row["id"] for row in run.rows] == [PROMPTS[k % 4][0] for k in range(10)]
    statuses = [row["status"] for row in run.rows]
    assert statuses[:3] == ["ok"] * 3 and statuses[-1] == "error"
    # once one request failed, all after it did (the server is gone)
    assert statuses == sorted(statuses, key=lambda status: status == "error")
    for row in run.rows:
        if row["status"] == "error":
            assert row["error"] and row["sent_ns"] and not row["empty_output"]


def kill_after(server: Server, logged: int) -> None:
    """Kill SERVER once it has logged LOGGED requests: at concurrency 1, LOGGED - 1 have ended by then."""
    deadline = time.monotonic() + 240
    while server.requests_logged() < logged and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()


def test_missing_rows_are_filled_and_a_missing_aiperf_is_the_users_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("ITERALAB_AIPERF", str(tmp_path / "nowhere" / "aiperf"))
    with pytest.raises(UserError, match="make setup"):
        find_aiperf()
    plan = load_generator._plan(PROMPTS, 5, 2)
    assert list(plan) == ["w0:doc-2", "w1:doc-3", "r0:doc-0", "r1:doc-1", "r2:doc-2", "r3:doc-3", "r4:doc-0"]
    row = load_generator._row(plan["r4:doc-0"], None, Level("poisson", 2.5))
    assert tuple(row) == load_generator.ROW_FIELDS
    assert (row["id"], row["status"], row["error"], row["level"], row["arrival"]) == (
        "doc-0", "error", load_generator.MISSING, 2.5, "poisson")


def test_a_failing_aiperf_raises_with_its_log_and_command(tmp_path):
    # a stand-in that logs and exits, as AIPerf does when it cannot run a level: no engine needed
    stand_in = tmp_path / "aiperf"
    stand_in.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --output-artifact-dir ] && dir=$2; shift; done\n'
                        'mkdir -p "$dir/logs" && echo "ERROR the stand-in refuses" > "$dir/logs/aiperf.log"\nexit 3\n')
    stand_in.chmod(0o755)
    with pytest.raises(LoadGeneratorFailed, match=r"(?s)exited with status 3, recording no request; 2 of 2 requests failed: 2 × no record "
                                                  r"from the load generator.*the stand-in refuses.*command: .*profile"
                       ) as caught:
        run_level(aiperf=stand_in, url="http://127.0.0.1:9", model_name="m", tokenizer_dir=tmp_path, prompts=PROMPTS,
                  level=Level("concurrency", 1), requests=2, warmup_requests=0, max_tokens=4, seed=1,
                  out_dir=tmp_path / "level")
    # never a gap: every planned request is a row
    assert [(row["id"], row["error"]) for row in caught.value.run.rows] == [
        ("doc-0", load_generator.MISSING), ("doc-1", load_generator.MISSING)]


def test_an_error_inside_a_stream_fails_the_request_that_aiperf_counts_as_done():
    # what a transformers serve stopped by SIGTERM sends mid-stream (seen in AIPerf's raw record), with status 200
    packets = ['{"id":"x","choices":[{"index":0,"text":"good"}],"object":"text_completion"}',
               '{"error": "The model\'s process crashed (exit code -15)."}']
    raw = {"start_perf_ns": 1_000_000, "status": 200,
           "responses": [{"perf_ns": 3_000_000 + k, "packets": [{"name": "data", "value": value}]}
                         for k, value in enumerate(packets)]}
    record = {"metadata": {"request_start_ns": 5_000_000, "request_end_ns": 9_000_000}, "metrics": {}}
    row = load_generator._row(("doc-0", "good", "profiling"), (record, raw), Level("concurrency", 1))
    assert (row["status"], row["http_status"], row["output_text"], row["ttft_ms"]) == ("error", 200, "good", 2.0)
    assert "crashed" in row["error"] and row["first_token_ns"] == 7_000_000


def test_aiperf_records_split_at_newlines_only(tmp_path):
    # AIPerf writes text as it came (U+2028 and U+0085 unescaped): str.splitlines() would cut such a record in two and
    # lose it as torn, leaving its request "no record from the load generator"
    path = tmp_path / "profile_export.jsonl"
    texts = ["one\u2028two", "three\x85four", "five\x0csix"]
    path.write_bytes(b"".join(json.dumps({"text": text}, ensure_ascii=False).encode() + b"\n" for text in texts)
                     + b'{"text": "torn')
    assert [line["text"] for line in read_records(path)] == texts
    assert read_records(tmp_path / "absent.jsonl") == []
