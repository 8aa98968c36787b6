"""What a serving trial does and keeps: the engine up, the levels through the load generator, every request a row (#64)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import uuid
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import cache_root, writing
from iteralab.core.language import Text
from iteralab.declared.corpus import load_corpus
from iteralab.serving import figures as served
from iteralab.serving import load_generator, offline
from iteralab.serving.engine import Engine, EngineFailed, EngineSpec

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
ROW_FIELDS = ("id", "level", "arrival", "order", "status", "error", "http_status", "sent_ns", "first_token_ns", "end_ns",
              "ttft_ms", "latency_ms", "chunk_times_ms", "chunk_tokens", "prompt_tokens", "output_tokens", "output_text",
              "token_ids", "finish_reason", "empty_output", "accepted")
FORMAT = ("jsonl: one row per request in send order: id, level, arrival, order (the request's place in its level), status "
          "(ok or error), error, http_status, sent_ns, first_token_ns, end_ns, ttft_ms, latency_ms, chunk_times_ms, "
          "chunk_tokens, prompt_tokens, output_tokens (the server's counts), output_text, token_ids, finish_reason, "
          "empty_output, accepted (ok and agreeing with the reference output of its id)")


def prompts(protocol: dict, texts: list[str]) -> list[str]:
    """Put each text into the campaign's prompt template."""
    template = protocol["serving"]["prompt_template"]
    return [template.replace("{text}", text) for text in texts]


def engine_said(settings: dict) -> str:
    """Name the engine as a sentence: which, and who starts it."""
    if settings["engine"] == "url":
        return f"the engine at {settings['url']}, which the runner does not start (it cannot vouch for its weights)"
    return f"{settings['engine']} serve, started by the runner for every trial and stopped after it"


def unusable(settings: dict) -> str | None:
    """Say why this machine cannot run the campaign's load generator or engine; None when it can."""
    try:
        load_generator.find_aiperf()
    except UserError as error:
        return str(error)
    return None


def start_engine(model_dir, variant, protocol: dict):
    """Start VARIANT's engine (or reach the user's) and wait until it is ready; return the tokenizer and the engine."""
    from transformers import AutoTokenizer

    settings = protocol["serving"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    # The log goes to the cache until the trial has an id; a kept trial copies it beside its requests.
    log = cache_root() / "engine-logs" / f"{uuid.uuid4().hex}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    spec = EngineSpec(engine=settings["engine"], model_dir=Path(model_dir) if settings["engine"] != "url" else None,
                      url=settings["url"], device=variant.device, dtype=DTYPES[variant.precision],
                      args=shlex.split(variant.engine_args or ""), port=settings["port"], cache_dir=cache_root() / "engines",
                      log_path=log, ready_timeout_s=settings["ready_timeout_s"])
    engine = Engine(spec)
    engine.facts = engine.start()
    return tokenizer, engine


def level_order(levels: list, repetition: int) -> list:
    """Return the levels in a repetition's order: rotated by one each repetition, as variants are."""
    shift = (repetition - 1) % len(levels) if levels else 0
    return list(levels[shift:]) + list(levels[:shift])


def key(row: dict) -> str:
    """Name a request by its level, its id and its place among the level's requests of that id."""
    return f"{row['level']}/{row['id']}/{row['order']}"


def expected_keys(protocol: dict, ids: list[str], order: list) -> list[str]:
    """Return every request a trial must record: each level's requests cycle through the corpus in file order."""
    count = protocol["serving"]["requests"]
    keys = []
    for level in order:
        for index in range(count):
            keys.append(f"{level}/{ids[index % len(ids)]}/{index // len(ids)}")
    return keys


class Work:
    """One trial's requests: each level in its order through the load generator, against the running engine."""

    progress_unit = "requests"

    def __init__(self, tokenizer, engine, variant, protocol: dict):
        self.tokenizer, self.engine, self.variant, self.protocol = tokenizer, engine, variant, protocol
        self.settings = protocol["serving"]
        self.progress_total = self.settings["requests"] * len(self.settings["levels"])
        self.completed, self.repetition, self.runs, self.prepared, self.texts = 0, 1, [], None, []
        self.kept, self.stopped, self.partial, self.offline = {}, None, None, None

    def compile(self) -> None:
        raise UserError("a serve variant compiles in its engine, not in the runner: set compile = false and pass the "
                        "engine's own flag in engine_args (transformers serve: \"--compile\")")

    def encode(self, texts: list[str]):
        """Tokenize a validation batch (its lengths go in the stage's record); keep the texts to send."""
        self.texts = texts
        return self.tokenizer(prompts(self.protocol, texts), padding=True, return_tensors="pt")

    def stage(self, clock, encoded) -> int:
        """Send each text of a validation batch once, alone, untimed: the engine must answer every one."""
        with clock.phase("request"):
            answers = [served_once(self.engine, prompt, self.settings["max_tokens"])
                       for prompt in prompts(self.protocol, self.texts)]
        return max(answer["output_tokens"] or 0 for answer in answers)

    def before_window(self, clock, prepared, runs_dir) -> None:
        """Skip the runner's warm-up (the load generator warms each level up itself); find the load generator."""
        clock.skip("warmup", Text("each level's warm-up requests are sent by the load generator before the level"))
        self.prepared, self.aiperf = prepared, load_generator.find_aiperf()
        # A served model must answer what the model answers: an offline generation of the same question, if measured.
        self.offline = offline.find(runs_dir, self.settings, prepared.model_identity)
        self.artifacts = cache_root() / "load-generator" / uuid.uuid4().hex

    def measured(self, corpus_path) -> list:
        """Run every level in this repetition's order; return what the load generator recorded of each."""
        entries = list(load_corpus(corpus_path).entries)
        sent = list(zip([entry.id for entry in entries], prompts(self.protocol, [entry.text for entry in entries]),
                        strict=True))
        for number, value in enumerate(level_order(self.settings["levels"], self.repetition), start=1):
            try:
                run = load_generator.run_level(aiperf=self.aiperf, url=self.engine.url, model_name=self.engine.model_name,
                                tokenizer_dir=Path(self.prepared.campaign.model_path), prompts=sent,
                                level=load_generator.Level(self.settings["arrival"], value), requests=self.settings["requests"],
                                warmup_requests=self.settings["warmup_requests"], max_tokens=self.settings["max_tokens"],
                                seed=self.settings["arrival_seed"], out_dir=self.artifacts / f"level-{number}")
            except load_generator.LoadGeneratorFailed as error:  # its rows so far are kept: a failed request is a row, never a gap
                if getattr(error, "run", None) is not None:
                    self.runs.append(error.run)
                self.partial = self.rows()
                shutil.rmtree(self.artifacts, ignore_errors=True)  # a failed trial keeps its rows, not AIPerf's files
                self._refuse_dead_engine(number)
                raise
            self.runs.append(run)
            self.completed += len(run.rows)
            self._refuse_dead_engine(number)
        return self.runs

    def rows(self) -> list[dict]:
        """Return every request recorded so far, each with its place among its level's requests of the same id."""
        return [row for run in self.runs for row in _numbered(run.rows)]

    def _refuse_dead_engine(self, number: int) -> None:
        """Fail the trial when the engine the runner started died during level NUMBER; its rows so far are kept."""
        if not self.engine.facts.get("started_by_runner") or self.engine.alive():
            return
        self.partial = self.rows()
        shutil.rmtree(self.artifacts, ignore_errors=True)
        failed = sum(row["status"] != "ok" for row in self.partial)
        raise EngineFailed(f"the engine exited during load level {self.runs[-1].level.value if self.runs else '?'} (the "
                           f"trial's level {number}): {failed} of {len(self.partial)} requests failed; the last lines of "
                           f"its log:\n{self.engine.log_tail()}")

    def after_window(self, clock, window, place) -> list[dict]:
        """Stop the engine (a phase of its own), keep its log and the load generator's files, judge every output."""
        with clock.phase("engine_stop"):
            self.stopped = self.engine.stop()
        self.kept = keep_files(place, self.engine, self.runs)
        # What was kept lies beside the trial's requests now; the cache's copies would only grow with every trial.
        shutil.rmtree(self.artifacts, ignore_errors=True)
        if self.engine.facts.get("started_by_runner") and self.engine.spec.log_path is not None:
            Path(self.engine.spec.log_path).unlink(missing_ok=True)
        rows = self.rows()
        judge(rows, self.prepared, self.variant)
        return rows

    def figures(self, clock, outputs) -> dict:
        """Return each level's figures, the capacity at the objective, the engine and the load generator."""
        return {"serving": trial_figures(self, outputs)}

    def window_units(self, window) -> int:
        """Return what the window's throughput counts: the requests answered."""
        return sum(row["status"] == "ok" for run in window for row in run.rows)


def _numbered(rows: list[dict]) -> list[dict]:
    """Return ROWS, each with how many earlier rows of its level carry its id (requests cycle through the corpus)."""
    seen: dict[str, int] = {}
    numbered = []
    for row in rows:
        numbered.append({**row, "order": seen.get(row["id"], 0)})
        seen[row["id"]] = seen.get(row["id"], 0) + 1
    return numbered


def served_once(engine, prompt: str, max_tokens: int) -> dict:
    """Send one completion request, not streamed; return its output tokens (the server's count) and its text."""
    import urllib.request

    body = json.dumps({"model": engine.model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": False}).encode()
    request = urllib.request.Request(f"{engine.url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        found = json.loads(response.read())
    return {"output_tokens": (found.get("usage") or {}).get("completion_tokens"),
            "text": found["choices"][0].get("text", "")}


def keep_files(place, engine, runs: list) -> dict:
    """Copy the engine's log and the load generator's files beside the trial's requests; return their paths and hashes."""
    folder = f"{place.campaign}/serving/{place.trial_id}"
    target = place.runs_dir / folder
    kept = {"folder": folder, "engine_log": None, "load_generator": []}
    with writing(target / "engine.log", "the engine's log"):
        target.mkdir(parents=True, exist_ok=True)
        log = getattr(engine.spec, "log_path", None)
        if log is not None and Path(log).is_file():
            shutil.copyfile(log, target / "engine.log")
            kept["engine_log"] = {"path": f"{folder}/engine.log", "sha256": _sha256(target / "engine.log")}
        for number, run in enumerate(runs, start=1):
            for name in ("profile_export.jsonl", "outputs.json", "inputs.json"):
                source = Path(run.artifacts) / name
                if source.is_file():
                    shutil.copyfile(source, target / f"level-{number}-{name}")
                    kept["load_generator"].append({"path": f"{folder}/level-{number}-{name}",
                                                   "sha256": _sha256(target / f"level-{number}-{name}")})
    return kept


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def judge(rows: list[dict], prepared, variant) -> None:
    """Mark each row accepted when it was answered and agrees with the reference variant's output for its id."""
    reference = prepared.reference
    if reference is None and variant.name == prepared.campaign.protocol["reference_variant"]:
        reference = {"predictions": {row["id"]: row["output_text"] for row in rows if row["status"] == "ok"}}
    served.agreement(rows, (reference or {}).get("predictions") or {})


def trial_figures(work: Work, rows: list[dict]) -> dict:
    """Return the trial's serving block: each level's figures in run order, the capacity, the engine, the load generator."""
    settings, levels = work.settings, []
    for number, run in enumerate(work.runs, start=1):
        mine = [row for row in rows if row["level"] == run.level.value]
        figures = served.level_figures(mine, objective=settings["objective"], share=settings["objective"]["share"],
                                       client_cpu_s=run.client_cpu_s, duration_s=run.duration_s, cpus=os.cpu_count() or 1)
        levels.append({"level": run.level.value, "arrival": run.level.arrival, "order": number,
                       "warmup_requests": len(run.warmup_rows), "load_generator_wall_s": run.wall_s,
                       "load_generator_cpu_s": run.client_cpu_total_s, **figures})
    return {"engine": {**{k: v for k, v in work.engine.facts.items() if k != "pid"}, "stopped": work.stopped},
            "load_generator": {"name": "aiperf", "version": load_generator.aiperf_version(work.aiperf),
                               "command": [str(part) for part in work.runs[0].command] if work.runs else None},
            "levels": levels, "capacity": served.capacity(levels), "files": work.kept,
            "offline": offline.compared(rows, work.offline),
            "objective": settings["objective"]}


def write_outputs(runs_dir: Path, campaign: str, trial_id: str, outputs: list[dict]) -> dict:
    """Write every request with its id to the trial's own JSON Lines file, synced to disk; return its path and sha256."""
    relative = f"{campaign}/predictions/{trial_id}.jsonl"
    path = runs_dir / relative
    with writing(path, "the requests file"), open(path, "x", encoding="utf-8", newline="\n") as handle:
        for row in outputs:
            handle.write(json.dumps({name: row.get(name) for name in ROW_FIELDS}, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return {"path": relative, "sha256": _sha256(path), "format": FORMAT}


def read_outputs(path: Path) -> dict[str, str]:
    """Return the first answered output text of each id, from a requests file."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = [json.loads(line) for line in handle.read().split("\n") if line.strip()]
    found: dict[str, str] = {}
    for row in rows:
        if row.get("status") == "ok" and isinstance(row.get("id"), str) and isinstance(row.get("output_text"), str):
            found.setdefault(row["id"], row["output_text"])
    return found
