"""Read what AIPerf wrote: its JSON Lines record files and each request's raw server-sent event stream."""

from __future__ import annotations

import json
from pathlib import Path

from iteralab.core.lines import json_lines as lines_of


def read_records(path: Path) -> list[dict]:
    """Return the JSON objects of the lines of PATH ([] when it is missing), a torn last line left out."""
    if not path.is_file():
        return []
    lines = []
    for text in lines_of(path.read_text(encoding="utf-8")):
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:  # AIPerf stopped mid-line
            continue
    return lines


def read_stream(raw: dict | None) -> dict:
    """Return the text, each text chunk's arrival after sending (ms), finish reason, usage and error of RAW's stream."""
    stream = {"raw": raw is not None, "text": None, "chunk_times_ms": None, "finish_reason": None, "usage": {},
              "error": None, "last_ms": None}
    if raw is None:
        return stream
    start, pieces, times = raw.get("start_perf_ns"), [], []
    for response in raw.get("responses") or []:
        for packet in response.get("packets") or []:
            message = _message(packet)
            if isinstance(message.get("error"), dict | str):
                stream["error"] = json.dumps(message["error"]) if isinstance(message["error"], dict) else message["error"]
            stream["usage"] = message.get("usage") or stream["usage"]
            for choice in message.get("choices") or []:
                text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                stream["finish_reason"] = choice.get("finish_reason") or stream["finish_reason"]
                if text:
                    pieces.append(text)
                    times.append((response["perf_ns"] - start) / 1e6)
        if start is not None and response.get("perf_ns") is not None:
            stream["last_ms"] = (response["perf_ns"] - start) / 1e6
    stream.update(text="".join(pieces), chunk_times_ms=times)
    return stream


def _message(packet: dict) -> dict:
    """Return an SSE packet's JSON data as a dict ({} for [DONE], comments and other fields)."""
    if packet.get("name") != "data":
        return {}
    try:
        message = json.loads(packet.get("value") or "")
    except json.JSONDecodeError:
        return {}
    return message if isinstance(message, dict) else {}


def metric(metrics: dict, name: str, fallback):
    """Return AIPerf's metric NAME's value, else FALLBACK."""
    metric = metrics.get(name)
    return metric.get("value", fallback) if isinstance(metric, dict) else fallback
