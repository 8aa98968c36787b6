"""The words a page uses for values of the records: trial statuses, phases, qualification outcomes, chart columns.

In English a value is shown as the records spell it; each is a message of the catalog, so another language has its word.
"""

from __future__ import annotations

from functools import cache

from markupsafe import Markup, escape

from iteralab.core.language import Joined, Text, say
from iteralab.decision.kinds import kind_line, kind_of_work

STATUSES = {"ok": Text("ok"), "oom": Text("oom"), "error": Text("error"), "interrupted": Text("interrupted")}

PHASES = {"environment_check": Text("environment_check"), "model_load": Text("model_load"), "compilation": Text("compilation"),
          "warmup": Text("warmup"), "measured_window": Text("measured_window"), "evaluation": Text("evaluation"),
          "writing_results": Text("writing_results"), "validation_stages": Text("validation_stages"),
          "prefill": Text("prefill"), "decode": Text("decode"), "first_forward": Text("first_forward"),
          "first_backward": Text("first_backward"), "first_update": Text("first_update"), "validation": Text("validation"),
          "export": Text("export"), "engine_stop": Text("engine_stop")}

# Qualification: a sheet's outcome and each criterion's status.
OUTCOMES = {"selected": Text("selected"), "to confirm": Text("to confirm"), "excluded": Text("excluded"),
            "acceptable": Text("acceptable"), "to-confirm": Text("to-confirm"), "exclude": Text("exclude")}

# What a qualification sheet qualifies a candidate for, its first line (#43: the source's sheets say which).
WORK = {"inference": Text("inference"), "adaptation": Text("adaptation")}

CRITERIA = {"workload_covered": Text("workload covered"), "compatibility": Text("compatibility"),
            "memory_per_gpu": Text("memory per gpu"), "quality": Text("quality"),
            "distribution_and_server": Text("distribution and server"), "budget_and_schedule": Text("budget and schedule")}

# A chart's data table heads its columns in words, not the rows' keys (#37: "low_hours" was read as a raw key).
COLUMNS = {"variant": Text("variant"), "run_order": Text("run order"), "seconds": Text("seconds"), "counter": Text("counter"),
           "mib": Text("MiB"), "bucket": Text("bucket"), "accuracy": Text("accuracy"), "configuration": Text("configuration"),
           "planned": Text("planned"), "currency": Text("currency"), "projected": Text("projected"),
           "low_hours": Text("fewest hours (fastest repetition)"), "high_hours": Text("most hours (slowest repetition)"),
           "lots": Text("lots"), "limit_hours": Text("hours available"), "feasible": Text("feasible"),
           "revision": Text("revision"), "output_tokens_per_s": Text("output tokens per second (median)"),
           "phase": Text("phase")}


# The figures of a trial's generation object, and the quality figures it scores beside accuracy, as pages head them.
FIGURES = {"outputs": Text("Outputs"), "input_tokens": Text("Input tokens"), "output_tokens": Text("Output tokens"),
           "output_tokens_per_s": Text("Output tokens per second"), "prefill_s_per_batch": Text("Prefill per batch"),
           "decode_s_per_new_token": Text("Decode per new token"), "stopped_at_eos": Text("Stopped at end of sequence"),
           "cut_by_max_new_tokens": Text("Cut by max_new_tokens"), "agreement": Text("Agreement"),
           "reference_match": Text("Reference match"), "kv_estimate": Text("KV cache: estimate"),
           "kv_measured": Text("KV cache: measured"),
           # An adaptation's figures (#43): per configuration on the campaign page, per trial on the trials page.
           "method": Text("Method"), "effective_batch": Text("Effective batch (microbatch × accumulation × devices)"),
           "updates": Text("Updates in the measured window"), "updates_per_s": Text("Updates per second"),
           "train_examples_per_s": Text("Training examples per second"),
           "train_tokens_per_s": Text("Training tokens per second"),
           "time_to_validated_model_s": Text("Time to the validated model"),
           "data_s": Text("Data: tokenize and move (summed over the window)"),
           "forward_s": Text("Forward and loss (summed over the window)"),
           "backward_s": Text("Backward (summed over the window)"),
           "optimizer_step_s": Text("Optimizer step (summed over the window)"),
           "trainable_parameters": Text("Trainable parameters"), "total_parameters": Text("Total parameters"),
           "first_update_loss": Text("Loss at the first update"), "validation_loss": Text("Validation loss"),
           "validation_accuracy": Text("Validation accuracy"), "validation_macro_f1": Text("Validation macro F1"),
           "estimate": Text("estimate"), "measured": Text("measured")}

# Why a trial counts in no figure, each reason by its name (#60: a disturbed trial was said to be excluded).
LEFT_OUT = {"excluded": Text("excluded"), "disturbed": Text("disturbed"), "failed": Text("failed"),
            "interrupted": Text("interrupted")}

KINDS = {"rental": Text("rental"), "expense": Text("expense"), "deliverable": Text("deliverable"),
         "exclusion": Text("exclusion"), "trial": Text("trial")}


def _lookup(table: dict, code: str, unknown=lambda value: value):
    # Said once per language, as markup: a trials page asks for these words thousands of times.
    said = {key: Markup(escape(text.say(code))) for key, text in table.items()}

    def word(value):
        found = said.get(value)
        return found if found is not None else unknown(value)  # a value this version does not know: shown as written
    return word


def _work(code: str) -> dict:
    """Return the template functions that say a campaign's kind of work (its manifests' kinds) in the language CODE: the
    kind alone for a table cell ('kinds_word'), or the page's line 'Kind of work: ...' ('kind_line')."""
    # The words are decision.kinds.WORK's, one message per kind (decide and compare say them too); no template branches
    # on a kind, and one this version has no words for is shown by its code.
    def work(kinds) -> Markup:
        return Markup(escape(say(kind_of_work(kinds), code)))

    def line(kinds) -> Markup:
        return Markup(escape(kind_line(kinds).say(code)))
    return {"kinds_word": work, "kind_line": line}


def _disturbance(code: str):
    """Return the template function that says, after a pair the repetitions cannot compare, which of the two its trials
    set aside as disturbed left fewer than two (store.separation names those an exclusion left so), and how to measure
    them again."""
    def caused(view, statement: dict) -> Markup:
        by_label = {summary.label: summary for summary in view.variants}
        pair = [summary for label in statement["pair"] if (summary := by_label.get(label)) is not None]
        found = [Text("{label} has {left} left, {count} measured as disturbed", label=s.label, left=len(s.seconds),
                      count=s.disturbed_successes) for s in pair if len(s.seconds) < 2 and s.disturbed_successes]
        if not found:
            return Markup("")
        return Markup(" " + escape(Text("Disturbance caused it: {causes}; iteralab run CAMPAIGN_FILE --resume "
                                        "--rerun-disturbed measures those repetitions again.",
                                        causes=Joined("; ", found)).say(code)))
    return caused


@cache
def said(code: str) -> dict:
    """Return the template functions that give these words in the language CODE."""
    return {"status_word": _lookup(STATUSES, code), "phase_word": _lookup(PHASES, code), "outcome_word": _lookup(OUTCOMES, code),
            "work_word": _lookup(WORK, code),
            "criterion_word": _lookup(CRITERIA, code, lambda name: str(name).replace("_", " ")),
            "column_word": _lookup(COLUMNS, code), "kind_word": _lookup(KINDS, code), "figure_word": _lookup(FIGURES, code),
            "left_out_word": _lookup(LEFT_OUT, code), "disturbance_caused": _disturbance(code), **_work(code)}
