"""Write what the shared pages repeat for every campaign: the index's rows and the sizing page's rows.

Assembled here rather than in Jinja loops: with 1,000 campaigns these pages took half a second of every build, the
one that adds a single campaign too. The words come from the templates (their ``w``); every value is escaped here.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.decision.kinds import kind_of_work
from iteralab.pages.generated import kv_cells
from iteralab.pages.render import cell, fill, fmt, moment, shown
from iteralab.pages.trained import weights_row
from iteralab.pages.words import said


def index_rows(campaigns: list[dict], notes: list, answers: dict, failed: dict, w: dict) -> Markup:
    """Return the index page's row of every campaign (its summary from the build state), in the words W of index.html."""
    code = language.current()
    by_campaign: dict[str, list] = {}
    for note in notes:
        by_campaign.setdefault(note.meta.get("campaign"), []).append(note)
    rows = []
    for campaign in campaigns:
        name = escape(campaign["name"])
        corpus = campaign["corpus"]
        if corpus:
            described = fill(w["corpus"], corpus=corpus["source_name"] or corpus["path"],
                             entries=fmt(corpus["entries"], "int", code=code), split=corpus["split"])
            corpus_cell = f"{described}<br><small>{escape(corpus['fingerprint'][:19])}…</small>"
        else:
            corpus_cell = w["no_manifest"]
        first = escape(moment(campaign["first_at"], code)) if campaign["first_at"] else w["no_run"]
        last = escape(moment(campaign["last_at"], code)) if campaign["last_at"] else w["no_run"]
        if campaign["name"] in failed:
            answer = (f'<td class="bad"><a href="campaigns/{name}/index.html">{w["not_built"]}</a>: '
                      f"<code>{escape(failed[campaign['name']])}</code></td>\n")
        else:
            answer = f'<td><a href="campaigns/{name}/decision.html">{w["report"]}</a>: {shown(answers[campaign["name"]], code)}</td>'
        decisions = "; ".join(f'<a href="notes/{escape(note.slug)}.html">{shown(note.meta["decision"], code)}</a>'
                              for note in by_campaign.get(campaign["name"], ())) or w["no_note"]
        rows.append(f'  <tr>\n    <th scope="row"><a href="campaigns/{name}/index.html">{escape(campaign["title"])}</a><br>'
                    f"<small>{name}</small></th>\n    <td>{shown(kind_of_work(campaign['kinds']), code)}</td>\n"
                    f"    <td>{corpus_cell}</td>\n    <td>{first}</td>\n    <td>{last}</td>\n"
                    f'    <td class="num">{shown(campaign["trials_ok"], code)}</td>\n'
                    f'    <td class="num">{shown(campaign["trials_failed"], code)}</td>\n'
                    f"{answer}    <td>{decisions}</td>\n  </tr>\n")
    return Markup("".join(rows))


def sizing_table_rows(rows: list[dict]) -> Markup:
    """Return the sizing page's row of every campaign and variant (from the build state); where any row has a KV cache
    figure, every row ends with the KV cache's estimate and measurement (``site.generated.kv_cells``)."""
    code = language.current()
    kv, rows = any(row.get("kv") for row in rows), [weights_row(row) for row in rows]  # a fine-tuning's own (#61)
    return Markup("".join(
        f'<tr>\n    <td><a href="campaigns/{escape(row["campaign"])}/index.html">{escape(row["campaign"])}</a></td>'
        f'<th scope="row">{shown(row["variant"], code)}</th>\n'
        f'    <td class="num">{fmt(row["parameters"], "int", row["parameters_reason"], code=code)}</td>'
        f'<td class="num">{shown(row["bits"], code)}</td>\n'
        f'    <td class="num">{fmt(row["estimate"], "bytes", row["parameters_reason"], code=code)}</td>\n'
        f'    <td class="num">{fmt(row["allocated"], "bytes", row["allocated_reason"], code=code)}</td>\n'
        f'    <td class="num">{fmt(row["reserved"], "bytes", row["reserved_reason"], code=code)}</td>\n'
        f'    <td class="num">{fmt(row["rss"], "bytes", row["rss_reason"], code=code)}</td>'
        f'{kv_cells(row.get("kv"), code) if kv else ""}\n  </tr>'
        for row in rows))


ESTIMATE = ("weights_bytes", "gradients_bytes", "optimizer_state_bytes", "total_bytes")  # each labelled "estimate"
MEASURED = ("gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes", "host_above_baseline_bytes")  # each "measured"


def adaptation_rows(rows: list[dict], w: dict, campaign: bool = True) -> Markup:
    """Return the adaptation table's row of every fine-tuning configuration among the sizing ROWS, in the words W of
    _adaptation_sizing.html: method, parameters, the estimate's parts beside the measured peaks (never summed), then each
    failed trial's phase with what the source points to for it. CAMPAIGN: begin each row with its campaign's link."""
    code = language.current()
    phase_word, lines = said(code)["phase_word"], []
    for row in rows:
        found = row.get("adaptation")
        if not found:
            continue
        memory, parameters = found["memory"], found.get("parameters") or {}
        estimate, reason = memory.get("estimate") or {}, memory.get("estimate_reason")
        failures = "; ".join(str(fill(w["failure"], trial=failure["trial"], phase=phase_word(failure["phase"]),
                                      pointer=failure["points_to"] or w["no_pointer"])) for failure in found["failures"])
        name = escape(row["campaign"])
        cells = [cell(parameters.get(key), "int", reason, code) for key in ("trainable_parameters", "total_parameters")]
        cells += [cell(estimate.get(key), "bytes", reason, code) for key in ESTIMATE]
        cells += [cell(memory["measured"][key]["value"], "bytes", memory["measured"][key]["reason"], code) for key in MEASURED]
        lines.append("<tr>" + (f'<td><a href="campaigns/{name}/index.html">{name}</a></td>' if campaign else "")
                     + f'<th scope="row">{shown(row["variant"], code)}</th><td>{fmt(found["method"], reason=reason, code=code)}'
                     f'</td>{"".join(map(str, cells))}<td class="failures">{failures or w["no_failure"]}</td></tr>\n')
    return Markup("".join(lines))
