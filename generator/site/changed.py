"""What a build does once its inputs changed: the record table, each campaign's key, the campaigns to render, the shared
pages and the build state.

Imported by ``site.build`` only where a build has work (``importlib``, as the command line's lazy group imports a
command): a rebuild with nothing to do reads the listing, the inputs' digest and the state's first line, and never
imports this module, the record table's libraries, the pages or the decision (0.1 s of 0.25 s at 1,000 campaigns).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import tomllib
from importlib import resources
from pathlib import Path

from iteralab.core import language, processes, workers
from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.decision.qualification import qualify
from iteralab.money.catalog import Catalog, load_catalog
from iteralab.pages import charts, per_campaign, questions
from iteralab.pages.generated import kv_note
from iteralab.pages.notes import load_notes, note_problems
from iteralab.pages.render import TEMPLATES, jinja_environment, moment, template_files
from iteralab.site import favicon, incremental, published, stored, vendor
from iteralab.site.campaign import Places, catalog_rows, parts, render_part
from iteralab.site.output import STATE_FILE, Writer, read_state, software, state_bytes, words
from iteralab.store.reading import is_records_file, load_table
from iteralab.store.records import KINDS


def build(*, inputs, out: Path, catalog, sheets_dir: Path, wanted: int | None, places_of: tuple, digest: str, signed: str,
          base_path: str, feed_base: str) -> dict:
    """Build into OUT what changed since its last build (everything in a new folder), rendering on WANTED processes (None:
    as many as the work is worth); DIGEST: the inputs' digest; PLACES_OF: the notes folder, the catalog, the other
    languages and the signer, as ``Places`` takes them after OUT and the runs folder.

    INPUTS: the build's ``_Inputs`` (the runs folder's listing; its record table is kept there for the other languages).
    """
    # The collector paused: a build allocates millions of objects that die by reference count, and each full collection
    # scanned the thousand campaigns' summaries again (50 ms of one campaign appended to a thousand). Rendering and the
    # record loader pause it too; the few cycles left are collected when it resumes.
    with processes.collector_paused():
        return _build(inputs=inputs, out=out, catalog=catalog, sheets_dir=sheets_dir, wanted=wanted, places_of=places_of,
                      digest=digest, signed=signed, base_path=base_path, feed_base=feed_base)


def record_table(inputs):
    """Return the record table (columns only) of INPUTS' runs folder, loaded once for every language of the build."""
    if inputs.table is None:
        # The listing names the records files and holds their stats: walking 100,000 prediction files again took half a
        # second, making 4,000 paths relative and stat-ing them again a tenth.
        listed = [(relative, entry) for relative, entry in inputs.summary
                  if relative.endswith(".jsonl") and is_records_file(relative)]
        inputs.table = load_table(inputs.runs, [entry.path for _, entry in listed],
                                  shown=[relative for relative, _ in listed], stats=[entry.stat() for _, entry in listed])
    return inputs.table


def _build(*, inputs, out: Path, catalog, sheets_dir: Path, wanted: int | None, places_of: tuple, digest: str, signed: str,
           base_path: str, feed_base: str) -> dict:
    runs = inputs.runs
    places = Places(out, runs, *places_of)
    state = read_state(out / STATE_FILE)
    # The record table (columns only, one for every language), then keys per campaign; only changed campaigns' records
    # are read whole.
    table = record_table(inputs)
    vendor.prepare()  # made while this process plans, where this machine keeps no bundle yet
    price_catalog = load_catalog(catalog)
    all_notes = load_notes(places.notes)
    plan = _plan(table, inputs, sheets_dir, price_catalog, all_notes, places.alternates, signed)
    names, keys, problems = plan["names"], plan["keys"], plan["problems"]
    previous, summaries = state.get("campaigns", {}), state.get("summaries", {})
    state.setdefault("answers", {})
    stale = [name for name in names if previous.get(name) != keys[name] or name not in summaries or name not in state["answers"]
             or not (out / "campaigns" / name / "index.html").is_file()]
    writer = Writer(out)
    cut = parts(table, {name: plan["positions"][name] for name in stale})
    store_limit = stored.limit_bytes()
    # Each campaign's prediction files present are looked for where it is rendered (render_part), on every core.
    tasks = [(name, cut[name], plan["notes"][name], plan["sheets"][name], plan["stamps"][name], None,
              stored.entry_key(keys[name], runs, places.notes) if store_limit else None)
             for name in stale]
    shared = {"problems": problems, "catalog": price_catalog, "places": places, "language": language.current(),
              "revisions": plan["revisions"],
              # Made here once, with Altair, and handed to every worker: none imports Altair itself.
              "chart_specs": {language.current(): charts.made(language.current())} if tasks else {}}
    answers, failed, count = _render_campaigns(tasks, places, wanted, writer, shared, summaries)
    if store_limit and stale:
        stored.prune(store_limit)
    # A failed campaign is never remembered as done (its key is None): every failure is one of this build's.
    answers |= {name: state["answers"][name] for name in names if name not in answers}
    failed = dict(sorted(failed.items()))
    for name in failed:  # rendered again next time, to say again why (or to succeed once its records are fixed)
        keys[name] = None
    for gone in set(previous) - set(keys):
        shutil.rmtree(out / "campaigns" / gone, ignore_errors=True)
    summaries = {name: summaries[name] for name in names}
    common = {"stamp": build_stamp(max((at for at in plan["newest"].values() if at), default=None)), "catalog": price_catalog,
              "alternates": places.alternates}
    problems = problems + plan["sheet_problems"] + note_problems(all_notes, summaries)
    _write_site_pages(writer, plan, summaries, all_notes, answers, problems, {**common, "failed": failed},
                      served_root(base_path, places.alternates), feed_base)
    # What a no-change rebuild reads first (read_head), then the rest (read_state).
    head = {"inputs": digest, "language": language.current(), "count": len(names), "problems": problems, "failed": failed}
    body = {"campaigns": keys, "summaries": summaries, "answers": {name: answers[name] for name in names}}
    writer.write(STATE_FILE, state_bytes(head, body))
    return {"index": out / "index.html", "campaigns": len(names), "rendered": stale, "copied": writer.copied, "processes": count,
            "written": writer.written, "unchanged": writer.kept, "problems": problems, "failed": failed}


def _plan(table, inputs, sheets_dir: Path, price_catalog, all_notes: list, alternates: tuple, signed: str = "") -> dict:
    """Work out each campaign's inputs and key from the record table, and settle the qualification sheets."""
    positions = incremental.groups(table)
    names = list(positions)
    problems = table.all_problems()
    sheet_problems: list[str] = []
    qualified = []
    if sheets_dir.is_dir():  # a sheet reads its campaign's trials: only those campaigns' records are read whole
        named = sheet_campaigns(sheets_dir) & set(names)
        qualified = qualify(sheets_dir, table.loaded(named), price_catalog, sheet_problems, campaigns=names)
    notes = {name: tuple(n for n in all_notes if n.meta.get("campaign") == name) for name in names}
    sheets = {name: tuple(s for s in qualified if s.campaign == name) for name in names}
    newest = incremental.newest_records(table, positions)
    stamps = {name: build_stamp(newest[name]) for name in names}
    folders = incremental.prediction_folders(table, positions)
    stamped = incremental.folder_stamps(inputs.runs, set().union(*folders.values()), inputs.folders)
    folder_keys = {name: json.dumps(sorted((folder, stamped[folder]) for folder in folders[name])) for name in names}
    # A campaign's revisions before and after it (#35) show on its pages and in its bundle: a new revision renders it again.
    manifests = questions.latest_manifests(table)
    revisions = questions.links(manifests)
    others = incremental.other_files(inputs.summary)
    for name, link in revisions.items():
        others[name] = f"{others.get(name, '')}\0{json.dumps(link, sort_keys=True)}"
    keys = incremental.campaign_keys(table, positions, shared_key(price_catalog, alternates, signed), problems, folder_keys, notes,
                                     sheets, stamps, others)
    return {"names": names, "positions": positions, "problems": problems, "sheet_problems": sheet_problems, "notes": notes,
            "sheets": sheets, "newest": newest, "stamps": stamps, "keys": keys, "manifests": manifests,
            "revisions": revisions}


def _render_campaigns(tasks: list[tuple], places: Places, wanted: int | None, writer: Writer, common: dict,
                      summaries: dict) -> tuple[dict, dict, int]:
    """Render the campaigns that changed, on several processes when there is enough work; return answers and failures."""
    tasks = sorted(tasks, key=lambda task: (-len(task[1]), task[0]))  # heaviest first: no worker left with a big one
    count = workers.choose_workers(wanted, sum(len(task[1]) for task in tasks), len(tasks))
    results = workers.run(render_part, tasks, count, common)
    answers, failed = {}, {}
    for task, (written, kept, answer, failure, summary, copied) in zip(tasks, results, strict=True):
        writer.written += written
        writer.kept += kept
        writer.copied += copied
        answers[task[0]], summaries[task[0]] = answer, summary
        if failure:
            failed[task[0]] = failure
    return answers, failed, count


def served_root(base_path: str, alternates: tuple) -> str:
    """Return where the 404 page's links start: served for a missing path at any depth, its links start at the path the
    site is published under (the host's root unless --base-url says otherwise; another language: below it)."""
    primary = not any(prefix.startswith("../") for _, _, prefix in alternates)
    return base_path if primary else f"{base_path}{language.current()}/"


def _write_site_pages(writer: Writer, plan: dict, summaries: dict, all_notes: list, answers: dict, problems: list,
                      common: dict, root: str, feed_base: str) -> None:
    """Write the shared pages, the pages of questions asked again and the feed."""
    asked = questions.question_pages(summaries, plan["manifests"], plan["revisions"])
    _write_shared_pages(writer, summaries, all_notes, answers, problems, {**common, "served_root": root, "asked": asked})
    published.write_questions(writer, asked, answers, common)
    writer.write(published.FEED, published.feed_bytes(summaries, answers, asked, common["failed"], feed_base))


def _write_shared_pages(writer: Writer, summaries: dict, all_notes: list, answers: dict, problems: list, common: dict) -> None:
    """Write the index, catalog, sizing and note pages, the stylesheet and the record schemas."""
    env = jinja_environment()
    writer.write("index.html", env.get_template("index.html").render(root="", page="index.html", campaigns=list(summaries.values()), notes=all_notes,
                                                                      answers=answers, problems=problems, index_rows=per_campaign.index_rows, **common))
    writer.write("404.html", env.get_template("404.html").render(root=common["served_root"], page="404.html", **common))
    writer.write("catalog.html", env.get_template("catalog.html").render(root="", page="catalog.html", rows=catalog_rows(common["catalog"]),
                                                                          **common))
    rows = [row for summary in summaries.values() for row in summary["sizing"]]
    kvs = [row.get("kv") for row in rows if row.get("kv")]  # a state kept by an older build has no KV cache figure
    writer.write("sizing.html", env.get_template("sizing.html").render(
        root="", page="sizing.html", rows=rows, kvs=kvs, kv_note=kv_note, adapted=[row for row in rows if row.get("adaptation")],
        sizing_table_rows=per_campaign.sizing_table_rows, adaptation_rows=per_campaign.adaptation_rows, **common))
    anchors = {name: summary["variants"] for name, summary in summaries.items()}
    for note in all_notes:
        writer.write(f"notes/{note.slug}.html", env.get_template("note.html").render(
            root="../", page=f"notes/{note.slug}.html", note=note, known=set(summaries), anchors=anchors,
            note_problems=[p for p in problems if p.startswith(f"notes/{note.source}: ")], **common))
    writer.write("assets/style.css", (TEMPLATES / "assets" / "style.css").read_bytes())
    writer.write("assets/charts.js", (TEMPLATES / "assets" / "charts.js").read_bytes())
    writer.write(favicon.FILE, favicon.ico())  # at the folder's top: where a browser asks for it unless told otherwise
    # Each language's folder carries the libraries too: it can be published, or opened from disk, on its own.
    writer.write(vendor.BUNDLE, vendor.bundle())
    writer.write(vendor.LICENCES, (TEMPLATES / vendor.LICENCES).read_bytes())
    folder = resources.files("iteralab.store") / "schemas"
    for kind in ("common", *KINDS):
        writer.write(f"schemas/{kind}.schema.json", (folder / f"{kind}.schema.json").read_bytes())


def sheet_campaigns(folder: Path) -> set[str]:
    """Return the campaigns the sheets in FOLDER name (a sheet that cannot be read names none; qualify says why)."""
    names = set()
    for path in sorted(Path(folder).glob("*.toml")):
        with contextlib.suppress(OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            campaign = tomllib.loads(path.read_text(encoding="utf-8")).get("campaign")
            if isinstance(campaign, str):
                names.add(campaign)
    return names





def build_stamp(latest: str | None) -> str:
    """Name the build time from SOURCE_DATE_EPOCH, else the newest record shown, so output is reproducible."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        try:
            built = dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        except ValueError:
            raise UserError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds") from None
        return Text("built {time}", time=moment(f"{built:%Y-%m-%dT%H:%M}+00:00")).say()
    return Text("records up to {time}", time=moment(latest)).say() if latest else Text("no records yet").say()


def shared_key(catalog: Catalog, alternates: tuple = (), signed: str = "") -> str:
    """Hash what every campaign's pages depend on: code version, templates, catalog, language, the bundles' signing key."""
    digest = hashlib.sha256(f"{software()}|{words(alternates)}|{signed}".encode())
    for template in template_files():
        digest.update(template.name.encode() + template.read_bytes())
    digest.update(json.dumps(catalog.snapshot(), sort_keys=True).encode())
    return digest.hexdigest()
