"""Drive NVIDIA AIPerf as the serving campaign's load generator: one AIPerf process per load level, one row per request."""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.machine import interference
from iteralab.serving import client_cpu
from iteralab.serving.aiperf_stream import metric, read_records, read_stream

AIPERF_VERSION = "0.13.0"
ARRIVALS = ("concurrency", "poisson")
MISSING = "no record from the load generator"
# AIPerf's verdict on a stream that carried no text (the model emitted only its end token): an empty output, which the
# campaign keeps as such, not a failed request.
EMPTY_OUTPUT = "InvalidInferenceResultError"
# Each chunk's arrival is in the raw records only, so the level asks for them (about 200 bytes per streamed token).
EXPORT_LEVEL = "raw"
INSTALL = ("`make setup` installs it into .venv/tools/aiperf (or: python -m venv X && X/bin/pip install "
           f"aiperf=={AIPERF_VERSION}, then set ITERALAB_AIPERF=X/bin/aiperf)")
LOG_TAIL = 40
# A row's fields, in order. Times: sent_ns, first_token_ns and end_ns on the wall clock (time.time_ns), ttft_ms,
# latency_ms and chunk_times_ms (each text chunk's arrival as AIPerf read it, chunks read together share a time) after
# sending. Token counts are the server's (usage). chunk_tokens and token_ids are always None: the stream carries text
# only, a chunk may hold several tokens, and the server counts the output whole.
ROW_FIELDS = ("id", "level", "arrival", "phase", "sent_ns", "first_token_ns", "end_ns", "ttft_ms", "latency_ms",
              "chunk_times_ms", "chunk_tokens", "prompt_tokens", "output_tokens", "output_text", "token_ids",
              "finish_reason", "status", "http_status", "error", "empty_output")
# AIPerf 0.13 paces a concurrency-only level with a zero interval: while every slot is busy its timing service spins on
# the event loop, a whole core for the level's length (33,672 wake-ups in 1.5 s, traced), taken from the engine on a
# small machine. Paced by a constant rate instead, it looks for a free slot this many times a second: the next request
# leaves at most 1/TICK_HZ s after a slot frees (0.5 ms on average at 2,000 per second). None: AIPerf's own spin.
CLOSED_LOOP_TICK_HZ: float | None = 2000


class LoadGeneratorFailed(RuntimeError):
    """AIPerf did not run a level through; RUN holds what rows it left, if any."""

    def __init__(self, message: str, run: LevelRun | None = None):
        super().__init__(message)
        self.run = run


@dataclass
class Level:
    """One declared load level: closed-loop concurrency, or open-loop Poisson arrivals at a rate (requests/s)."""

    arrival: str
    value: float

    def __post_init__(self):
        if self.arrival not in ARRIVALS:
            raise UserError(f"load level arrival {self.arrival!r}: use one of {', '.join(ARRIVALS)}")
        if not (isinstance(self.value, int | float) and math.isfinite(self.value) and self.value > 0):
            raise UserError(f"load level {self.arrival} = {self.value!r}: use a number above 0")
        if self.arrival == "concurrency":
            if self.value != int(self.value):
                raise UserError(f"load level concurrency = {self.value!r}: use a whole number of requests in flight")
            self.value = int(self.value)


@dataclass
class LevelRun:
    """What one level gave: its rows, its warm-up apart, and what the load generator itself cost."""

    level: Level
    rows: list[dict]
    warmup_rows: list[dict]
    wall_s: float
    client_cpu_s: float | None  # while the level's requests were in flight (None: the samples did not cover them)
    duration_s: float
    artifacts: Path
    command: list[str] = field(default_factory=list)
    client_cpu_total_s: float | None = None  # the whole AIPerf process tree's, its start-up included


def find_aiperf() -> Path:
    """Return AIPerf's command: $ITERALAB_AIPERF, else the project's tools venv, else the PATH's."""
    named = os.environ.get("ITERALAB_AIPERF")
    if named:
        path = Path(named)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise UserError(f"ITERALAB_AIPERF={named} is not an executable file: point it at AIPerf's `aiperf`; {INSTALL}")
    tools = Path(sys.prefix) / "tools" / "aiperf" / "bin" / "aiperf"
    if tools.is_file():
        return tools
    found = shutil.which("aiperf")
    if found:
        return Path(found)
    raise UserError(f"AIPerf, the serving campaign's load generator, is not installed: {INSTALL}")


def aiperf_version(path: Path) -> str:
    """Return the version AIPerf at PATH reports."""
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=120, env=_env())
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LoadGeneratorFailed(f"{path} --version did not answer: {error}") from error
    words = done.stdout.split()
    if done.returncode != 0 or not words:
        raise LoadGeneratorFailed(f"{path} --version exited {done.returncode}: {(done.stderr or done.stdout)[-500:]}")
    return words[-1]


def run_level(*, aiperf: Path, url: str, model_name: str, tokenizer_dir: Path, prompts: list[tuple[str, str]],
              level: Level, requests: int, warmup_requests: int, max_tokens: int, seed: int, out_dir: Path,
              timeout_s: float = 600) -> LevelRun:
    """Send REQUESTS streamed completions at LEVEL after WARMUP_REQUESTS, through AIPerf, and return a row for each.

    PROMPTS are (corpus id, text). The profiling requests take them in order from the first, cycling when REQUESTS is
    larger than the corpus (the ids repeat); the warm-up requests take the prompts just before, so the profiling phase
    starts at the first prompt. Every request has its own session id in AIPerf's input file (``r<k>:<id>`` or
    ``w<k>:<id>``), as AIPerf would merge the lines of one session id into one multi-turn conversation. Rows are in
    the order AIPerf issued the requests; a request it left no record of is a row with the error MISSING.
    """
    if not prompts:
        raise UserError("the serving level has no prompts: the corpus is empty")
    if requests < 1 or warmup_requests < 0 or max_tokens < 1:
        raise UserError(f"requests {requests}, warm-up {warmup_requests}, max_tokens {max_tokens}: "
                        "use at least one request and one token, and no negative warm-up")
    out_dir.mkdir(parents=True, exist_ok=True)
    artifacts = out_dir / "aiperf"
    if artifacts.exists():  # a level run again: AIPerf's files of the earlier try would be read as this one's
        shutil.rmtree(artifacts)
    plan = _plan(prompts, requests, warmup_requests)
    input_file = out_dir / "requests.jsonl"
    input_file.write_text("".join(json.dumps({"session_id": key, "text": text}) + "\n"
                                  for key, (_, text, _) in plan.items()), encoding="utf-8")
    command = _command(aiperf=aiperf, url=url, model_name=model_name, tokenizer_dir=tokenizer_dir, level=level,
                       requests=requests, warmup_requests=warmup_requests, max_tokens=max_tokens, seed=seed,
                       input_file=input_file, artifacts=artifacts, timeout_s=timeout_s)
    returncode, wall_s, cpu_s, samples = _run(command, artifacts, timeout_s)
    records = _records(artifacts)
    rows = {key: _row(plan[key], records.get(key), level) for key in plan}
    run = LevelRun(level=level, rows=[row for row in rows.values() if row["phase"] == "profiling"],
                   warmup_rows=[row for row in rows.values() if row["phase"] == "warmup"], wall_s=wall_s,
                   client_cpu_s=client_cpu.in_flight(samples, rows.values()), duration_s=_duration_s(rows.values()),
                   artifacts=artifacts, command=command, client_cpu_total_s=cpu_s)
    _check_ids(run, prompts, requests, records, plan, command)
    if (returncode != 0 or not records) and not _ran_through(run, records, plan):
        said = "" if records else ", recording no request"
        raise LoadGeneratorFailed(f"AIPerf exited with status {returncode}{said}; {_failures(run)}.\n{_log_tail(artifacts)}"
                                  f"\ncommand: {subprocess.list2cmdline(command)}", run)
    return run


def _plan(prompts: list[tuple[str, str]], requests: int, warmup: int) -> dict[str, tuple[str, str, str]]:
    """Return each request's session id -> (corpus id, prompt, phase), in the order AIPerf will send them."""
    plan = {}
    for k in range(warmup):
        corpus_id, text = prompts[(k - warmup) % len(prompts)]
        plan[f"w{k}:{corpus_id}"] = (corpus_id, text, "warmup")
    for k in range(requests):
        corpus_id, text = prompts[k % len(prompts)]
        plan[f"r{k}:{corpus_id}"] = (corpus_id, text, "profiling")
    return plan


def _command(*, aiperf: Path, url: str, model_name: str, tokenizer_dir: Path, level: Level, requests: int,
             warmup_requests: int, max_tokens: int, seed: int, input_file: Path, artifacts: Path,
             timeout_s: float) -> list[str]:
    """Return AIPerf's command line for one level."""
    command = [str(aiperf), "profile", "--model-names", model_name, "--url", url, "--endpoint-type", "completions",
               "--streaming", "--input-file", str(input_file), "--custom-dataset-type", "single_turn",
               "--dataset-sampling-strategy", "sequential", "--tokenizer", str(tokenizer_dir),
               "--request-count", str(requests), "--random-seed", str(seed),
               # greedy: an engine that samples by default must not; transformers serve ignores it with a warning
               "--extra-inputs", f"max_tokens:{max_tokens}", "--extra-inputs", "temperature:0",
               "--use-server-token-count", "--export-level", EXPORT_LEVEL, "--output-artifact-dir", str(artifacts),
               "--ui-type", "none", "--request-timeout-seconds", f"{timeout_s:g}",
               # the campaign watches the cards and the server itself; AIPerf's probes would only add requests
               "--no-server-metrics", "--no-gpu-telemetry"]
    if warmup_requests:
        command += ["--warmup-request-count", str(warmup_requests)]
    if level.arrival == "concurrency":
        command += ["--concurrency", str(int(level.value))]
        if CLOSED_LOOP_TICK_HZ:
            command += ["--request-rate", f"{CLOSED_LOOP_TICK_HZ:g}", "--arrival-pattern", "constant"]
    else:
        command += ["--request-rate", f"{level.value:g}", "--arrival-pattern", "poisson"]
    return command


def _env(scratch: Path | None = None) -> dict[str, str]:
    """Return AIPerf's environment: ours without HF_HUB_OFFLINE, with which AIPerf 0.13 fails to start, and SCRATCH as
    its temporary folder: it left two folders in the system's at every level (its sockets' and its dataset's)."""
    env = dict(os.environ)
    env.pop("HF_HUB_OFFLINE", None)
    if scratch is not None:
        env["TMPDIR"] = str(scratch)
    return env


def _run(command: list[str], artifacts: Path, timeout_s: float) -> tuple[int, float, float, list]:
    """Run COMMAND to its end; return its exit status, wall seconds, the CPU seconds of its whole process tree, and
    samples of that CPU over time (client_cpu: what the level's requests in flight cost it, start-up left out)."""
    # RUSAGE_CHILDREN counts every descendant waited for (AIPerf's 7 processes: within 1.5 % of psutil's sum), and any
    # other child this process reaps meanwhile.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    artifacts.mkdir(parents=True, exist_ok=True)
    with (open(artifacts.parent / "aiperf-console.log", "wb") as console,
          tempfile.TemporaryDirectory(prefix="iteralab-aiperf-", dir=_short_temporary_folder()) as scratch):
        process = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_env(Path(scratch)), start_new_session=True)
        interference.OWN_SESSIONS.add(process.pid)  # its CPU is the trial's, not a disturbance of it
        try:
            with client_cpu.TreeSampler(process.pid) as sampler:
                returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise LoadGeneratorFailed(f"AIPerf ran past {timeout_s:g} s and was stopped.\n{_log_tail(artifacts)}\n"
                                      f"command: {subprocess.list2cmdline(command)}") from None
        finally:  # interrupted, or ended with a service of its still writing: none may outlive the level
            _kill_group(process)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return returncode, wall_s, cpu_s, sampler.samples


def _short_temporary_folder() -> str:
    """Return the temporary folder, or /tmp where its path is too long for AIPerf's sockets inside it (a socket's
    path holds at most 107 bytes, and AIPerf adds about 75 to it; it then fails to start yet exits 0)."""
    folder = tempfile.gettempdir()
    return folder if len(os.fsencode(folder)) <= 32 or not os.path.isdir("/tmp") else "/tmp"


def _kill_group(process: subprocess.Popen) -> None:
    """Kill what is left of PROCESS's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group ended by itself in the meantime
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _log_tail(artifacts: Path) -> str:
    """Return the last lines of AIPerf's log (or of its console when it wrote no log)."""
    for path in (artifacts / "logs" / "aiperf.log", artifacts.parent / "aiperf-console.log"):
        if path.is_file():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            return f"the end of {path}:\n" + "\n".join(lines[-LOG_TAIL:])
    return "AIPerf wrote no log."


def _records(artifacts: Path) -> dict[str, tuple[dict, dict | None]]:
    """Return each request's (record, raw record) by session id, from the record files AIPerf wrote."""
    raw = {}
    # merged at the end of a run that exported; a run that failed left only each record processor's own file
    merged = artifacts / "profile_export_raw.jsonl"
    for path in [merged] if merged.is_file() else sorted(artifacts.glob("raw_records/*.jsonl")):
        for line in read_records(path):
            raw.setdefault(line["metadata"].get("x_request_id"), line)
    records: dict[str, tuple[dict, dict | None]] = {}
    duplicates = []
    for line in read_records(artifacts / "profile_export.jsonl"):
        key = line["metadata"].get("conversation_id")
        if key in records:
            duplicates.append(key)
        records[key] = (line, raw.get(line["metadata"].get("x_request_id")))
    if duplicates:
        raise LoadGeneratorFailed(f"AIPerf sent these requests more than once: {', '.join(map(str, duplicates[:5]))}")
    return records


def _row(planned: tuple[str, str, str], found: tuple[dict, dict | None] | None, level: Level) -> dict:
    """Return one request's row from AIPerf's record and raw record (None: AIPerf left no record)."""
    corpus_id, _, phase = planned
    row = dict.fromkeys(ROW_FIELDS)
    row.update(id=corpus_id, level=level.value, arrival=level.arrival, phase=phase, status="error", error=MISSING,
               empty_output=False)
    if found is None:
        return row
    record, raw = found
    meta, metrics = record["metadata"], record.get("metrics") or {}
    stream = read_stream(raw)
    row.update(sent_ns=meta.get("request_start_ns"), end_ns=meta.get("request_end_ns"),
               chunk_times_ms=stream["chunk_times_ms"], output_text=stream["text"],
               finish_reason=stream["finish_reason"], http_status=raw.get("status") if raw else None,
               prompt_tokens=metric(metrics, "usage_prompt_tokens", stream["usage"].get("prompt_tokens")),
               output_tokens=metric(metrics, "usage_completion_tokens", stream["usage"].get("completion_tokens")))
    ttft_ms = metric(metrics, "time_to_first_token", stream["chunk_times_ms"][0] if stream["chunk_times_ms"] else None)
    latency_ms = metric(metrics, "request_latency", stream["last_ms"])
    if latency_ms is None and row["sent_ns"] and row["end_ns"]:
        latency_ms = (row["end_ns"] - row["sent_ns"]) / 1e6
    row.update(ttft_ms=ttft_ms, latency_ms=latency_ms,
               first_token_ns=row["sent_ns"] + round(ttft_ms * 1e6) if ttft_ms is not None and row["sent_ns"] else None)
    row.update(_verdict(record.get("error"), stream))
    return row


def _verdict(error: dict | None, stream: dict) -> dict:
    """Return the row's status, error and empty_output from AIPerf's error and what the stream carried."""
    if stream["error"]:  # the server reported a failure inside a 200 stream, which AIPerf reads as text or as empty
        return {"status": "error", "error": f"the server's stream ended with an error: {stream['error']}",
                "empty_output": False}
    if error and error.get("type") == EMPTY_OUTPUT and stream["finish_reason"]:
        return {"status": "ok", "error": None, "empty_output": True}
    if error:
        return {"status": "error", "error": f"{error.get('type')}: {error.get('message')}", "empty_output": False}
    if stream["raw"] and not stream["finish_reason"]:
        return {"status": "error", "error": "the stream ended before the server gave a finish reason",
                "empty_output": False}
    return {"status": "ok", "error": None, "empty_output": stream["text"] == ""}


def _duration_s(rows) -> float:
    """Return the profiling phase's own duration: first send to last end, over the requests that have both."""
    timed = [row for row in rows if row["phase"] == "profiling" and row["sent_ns"] and row["end_ns"]]
    if not timed:
        return 0.0
    return (max(row["end_ns"] for row in timed) - min(row["sent_ns"] for row in timed)) / 1e9


def _check_ids(run: LevelRun, prompts: list[tuple[str, str]], requests: int, records: dict, plan: dict,
               command: list[str]) -> None:
    """Raise LoadGeneratorFailed when AIPerf sent requests other than the planned ones or rows miss a planned id."""
    strangers = sorted(set(records) - set(plan), key=str)
    if strangers:
        raise LoadGeneratorFailed(f"AIPerf sent requests that were not planned: {', '.join(map(str, strangers[:5]))}"
                                  f"\ncommand: {subprocess.list2cmdline(command)}", run)
    astray = [key for key, (record, _) in records.items() if record["metadata"].get("benchmark_phase") != plan[key][2]]
    if astray:
        raise LoadGeneratorFailed(f"AIPerf sent these requests in the other phase than planned: {', '.join(astray[:5])}"
                                  f"\ncommand: {subprocess.list2cmdline(command)}", run)
    expected = Counter(prompts[k % len(prompts)][0] for k in range(requests))
    if Counter(row["id"] for row in run.rows) != expected:
        raise LoadGeneratorFailed("the level's rows do not hold the planned corpus ids", run)


def _failures(run: LevelRun) -> str:
    """Return how many of the level's requests failed, and the commonest errors."""
    errors = Counter(row["error"] for row in run.rows if row["status"] == "error")
    common = "; ".join(f"{count} × {error[:300]}" for error, count in errors.most_common(3))
    return f"{sum(errors.values())} of {len(run.rows)} requests failed" + (f": {common}" if common else "")


def _ran_through(run: LevelRun, records: dict, plan: dict) -> bool:
    """Return whether AIPerf recorded every request and its only failures were empty outputs (it exits 1 then)."""
    return len(records) == len(plan) and all(row["status"] == "ok" for row in run.rows)
