"""What the pages show of the serving object a trial record carries (#64): per configuration and level, the load it
served, its latency quantiles with their intervals and its throughput; the capacity at the objective; the engine and its
start; the requests' latency distributions and the throughput against p90 TTFT as charts; every request as CSV.

A page shows these when the records have the object; nothing here or in a template asks for the campaign's kind of work.
Each figure is the record's own; a missing one is empty with its reason, never 0. Every value from a record is escaped.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from pathlib import Path

import orjson
from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.core.language import Figure, Text
from iteralab.pages import charts
from iteralab.pages.figures import chart
from iteralab.pages.render import fmt, say_value
from iteralab.pages.words import said

BLOCK = "serving"
QUANTILES = ("p50", "p90", "p99")
WORDS = {"concurrency": Text("concurrency"), "poisson": Text("poisson"), "per token": Text("per token"),
         "per chunk": Text("per chunk")}
BOUND = Text("the load generator may be the bottleneck")
NOT_STARTED = Text("not started by the runner: its weights are not vouched for")
# The request file's columns in requests.csv, after the trial's; lists are written as JSON.
CSV_COLUMNS = ("id", "level", "arrival", "order", "status", "error", "http_status", "sent_ns", "first_token_ns", "end_ns",
               "ttft_ms", "latency_ms", "tpot_ms", "chunk_times_ms", "chunk_tokens", "prompt_tokens", "output_tokens",
               "output_text", "token_ids", "finish_reason", "empty_output", "accepted")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell starting so as a formula
# The sentences the serving figures write into a record (iteralab.serving.figures), as messages: a page says each in its
# language (language.recorded reads a record's sentence back through these).
RECORDED = (Text("no request was measured"), Text("no request was sent at this level"), Text("no level was run"),
            Text("a {percent} interval of the {q} quantile needs at least {needed} requests; {n} measured"),
            Text("{missing} of {count} {what} requests lack the server's output token count"),
            Text("the load generator's CPU time was not measured"), Text("the request failed"),
            Text("no request carries a quality check's verdict ('accepted'): agreement() was not run"),
            Text("the server gave no output token count"), Text("one output token or none: no time between tokens"),
            Text("no first token or end time"),
            Text("lower level(s) {levels} did not meet the objective: meeting it is not monotonic in the level here, so a "
                 "repeat of the trial may move the capacity"),
            Text("the load generator used {cores} cores at this level: its own delays are in the latencies"),
            Text("the load generator may have been the bottleneck at level(s) {levels} above it: the server's capacity "
                 "may be higher"),
            Text("no level meets the objective; the most was {share} at level {level}, against the declared {declared}"))


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _block(trial: dict) -> dict | None:
    block = trial.get(BLOCK)
    return block if isinstance(block, dict) else None


def has_block(trials) -> bool:
    """Tell whether any trial carries the serving object."""
    return any(_block(trial) for trial in trials)


def _levels(block: dict) -> list[dict]:
    """Return a block's levels in level order (a damaged entry left out)."""
    found = [entry for entry in block.get("levels") or () if isinstance(entry, dict) and _number(entry.get("level"))]
    return sorted(found, key=lambda entry: entry["level"])


def _word(value, code: str) -> str:
    return WORDS[value].say(code) if value in WORDS else "" if value is None else str(value)


def _ms(value, code: str) -> str:
    places = 1 if abs(value) >= 1 else 3
    return f"{Figure(value, places, grouped=False).say(code)} ms"


def quantile_cell(found, code: str) -> Markup:
    """Return a quantile's cell: its value, its 95 % interval (or why there is none) and the requests it rests on."""
    if not isinstance(found, dict) or not _number(found.get("value")):
        reason = found.get("reason") if isinstance(found, dict) else None
        return Markup(f'<td class="num">{fmt(None, reason=reason or Text("not recorded"), code=code)}</td>')
    if _number(found.get("low")) and _number(found.get("high")):
        interval = escape(Text("{confidence} %: {low} – {high}", confidence=Figure((found.get("confidence") or 0) * 100),
                               low=_ms(found["low"], code), high=_ms(found["high"], code)).say(code))
    else:
        interval = fmt(None, reason=found.get("reason") or Text("no interval recorded"), code=code)
    rests = escape(Text("{count} request(s)", count=Figure(found.get("requests") or 0)).say(code))
    # Each figure kept whole (.nb), the cell free to wrap between them, so that six quantiles fit 1,280 px.
    return Markup(f'<td class="num"><span class="nb">{escape(_ms(found["value"], code))}</span><br><small>{interval}</small>'
                  f"<br><small>{rests}</small></td>")


def load_cells(entry: dict, code: str) -> Markup:
    """Return a level's row of load figures: arrival, requests and failed, the share meeting the objective (and whether
    the level meets the declared share), goodput, output tokens per second, client CPU and how gaps are timed."""
    reasons = entry.get("reasons") if isinstance(entry.get("reasons"), dict) else {}
    failed = escape(Text("{count} failed", count=Figure(entry.get("failed") or 0)).say(code))
    share = entry.get("share_meeting")
    declared = Figure((entry.get("share") or 0) * 100, 1)
    meets = (Text("meets the declared share ({share} %)", share=declared) if entry.get("meets_share") else
             Text("misses the declared share ({share} %)", share=declared))
    share_cell = (fmt(None, reason=reasons.get("share_meeting") or Text("no request"), code=code) if not _number(share) else
                  Markup(f'<span class="nb">{escape(Figure(share * 100, 1).say(code))} %</span><br><small class="{"ok" if entry.get("meets_share") else "warning"}">'
                         f"{escape(meets.say(code))}</small>"))
    cores = entry.get("client_cores")
    said_cores = Text("{cores} cores", cores=Figure(cores, 2)).say(code) if _number(cores) else ""
    cpu = (fmt(None, reason=reasons.get("client_cores") or Text("not measured"), code=code) if not _number(cores) else
           Markup(f'<span class="nb">{escape(said_cores)}</span>'))
    if entry.get("client_bound"):  # shown as a disturbed trial's mark: its figures hold the load generator's own delays
        cpu = Markup(f'{cpu}<br><strong class="warning client-bound">{escape(BOUND.say(code))}</strong>')
    cells = [f"<td>{escape(_word(entry.get('arrival'), code))}</td>",
             f'<td class="num">{fmt(entry.get("requests"), "int", code=code)}<br><small>{failed}</small></td>',
             f'<td class="num">{share_cell}</td>',
             f'<td class="num">{_rate(entry.get("goodput_requests_per_s"), reasons.get("goodput_requests_per_s"), code)}</td>',
             f'<td class="num">{fmt(entry.get("output_tokens_per_s"), "tokens_per_s", reasons.get("output_tokens_per_s"), code)}</td>',
             f'<td class="num">{cpu}</td>', f"<td>{escape(_word(entry.get('gaps'), code))}</td>"]
    return Markup("".join(cells))


def _rate(value, reason, code: str) -> Markup:
    if not _number(value):
        return fmt(None, reason=reason, code=code)
    return escape(Text("{rate} requests/s", rate=Figure(value, 2)).say(code))


def latency_cells(entry: dict, code: str) -> Markup:
    """Return a level's row of latency quantiles: p50, p90 and p99 of TTFT, then of time per output token."""
    return Markup("".join(quantile_cell((entry.get(figure) or {}).get(q), code)
                          for figure in ("ttft_ms", "tpot_ms") for q in QUANTILES))


def level_notes(entry: dict, code: str) -> list[str]:
    """Return what a level's record says beside its figures: requests without a time per output token, and why."""
    notes = []
    unmeasured = entry.get("tpot_unmeasured") if isinstance(entry.get("tpot_unmeasured"), dict) else {}
    if unmeasured.get("requests"):
        why = "; ".join(f"{say_value(reason, code)} ({count})" for reason, count in (unmeasured.get("reasons") or {}).items())
        notes.append(Text("{count} request(s) have no time per output token: {why}", count=Figure(unmeasured["requests"]),
                          why=why).say(code))
    reasons = entry.get("reasons") if isinstance(entry.get("reasons"), dict) else {}
    notes += [f"{key}: {say_value(why, code)}" for key, why in sorted(reasons.items())]
    return notes


def capacity_said(capacity, code: str) -> dict:
    """Return the capacity at the objective as a sentence, the levels below it that failed and its caveats."""
    capacity = capacity if isinstance(capacity, dict) else {}
    if _number(capacity.get("level")):
        sentence = Text("Capacity at the objective: level {level}.", level=Figure(capacity["level"]))
    else:
        sentence = Text("No capacity at the objective: {reason}.", reason=say_value(capacity.get("reason"), code)
                        or Text("not recorded"))
    failing = [str(level) for level in capacity.get("lower_levels_failing") or ()]
    return {"sentence": sentence.say(code),
            "failing": Text("Lower levels that missed it: {levels}.", levels=", ".join(failing)).say(code) if failing else "",
            "caveats": [say_value(caveat, code) for caveat in capacity.get("caveats") or ()]}


def engine_items(trial: dict, code: str) -> Markup:
    """Return the engine's items: what and which version, who started it, its command, its start to ready (the model_load
    phase, paid at each restart), how it stopped; and the load generator."""
    block = _block(trial) or {}
    engine = block.get("engine") if isinstance(block.get("engine"), dict) else {}
    load = block.get("load_generator") if isinstance(block.get("load_generator"), dict) else {}
    phase = (trial.get("phases") or {}).get("model_load") or {}
    started = Text("yes") if engine.get("started_by_runner") else NOT_STARTED
    ready = Text("{seconds} from its start to ready (the model_load phase: {phase}); a renter pays it again at each restart "
                 "of the engine", seconds=fmt(engine.get("ready_s"), "seconds", code=code),
                 phase=fmt(phase.get("duration_ns"), "ns", phase.get("reason"), code))
    stopped = engine.get("stopped") if isinstance(engine.get("stopped"), dict) else {}
    items = [(Text("Engine"), escape(f"{engine.get('engine') or ''} {engine.get('version') or ''}"), True),
             (Text("Started by the runner"), escape(started.say(code)), False),
             (Text("Start to ready"), escape(ready.say(code)), False),
             (Text("Command"), _command(engine.get("command")), True),
             (Text("Endpoint"), escape(engine.get("endpoint") or ""), True),
             (Text("Model"), escape(engine.get("model_name") or ""), True),
             (Text("Stopped"), escape(" ".join(f"{key}={value}" for key, value in sorted(stopped.items()))), True),
             (Text("Load generator"), escape(f"{load.get('name') or ''} {load.get('version') or ''}"), True),
             (Text("Load generator command"), _command(load.get("command")), True)]
    # A name or command the records hold is the same in every language (translate="no").
    kept_as_is = ' translate="no"'
    return Markup("".join(f"<dt>{escape(name.say(code))}</dt><dd{kept_as_is if kept else ''}>{value}</dd>"
                          for name, value, kept in items))


def _command(command) -> Markup:
    words = command if isinstance(command, list) else [command] if command else []
    return Markup(f"<code>{escape(' '.join(str(word) for word in words))}</code>")


def campaign_block(view) -> dict | None:
    """Return the campaign page's serving block: per configuration, each counted trial's level tables, capacity and
    engine, and the objective; None when no trial carries the serving object."""
    if not has_block(view.trials):
        return None
    code = language.current()
    configurations = []
    for summary in view.variants:
        trials = [trial for trial in summary.counted if _block(trial)]
        if trials:
            configurations.append({"summary": summary, "trials": [_trial_part(trial, code) for trial in trials]})
    objective = next((block["objective"] for trial in view.trials if isinstance((block := _block(trial) or {}).get("objective"), dict)), {})
    return {"configurations": configurations, "objective": objective}


def _trial_part(trial: dict, code: str) -> dict:
    block = _block(trial)
    levels = _levels(block)
    return {"id": trial["record_id"], "repetition": trial.get("repetition"),
            "rows": [(entry["level"], load_cells(entry, code), latency_cells(entry, code)) for entry in levels],
            "notes": [(entry["level"], note) for entry in levels for note in level_notes(entry, code)],
            "capacity": capacity_said(block.get("capacity"), code), "engine": engine_items(trial, code)}


def request_rows(trial: dict, runs: Path | None) -> list[dict] | None:
    """Return a serving trial's requests from its file under RUNS (the trial's predictions.path), one dict a row; None
    where there is no such file inside the runs folder. A line that is not a JSON object is left out."""
    path = (trial.get("predictions") or {}).get("path") if isinstance(trial.get("predictions"), dict) else None
    if runs is None or not isinstance(path, str) or not _block(trial):
        return None
    root = Path(runs).resolve()
    found = (root / path).resolve()
    if not found.is_relative_to(root) or not found.is_file():  # a record never sends the pages outside the runs folder
        return None
    rows = []
    with found.open("rb") as handle:
        for line in handle:
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def requests_of(view, runs: Path | None) -> dict[str, list[dict]]:
    """Return each serving trial's requests by its record id (those whose file is found)."""
    found = {}
    for trial in view.trials:
        rows = request_rows(trial, runs)
        if rows is not None:
            found[trial["record_id"]] = rows
    return found


def tpot_ms(row: dict) -> float | None:
    """Return a request's mean time per output token after the first, in ms; None for a failed one or one token."""
    tokens, first, end = row.get("output_tokens"), row.get("first_token_ns"), row.get("end_ns")
    if row.get("status") != "ok" or not all(_number(value) for value in (tokens, first, end)) or tokens <= 1:
        return None
    return (end - first) / (tokens - 1) / 1e6


def requests_csv(view, requests: dict[str, list[dict]]) -> str:
    """Write requests.csv: every request of every serving trial in run order, after its trial, variant and repetition;
    lists as JSON, a text a spreadsheet would run as a formula quoted with a leading apostrophe."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["trial", "variant", "repetition", *CSV_COLUMNS])
    for trial in view.trials:
        for row in requests.get(trial["record_id"], ()):
            values = {**row, "tpot_ms": tpot_ms(row)}
            writer.writerow([_csv_cell(value) for value in (trial["record_id"], trial.get("variant"), trial.get("repetition"),
                                                            *(values.get(column) for column in CSV_COLUMNS))])
    return buffer.getvalue()


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return orjson.dumps(value).decode("utf-8")
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return str(value)


def _cdf_rows(view, requests: dict, figure: str, objective) -> list[dict]:
    """Return a chart's rows: per configuration and level, each request's figure with the share of the level's requests
    at or under it (failed ones count in the share's whole, never as a value), and the objective."""
    rows = []
    for summary in view.variants:
        by_level: dict = {}
        for trial in summary.counted:
            for row in requests.get(trial["record_id"], ()):
                if _number(row.get("level")):  # a damaged row's level (a list, an object) is no level of the chart
                    by_level.setdefault(row["level"], []).append(row)
        for level in sorted(by_level):
            sent = by_level[level]
            values = sorted(value for row in sent if _number(value := row.get("ttft_ms") if figure == "ttft_ms"
                                                              else tpot_ms(row)) and row.get("status") == "ok")
            rows += [{"configuration": summary.label, "level": str(level), figure: round(value, 3),
                      "share": round(rank / len(sent), 4), "objective_ms": objective}
                     for rank, value in enumerate(values, start=1)]
    return rows


def _throughput_rows(view) -> list[dict]:
    """Return per configuration and level the median over its counted trials of p90 TTFT and output tokens per second,
    and the configuration's capacity level (the lowest its trials reached), where the knee is marked."""
    rows = []
    for summary in view.variants:
        blocks = [block for trial in summary.counted if (block := _block(trial))]
        capacities = [(block.get("capacity") or {}).get("level") for block in blocks]
        capacity = min(capacities) if capacities and all(_number(level) for level in capacities) else None
        by_level: dict = {}
        for block in blocks:
            for entry in _levels(block):
                by_level.setdefault(entry["level"], []).append(entry)
        for level, entries in sorted(by_level.items()):
            p90 = [found for entry in entries if _number(found := ((entry.get("ttft_ms") or {}).get("p90") or {}).get("value"))]
            rate = [entry["output_tokens_per_s"] for entry in entries if _number(entry.get("output_tokens_per_s"))]
            if p90 and rate:
                rows.append({"configuration": summary.label, "level": level, "p90_ttft_ms": round(statistics.median(p90), 3),
                             "output_tokens_per_s": round(statistics.median(rate), 3), "capacity_level": capacity})
    return rows


def serving_charts(view, requests: dict) -> list[dict]:
    """Return the serving charts: the distributions of TTFT and of time per output token per level, the objective
    drawn; the throughput against p90 TTFT across levels, the capacity marked. None of them without their rows."""
    if not has_block(view.trials):
        return []
    objective = next((block["objective"] for trial in view.trials
                      if isinstance((block := _block(trial) or {}).get("objective"), dict)), {})
    drawn = []
    for figure, kind, title in (("ttft_ms", "serving-ttft", Text("Time to first token per request, per level")),
                                ("tpot_ms", "serving-tpot", Text("Time per output token per request, per level"))):
        rows = _cdf_rows(view, requests, figure, objective.get(figure) if _number(objective.get(figure)) else None)
        if rows:
            drawn.append(chart(kind, title, Text(
                "The share of a level's requests (all sent, failed ones included, so a curve with failures stays under "
                "1) at or under each value, its configurations pooled over their counted repetitions; the red rule is "
                "the objective. Time per output token = (end − first token) ÷ (output tokens − 1), for requests with "
                "more than one output token."), rows))
    rows = _throughput_rows(view)
    if rows:
        drawn.append(chart("serving-throughput", Text("Output tokens per second against p90 time to first token"),
                           Text("One line per configuration across its levels (the median over its counted repetitions); "
                                "the red diamond marks the capacity at the objective, the knee past which the latency "
                                "objective is no longer met."), rows))
    return drawn


def column_word(code: str):
    """Return the template function that heads a chart's data column: a serving column's word, else the site's."""
    words, others = {key: Markup(escape(text.say(code))) for key, text in charts.SERVED.items()}, said(code)["column_word"]
    return lambda column: words.get(column) or others(column)
