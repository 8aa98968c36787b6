"""Write what a page repeats for every trial: the trials page's sections and the campaign page's table rows.

Assembled here rather than in Jinja loops: a loop cost about 1 ms a trial in attribute lookups and escaping, most of a
large build's time. The words come from the templates (their ``w``), so a page's text stays in its template and in the
catalog; every value from a record is escaped here.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.pages import adapted
from iteralab.pages.generated import definitions, derived_said, trial_figures
from iteralab.pages.render import NO_ENTRIES, cell, fill, fmt, moment, pretty_json, say_value, shown
from iteralab.pages.words import said
from iteralab.store import generation
from iteralab.store.disturbance import is_disturbed, set_aside_in
from iteralab.store.trials import initialised_runs, phases_of
from iteralab.store.views import CampaignView

COMPARISONS = {">=": "≥", "<=": "≤"}  # as every other page writes a threshold; the record keeps its ASCII form


def trial_index(view: CampaignView, retry_words: dict | None = None, excluded_words: str = "",
                disturbed_words: str = "") -> Markup:
    """Return the trials page's list of links, one per trial in run order: its id, variant and status, then
    RETRY_WORDS[why] after a trial that runs a disturbed or an interrupted repetition again (CampaignView.retried),
    EXCLUDED_WORDS after one an exclusion sets aside and DISTURBED_WORDS after one the decision sets aside as disturbed."""
    status_word, retried, retry_words = said(language.current())["status_word"], view.retried, retry_words or {}
    aside = set_aside_in(view)

    def notes(trial: dict) -> str:
        said_of = [retry_words.get(retried[trial["record_id"]], "")] if trial["record_id"] in retried else []
        said_of += [excluded_words] if trial["record_id"] in view.excluded else []
        said_of += [disturbed_words] if trial["record_id"] in aside else []
        return "".join(f"; {escape(words)}" for words in said_of)

    return Markup("".join(f'<li><a href="#{escape(t["record_id"])}">{escape(t["record_id"])}</a> ({escape(t["variant"])}, '
                          f'{status_word(t["status"])}{notes(t)})</li>' for t in view.trials))


def trial_sections(view: CampaignView, bundle_name: str, w: dict) -> Markup:
    """Return every trial's section of VIEW in run order, in the words W of trials.html."""
    code = language.current()
    words = said(code)
    exclusions = {exclusion["record_id"]: exclusion for exclusion in reversed(view.exclusions)}  # the first of an id wins
    # CUDA's initialisation of each run, said under its trials' phases (a campaign of runs that never recorded it: nothing).
    runs = initialised_runs(view.manifests)
    w = {**w, "initialisation": {manifest_id: _initialisation(entry, w, code) for manifest_id, entry in runs.items()},
         "aside": set_aside_in(view)}
    return Markup("".join(_section(trial, view, bundle_name, w, code, words, exclusions) for trial in view.trials))


def _initialisation(entry: dict, w: dict, code: str) -> str:
    """Say a run's CUDA initialisation under each of its trials' phases: its duration, or empty with its reason."""
    duration = None if entry["seconds"] is None else round(entry["seconds"] * 1e9)
    return (f'<p class="initialisation"><small>{w["cuda_initialisation"]}: {fmt(duration, "ns", entry["reason"], code=code)}'
            f' {w["counted_once"] if duration is not None else w["nothing_counted"]}</small></p>\n')


def _section(trial: dict, view: CampaignView, bundle_name: str, w: dict, code: str, words: dict, exclusions: dict) -> str:
    trial_id = escape(trial["record_id"])
    parts = [f'<article id="{trial_id}" class="trial" aria-labelledby="{trial_id}-title">\n',
             f'<h2 id="{trial_id}-title">{fill(w["heading"], variant=trial["variant"], repetition=trial["repetition"])}</h2>\n',
             _meta(trial, trial_id, w, words, "excluded" if trial["record_id"] in view.excluded else
                   "disturbed" if trial["record_id"] in w["aside"] else None)]
    if trial.get("error"):
        parts.append(f'<p class="warning">{w["error"]}: <code>{shown(trial["error"], code)}</code></p>')
        parts.append(adapted.failure_note(trial, code))
    if trial.get("started_at"):
        reason = fmt(None, reason=trial.get("entries_completed_reason") or w["unknown"], code=code)
        parts.append(f'<p id="{trial_id}-in-flight" class="warning in-flight">'
                     f'{fill(w["interrupted"], started=moment(trial["started_at"], code), recorded=moment(trial["created_at"], code))} '
                     f'{w["completed"]}: {reason}. {w["never"]}</p>')
    if trial.get("retry_of"):  # of a disturbed trial (run --resume --rerun-disturbed) or an interrupted one, said apart
        retry = w["retry_disturbed"] if view.retried.get(trial["record_id"]) == "disturbed" else w["retry"]
        parts.append(f'<p id="{trial_id}-retry" class="retry">'
                     f'{fill(retry, repetition=trial["repetition"], trial=trial["retry_of"])}</p>')
    resumed = view.resumed_before(trial)
    if resumed and not trial.get("started_at"):
        parts.append(f'<p id="{trial_id}-after-resumption" class="after-resumption">'
                     f'{fill(w["resumed"], run=resumed["run_id"], at=moment(resumed["created_at"], code), warmup=say_value(resumed["warmup"], code))}</p>')
    if trial["record_id"] in view.excluded:
        exclusion = exclusions[view.excluded[trial["record_id"]]]
        parts.append(f'<p class="warning">{fill(w["excluded"], record=exclusion["record_id"], at=moment(exclusion["created_at"], code), rule=exclusion["rule"])}</p>')
    if is_disturbed(trial):
        parts.append(_disturbed(trial, trial_id, w, trial["record_id"] in w["aside"]))
    if isinstance(trial.get("per_card"), dict):
        parts.append(_per_card(trial, trial_id, w))
    rows = trial_rows(trial, code, words["phase_word"])
    parts += ["\n", _phases(trial, trial_id, rows, w, code), "\n", _cards(trial, trial_id, rows["phase_names"], w, code)]
    if trial.get(generation.BLOCK):
        parts += [trial_figures(trial, trial_id, w["generation"], code), "\n"]
    if trial.get(adapted.BLOCK):
        parts += [adapted.trial_figures(trial, trial_id, code), "\n"]
    if trial.get("quality"):
        parts.append(_quality(trial, trial_id, rows, w, code))
    parts += ["\n", _record(trial, trial_id, view, bundle_name, w), "</article>\n"]
    return "".join(parts)


def _meta(trial: dict, trial_id: str, w: dict, words: dict, aside: str | None = None) -> str:
    """Say a trial's status, phase, entries and acceptance; a trial set ASIDE (excluded, disturbed) says that it counts in
    no figure beside its acceptance, as the configuration's table counts it (#61)."""
    status = "pass" if trial["status"] == "ok" else "fail"
    not_counted = f' ({(w.get("aside_words") or {}).get(aside, "")})' if aside and w.get("aside_words") else ""
    phase = f' {fill(w["in_phase"], phase=words["phase_word"](trial["failed_phase"]))}' if trial.get("failed_phase") else ""
    entries = fill(w["entries"], completed=fmt(trial["entries_completed"], "int", trial.get("entries_completed_reason")),
                   expected=fmt(trial["entries_expected"], "int"))
    return (f'<p class="meta"><code>{trial_id}</code> · {w["status"]} <strong class="{status}">'
            f'{words["status_word"](trial["status"])}</strong>{phase} · {entries} · '
            f'{w["model_accepted"] if adapted.is_adaptation(trial) else w["accepted"]}: '
            f'{w["yes"] if trial["corpus_accepted"] else w["no"]}{not_counted}</p>\n')


def _phases(trial: dict, trial_id: str, rows: dict, w: dict, code: str) -> str:
    caption = w["wall_cuda"] if trial["memory"]["device"].startswith("cuda") else w["wall"]
    scope = trial["memory"].get("host_rss_scope")
    body = "".join(f'<tr><th scope="row">{name}</th>{cells}</tr>\n' for name, cells in rows["phases"])
    # A phase derived from others (a generation trial's decode) says how, under the table.
    derived = "".join(f'<p><small>{rows["phase_names"][name]}: '
                      f'{escape(say_value(derived_said(phase["derived"], trial["memory"]["device"]), code))}</small></p>\n'
                      for name, phase in trial["phases"].items() if phase.get("derived"))
    return (f'<section id="{trial_id}-phases">\n<h3>{w["phases"]}</h3>\n'
            f'<div class="scroll" tabindex="0" role="region" aria-label="{fill(w["phases_of"], trial=trial["record_id"])}">\n'
            f'<table>\n  <caption>{caption}</caption>\n'
            f'  <thead><tr><th scope="col">{w["phase"]}</th><th scope="col">{w["duration"]}</th><th scope="col">{w["allocated"]}'
            f'</th><th scope="col">{w["reserved"]}</th><th scope="col">{w["rss"]}</th></tr></thead>\n'
            f'  <tbody>{body}</tbody>\n</table>\n</div>\n'
            f'<p><small>{w["rss"]}: {escape(say_value(scope, code)) if scope else fmt(None, code=code)}.</small></p>\n'
            f'{w["initialisation"].get(trial.get("manifest_id"), "")}{derived}</section>\n')


def _disturbed(trial: dict, trial_id: str, w: dict, aside: bool) -> str:
    """Say what disturbed TRIAL's measured window, as the runner wrote it, and whether the decision sets it ASIDE."""
    crossed = "; ".join(str(found.get("text")) for found in trial["interference"].get("crossed") or ()
                        if isinstance(found, dict)) or w["unknown"]
    return (f'<p id="{trial_id}-disturbed" class="{"warning " if aside else ""}disturbed">'
            f'{fill(w["disturbed_aside" if aside else "disturbed_used"], what=crossed)}</p>\n')


def _per_card(trial: dict, trial_id: str, w: dict) -> str:
    """Say which card of a set (one trial per card at the same time) this trial ran on, and the set it belongs to."""
    found = trial["per_card"]
    others = ", ".join(str(card) for card in found.get("cards") or () if card != found.get("card"))
    return (f'<p id="{trial_id}-per-card" class="per-card">'
            f'{fill(w["per_card"], card=str(found.get("card")), others=others, set=str(found.get("set")))}</p>\n')


def _cards(trial: dict, trial_id: str, names: dict, w: dict, code: str) -> str:
    """Return each card's peaks per phase, one column pair per card, where the phases kept them apart (gpu_cards)."""
    phases = [(name, phase["gpu_cards"]) for name, phase in trial["phases"].items()
              if isinstance(phase, dict) and isinstance(phase.get("gpu_cards"), dict)]
    if not phases:
        return ""
    cards = list(dict.fromkeys(card for _, each in phases for card in each))
    head = "".join(f'<th scope="col">{escape(card)} · {w["allocated"]}</th><th scope="col">{escape(card)} · {w["reserved"]}</th>'
                   for card in cards)
    body = "".join(
        f'<tr><th scope="row">{names.get(name) or escape(name)}</th>'
        + "".join(cell((each.get(card) or {}).get(key), "bytes", w["not_on_card"], code)
                  for card in cards for key in ("gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes")) + "</tr>\n"
        for name, each in phases)
    return (f'<section id="{trial_id}-cards">\n<h3>{w["cards"]}</h3>\n'
            f'<div class="scroll" tabindex="0" role="region" aria-label="{fill(w["cards_of"], trial=trial["record_id"])}">\n'
            f'<table class="cards">\n  <caption>{w["cards_caption"]}</caption>\n'
            f'  <thead><tr><th scope="col">{w["phase"]}</th>{head}</tr></thead>\n  <tbody>{body}</tbody>\n</table>\n</div>\n'
            '</section>\n')


def _quality(trial: dict, trial_id: str, rows: dict, w: dict, code: str) -> str:
    quality = trial["quality"]
    reference = quality.get("reference")
    agreement = (f'; {fill(w["agreement_with"], variant=reference["variant"], trial=reference["trial_id"])}'
                 if reference else "")
    body = "".join(f'<tr><th scope="row">{_group(name, w)}</th>{cells}</tr>\n' for name, cells in rows["quality"])
    word = said(code)["figure_word"]
    more = "".join(f'<th scope="col">{word(metric)}</th>' for metric in rows["metrics"][len(QUALITY_METRICS):])
    verdicts = "".join(
        f'<li class="{"pass" if verdict["passed"] else "fail"}">{shown(verdict["metric"], code)} '
        f'{fmt(verdict["value"], "ratio", verdict.get("reason"), code=code)} {shown(COMPARISONS.get(verdict["comparison"], verdict["comparison"]), code)} '
        f'{shown(verdict["threshold"], code)}: {w["passed"] if verdict["passed"] else w["failed"]}</li>'
        for verdict in quality["verdicts"])
    return (f'<section id="{trial_id}-quality">\n<h3>{w["quality"]}</h3>\n'
            f'<div class="scroll" tabindex="0" role="region" aria-label="{fill(w["quality_of"], trial=trial["record_id"])}">\n'
            f'<table>\n  <caption>{w["buckets"]}{agreement}</caption>\n'
            f'  <thead><tr><th scope="col">{w["subgroup"]}</th><th scope="col">{w["entries_heading"]}</th><th scope="col">'
            f'{w["accuracy"]}</th><th scope="col">Macro-F1</th><th scope="col">{w["agreement"]}</th>{more}</tr></thead>\n'
            f'  <tbody>\n{body}  </tbody>\n</table>\n</div>\n{definitions(quality, code)}<ul>{verdicts}</ul>\n</section>\n')


def _group(name, w: dict) -> str:
    """Name a quality row: overall, a length bucket, or a sampling seed."""
    if name == "overall":
        return w["overall"]
    return fill(w["seed"], seed=name[1]) if isinstance(name, tuple) else escape(name)


def _record(trial: dict, trial_id: str, view: CampaignView, bundle_name: str, w: dict) -> str:
    predictions = trial.get("predictions")
    if trial["record_id"] in view.missing_predictions:
        where = f'<p class="warning">{fill(w["missing"], path=predictions["path"])}</p>'
    elif predictions:
        where = (f'<p>{fill(w["predictions"], file=predictions["path"].rpartition("/")[2], bundle=bundle_name, sha=predictions["sha256"])}'
                 "</p>")
    else:
        where = ""
    manifest = escape(trial["manifest_id"])
    # The record is folded: unfolded, 25 trials made a page 100,000 px tall, mostly JSON nobody reads first.
    return (f'<section id="{trial_id}-record">\n<details>\n<summary><h3>{w["record"]}</h3></summary>\n'
            f'<pre class="record" tabindex="0" role="region" aria-label="{fill(w["record_of"], trial=trial["record_id"])}">'
            f'{escape(pretty_json(trial))}</pre>\n</details>\n{where}'
            f'<p>{w["manifest"]}: <a href="manifests/{manifest}.json">{manifest}</a> · <a href="#contents">{w["back"]}</a></p>\n'
            '</section>\n')


def trial_table_rows(view: CampaignView, w: dict) -> Markup:
    """Return the campaign page's row of every trial in run order, in the words W of campaign.html."""
    code = language.current()
    status_word = said(code)["status_word"]
    excluded = f'<br><small class="excluded"><a href="#exclusions">{w["excluded"]}</a></small>'
    aside = set_aside_in(view)
    rows = []
    for index, trial in enumerate(view.trials, start=1):
        quality = trial.get("quality") or {}
        overall, missing = quality.get("overall") or {}, quality.get("missing_reasons") or {}
        window = trial["phases"].get("measured_window") or {}
        predictions = trial.get("predictions")
        if predictions and trial["record_id"] in view.missing_predictions:
            where = w["missing"]
        elif predictions:
            where = f'{w["bundle"]} <small><code>{escape(predictions["sha256"][:12])}…</code></small>'
        else:
            where = w["none"]
        trial_id = escape(trial["record_id"])
        disturbed = (f'<br><small class="excluded"><a href="trials.html#{trial_id}-disturbed">{w["disturbed"]}</a></small>'
                     if trial["record_id"] in aside else "")
        rows.append(
            f'<tr class="{"failure" if trial["status"] != "ok" else ""}">\n'
            f'      <td class="num">{shown(index, code)}</td><td><a href="trials.html#{trial_id}">{trial_id}</a></td>'
            f'<td>{escape(trial["variant"])}</td><td class="num">{shown(trial["repetition"], code)}</td>'
            f'<td>{status_word(trial["status"])}{excluded if trial["record_id"] in view.excluded else ""}{disturbed}</td>\n'
            f'{cell(window.get("duration_ns"), "ns", window.get("reason") or w["window"], code)}\n'
            f'      {cell(overall.get("accuracy"), "ratio", missing.get("accuracy") or w["failed"], code)}\n'
            f'      {cell(overall.get("agreement"), "ratio", missing.get("agreement") or w["failed"], code)}\n'
            f'      <td>{w["yes"] if trial["corpus_accepted"] else w["no"]}{_not_counted(trial, view, aside, w)}</td>\n'
            f"      <td>{where}</td>\n    </tr>")
    return Markup("".join(rows))


def _not_counted(trial: dict, view: CampaignView, aside: dict, w: dict) -> str:
    """Say beside an accepted trial set aside (excluded, disturbed) that it counts in no figure: the configuration's
    table counts it in neither its successes nor its accepted ones (#61)."""
    if not trial["corpus_accepted"]:
        return ""
    reason = "excluded" if trial["record_id"] in view.excluded else "disturbed" if trial["record_id"] in aside else None
    return f'<br><small class="excluded">{w[reason]}</small>' if reason else ""


QUALITY_METRICS = ("accuracy", "macro_f1", "agreement")  # every trial's quality columns, in order
MORE_METRICS = {"reference_match": "ratio", "cut_by_max_new_tokens": "int"}  # a column where the trial's quality has it


def trial_rows(trial: dict, code: str, phase_word) -> dict:
    """Return the phase and quality rows of a trial's section as (heading, ready cells), the phases' names, and the
    quality metrics it has (its quality rows: overall, each bucket, then each sampling seed as ("seed", seed))."""
    gpu_reason = trial["memory"].get("gpu_memory_reason")
    # Without a GPU, both GPU counters of every phase are the same empty cell with its reason: made once per trial.
    no_gpu = cell(None, "bytes", gpu_reason, code) * 2 if gpu_reason else None
    phases, names = [], {}
    for name in phases_of(trial):
        phase = trial["phases"].get(name, {})
        reason = phase.get("reason")
        allocated, reserved = phase.get("gpu_peak_allocated_bytes"), phase.get("gpu_peak_reserved_bytes")
        gpu = no_gpu if no_gpu and allocated is None and reserved is None else "".join((
            cell(allocated, "bytes", gpu_reason or reason, code), cell(reserved, "bytes", gpu_reason or reason, code)))
        names[name] = phase_word(name)
        phases.append((names[name], "".join((cell(phase.get("duration_ns"), "ns", reason, code), gpu,
                                             cell(phase.get("host_peak_rss_bytes"), "bytes", reason, code)))))
    quality, metrics = [], QUALITY_METRICS
    if trial.get("quality"):
        found = trial["quality"]
        missing = found["missing_reasons"]
        metrics = (*QUALITY_METRICS, *[metric for metric in MORE_METRICS if metric in found["overall"]])
        groups = [("overall", found["overall"]), *sorted(found["buckets"].items()),
                  *[(("seed", seed), scores) for seed, scores in (found.get("seeds") or {}).items()]]
        for name, scores in groups:
            quality.append((name, "".join((
                cell(scores.get("entries"), "int", None, code),
                *[cell(scores.get(metric), MORE_METRICS.get(metric, "ratio"), missing.get(metric, NO_ENTRIES), code)
                  for metric in metrics]))))
    return {"phases": phases, "phase_names": names, "quality": quality, "metrics": metrics}
