"""Render one campaign's pages, charts, trial pages, copies and evidence bundle."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import orjson

from iteralab.core import language, processes, workers
from iteralab.core.errors import CampaignFailed, within_campaign
from iteralab.core.language import Figure, Text
from iteralab.decision.report import Report, decide
from iteralab.decision.text import figures_digest
from iteralab.evidence.bundle import campaign_bundle
from iteralab.evidence.signing import Signer
from iteralab.money.catalog import Catalog, gb_to_gib
from iteralab.money.sizing import weights_bytes
from iteralab.pages import adapted, served
from iteralab.pages.figures import campaign_charts, decision_charts
from iteralab.pages.generated import campaign_block, kv_cells, kv_note, spread_cell, tokens_of
from iteralab.pages.per_campaign import adaptation_rows
from iteralab.pages.per_trial import trial_index, trial_sections, trial_table_rows
from iteralab.pages.questions import revision_figures
from iteralab.pages.render import jinja_environment
from iteralab.pages.shortened import shortened
from iteralab.site import stored
from iteralab.site.incremental import present_among, summary
from iteralab.site.output import Writer
from iteralab.store import generation
from iteralab.store.disturbance import unstable_statements
from iteralab.store.reading import Loaded, RecordTable, read_lines
from iteralab.store.trials import initialised_runs, trial_table, trials_csv
from iteralab.store.views import CampaignView, campaign_views


def catalog_rows(catalog: Catalog) -> list[dict]:
    """Return one row per catalog card: its prices for 3, 7 and 30 days and its memory in GiB."""
    rows = []
    for gpu in sorted(catalog.gpus.values(), key=lambda g: g.slug):
        prices = {days: catalog.prices.get((gpu.slug, days)) for days in (3, 7, 30)}
        rows.append({"gpu": gpu, "prices": prices,
                     "memory_gib": None if gpu.memory_per_card_gb is None else gb_to_gib(gpu.memory_per_card_gb)})
    return rows


class Part:
    """One campaign's rows as a worker reads its records: each record's file (an index into PATHS), offset, length, line,
    id and prediction file (a path or None), in reading order. Small to send to a worker: arrays and lists, no pandas
    (a slice of the record table took 1.4-5 ms to cut, pickle and unpickle, seconds of CPU at 1,000 campaigns)."""

    __slots__ = ("file", "ids", "length", "line", "offset", "paths", "predictions", "shown")

    def __init__(self, paths: list, shown: list[str], file, offset, length, line, ids: list[str], predictions: list):
        self.paths, self.shown, self.file, self.offset, self.length, self.line, self.ids, self.predictions = \
            paths, shown, file, offset, length, line, ids, predictions

    def __len__(self) -> int:
        return len(self.ids)

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state):
        for name, value in zip(self.__slots__, state, strict=True):
            setattr(self, name, value)

    def records(self) -> list[dict | None]:
        """Return the campaign's records, in reading order, read from their files."""
        return read_lines(self.paths, self.shown, self.file, self.offset, self.offset + self.length, self.ids)

    def places(self) -> list[str]:
        """Return 'file:line' of each record."""
        return [f"{self.shown[file]}:{line}" for file, line in zip(self.file.tolist(), self.line.tolist(), strict=True)]


def parts(table: RecordTable, positions: dict) -> dict[str, Part]:
    """Return, per campaign of POSITIONS (its rows' positions in TABLE), its Part, with only the files its rows lie in.

    The table's columns are taken as arrays once and indexed per campaign.
    """
    import numpy as np

    frame = table.frame
    files, offsets, lengths = frame["file"].to_numpy(), frame["offset"].to_numpy(), frame["length"].to_numpy()
    lines, ids = frame["line"].to_numpy(), frame["record_id"].to_numpy(dtype=object)
    predictions = frame["predictions_path"].to_numpy(dtype=object)
    found = {}
    for name, rows in positions.items():
        used, renumbered = np.unique(files[rows], return_inverse=True)
        found[name] = Part([table.paths[i] for i in used], [table.shown[i] for i in used], renumbered.astype(np.int32),
                           offsets[rows], lengths[rows], lines[rows], ids[rows].tolist(),
                           [path if isinstance(path, str) else None for path in predictions[rows]])
    return found


@dataclass(frozen=True)
class CampaignJob:
    """What one campaign's pages are rendered from; built by the build, rendered here or in a worker."""

    view: CampaignView
    notes: tuple  # the decision notes naming this campaign
    sheets: tuple  # the qualification sheets naming this campaign
    stamp: str
    catalog: Catalog
    alternates: tuple = ()
    revision: dict | None = None  # the question it belongs to, the revisions before and after it (site.questions.links)


@dataclass(frozen=True)
class Places:
    """Where a build reads and writes: the same for every campaign."""

    out: Path
    runs: Path
    notes: Path
    catalog: Path | None
    alternates: tuple = ()  # (code, name, path from this language's site to that one's) of the other languages built
    signer: Signer | None = None  # the key that signs each evidence bundle (build --sign-key)


def render_part(name: str, part: Part, notes: tuple, sheets: tuple, stamp: str,
                present: frozenset | None, key: str | None = None) -> tuple[int, int, str, str | None, dict, bool]:
    """Read one campaign's records from their files, then render it (in a worker, or here); also return its summary.

    PRESENT: the campaign's prediction files found in the runs folder (None: looked for here, in its prediction
    folders, only when it is rendered: 0.4 s of a cold build's one process at 1,000 campaigns, and none of a build that
    copies campaigns from the store). The records' problems (the whole folder's), the
    catalog and the places come through ``workers.shared()``. KEY: the campaign's entry in the machine's store of
    rendered campaigns (None: not stored); an entry found there is written out instead of rendering the campaign (the
    last value returned says so).
    """
    common = workers.shared()
    places = common["places"]
    found = stored.load(key) if key else None
    if found is not None:
        files, result = found
        writer = Writer(places.out)
        _remove_legacy(writer, name)
        for relative, data in files:
            writer.write(relative, data)
        return writer.written, writer.kept, result["answer"], None, result["summary"], True
    files: list[tuple[str, bytes]] | None = [] if key else None
    if present is None:
        present = present_among(part.predictions, places.runs)
    with language.speaking(common["language"]), processes.collector_paused():
        written, kept, answer, failure, summary = _render_part(common, part, notes, sheets, stamp, present, files)
    if key and failure is None:  # a failure is said again by the next build, never remembered
        stored.save(key, files, {"answer": answer, "summary": summary}, places.out)
    return written, kept, answer, failure, summary, False


def _render_part(common: dict, part: Part, notes: tuple, sheets: tuple, stamp: str, present: frozenset,
                 files: list | None) -> tuple:
    loaded = Loaded(part.records(), part.places(), common["problems"])
    view = campaign_views(loaded, present=present)[0]
    job = CampaignJob(view, notes, sheets, stamp, common["catalog"], common["places"].alternates,
                      common.get("revisions", {}).get(view.name))
    written, kept, answer, failure, decided = render_campaign_job(job, common["places"], files)
    # Kept in the build state as plain words of this language, so a later build shows them without deciding again.
    return written, kept, language.say(answer), failure, language.said(summary(view, sizing_rows([view]), **(decided or {})))


def render_campaign_job(job: CampaignJob, places: Places, files: list | None = None) -> tuple[int, int, str, str | None, dict | None]:
    """Decide the campaign, write its pages; return files written, files unchanged, the one-line answer, any failure and
    what its summary keeps of the decision: the digest of its figures and its revision's figures (None for a failure).

    A campaign whose view, decision or pages fail gets a page saying why instead; a refused write stops the build.
    FILES, when a list, gets every file written (relative path, bytes).
    """
    writer = Writer(places.out, files)
    try:
        if job.view.failure:
            raise CampaignFailed(job.view.name, job.view.failure)
        with within_campaign(job.view.name):
            table = trial_table(job.view)  # one table per campaign: the decision's figures and trials.csv
            report = decide(job.view, job.catalog, table)
            render_campaign(writer, job, report, trials_csv(table), places)
        return writer.written, writer.kept, report.summary_line, None, {"figures": figures_digest(report),
                                                                          "revision": revision_figures(report)}
    except CampaignFailed as failed:
        render_failure(writer, job, failed.reason)
        return writer.written, writer.kept, Text("not built: {reason}", reason=failed.reason), failed.reason, None


def render_failure(writer: Writer, job: CampaignJob, reason: str) -> None:
    """Write the campaign's index and decision pages as a statement of why they could not be built."""
    template = jinja_environment().get_template("campaign_failed.html")
    for name in ("index.html", "decision.html"):
        writer.write(f"campaigns/{job.view.name}/{name}", template.render(
            root="../../", page=f"campaigns/{job.view.name}/{name}", view=job.view, failure=reason, stamp=job.stamp,
            catalog=job.catalog, alternates=job.alternates))


def render_campaign(writer: Writer, job: CampaignJob, report: Report, table_csv: str, places: Places) -> None:
    """Write the campaign, decision, trial and qualification pages, the copies, trials.csv (and a serving campaign's
    requests.csv) and the bundle."""
    env, view, base = jinja_environment(), job.view, f"campaigns/{job.view.name}"
    common = {"stamp": job.stamp, "catalog": job.catalog, "alternates": job.alternates, "revision": job.revision}
    requests = served.requests_of(view, places.runs)  # a serving campaign's requests, read once (#64)
    serving = served.serving_charts(view, requests)
    drawn, decided = campaign_charts(view) + serving, decision_charts(report)
    if report.serving is not None:  # its capacity's knee, not a corpus's projected hours and spend
        decided = [found for found in serving if found["id"] == "serving-throughput"]
    bundle = campaign_bundle(view, runs=places.runs, notes=places.notes, catalog=places.catalog, loaded_notes=list(job.notes),
                             price_catalog=job.catalog, table_csv=table_csv, report=report,
                             charts=drawn + ([] if report.serving is not None else decided),
                             signer=places.signer, revision=job.revision)
    bundle_info = {"name": f"evidence-{view.name}.zip", "sha256": hashlib.sha256(bundle).hexdigest(), "size": len(bundle),
                   "signed": places.signer}
    writer.write(f"{base}/{bundle_info['name']}", bundle)
    compared, constant = view.compared_and_constant()
    # The machine every configuration shares is said once per table, each row named by its variant (#45).
    named = shortened(view)
    shown = named.view
    sizing = sizing_rows([shown])
    writer.write(f"{base}/index.html", env.get_template("campaign.html").render(
        root="../../", page=f"{base}/index.html", view=shown, compared=compared, constant=constant, separation=shown.separation(), cost=view.cost(),
        charts=drawn, notes=list(job.notes), sheets=list(job.sheets), bundle=bundle_info, trial_table_rows=trial_table_rows,
        sizing=sizing, adapted=[row for row in sizing if row.get("adaptation")], report=report, generation=campaign_block(shown), spread_cell=spread_cell, kv_cells=kv_cells,
        kv_note=kv_note, adaptation=adapted.campaign_block(shown), adaptation_rows=adaptation_rows, machine=named.machine, short=named.short,
        initialised=initialised_runs(view.manifests), unstable=unstable_statements(shown), serving=served.campaign_block(shown),
        requests_csv=bool(requests), column_word=served.column_word(language.current()), **common))
    writer.write(f"{base}/decision.html", env.get_template("decision.html").render(
        root="../../", page=f"{base}/decision.html", view=view, report=report, charts=decided,
        notes=list(job.notes), sheets=list(job.sheets), bundle=bundle_info, tokens_of=tokens_of,
        unit_durations=adapted.unit_durations, machine=named.machine, short=named.short,
        column_word=served.column_word(language.current()), **common))
    _trials_page(writer, env, view, bundle_info["name"], common)
    writer.write(f"{base}/trials.csv", table_csv)
    if requests:  # every request of every serving trial, beside trials.csv
        writer.write(f"{base}/requests.csv", served.requests_csv(view, requests))
    writer.write(f"{base}/qualification.html", env.get_template("qualification.html").render(
        root="../../", page=f"{base}/qualification.html", view=view, sheets=list(job.sheets), **common))


def _trials_page(writer: Writer, env, view: CampaignView, bundle_name: str, common: dict) -> None:
    """Write every trial on one page, each at its own anchor (trials.html#TRIAL_ID), and each manifest as JSON.

    One page per campaign, not per trial: creating a file costs more than rendering its content, and 100,000 trials made
    100,000 pages. Predictions stay in the evidence bundle, where each one's path and sha256 are named.
    """
    base = f"campaigns/{view.name}"
    _remove_legacy(writer, view.name)
    writer.write(f"{base}/trials.html", env.get_template("trials.html").render(
        root="../../", page=f"{base}/trials.html", view=view, bundle_name=bundle_name, trial_sections=trial_sections, trial_index=trial_index,
        **common))
    for manifest in view.manifests:
        writer.write(f"{base}/manifests/{manifest['record_id']}.json", manifest_json(manifest))


def manifest_json(manifest: dict) -> bytes:
    """Return MANIFEST as the site writes it: ``json.dumps(indent=2, sort_keys=True, ensure_ascii=False)`` and a newline.

    The standard library indents in pure Python: 1.7 ms a manifest, 7 ms of every campaign of four runs. orjson writes
    the same text in a hundredth of that wherever both write every value alike, which their compact forms (the standard
    library's one in C) tell: a float the two spell differently (1e-05 and 1e-5), or a value orjson refuses, takes the
    standard library's way.
    """
    try:
        compact = orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS)
        if compact.decode() == json.dumps(manifest, separators=(",", ":"), sort_keys=True, ensure_ascii=False):
            return orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)
    except (TypeError, ValueError, UnicodeDecodeError):
        pass
    return (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _remove_legacy(writer: Writer, name: str) -> None:
    """Remove a page per trial and the prediction copies that builds before trials.html wrote."""
    for legacy in ("trials", "predictions"):
        shutil.rmtree(writer.out / "campaigns" / name / legacy, ignore_errors=True)


def sizing_rows(views: list[CampaignView]) -> list[dict]:
    """Per campaign and variant: the weights estimate from the parameter count beside the observed peaks, and the KV
    cache's estimate beside its measurement where the variant's trials carry one (None elsewhere)."""
    rows = []
    for view in views:
        model = view.manifests[-1]["model"] if view.manifests else {}
        parameters = model.get("parameters")
        for variant in view.variants:
            int8 = variant.config.get("quantization") == "dynamic-int8"
            bits = 8 if int8 else {"fp32": 32, "bf16": 16, "fp16": 16}.get(variant.config.get("precision"), 32)
            # Dynamic int8 keeps every weight that is not a Linear layer in fp32: the manifest counts what it converts.
            estimate = (model.get("dynamic_int8") or {}).get("bytes") if int8 else None
            if estimate is None and parameters is not None:
                estimate = int(weights_bytes(parameters, bits))
            allocated, allocated_reason = variant.peak("gpu_peak_allocated_bytes")
            reserved, reserved_reason = variant.peak("gpu_peak_reserved_bytes")
            rss, rss_reason = rss_above_baseline(variant)
            figures = generation.of_summary(variant)  # the KV cache where its trials carry the generation object
            rows.append({"campaign": view.name, "variant": variant.label, "parameters": parameters,
                         "parameters_reason": model.get("parameters_reason") or Text("no manifest with a parameter count"),
                         "bits": Text("int8 (Linear layers), fp32 (the rest)") if int8 and model.get("dynamic_int8") else bits,
                         "estimate": estimate,
                         "allocated": allocated, "allocated_reason": allocated_reason, "reserved": reserved,
                         "reserved_reason": reserved_reason, "rss": rss, "rss_reason": rss_reason,
                         "kv": figures["kv_cache"] if figures else None, **_adaptation(variant)})
    return rows




def _adaptation(variant) -> dict:
    """Return what a fine-tuning configuration adds to its sizing row (``site.adapted.sizing``); nothing for another."""
    found = adapted.sizing(variant)
    return {"adaptation": found} if found else {}


def rss_above_baseline(variant) -> tuple[int | None, str | None]:
    """Return the highest host RSS above what the process held before its model loaded, over ok trials, or the reason."""
    values = []
    for trial in variant.counted:
        phases = trial["phases"] if trial["status"] == "ok" else {}
        baseline = (phases.get("model_load") or {}).get("host_rss_at_start_bytes")
        peaks = [phase.get("host_peak_rss_bytes") for name, phase in phases.items() if name != "environment_check"]
        if baseline is not None and any(peak is not None for peak in peaks):
            values.append(max(peak for peak in peaks if peak is not None) - baseline)
    if values:
        return max(values), None
    peak, reason = variant.peak("host_peak_rss_bytes")
    if peak is not None:  # recorded before the baseline existed: the raw peak, said for what it is
        return None, Text("no baseline before the model loads was recorded (a runner before this one): the process's "
                          "peak, {peak} B, counts the interpreter and torch with the model", peak=Figure(peak))
    return None, reason
