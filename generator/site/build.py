"""Build the static site: records, catalog and notes rendered through Jinja2 templates."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
import posixpath
import shutil
from functools import cache, lru_cache, partial
from importlib import resources
from pathlib import Path

from markupsafe import Markup, escape

import iteralab
from iteralab.site import charts
from iteralab.site import workers
from iteralab.money.catalog import Catalog, gb_to_gib, load_catalog
from iteralab.decision.report import Report, decide, span
from iteralab.core.errors import UserError
from iteralab.site.notes import load_notes
from iteralab.decision.qualification import qualify
from iteralab.store.records import KINDS, load
from iteralab.money.schedule import format_hours
from iteralab.store.views import CampaignView, campaign_views

# Shipped inside the package (iteralab.templates, from the repository's templates/ folder), so a wheel has them too.
TEMPLATES = Path(str(resources.files("iteralab.templates")))
TEMPLATE_SUFFIXES = (".html", ".css")
STATE_FILE = ".iteralab-build.json"
PHASE_ORDER = ("environment_check", "model_load", "compilation", "warmup", "measured_window", "evaluation", "writing_results")


FORMATS = {
    "seconds": lambda value: f"{value:.3f} s",
    "ns": lambda value: f"{value / 1e9:.3f} s",
    "bytes": lambda value: f"{value:,} B ({value / 2**20:,.1f} MiB)",
    "gib": lambda value: f"{value / 2**30:,.2f} GiB",
    "ratio": lambda value: f"{value:.3f}",
    "int": lambda value: f"{value:,}",
    "rate": lambda value: f"{value:,.1f}/s",
}
ALL_FORMATS = {**FORMATS, "bool": lambda value: "yes" if value else "no", "text": str}


def _fmt(value, kind: str, reason: str | None) -> Markup:
    if value is None:
        why = escape(reason or "not recorded")
        return Markup(f'<span class="missing" data-missing="{why}" title="{why}">—<span class="reason"> {why}</span></span>')
    return escape(ALL_FORMATS.get(kind, str)(value))


# Trial pages repeat the same figures and reasons thousands of times; typed, so True and 1 stay apart.
_fmt_cached = lru_cache(maxsize=1 << 16, typed=True)(_fmt)


def fmt(value, kind: str = "text", reason: str | None = None) -> Markup:
    """Format VALUE one way everywhere; a missing value is an empty cell with its reason, never 0."""
    try:
        return _fmt_cached(value, kind, reason)
    except TypeError:  # an unhashable value (a list or object shown as text)
        return _fmt(value, kind, reason)


def _cell(value, kind: str, reason: str | None) -> Markup:
    css = ' class="num"' if kind in FORMATS else ""
    return Markup(f"<td{css}>{fmt(value, kind, reason)}</td>")


_cell_cached = lru_cache(maxsize=1 << 16, typed=True)(_cell)


def cell(value, kind: str = "text", reason: str | None = None) -> Markup:
    """Return a table cell holding fmt(VALUE), right-aligned for numbers."""
    try:
        return _cell_cached(value, kind, reason)
    except TypeError:
        return _cell(value, kind, reason)


@lru_cache(maxsize=16)
def schema_links(root: str) -> Markup:
    """Link the record schemas from a page ROOT levels deep (every page's footer)."""
    return Markup(", ").join(Markup('<a href="{}schemas/{}.schema.json">{}</a>').format(root, kind, kind) for kind in KINDS)


def trial_rows(trial: dict) -> dict:
    """Return the phase and quality rows of a trial page as ready cells (thousands of pages: kept out of Jinja calls)."""
    gpu_reason = trial["memory"].get("gpu_memory_reason")
    phases = []
    for name in PHASE_ORDER:
        phase = trial["phases"].get(name, {})
        reason = phase.get("reason")
        phases.append((name, Markup("".join((
            cell(phase.get("duration_ns"), "ns", reason),
            cell(phase.get("gpu_peak_allocated_bytes"), "bytes", gpu_reason or reason),
            cell(phase.get("gpu_peak_reserved_bytes"), "bytes", gpu_reason or reason),
            cell(phase.get("host_peak_rss_bytes"), "bytes", reason))))))
    quality = []
    if trial.get("quality"):
        missing = trial["quality"]["missing_reasons"]
        groups = [("overall", trial["quality"]["overall"]), *sorted(trial["quality"]["buckets"].items())]
        for name, scores in groups:
            quality.append((name, Markup("".join((
                cell(scores.get("entries"), "int"),
                *(cell(scores.get(metric), "ratio", missing.get(metric, "no entries in this subgroup"))
                  for metric in ("accuracy", "macro_f1", "agreement")))))))
    return {"phases": phases, "quality": quality}


def pretty_json(value) -> str:
    """Indent a record for reading, keys sorted."""
    try:
        import orjson

        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode("utf-8")
    except (ImportError, TypeError):  # TypeError: an integer beyond 64 bits, valid JSON that orjson does not write
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@cache
def environment():
    """Return the Jinja2 environment: autoescape on, undefined names are errors."""
    # Cached: compiled templates are reused across campaigns; Jinja still reloads a template whose file changed.
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("iteralab.templates", "."), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals.update(fmt=fmt, cell=cell, phase_order=PHASE_ORDER, version=iteralab.__version__, schema_links=schema_links,
                       hours=format_hours, span=span)
    env.filters["tojson_pretty"] = pretty_json
    return env


def _build_stamp(latest: str | None) -> str:
    """Name the build time from SOURCE_DATE_EPOCH, else the newest record shown, so output is reproducible."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        try:
            moment = dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        except ValueError:
            raise UserError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds") from None
        return f"built {moment:%Y-%m-%d %H:%M} UTC"
    return f"records up to {latest}" if latest else "no records yet"


class Writer:
    """Write files under the output folder, leaving unchanged files untouched."""

    def __init__(self, out: Path):
        self.out, self.written, self.kept, self.folders = out, 0, 0, set()

    def write(self, relative: str, data: str | bytes) -> None:
        # Plain os calls on strings: a full build writes 100,000 files and pathlib's overhead showed.
        path = f"{self.out}/{relative}"
        payload = data.encode("utf-8") if isinstance(data, str) else data
        exists = True
        try:
            with open(path, "rb") as existing:
                if os.fstat(existing.fileno()).st_size == len(payload) and existing.read() == payload:
                    self.kept += 1
                    return
        except (FileNotFoundError, NotADirectoryError):
            exists = False
        folder = os.path.dirname(path)
        if folder not in self.folders:
            os.makedirs(folder, exist_ok=True)
            self.folders.add(folder)
        self.written += 1
        if not exists:
            # A new file replaces nothing: create it in place (a rename per file cost a fifth of a full build's
            # writes). A build cut short leaves it incomplete, but then no build state is saved and the next
            # build renders the campaign again.
            try:
                with open(path, "xb") as handle:
                    handle.write(payload)
                return
            except FileExistsError:
                pass  # created meanwhile: replace it whole, below
        temporary = path + ".partial"
        with open(temporary, "wb") as handle:
            handle.write(payload)
        os.replace(temporary, path)  # readers of a served site never see half of a page they could already open


def _files(folder: Path) -> list[tuple[str, os.DirEntry]]:
    """Return (relative posix path, entry) of every file under FOLDER, sorted; scandir, as runs/ may hold 100,000s."""
    found, pending = [], [(str(folder), "")]
    while pending:
        current, prefix = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    # Linked folders are not entered, as the record loader's rglob does not enter them either.
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, f"{prefix}{entry.name}/"))
                    elif entry.is_file():
                        found.append((f"{prefix}{entry.name}", entry))
        except OSError:
            continue  # an unreadable folder is reported by the loader, which reads the records
    return sorted(found, key=lambda item: item[0])


def _inputs_digest(runs_files: list, notes_dir: Path, sheets_dir: Path, catalog: Path | None) -> str:
    """Hash everything a build reads: record bytes, other files by size and time, notes, sheets, catalog, templates."""
    digest = hashlib.sha256(f"{iteralab.__version__}|{os.environ.get('SOURCE_DATE_EPOCH')}".encode())
    listing = []  # names, sizes and times, hashed in one call: a no-change rebuild of 100,000 trials stats them all
    for relative, entry in runs_files:
        if relative.endswith(".jsonl") and relative.rpartition("/")[0].rpartition("/")[2] == "records":
            with open(entry.path, "rb") as handle:
                digest.update(relative.encode("utf-8", "surrogateescape") + b"\0" + handle.read())
        else:
            # Predictions, receipts and corpus copies are written once; their size and time stand for them.
            info = entry.stat()
            listing.append(f"{relative}\0{info.st_size}:{info.st_mtime_ns}\n")
    digest.update("".join(listing).encode("utf-8", "surrogateescape"))
    for folder in (notes_dir, sheets_dir):
        if folder.is_dir():
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                digest.update(path.as_posix().encode("utf-8", "surrogateescape") + b"\0" + path.read_bytes())
    for path in template_files():
        digest.update(path.relative_to(TEMPLATES).as_posix().encode() + b"\0" + path.read_bytes())
    if catalog is not None and catalog.is_file():
        digest.update(catalog.read_bytes())
    return digest.hexdigest()


def template_files() -> list[Path]:
    """Return the template and stylesheet files, sorted (not the package's __init__ or bytecode)."""
    return sorted(path for path in TEMPLATES.rglob("*") if path.suffix in TEMPLATE_SUFFIXES and path.is_file())


def _shared_key(catalog: Catalog) -> str:
    """Hash what every campaign's pages depend on: code version, templates, catalog."""
    digest = hashlib.sha256(iteralab.__version__.encode())
    for template in template_files():
        digest.update(template.name.encode() + template.read_bytes())
    digest.update(json.dumps(catalog.snapshot(), sort_keys=True).encode())
    return digest.hexdigest()


def _campaign_key(view: CampaignView, notes, shared: str) -> str:
    import orjson

    digest = hashlib.sha256(shared.encode())
    for record in view.manifests + view.trials + view.rentals + view.deliverables:
        digest.update(orjson.dumps(record, option=orjson.OPT_SORT_KEYS))
    digest.update(json.dumps(view.problems).encode())
    digest.update(json.dumps([(n.slug, n.meta, n.html) for n in notes], sort_keys=True).encode())
    return digest.hexdigest()


def build_site(*, runs: Path | str = "runs", out: Path | str = "site", notes: Path | str | None = None,
               catalog: Path | str | None = None, sheets: Path | str | None = None, chart_cache: Path | None = None,
               processes: int | None = None) -> dict:
    """Render every page; campaigns whose inputs did not change since the last build are skipped.

    PROCESSES renders campaigns on that many cores (default: every core when there are thousands of trials).
    """
    runs, out = Path(runs), Path(out)
    notes_dir = Path(notes) if notes else runs.parent / "notes"
    sheets_dir = Path(sheets) if sheets else runs.parent / "qualification"
    state_path = out / STATE_FILE
    try:
        state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        state = {}
    if not runs.is_dir():
        raise UserError(f"{runs} is not a folder: pass the runs folder that holds the records")
    runs_files = _files(runs)
    inputs = _inputs_digest(runs_files, notes_dir, sheets_dir, Path(catalog) if catalog else None)
    if state.get("inputs") == inputs and (out / "index.html").is_file():
        return {"index": out / "index.html", "campaigns": len(state.get("campaigns", {})), "rendered": [], "processes": 1,
                "written": 0, "unchanged": 0, "problems": state.get("problems", [])}
    loaded = load(runs)
    price_catalog = load_catalog(catalog)
    all_notes = load_notes(Path(notes) if notes else runs.parent / "notes")
    catalog_path = Path(catalog) if catalog else None
    views = campaign_views(loaded)
    qualified = qualify(sheets_dir, loaded, price_catalog) if sheets_dir.is_dir() else []
    env = environment()
    writer = Writer(out)
    previous = state.get("campaigns", {})
    cache = chart_cache if chart_cache is not None else out.parent / ".iteralab-cache" / "charts"
    stamp = _build_stamp(max((view.last_at for view in views if view.manifests or view.trials), default=None))
    common = {"stamp": stamp, "catalog": price_catalog}
    new_state, rendered, jobs = {}, [], []
    shared = _shared_key(price_catalog)
    present = {relative for relative, _ in runs_files}
    for view in views:
        for trial in view.trials:
            if trial.get("predictions") and posixpath.normpath(trial["predictions"]["path"]) not in present:
                view.problems.append(f"{trial['predictions']['path']}: prediction file of trial {trial['record_id']} "
                                     "is missing from the runs folder")
                trial["predictions_missing"] = True
        mine = [note for note in all_notes if note.meta.get("campaign") == view.name]
        view.sheets = [sheet for sheet in qualified if sheet.campaign == view.name]
        own_stamp = _build_stamp(view.last_at if view.manifests or view.trials else None)
        key = _campaign_key(view, mine, shared) + own_stamp
        new_state[view.name] = key
        if previous.get(view.name) == key and (out / "campaigns" / view.name / "index.html").is_file():
            continue
        jobs.append((len(view.trials), view.name, partial(
            _render_campaign_job, out, view, mine, runs, cache, {**common, "stamp": own_stamp},
            notes_dir=notes_dir, catalog_path=catalog_path)))
        rendered.append(view.name)
    jobs.sort(key=lambda job: (-job[0], job[1]))  # heaviest first, so no worker is left with a big one at the end
    count = workers.choose_workers(processes, sum(job[0] for job in jobs), len(jobs))
    if count > 1:
        charts.prepare()  # build the chart templates once here; the workers inherit them
    answers = {}
    for (_, name, _), (written, kept, answer) in zip(jobs, workers.run([job[2] for job in jobs], count), strict=True):
        writer.written += written
        writer.kept += kept
        answers[name] = answer
    # Decided in the workers for the campaigns they rendered (pandas starts BLAS threads, and a threaded process is
    # never forked); the unchanged campaigns' answers are decided here, after the workers are done.
    for view in views:
        if view.name not in answers:
            answers[view.name] = decide(view, price_catalog).summary_line
    for stale in set(previous) - set(new_state):
        shutil.rmtree(out / "campaigns" / stale, ignore_errors=True)
    writer.write("index.html", env.get_template("index.html").render(root="", views=views, notes=all_notes, answers=answers,
                                                                      problems=loaded.problems, **common))
    writer.write("catalog.html", env.get_template("catalog.html").render(root="", rows=_catalog_rows(price_catalog), **common))
    writer.write("sizing.html", env.get_template("sizing.html").render(root="", rows=sizing_rows(views), **common))
    for note in all_notes:
        writer.write(f"notes/{note.slug}.html", env.get_template("note.html").render(
            root="../", note=note, known={v.name for v in views}, **common))
    writer.write("assets/style.css", (TEMPLATES / "assets" / "style.css").read_bytes())
    folder = resources.files("iteralab.store") / "schemas"
    for kind in ("common", *KINDS):
        writer.write(f"schemas/{kind}.schema.json", (folder / f"{kind}.schema.json").read_bytes())
    writer.write(STATE_FILE, json.dumps({"inputs": inputs, "campaigns": new_state, "problems": loaded.problems},
                                        indent=2, sort_keys=True) + "\n")
    return {"index": out / "index.html", "campaigns": len(views), "rendered": rendered, "processes": count,
            "written": writer.written, "unchanged": writer.kept, "problems": loaded.problems}


def _catalog_rows(catalog: Catalog) -> list[dict]:
    rows = []
    for gpu in sorted(catalog.gpus.values(), key=lambda g: g.slug):
        prices = {days: catalog.prices.get((gpu.slug, days)) for days in (3, 7, 30)}
        rows.append({"gpu": gpu, "prices": prices,
                     "memory_gib": None if gpu.memory_per_card_gb is None else gb_to_gib(gpu.memory_per_card_gb)})
    return rows


def _render_campaign_job(out: Path, view: CampaignView, notes, runs: Path, cache: Path, common: dict,
                         **options) -> tuple[int, int, str]:
    writer = Writer(out)
    report = decide(view, common["catalog"])
    _render_campaign(environment(), writer, view, report, notes, runs, cache, common, **options)
    return writer.written, writer.kept, report.summary_line


def _render_campaign(env, writer: Writer, view: CampaignView, report: Report, notes, runs: Path, cache: Path, common: dict, *,
                     notes_dir: Path, catalog_path: Path | None) -> None:
    from iteralab.site.bundle import campaign_bundle

    base = f"campaigns/{view.name}"
    compared, constant = view.compared_and_constant()
    chart_blocks = _charts(view, cache)
    table = trial_table_csv(view)
    bundle = campaign_bundle(view, runs=runs, notes=notes_dir, catalog=catalog_path,
                             loaded_notes=notes, price_catalog=common["catalog"], trials_csv=table, report=report)
    bundle_info = {"name": f"evidence-{view.name}.zip", "sha256": hashlib.sha256(bundle).hexdigest(), "size": len(bundle)}
    writer.write(f"{base}/{bundle_info['name']}", bundle)
    writer.write(f"{base}/index.html", env.get_template("campaign.html").render(
        root="../../", view=view, compared=compared, constant=constant, separation=view.separation(),
        cost=view.cost(), charts=chart_blocks, notes=notes, bundle=bundle_info, sizing=sizing_rows([view]), report=report,
        **common))
    writer.write(f"{base}/decision.html", env.get_template("decision.html").render(
        root="../../", view=view, report=report, charts=decision_charts(report, cache), **common))
    trial_page = env.get_template("trial.html")
    for trial in view.trials:
        writer.write(f"{base}/trials/{trial['record_id']}.html", trial_page.render(
            root="../../../", view=view, trial=trial, rows=trial_rows(trial), **common))
        if trial.get("predictions") and not trial.get("predictions_missing"):
            source = runs / trial["predictions"]["path"]
            writer.write(f"{base}/predictions/{trial['record_id']}.csv", source.read_bytes())
    for manifest in view.manifests:
        writer.write(f"{base}/manifests/{manifest['record_id']}.json",
                     json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    writer.write(f"{base}/trials.csv", table)
    writer.write(f"{base}/qualification.html", env.get_template("qualification.html").render(
        root="../../", view=view, sheets=view.sheets, **common))


def sizing_rows(views: list[CampaignView]) -> list[dict]:
    """Per campaign and variant: the weights estimate from the parameter count beside the observed peaks."""
    from iteralab.money.sizing import weights_bytes

    rows = []
    for view in views:
        model = view.manifests[-1]["model"] if view.manifests else {}
        parameters = model.get("parameters")
        for variant in view.variants:
            bits = 8 if variant.config.get("quantization") == "dynamic-int8" else {"fp32": 32, "bf16": 16, "fp16": 16}.get(
                variant.config.get("precision"), 32)
            allocated, allocated_reason = variant.peak("gpu_peak_allocated_bytes")
            reserved, reserved_reason = variant.peak("gpu_peak_reserved_bytes")
            rss, rss_reason = variant.peak("host_peak_rss_bytes")
            rows.append({"campaign": view.name, "variant": variant.label, "parameters": parameters,
                         "parameters_reason": model.get("parameters_reason") or "no manifest with a parameter count",
                         "bits": bits, "estimate": None if parameters is None else int(weights_bytes(parameters, bits)),
                         "allocated": allocated, "allocated_reason": allocated_reason, "reserved": reserved,
                         "reserved_reason": reserved_reason, "rss": rss, "rss_reason": rss_reason})
    return rows


def trial_table_csv(view: CampaignView) -> str:
    """Return one row per trial, in run order; missing values are empty cells."""
    columns = ["record_id", "run_id", "created_at", "configuration", "variant", "hardware", "software", "series", "repetition",
               "sequence", "status",
               "failed_phase", "error", "entries_expected", "entries_completed", "measured_window_s",
               *[f"{phase}_s" for phase in PHASE_ORDER if phase != "measured_window"],
               "throughput_entries_per_s", "ids_match", "accuracy", "macro_f1", "agreement", "corpus_accepted",
               "predictions_sha256", "protocol_fingerprint"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    configurations = {t["record_id"]: s for s in view.variants for t in s.trials}
    for trial in view.trials:
        summary = configurations[trial["record_id"]]
        overall = (trial.get("quality") or {}).get("overall") or {}
        durations = {f"{phase}_s": _seconds(trial["phases"].get(phase, {}).get("duration_ns")) for phase in PHASE_ORDER}
        writer.writerow({
            **{key: trial.get(key) for key in ("record_id", "run_id", "created_at", "variant", "series", "repetition",
                                               "sequence", "status", "failed_phase", "error", "entries_expected",
                                               "entries_completed", "throughput_entries_per_s", "corpus_accepted",
                                               "protocol_fingerprint")},
            **durations,
            "configuration": summary.label,
            "hardware": summary.configuration.hardware if summary.configuration else None,
            "software": summary.configuration.software if summary.configuration else None,
            "ids_match": (trial.get("id_check") or {}).get("ids_match"),
            "accuracy": overall.get("accuracy"), "macro_f1": overall.get("macro_f1"), "agreement": overall.get("agreement"),
            "predictions_sha256": (trial.get("predictions") or {}).get("sha256"),
        })
    return buffer.getvalue()


def _seconds(nanoseconds):
    return None if nanoseconds is None else f"{nanoseconds / 1e9:.6f}"


def _chart(draw, chart_id: str, title: str, description: str, rows: list[dict], cache: Path) -> dict:
    """Draw one chart with DRAW and keep its rows beside it as its data table (columns in the rows' order)."""
    return {"id": chart_id, "title": title, "description": description, "svg": Markup(draw(rows, cache)),
            "columns": list(rows[0]), "rows": rows}


def _charts(view: CampaignView, cache: Path) -> list[dict]:
    blocks = []
    duration_rows = [{"variant": v.label, "run_order": order, "seconds": round(seconds, 6)}
                     for v in view.variants for order, seconds in enumerate(v.seconds, start=1)]
    if duration_rows:
        blocks.append(_chart(charts.durations_chart, "durations", "Measured window per successful trial",
                             "Each dot is one successful trial's measured window; the black tick is the configuration's median. "
                             "Failed trials have no duration and are listed under Failures.", duration_rows, cache))
    memory_rows = []
    for v in view.variants:
        for key, label in (("gpu_peak_allocated_bytes", "GPU peak allocated"), ("gpu_peak_reserved_bytes", "GPU peak reserved"),
                           ("host_peak_rss_bytes", "host peak RSS (process)")):
            value, _ = v.peak(key)
            if value is not None:
                memory_rows.append({"variant": v.label, "counter": label, "mib": round(value / 2**20, 1)})
    if memory_rows:
        blocks.append(_chart(charts.memory_chart, "memory", "Peak memory per configuration",
                             "Highest value of each counter over the configuration's successful trials, in MiB (2^20 bytes). "
                             "Counters are shown side by side, never added. GPU counters are absent when the variant ran without a GPU.",
                             memory_rows, cache))
    quality_rows = [{"variant": v.label, "bucket": bucket, "accuracy": round(value, 4)}
                    for v in view.variants for bucket, value in v.bucket_quality("accuracy").items() if value is not None]
    if quality_rows:
        blocks.append(_chart(charts.quality_chart, "quality", "Accuracy per configuration and length bucket",
                             "Median accuracy against gold labels over the configuration's successful trials, per planned length bucket.",
                             quality_rows, cache))
    return blocks


def decision_charts(report: Report, cache: Path) -> list[dict]:
    """Charts of the decision page: planned spend and projected hours against the window, each with its data."""
    blocks = []
    spend_rows = [{"configuration": row.label, "planned": float(row.plan.total), "currency": row.plan.currency}
                  for row in report.rows if row.plan]
    if spend_rows:
        blocks.append(_chart(charts.spend_chart, "planned-spend", "Planned package spend per configuration",
                             "The cheapest catalog package × lots covering the access window and the projected hours. "
                             "Configurations on hardware the catalog does not price have no bar.", spend_rows, cache))
    limit = report.question.limit_hours
    hour_rows = [{"configuration": row.label, "low_hours": round(row.hours[0], 4), "high_hours": round(row.hours[2], 4),
                  "lots": row.lots, "limit_hours": None if limit is None else float(limit)}
                 for row in report.rows if row.hours]
    if hour_rows:
        marked = ("the red tick marks the hours available (the window, or the deadline when it comes first)" if limit is not None
                  else "no window or deadline was stated, so nothing is marked")
        blocks.append(_chart(charts.hours_chart, "projected-hours", "Projected processing hours against the window",
                             "A projection, not a measurement: from the fastest to the slowest repetition, for the declared "
                             f"workload on the planned lots; {marked}.", hour_rows, cache))
    return blocks
