"""What the pages show of the adaptation object a trial record carries (#43): per configuration on the campaign page
(its figures and a phase table), per phase on a chart of peak memory, per trial on the trials page (the figures, the
memory estimate beside the measured peaks, the export with its hashes), and beside the weights on the sizing page.

A page shows these blocks when the records have the object (``store.adaptation``), or, for a failed trial, when its
variant names a training method; nothing here or in a template asks for the campaign's kind of work. The figures'
headings are ``site.words.FIGURES``; every value from a record is escaped. A peak is never summed with another: GPU
allocated and reserved stay apart, and host RSS is said above the baseline the runner took before the model loaded.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.core.language import Figure, Recorded, Text
from iteralab.decision.kinds import MODEL
from iteralab.decision.qualification import POINTS_TO
from iteralab.pages.generated import spread_cell
from iteralab.pages.render import cell, fmt, say_value, shown
from iteralab.pages.trained import base_part, training_items, weights_of
from iteralab.pages.words import said
from iteralab.store import adaptation
from iteralab.store.generation import NO_SUCCESS, NOT_RECORDED
from iteralab.store.generation import spread as spread_of

BLOCK = adaptation.BLOCK
# An adaptation's phases in the order they run: the load, its own before the window, the window, its own after it.
PHASES = ("model_load", *adaptation.BEFORE_WINDOW, "measured_window", *adaptation.AFTER_WINDOW)
ABOVE = "host_above_baseline_bytes"  # a phase's host peak less the baseline taken before the model loaded
COUNTERS = (*adaptation.PEAKS, ABOVE)
# The chart's counters: GPU ones where a GPU measured them; host RSS above the baseline, never the raw process peak.
CHARTED = {"gpu_peak_allocated_bytes": Text("GPU peak allocated"), "gpu_peak_reserved_bytes": Text("GPU peak reserved"),
           ABOVE: Text("host peak RSS above the baseline before the model loads")}
# The campaign page's columns, in order, and how each is written (a spread over the repetitions, or one value).
# Rates to three significant figures (#61: 0.257 updates per second was said "0.3/s"); the window's parts summed.
COLUMNS = {"method": "text", "effective_batch": "text", "updates": "int", "updates_per_s": "rate3",
           "train_examples_per_s": "rate3", "train_tokens_per_s": "rate3", "time_to_validated_model_s": "seconds",
           "data_s": "seconds", "forward_s": "seconds", "backward_s": "seconds", "optimizer_step_s": "seconds",
           "trainable_parameters": "int", "total_parameters": "int", "first_update_loss": "ratio",
           "validation_loss": "ratio", "validation_accuracy": "ratio", "validation_macro_f1": "ratio"}
SPREADS = {"validation_accuracy": "accuracy", "validation_macro_f1": "macro_f1"}  # a column read from another figure
NO_BASELINE = Text("no baseline before the model loads was recorded")


def is_adaptation(trial: dict) -> bool:
    """Tell whether TRIAL fine-tunes: it carries the adaptation object, or (failed before writing it) its variant names
    a training method."""
    return bool(trial.get(BLOCK)) or "method" in (trial.get("variant_config") or {})


def campaign_block(view) -> dict | None:
    """Return the campaign page's adaptation block: each configuration's figures and phase table, and how the time to
    the validated model is defined; None when no trial of the campaign carries the adaptation object."""
    if not adaptation.has_block(view.trials):
        return None
    figures = [(summary, adaptation.figures(summary.counted, summary.trials)) for summary in view.variants]
    definition = next((found["definition"] for _, found in figures if found["definition"]), None)
    return {"rows": [(summary, figure_cells(found)) for summary, found in figures], "columns": COLUMNS,
            "phases": [(summary, phase_cells(phase_rows(summary.counted))) for summary in view.variants],
            "definition": definition}


def figure_cells(found: dict, code: str | None = None) -> Markup:
    """Return a configuration's row of figures (``COLUMNS``): the spreads as median then minimum – maximum, the method,
    the effective batch as its product and the parameter counts as recorded."""
    code = code or language.current()
    parameters = found["parameters"] or {}
    cells = []
    for name, kind in COLUMNS.items():
        if name == "method":
            cells.append(cell(found["method"], "text", NO_SUCCESS, code))
        elif name == "effective_batch":
            cells.append(Markup(f"<td>{effective_batch(found['effective_batch'], code)}</td>"))
        elif name in ("trainable_parameters", "total_parameters"):
            cells.append(cell(parameters.get(name), "int", NOT_RECORDED, code))
        else:
            cells.append(spread_cell(found[SPREADS.get(name, name)], kind, code))
    return Markup("".join(cells))


def effective_batch(batch: dict | None, code: str) -> Markup:
    """Say an effective batch as its product: '4 × 2 × 1 = 8 examples per update'."""
    if not batch:
        return fmt(None, reason=NOT_RECORDED, code=code)
    return escape(Text("{microbatch} × {accumulation} × {devices} = {examples} examples per update",
                       microbatch=batch["microbatch"], accumulation=batch["accumulation"], devices=batch["devices"],
                       examples=batch["examples"]).say(code))


def _baseline(trial: dict) -> int | None:
    measured = (trial[BLOCK].get("memory") or {}).get("measured") or {}
    return measured.get("host_baseline_bytes")


def phase_rows(trials) -> list[dict]:
    """Return per adaptation phase of the successful TRIALS: the duration's spread in seconds and the highest of each
    counter (``COUNTERS``) as (value, reason why empty); the phase's own reason (not reached, not run) where it has one."""
    ok = [trial for trial in trials if trial["status"] == "ok" and trial.get(BLOCK)]
    peaks, measured = adaptation.phase_peaks(ok), adaptation.memory(ok)["measured"]
    rows = []
    for name in PHASES:
        phases = [(trial, trial["phases"].get(name) or {}) for trial in ok]
        reason = next((phase["reason"] for _, phase in phases if phase.get("reason")), NOT_RECORDED if ok else NO_SUCCESS)
        seconds = [phase["duration_ns"] / 1e9 for _, phase in phases if phase.get("duration_ns") is not None]
        row = {"phase": name, "seconds": spread_of(seconds, reason, len(ok))}
        for key in adaptation.PEAKS:
            value = (peaks.get(name) or {}).get(key)
            row[key] = (value, None if value is not None else measured[key]["reason"] if key.startswith("gpu_") else reason)
        # Clamped at 0 as the trial's own figure is: a phase whose peak stayed under the baseline used nothing above it.
        above = [max(0, phase["host_peak_rss_bytes"] - base) for trial, phase in phases
                 if phase.get("host_peak_rss_bytes") is not None and (base := _baseline(trial)) is not None]
        measured_here = any(phase.get("host_peak_rss_bytes") is not None for _, phase in phases)
        row[ABOVE] = (max(above), None) if above else (None, NO_BASELINE if measured_here else reason)
        rows.append(row)
    return rows


def phase_cells(rows: list[dict], code: str | None = None) -> list[tuple[Markup, Markup]]:
    """Return each phase row as (the phase's word, its cells: duration, GPU allocated, GPU reserved, host peak RSS, host
    peak RSS above the baseline)."""
    code = code or language.current()
    word = said(code)["phase_word"]
    return [(word(row["phase"]), Markup("").join([spread_cell(row["seconds"], "seconds", code),
                                                 *[cell(row[key][0], "bytes", row[key][1], code) for key in COUNTERS]]))
            for row in rows]


def chart_rows(view) -> list[dict]:
    """Return the chart of peak memory per phase and per variant: a row per configuration, phase and counter measured
    (MiB), in the phases' order; a counter no trial measured (the GPU ones on a CPU run) has no row."""
    code = language.current()
    word = said(code)["phase_word"]
    rows = []
    for summary in view.variants:
        for row in phase_rows(summary.counted):
            for key, counter in CHARTED.items():
                value = row[key][0]
                if value is not None:
                    rows.append({"variant": summary.label, "phase": str(word(row["phase"])), "counter": counter.say(code),
                                 "mib": round(value / 2**20, 3)})
    return rows


def estimate_and_measured(memory: dict, code: str, elsewhere=None) -> tuple[Markup, Markup]:
    """Return the memory estimate (weights + gradients + optimizer state = total) and the measured peaks, each as a
    labelled list; a measured peak is empty with its reason (ELSEWHERE: why the measurement does not stand here)."""
    word = said(code)["figure_word"]
    estimate = memory.get("estimate")
    if estimate:
        parts = [(Text("weights"), estimate.get("weights_bytes")), (Text("gradients"), estimate.get("gradients_bytes")),
                 (Text("optimizer state"), estimate.get("optimizer_state_bytes")), (Text("total"), estimate.get("total_bytes"))]
        said_estimate = "".join(f"<li>{escape(name.say(code))}: {fmt(value, 'bytes', NOT_RECORDED, code)}</li>"
                                for name, value in parts)
    else:
        said_estimate = f"<li>{fmt(None, 'bytes', memory.get('estimate_reason') or NO_SUCCESS, code)}</li>"
    measured = memory["measured"]
    said_measured = "".join(
        f"<li>{escape(CHARTED.get(key, Text('host peak RSS (process)')).say(code))}: "
        f"{fmt(None if elsewhere else measured[key]['value'], 'bytes', elsewhere or measured[key]['reason'], code)}</li>"
        for key in (*adaptation.PEAKS, ABOVE))
    return (Markup(f'<strong class="label">{word("estimate")}</strong><ul>{said_estimate}</ul>'),
            Markup(f'<strong class="label">{word("measured")}</strong><ul>{said_measured}</ul>'))


def trial_figures(trial: dict, trial_id: str, code: str) -> str:
    """Return a trial's adaptation section: its figures, the memory estimate beside the measured peaks, and the export
    (folder, what was saved, bytes and sha256 of each file and of the whole); empty for a trial without the object."""
    block = trial.get(BLOCK)
    if not block:
        return ""
    word = said(code)["figure_word"]
    losses = block.get("losses") or {}
    values = {**block, **(block.get("parameters") or {}), "first_update_loss": losses.get("first_update"),
              "validation_loss": losses.get("validation")}
    window = ", ".join(shown(Figure(loss, 4, grouped=False), code) for loss in losses.get("window") or [])
    items = f'<dt>{word("effective_batch")}</dt><dd>{effective_batch(block.get("effective_batch"), code)}</dd>' + "".join(
        f"<dt>{word(name)}</dt><dd>{fmt(values.get(name), kind, NOT_RECORDED, code)}</dd>"
        for name, kind in COLUMNS.items() if name != "effective_batch" and name not in SPREADS)
    losses = Text("Losses over the measured window")  # a message outside the f-string, where extraction finds it
    items += f"<dt>{escape(losses.say(code))}</dt><dd>{window or fmt(None, code=code)}</dd>" + training_items(block, code)
    estimate, measured = estimate_and_measured(adaptation.memory([trial]), code)
    definition = block.get("time_to_validated_model")
    heading = escape(Text("Adaptation: figures, memory and export").say(code))
    return (f'<section id="{trial_id}-adaptation">\n<h3>{heading}</h3>\n<dl class="protocol">{items}</dl>\n'
            + (f"<p><small>{word('time_to_validated_model_s')}: {escape(say_value(definition, code))}</small></p>\n"
               if definition else "")
            + f'<div class="two memory">{_box(estimate)}{_box(measured)}</div>\n'
            + _formula(block, code) + export_part(block.get("export"), trial_id, code) + "</section>\n")


def _box(part: Markup) -> str:
    return f"<div>{part}</div>"


def _formula(block: dict, code: str) -> str:
    formula = (((block.get("memory") or {}).get("estimate") or {}).get("formula"))
    baseline = (((block.get("memory") or {}).get("measured") or {}).get("host_baseline"))
    # The record holds the runner's English sentences: each is said in the page's language where the catalog has it.
    said_parts = [escape(Text("Estimate: {formula}", formula=Recorded(formula)).say(code)) if formula else "",
                  escape(Text("Baseline: {baseline}", baseline=Recorded(baseline)).say(code)) if baseline else ""]
    return "".join(f"<p><small>{part}</small></p>\n" for part in said_parts if part)


def export_part(export: dict | None, trial_id: str, code: str) -> str:
    """Return a trial's export: where it is under the runs folder, what was saved, its files with bytes and sha256, and
    the sha256 over them (with how it is made)."""
    if not export:
        return ""
    rows = "".join(f'<tr><th scope="row"><code>{escape(item["name"])}</code></th>{cell(item["bytes"], "bytes", None, code)}'
                   f'<td><code>{escape(item["sha256"])}</code></td></tr>' for item in export.get("files") or [])
    said_export = Text("Exported to {path} under the runs folder ({method}): {what}. {bytes} bytes in all; sha256 {sha}, of "
                       "{of}.", path=export["path"], method=export.get("method") or "", what=Recorded(export.get("what") or ""),
                       bytes=Figure(export["bytes"]), sha=export["sha256"], of=Recorded(export.get("sha256_of") or "")).say(code)
    caption = escape(Text("Files of the export of {trial}", trial=trial_id).say(code))
    heads = "".join(f'<th scope="col">{escape(head.say(code))}</th>' for head in (Text("File"), Text("Size"), Text("sha256")))
    title = Text("Export")  # outside the f-string, where extraction finds it
    said_export += base_part(export, code)
    return (f'<h4 id="{trial_id}-export">{escape(title.say(code))}</h4>\n<p class="export">{escape(said_export)}</p>\n'
            f'<div class="scroll" tabindex="0" role="region" aria-label="{caption}"><table><caption>{caption}</caption>'
            f"<thead><tr>{heads}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>\n")


def failure_note(trial: dict, code: str) -> str:
    """Return what the source points to for the phase a failed adaptation trial stopped in, or nothing."""
    pointer = POINTS_TO.get(trial.get("failed_phase")) if trial["status"] != "ok" and is_adaptation(trial) else None
    if pointer is None:
        return ""
    said_note = Text("For a failure in {phase}, the source points to {pointer}.", pointer=pointer,
                     phase=said(code)["phase_word"](trial["failed_phase"])).say(code)
    return f'<p class="points-to">{escape(said_note)}</p>\n'


def sizing(summary) -> dict | None:
    """Return a configuration's row of the adaptation table of the sizing pages: the method and parameters, the
    estimate beside the measured peaks, and each failed trial's phase with what the source points to for it; None for a
    configuration that does not fine-tune."""
    if not any(is_adaptation(trial) for trial in summary.trials):
        return None
    found = adaptation.figures(summary.counted, summary.trials)
    failures = [{"trial": trial["record_id"], "phase": trial["failed_phase"], "points_to": POINTS_TO.get(trial["failed_phase"])}
                for trial in summary.counted if trial["status"] != "ok" and trial.get("failed_phase")]
    return {"method": found["method"], "parameters": found["parameters"], "memory": found["memory"], "failures": failures,
            "weights": weights_of(found)}


def unit_durations(row) -> list[tuple[str, float, str | None]]:
    """Return (trial id, seconds of one useful unit, why it is set aside or None) of every successful trial of a decision
    ROW in run order:
    a corpus's measured window, or a model's time to the validated model (its window_seconds are read from those)."""
    summary = row.summary
    if row.unit != MODEL:
        return summary.raw_durations
    return [(trial["record_id"], seconds, summary.left_out(trial)) for trial in summary.trials
            if (seconds := adaptation.model_seconds(trial)) is not None]
