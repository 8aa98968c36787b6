"""Build the static site: records, catalog and notes rendered through Jinja2 templates."""


from __future__ import annotations

import contextlib
import json
import shutil
import tomllib
from importlib import resources
from pathlib import Path

import orjson

from iteralab.core import language, workers
from iteralab.core.errors import UserError
from iteralab.core.paths import DEFAULT_RUNS, notes_folder, sheets_folder
from iteralab.decision.qualification import qualify
from iteralab.evidence import signing
from iteralab.money.catalog import load_catalog
from iteralab.pages import charts, per_campaign, questions
from iteralab.pages.generated import kv_note
from iteralab.pages.notes import load_notes, note_problems
from iteralab.pages.render import TEMPLATES, jinja_environment
from iteralab.site import favicon, incremental, published, stored, vendor
from iteralab.site.campaign import Places, catalog_rows, render_part
from iteralab.site.output import STATE_FILE, Writer, build_stamp, inputs_digest, list_files, shared_key, software
from iteralab.store.reading import is_records_file, load_table
from iteralab.store.records import KINDS


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
               catalog: Path | str | None = None, sheets: Path | str | None = None,
               processes: int | None = None, languages: tuple[str, ...] | list[str] | None = None,
               base_url: str | None = None, sign_key: Path | str | None = None, quiet: bool = False) -> dict:
    """Render every page in each of LANGUAGES; campaigns whose inputs did not change since the last build are skipped.

    The first language is built into OUT, each other one into OUT/CODE/, every page linking to its twin in the others.
    LANGUAGES None: every language OUT already holds (English alone in a new one). A language OUT holds that LANGUAGES
    leaves out is removed, never left behind with stale pages. PROCESSES renders campaigns on that many cores (default: every core when there are thousands of trials).
    BASE_URL: where the site is published (https://host/team/site/ or /team/site/), for the one page a host serves at
    any path, 404.html; every other page links relatively and needs none. SIGN_KEY: an OpenSSH key that signs each
    evidence bundle (QUIET: never ask for its passphrase).
    """
    runs, out = Path(runs), Path(out)
    top, held = held_languages(out)
    codes = _languages(languages) if languages else (top, *held)
    base_path = served_path(base_url)
    signer = signing.signer(sign_key, quiet=quiet, many=True) if sign_key else None  # checked before anything is written
    if not runs.is_dir():
        raise UserError(f"{runs} is not a folder: pass the runs folder that holds the records")
    inputs = _Inputs(runs)
    results = {}
    for code in codes:
        others = tuple((other, language.LANGUAGES[other], _prefix(code, other, codes[0])) for other in codes if other != code)
        with language.speaking(code):
            results[code] = _build_language(inputs=inputs, out=out if code == codes[0] else out / code, notes=notes,
                                            catalog=catalog, sheets=sheets, processes=processes,
                                            alternates=others, base_path=base_path, signer=signer,
                                            feed_base=_feed_base(base_url, None if code == codes[0] else code))
    removed = [code for code in held if code not in codes[1:]]  # the top language's old folder too
    for code in removed:  # built before, left out now: its pages would be served stale, unlinked from the others
        shutil.rmtree(out / code, ignore_errors=True)
    result = dict(results[codes[0]])
    result["removed_languages"] = removed
    result["languages"] = {code: {"index": found["index"], "rendered": found["rendered"], "copied": found["copied"],
                                  "written": found["written"], "unchanged": found["unchanged"]}
                           for code, found in results.items()}
    return result


def served_path(base_url: str | None) -> str:
    """Return the path a site published at BASE_URL is served under ('/' when None), ending in '/'."""
    from urllib.parse import urlsplit

    if base_url is None:
        return "/"
    parts = urlsplit(base_url)
    if parts.scheme not in ("", "http", "https") or (parts.scheme and not parts.netloc) or not parts.path.startswith("/") \
            or parts.query or parts.fragment or "\\" in base_url or any(part in (".", "..") for part in parts.path.split("/")):
        raise UserError(f"--base-url {base_url!r} is not where a site can be published: give the address of its index "
                        "page's folder, such as https://example.org/team/site/ or /team/site/; nothing was written")
    return parts.path if parts.path.endswith("/") else f"{parts.path}/"


def _feed_base(base_url: str | None, code: str | None) -> str:
    """Return what the feed's links start with: the published address (of CODE's folder), or nothing (relative links)."""
    if not base_url:
        return ""
    base = base_url if base_url.endswith("/") else f"{base_url}/"
    return f"{base}{code}/" if code else base


def held_languages(out: Path) -> tuple[str, tuple[str, ...]]:
    """Return the language an earlier build wrote at the top of OUT (English for a new one) and those it wrote into
    OUT/CODE/, each folder with its build state."""
    top = _read_state(Path(out) / STATE_FILE).get("language")
    top = top if top in language.LANGUAGES else language.DEFAULT
    return top, tuple(code for code in language.LANGUAGES if code != top and (Path(out) / code / STATE_FILE).is_file())


def _languages(requested) -> tuple[str, ...]:
    """Check the requested language codes: known ones, each once, in the order given."""
    codes = tuple(dict.fromkeys(requested))
    unknown = [code for code in codes if code not in language.LANGUAGES]
    if unknown or not codes:
        raise UserError(f"unknown language {', '.join(unknown) or '(none)'}: choose from {', '.join(language.LANGUAGES)} "
                        "(--lang en --lang id builds both); nothing was written")
    return codes


def _prefix(code: str, other: str, first: str) -> str:
    """Return the path from CODE's site root to OTHER's: the first language at the top, the others in CODE/ below it."""
    if code == first:
        return f"{other}/"
    return "../" if other == first else f"../{other}/"


class _Inputs:
    """What every language's build reads alike: the runs folder's listing, and its record table once one needs it."""

    def __init__(self, runs: Path):
        # Each campaign's predictions folder is one entry: its times stand for its names (listing 100,000 of them took a
        # third of a second); only the changed campaigns' folders are listed, when they are rendered.
        self.runs, self.summary, self._table = runs, list_files(runs, summarised=True), None
        self.folders = {relative[:-1]: entry for relative, entry in self.summary if relative.endswith("/")}

    def table(self):
        """Return the record table (columns only), loaded at the first call."""
        # The listing names the records files already: walking 100,000 prediction files again took half a second.
        if self._table is None:
            self._table = load_table(self.runs, sorted(self.runs / relative for relative, _ in self.summary
                                                       if relative.endswith(".jsonl") and is_records_file(relative)))
        return self._table


def _build_language(*, inputs: _Inputs, out: Path, notes, catalog, sheets, processes,
                    alternates: tuple, base_path: str = "/", signer: signing.Signer | None = None, feed_base: str = "") -> dict:
    """Build the site in the current language into OUT."""
    runs, out = inputs.runs, Path(out)
    _refuse_nested(runs, out)
    places = Places(out, runs, notes_folder(runs, notes), Path(catalog) if catalog else None, alternates, signer)
    sheets_dir = sheets_folder(runs, sheets)
    state = _read_state(out / STATE_FILE)
    # The 404 page links from where the site is published: another --base-url is a change to build.
    signed = signer.fingerprint if signer else ""  # another signing key (or none) changes every bundle
    digest = (f"{inputs_digest(inputs.summary, places.notes, sheets_dir, places.catalog, alternates)}|{base_path}|{signed}|{feed_base}"
              f"|{software()}")
    if state.get("inputs") == digest and (out / "index.html").is_file():
        return {"index": out / "index.html", "campaigns": len(state.get("campaigns", {})), "rendered": [], "copied": 0, "processes": 1,
                "written": 0, "unchanged": 0, "problems": state.get("problems", []), "failed": state.get("failed", {})}
    # The record table (columns only, one for every language), then keys per campaign; only changed campaigns' records
    # are read whole.
    table = inputs.table()
    price_catalog = load_catalog(catalog)
    all_notes = load_notes(places.notes)
    plan = _plan(table, inputs, sheets_dir, price_catalog, all_notes, places.alternates, signed)
    names, keys, problems = plan["names"], plan["keys"], plan["problems"]
    previous, summaries = state.get("campaigns", {}), state.get("summaries", {})
    state.setdefault("answers", {})
    stale = [name for name in names if previous.get(name) != keys[name] or name not in summaries or name not in state["answers"]
             or not (out / "campaigns" / name / "index.html").is_file()]
    writer = Writer(out)
    parts = table.parts({name: plan["positions"][name] for name in stale})
    present = incremental.present_predictions(table, {name: plan["positions"][name] for name in stale}, runs)
    store_limit = stored.limit_bytes()
    tasks = [(name, parts[name], plan["notes"][name], plan["sheets"][name], plan["stamps"][name], present[name],
              stored.entry_key(keys[name], runs, places.notes) if store_limit else None)
             for name in stale]
    shared = {"problems": problems, "catalog": price_catalog, "places": places, "language": language.current(),
              "revisions": plan["revisions"],
              # Made here once, with Altair, and handed to every worker: none imports Altair itself.
              "chart_specs": {language.current(): charts.made(language.current())} if tasks else {}}
    answers, failed, count = _render_campaigns(tasks, places, processes, writer, shared, summaries)
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
    state = {"format": incremental.STATE_FORMAT, "inputs": digest, "campaigns": keys, "summaries": summaries,
             "answers": {name: answers[name] for name in names}, "problems": problems, "failed": failed,
             "language": language.current()}
    writer.write(STATE_FILE, orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
    return {"index": out / "index.html", "campaigns": len(names), "rendered": stale, "copied": writer.copied, "processes": count,
            "written": writer.written, "unchanged": writer.kept, "problems": problems, "failed": failed}


def _plan(table, inputs: _Inputs, sheets_dir: Path, price_catalog, all_notes: list, alternates: tuple, signed: str = "") -> dict:
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


def _read_state(path: Path) -> dict:
    """Return what the last build recorded, or nothing when there is no readable state of this format."""
    try:
        # orjson: a thousand campaigns' state is megabytes, read on every build, a no-change one included.
        state = orjson.loads(path.read_bytes()) if path.is_file() else {}
    except orjson.JSONDecodeError:  # bytes that are not UTF-8 JSON too
        return {}
    return state if isinstance(state, dict) and state.get("format") == incremental.STATE_FORMAT else {}


def _render_campaigns(tasks: list[tuple], places: Places, processes: int | None, writer: Writer, common: dict,
                      summaries: dict) -> tuple[dict, dict, int]:
    """Render the campaigns that changed, on several processes when there is enough work; return answers and failures."""
    tasks = sorted(tasks, key=lambda task: (-len(task[1].frame), task[0]))  # heaviest first: no worker left with a big one
    count = workers.choose_workers(processes, sum(len(task[1].frame) for task in tasks), len(tasks))
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



def describe_build(result: dict) -> str:
    """Say which campaigns were rendered, how many files were written, and where the index is."""
    rendered = result["rendered"]
    named = ", ".join(rendered[:10]) + (f" and {len(rendered) - 10} more" if len(rendered) > 10 else "")
    on = f" on {result['processes']} processes" if result["processes"] > 1 else ""
    # Said, so that nobody wonders whether a fast build looked at the records: a copy is of the same inputs' pages.
    store = _copied(result.get("copied", 0))
    lines = [f"{result['campaigns']} campaign(s); re-rendered: {named or 'none (unchanged)'}{store}{on}; "
             f"{result['written']} file(s) written, {result['unchanged']} unchanged"]
    lines += [f"campaign {name} was not built: {reason} (its page says so; run iteralab check)"
              for name, reason in result["failed"].items()]
    if result["problems"]:
        lines.append(f"{len(result['problems'])} problem(s) in the records and notes are listed on the index page "
                     "(iteralab check shows the records' ones)")
    for code, found in list(result.get("languages", {}).items())[1:]:
        lines.append(f"{language.LANGUAGES[code]}: {found['written']} file(s) written, {found['unchanged']} unchanged"
                     f"{_copied(found.get('copied', 0))}; {found['index'].resolve()}")
    for code in result.get("removed_languages", []):
        lines.append(f"{language.LANGUAGES[code]} ({code}/) removed: not asked for with --lang, its pages would have "
                     f"been left stale (build --lang {language.DEFAULT} --lang {code} builds both)")
    lines.append(f"Site: {result['index'].resolve()}")
    return "\n".join(lines)


def _copied(count: int) -> str:
    return f" ({count} copied from this machine's store of rendered campaigns)" if count else ""
