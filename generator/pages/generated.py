"""What the pages show of the generation object a trial record carries (#42, part 3): its figures per configuration on
the campaign page, per trial on the trials page, its quality figures' definitions and the KV cache beside its estimate.

A page shows these blocks when the records have the object (``store.generation``); nothing here or in a template asks
for the campaign's kind of work. The figures' headings are ``site.words.FIGURES``; every value from a record is escaped.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.core.language import Text
from iteralab.pages.render import fmt, say_value
from iteralab.pages.words import said
from iteralab.store import generation
from iteralab.store.views import CampaignView

# The campaign page's columns, in order, and how each is written (a spread of each over the repetitions); the header names
# each rate's unit, so its cells stay narrow enough for the table to fit 1,280 px.
COLUMNS = {"output_tokens_per_s": "rate", "prefill_s_per_batch": "ms", "decode_s_per_new_token": "ms", "input_tokens": "int",
           "output_tokens": "int", "cut_by_max_new_tokens": "int", "stopped_at_eos": "int", "agreement": "ratio",
           "reference_match": "ratio"}


# A trial on a CPU recorded before #61 says that its decode was "timed with CUDA synchronised at every boundary": its page
# says the clock it had.
DECODE_CUDA = ("the generation calls of the measured window less the prefill phase for each pass (as optimum-benchmark "
               "derives decode); timed with CUDA synchronised at every boundary")
DECODE_HOST = Text("the generation calls of the measured window less the prefill phase for each pass (as optimum-benchmark "
                   "derives decode); timed with the host's clock, with no device to synchronise")


def derived_said(derived, device: str):
    """Return how a derived phase was made, as its record says; on a device other than CUDA never that CUDA synchronised."""
    return DECODE_HOST if derived == DECODE_CUDA and not str(device).startswith("cuda") else derived


def campaign_block(view: CampaignView) -> dict | None:
    """Return the campaign page's generation block: each configuration's figures and the quality figures' definitions;
    None when no trial of the campaign carries the generation object."""
    if not generation.has_block(view.trials):
        return None
    rows = [(summary, generation.figures(summary.counted)) for summary in view.variants]
    definitions = next((figures["definitions"] for _, figures in rows if figures["definitions"]), {})
    return {"rows": rows, "columns": COLUMNS, "definitions": definitions}


def tokens_of(summary) -> Markup:
    """Return a configuration's output tokens per second, to follow its corpus time on the decision page ('<br><small>
    Output tokens per second: median, min – max</small>'); nothing where its trials carry no generation object."""
    figures = generation.of_summary(summary)
    if figures is None:
        return Markup("")
    code = language.current()
    return Markup(f'<br><span class="tokens">{said(code)["figure_word"]("output_tokens_per_s")}: '
                  f'{spread(figures["output_tokens_per_s"], "tokens_per_s", code)}</span>')


def spread_cell(found: dict, kind: str, code: str | None = None) -> Markup:
    """Return a table cell holding ``spread``."""
    return Markup(f'<td class="num">{spread(found, kind, code)}</td>')


def spread(found: dict, kind: str, code: str | None = None) -> Markup:
    """Return a spread's median, then its minimum – maximum; empty with its reason when missing; where some repetitions
    lack it, how many have it and why the others do not."""
    code = code or language.current()
    if found["median"] is None:
        return fmt(None, kind, found["reason"], code)
    low, high = fmt(found["min"], kind, code=code), fmt(found["max"], kind, code=code)
    partial = ""
    if found["count"] < found["of"]:  # some repetitions lack it: said, never averaged over as if they had it
        said_partial = Text("{count} of {of} repetitions; the others: {reason}", count=found["count"], of=found["of"],
                            reason=say_value(found["reason"], code)).say(code)
        partial = f'<br><small class="partial">{escape(said_partial)}</small>'
    return Markup(f"{fmt(found['median'], kind, code=code)}<br><small>{low} – {high}</small>{partial}")


def kv_values(kv: dict | None, code: str | None = None) -> tuple[Markup, Markup]:
    """Return the KV cache's estimate (with the tokens, sequences and bits it is made at) and its measurement, each empty
    with its reason; without a KV cache figure, both empty as not recorded."""
    code = code or language.current()
    if kv is None:
        reason = Text("no trial recorded a KV cache")
        return fmt(None, "bytes", reason, code), fmt(None, "bytes", reason, code)
    shape = ""
    if kv["tokens"] is not None:
        said_shape = Text("{tokens} tokens (longest prompt + max_new_tokens) × {sequences} sequence(s), {bits} bit",
                          tokens=kv["tokens"], sequences=kv["sequences"], bits=kv["bits"]).say(code)
        shape = f"<br><small>{escape(said_shape)}</small>"
    return (Markup(f'{fmt(kv["estimate"], "bytes", kv["estimate_reason"], code)}{shape}'),
            fmt(kv["measured"], "bytes", kv["measured_reason"], code))


def kv_cells(kv: dict | None, code: str | None = None) -> Markup:
    """Return the KV cache's two table cells: the estimate, then the measurement (``kv_values``)."""
    estimate, measured = kv_values(kv, code)
    return Markup(f'<td class="num">{estimate}</td><td class="num">{measured}</td>')


def kv_note(kvs, code: str | None = None) -> Markup:
    """Say how the KV cache's estimate and measurement were made (the first of KVS that says it), or nothing."""
    code = code or language.current()
    kv = next((kv for kv in kvs if kv and kv.get("formula")), None)
    if kv is None:
        return Markup("")
    return Markup(escape(Text("KV cache estimate: {formula}, at the campaign's real token counts and batch. KV cache "
                              "measured: {measured}.", formula=kv["formula"],
                              measured=say_value(kv["measured_as"], code)).say(code)))


def definitions(quality: dict, code: str | None = None) -> str:
    """Return what the quality figures mean (a generation trial's agreement and reference match), as its record says."""
    found = quality.get("definitions") or {}
    if not found:
        return ""
    code = code or language.current()
    word = said(code)["figure_word"]
    return ('<dl class="protocol definitions">' + "".join(
        f"<dt>{word(name)}</dt><dd>{escape(say_value(found[name], code))}</dd>" for name in sorted(found)) + "</dl>\n")


def trial_figures(trial: dict, trial_id: str, heading: str, code: str) -> str:
    """Return a trial's generation section: its tokens, rates, stop reasons and KV cache, each empty with its reason."""
    block, word = trial[generation.BLOCK], said(code)["figure_word"]
    items = "".join(f"<dt>{word(name)}</dt><dd>{fmt(block.get(name), kind, block.get(why) if why else None, code)}</dd>"
                    for name, kind, why in generation.FIGURES)
    kv = generation.kv_cache([trial])
    estimate, measured = kv_values(kv, code)
    items += f'<dt>{word("kv_estimate")}</dt><dd>{estimate}</dd><dt>{word("kv_measured")}</dt><dd>{measured}</dd>'
    return (f'<section id="{trial_id}-generation">\n<h3>{heading}</h3>\n<dl class="protocol">{items}</dl>\n'
            f"<p><small>{kv_note([kv], code)}</small></p>\n</section>\n")
