"""AIPerf's time to first token at concurrency 1 against a plain client's, over the same prompts and the same engine.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m tests.benchmarks.bench_serving [--rounds 5] [--requests 20] [--max-tokens 8]
One `transformers serve` (CPU) of the tiny GPT-2 that always says "good" serves both clients. Each round sends the
same REQUESTS prompts in the same order once through the load generator (run_level, concurrency 1, 2 warm-up
requests) and once through a plain client (http.client, one kept-alive connection as AIPerf keeps one, send to the
first chunk that carries text), the two in alternating order round by round. It prints each round's median TTFT of
both and their ratio, then the median ratio over the rounds (target: at most 1.05). --spin measures AIPerf's own pacing
of a concurrency level (a busy loop on one core) instead of the load generator's constant-rate ticks.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
import urllib.parse
from pathlib import Path

from iteralab.serving import load_generator
from iteralab.serving.load_generator import Level, find_aiperf, run_level
from tests.test_load_generator import PROMPTS, Server, tiny_lm
from tests.tiny import WORDS

_connections: dict[tuple[str, int], http.client.HTTPConnection] = {}


def plain_ttft_ms(*, url: str, model_name: str, prompt: str, max_tokens: int) -> float:
    """Send one streamed completion and return the milliseconds from sending to its first chunk with text."""
    parts = urllib.parse.urlsplit(url)
    key = (parts.hostname, parts.port or 80)
    body = json.dumps({"model": model_name, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "stream_options": {"include_usage": True}})
    for attempt in range(2):
        connection = _connections.get(key) or _connections.setdefault(key, http.client.HTTPConnection(*key))
        start = time.perf_counter_ns()
        try:
            connection.request("POST", "/v1/completions", body=body,
                               headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
            response = connection.getresponse()
            break
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # uvicorn closes a connection idle for 5 s (while AIPerf's round ran): send again on a new one
            _connections.pop(key).close()
            if attempt:
                raise
    first = None
    for line in response:  # read to the end, so that the connection is free for the next request
        if first is None and line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            choices = json.loads(line[5:]).get("choices") or [{}]
            if choices[0].get("text"):
                first = time.perf_counter_ns()
    if response.status != 200 or first is None:
        raise RuntimeError(f"the plain client's request gave status {response.status} and no text")
    return (first - start) / 1e6


def prompts_for(count: int) -> list[tuple[str, str]]:
    """Return COUNT prompts of 3 to 12 words, the test module's four first."""
    extra = [(f"doc-{index}", " ".join(WORDS[(index * 7 + k) % len(WORDS)] for k in range(3 + index % 10)))
             for index in range(len(PROMPTS), count)]
    return (PROMPTS + extra)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--spin", action="store_true", help="let AIPerf pace the level itself (a busy loop), "
                        "not at load_generator.CLOSED_LOOP_TICK_HZ")
    options = parser.parse_args()
    if options.spin:
        load_generator.CLOSED_LOOP_TICK_HZ = None
    with tempfile.TemporaryDirectory() as folder:
        model = tiny_lm(Path(folder) / "speaking", speaks=True)
        server = Server(Path(folder) / "server.log", forced=model)
        try:
            server.wait_ready()
            ratios = rounds(server.url, model, Path(folder), options)
        finally:
            server.kill()
    print(f"median ratio AIPerf / plain over {len(ratios)} rounds: {statistics.median(ratios):.3f} (target ≤ 1.05)")


def rounds(url: str, model: Path, folder: Path, options) -> list[float]:
    """Run the rounds and return each round's ratio of median TTFTs, AIPerf's over the plain client's."""
    prompts, ratios = prompts_for(options.requests), []
    for _ in range(2):  # the plain client's own warm-up, as AIPerf's level has its two
        plain_ttft_ms(url=url, model_name=str(model), prompt=prompts[0][1], max_tokens=options.max_tokens)
    for number in range(options.rounds):
        def aiperf(number=number):
            run = run_level(aiperf=find_aiperf(), url=url, model_name=str(model), tokenizer_dir=model,
                            prompts=prompts, level=Level("concurrency", 1), requests=len(prompts), warmup_requests=2,
                            max_tokens=options.max_tokens, seed=number, out_dir=folder / f"round-{number}")
            return [row["ttft_ms"] for row in run.rows]

        def plain():
            return [plain_ttft_ms(url=url, model_name=str(model), prompt=text, max_tokens=options.max_tokens)
                    for _, text in prompts]

        first, second = (aiperf, plain) if number % 2 == 0 else (plain, aiperf)
        results = {first: first(), second: second()}
        mine, theirs = statistics.median(results[aiperf]), statistics.median(results[plain])
        ratios.append(mine / theirs)
        print(f"round {number + 1} ({first.__name__} first): AIPerf median TTFT {mine:.2f} ms, plain {theirs:.2f} ms, "
              f"ratio {mine / theirs:.3f}", flush=True)
    return ratios


if __name__ == "__main__":
    main()
