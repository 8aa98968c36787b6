"""Write what the shared pages repeat for every campaign: the index's rows and the sizing page's rows.

Assembled here rather than in Jinja loops: with 1,000 campaigns these pages took half a second of every build, the
one that adds a single campaign too. The words come from the templates (their ``w``); every value is escaped here.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from iteralab.core import language
from iteralab.decision.kinds import kind_of_work
from iteralab.site.generated import kv_cells
from iteralab.site.render import fill, fmt, moment, shown


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
    kv = any(row.get("kv") for row in rows)
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
