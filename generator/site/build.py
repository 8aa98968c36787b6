"""Build the static site: records, catalog and notes rendered through Jinja2 templates."""


from __future__ import annotations

import json
import shutil
from functools import partial
from importlib import resources
from pathlib import Path

from iteralab.core.errors import CampaignFailed, UserError
from iteralab.core.paths import DEFAULT_RUNS, notes_folder, sheets_folder
from iteralab.decision.qualification import qualify
from iteralab.decision.report import decide_guarded
from iteralab.money.catalog import load_catalog
from iteralab.site import charts, workers
from iteralab.site.notes import load_notes, note_problems, variant_anchors
from iteralab.site.output import STATE_FILE, Writer, build_stamp, campaign_key, inputs_digest, list_files, shared_key
from iteralab.site.pages import CampaignJob, Places, catalog_rows, render_campaign_job, sizing_rows
from iteralab.site.render import TEMPLATES, jinja_environment
from iteralab.store.reading import load
from iteralab.store.records import KINDS
from iteralab.store.views import campaign_views


def _refuse_nested(runs: Path, out: Path) -> None:
    """Refuse a site folder inside the evidence, or evidence inside the site folder a build rewrites."""
    runs_at, out_at = runs.resolve(), out.resolve()
    if out_at == runs_at or out_at.is_relative_to(runs_at):
        raise UserError(f"--out {out} is inside the runs folder {runs}: the site would be written among the evidence; "
                        "choose a folder outside it, e.g. --out site; nothing was written")
    if runs_at.is_relative_to(out_at):
        raise UserError(f"the runs folder {runs} is inside --out {out}: a build rewrites that folder; keep the records "
                        "outside it; nothing was written")


def build_site(*, runs: Path | str = DEFAULT_RUNS, out: Path | str = "site", notes: Path | str | None = None,
               catalog: Path | str | None = None, sheets: Path | str | None = None, chart_cache: Path | None = None,
               processes: int | None = None) -> dict:
    """Render every page; campaigns whose inputs did not change since the last build are skipped.

    PROCESSES renders campaigns on that many cores (default: every core when there are thousands of trials).
    """
    runs, out = Path(runs), Path(out)
    if not runs.is_dir():
        raise UserError(f"{runs} is not a folder: pass the runs folder that holds the records")
    _refuse_nested(runs, out)
    places = Places(out, runs, notes_folder(runs, notes), Path(catalog) if catalog else None,
                    chart_cache if chart_cache is not None else out.parent / ".iteralab-cache" / "charts")
    sheets_dir = sheets_folder(runs, sheets)
    state = _read_state(out / STATE_FILE)
    runs_files = list_files(runs)
    inputs = inputs_digest(runs_files, places.notes, sheets_dir, places.catalog)
    if state.get("inputs") == inputs and (out / "index.html").is_file():
        return {"index": out / "index.html", "campaigns": len(state.get("campaigns", {})), "rendered": [], "processes": 1,
                "written": 0, "unchanged": 0, "problems": state.get("problems", []), "failed": state.get("failed", {})}
    # Load, then views, then decide and render, then write what every page links to.
    loaded = load(runs)
    price_catalog = load_catalog(catalog)
    all_notes = load_notes(places.notes)
    views = campaign_views(loaded, present={relative for relative, _ in runs_files})
    sheet_problems: list[str] = []
    qualified = qualify(sheets_dir, loaded, price_catalog, sheet_problems) if sheets_dir.is_dir() else []
    jobs = [CampaignJob(view, tuple(n for n in all_notes if n.meta.get("campaign") == view.name),
                        tuple(s for s in qualified if s.campaign == view.name),
                        build_stamp(view.last_at if view.manifests or view.trials else None), price_catalog) for view in views]
    shared = shared_key(price_catalog)
    keys = {job.view.name: campaign_key(job, shared) for job in jobs}
    previous = state.get("campaigns", {})
    stale = [job for job in jobs if previous.get(job.view.name) != keys[job.view.name]
             or not (out / "campaigns" / job.view.name / "index.html").is_file()]
    writer = Writer(out)
    answers, failed, count = _render_campaigns(stale, places, processes, writer)
    for view in views:  # unchanged campaigns are decided here, after the workers are done
        if view.name not in answers:
            try:
                answers[view.name] = decide_guarded(view, price_catalog).summary_line
            except CampaignFailed as error:
                answers[view.name], failed[view.name] = f"not built: {error.reason}", error.reason
    failed = dict(sorted(failed.items()))
    for name in failed:  # rendered again next time, to say again why (or to succeed once its records are fixed)
        keys[name] = None
    for gone in set(previous) - set(keys):
        shutil.rmtree(out / "campaigns" / gone, ignore_errors=True)
    common = {"stamp": build_stamp(max((v.last_at for v in views if v.manifests or v.trials), default=None)),
              "catalog": price_catalog}
    problems = loaded.problems + sheet_problems + note_problems(all_notes, views)
    _write_shared_pages(writer, views, all_notes, answers, problems, {**common, "failed": failed})
    writer.write(STATE_FILE, json.dumps({"inputs": inputs, "campaigns": keys, "problems": problems, "failed": failed},
                                        indent=2, sort_keys=True) + "\n")
    return {"index": out / "index.html", "campaigns": len(views), "rendered": [job.view.name for job in stale],
            "processes": count, "written": writer.written, "unchanged": writer.kept, "problems": problems,
            "failed": failed}


def _read_state(path: Path) -> dict:
    """Return what the last build recorded, or nothing when there is no readable state."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


def _render_campaigns(jobs: list[CampaignJob], places: Places, processes: int | None,
                      writer: Writer) -> tuple[dict, dict, int]:
    """Render the campaigns that changed, on several processes when there is enough work; return answers and failures."""
    jobs = sorted(jobs, key=lambda job: (-len(job.view.trials), job.view.name))  # heaviest first: no worker left with a big one
    count = workers.choose_workers(processes, sum(len(job.view.trials) for job in jobs), len(jobs))
    if count > 1:
        charts.prepare()  # build the chart templates once here; the workers inherit them
    # Decided in the workers (pandas starts BLAS threads, and a threaded process is never forked).
    results = workers.run([partial(render_campaign_job, job, places) for job in jobs], count)
    answers, failed = {}, {}
    for job, (written, kept, answer, failure) in zip(jobs, results, strict=True):
        writer.written += written
        writer.kept += kept
        answers[job.view.name] = answer
        if failure:
            failed[job.view.name] = failure
    return answers, failed, count


def _write_shared_pages(writer: Writer, views: list, all_notes: list, answers: dict, problems: list, common: dict) -> None:
    """Write the index, catalog, sizing and note pages, the stylesheet and the record schemas."""
    env = jinja_environment()
    writer.write("index.html", env.get_template("index.html").render(root="", views=views, notes=all_notes, answers=answers,
                                                                      problems=problems, **common))
    writer.write("catalog.html", env.get_template("catalog.html").render(root="", rows=catalog_rows(common["catalog"]), **common))
    writer.write("sizing.html", env.get_template("sizing.html").render(root="", rows=sizing_rows(views), **common))
    anchors = variant_anchors(views)
    for note in all_notes:
        writer.write(f"notes/{note.slug}.html", env.get_template("note.html").render(
            root="../", note=note, known={v.name for v in views}, anchors=anchors,
            note_problems=[p for p in problems if p.startswith(f"notes/{note.source}: ")], **common))
    writer.write("assets/style.css", (TEMPLATES / "assets" / "style.css").read_bytes())
    folder = resources.files("iteralab.store") / "schemas"
    for kind in ("common", *KINDS):
        writer.write(f"schemas/{kind}.schema.json", (folder / f"{kind}.schema.json").read_bytes())


def describe_build(result: dict) -> str:
    """Say which campaigns were rendered, how many files were written, and where the index is."""
    rendered = result["rendered"]
    named = ", ".join(rendered[:10]) + (f" and {len(rendered) - 10} more" if len(rendered) > 10 else "")
    on = f" on {result['processes']} processes" if result["processes"] > 1 else ""
    lines = [f"{result['campaigns']} campaign(s); re-rendered: {named or 'none (unchanged)'}{on}; "
             f"{result['written']} file(s) written, {result['unchanged']} unchanged"]
    lines += [f"campaign {name} was not built: {reason} (its page says so; run iteralab check)"
              for name, reason in result["failed"].items()]
    if result["problems"]:
        lines.append(f"{len(result['problems'])} problem(s) in the records and notes are listed on the index page "
                     "(iteralab check shows the records' ones)")
    lines.append(f"Site: {result['index'].resolve()}")
    return "\n".join(lines)
