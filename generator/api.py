"""The records from Python: a runs folder read as check, build and decide read it, as pandas tables and Altair charts.

Every table and figure here comes from the code the site and the CLI use, so a notebook and the site never disagree on
which trials count.
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import cached_property
from pathlib import Path

from iteralab.core import language
from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.decision import text
from iteralab.decision.report import Report, decide_guarded
from iteralab.ledger import rental_checks
from iteralab.machine.phases import PhaseClock
from iteralab.money.catalog import load_catalog
from iteralab.pages.figures import campaign_charts, decision_charts
from iteralab.store import reading
from iteralab.store.trials import (
    ADAPTATION_COLUMNS,
    CSV_COLUMNS,
    GENERATION_COLUMNS,
    PER_CARD_COLUMNS,
    initialisation,
    left_out_words,
    trial_table,
)
from iteralab.store.views import CampaignView, campaign_views, kind_of

__all__ = ["PhaseClock", "Runs", "open_runs"]

# How .trials types each column of trials.csv (and of its generation and adaptation columns); any other is text.
# The CSV writes durations as text with six decimals: here they are float seconds, a missing one NaN, never 0.
FLOATS = frozenset({*(c for c in (*CSV_COLUMNS, *GENERATION_COLUMNS, *ADAPTATION_COLUMNS) if c.endswith("_s")),
                    "throughput_entries_per_s", "accuracy", "macro_f1", "agreement", "output_tokens_per_s",
                    "prefill_s_per_batch", "decode_s_per_new_token", "reference_match", "updates_per_s",
                    "train_examples_per_s", "train_tokens_per_s", "first_update_loss", "validation_loss",
                    "device_initialisation_s"})
WHOLE = frozenset({"repetition", "sequence", "entries_expected", "entries_completed", "input_tokens", "output_tokens",
                   "cut_by_max_new_tokens", "stopped_at_eos", "kv_cache_estimate_bytes", "kv_cache_measured_bytes",
                   "microbatch", "accumulation", "effective_batch", "updates", "trainable_parameters", "total_parameters",
                   "memory_estimate_total_bytes", "gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes",
                   "host_peak_rss_bytes", "export_bytes", "manifests", "trials", "ok_trials", "failed_trials",
                   "counted_trials", "excluded_trials", "disturbed_trials", "configurations", "rentals", "deliverables",
                   "expenses", "problems", "corpus_entries", "gpu_count",
                   "gpus", "cards_per_lot", "lots", "days"})
FLAGS = frozenset({"ids_match", "corpus_accepted", "disturbed", "accepted", "excluded", "set_aside", "counted", "reference",
                   "voided"})
TIMES = frozenset({"created_at", "first_at", "last_at"})
# Beside trials.csv's columns: what a notebook otherwise works out again from the records.
# left_out: why a trial counts in no figure, by its name (excluded, disturbed, failed, interrupted), empty where it counts.
TRIAL_EXTRAS = ["configuration_key", "accepted", "excluded", "set_aside", "counted", "left_out", "reference"]
MONEY = ("price_per_lot", "total")


def open_runs(path: Path | str, *, catalog: Path | str | None = None) -> Runs:
    """Read the runs folder PATH; an odd record is listed in ``.problems``, never raised (CATALOG: decide's --catalog)."""
    return Runs(path, catalog=catalog)


class Runs:
    """A runs folder's records, read once: trials, campaigns, manifests and rentals as pandas tables, decisions, charts."""

    def __init__(self, path: Path | str, *, catalog: Path | str | None = None):
        self.path = Path(path)
        if not self.path.is_dir():
            raise UserError(f"{self.path} is not a folder: pass the runs folder that holds the records")
        self.catalog = catalog
        # Read as decide and build read it (decision_report: load, then a view per campaign).
        self._views = {view.name: view for view in campaign_views(reading.load(self.path))}
        self._reports: dict[str, Report] = {}

    def __repr__(self) -> str:
        return f"<Runs {self.path}: {len(self._views)} campaign(s)>"

    @property
    def names(self) -> list[str]:
        """Return the campaigns' names, sorted."""
        return list(self._views)

    @cached_property
    def problems(self) -> list[str]:
        """Return every problem as ``iteralab check`` lists it, then the campaigns' own (a missing prediction file, a
        campaign that could not be read), each once."""
        # check's own reading (records, then each campaign's rentals): a second read, from the columnar cache.
        found = rental_checks.check_folder(self.path).problems
        found += [problem for view in self._views.values() for problem in view.problems]
        found += [f"campaign {view.name}: {view.failure}" for view in self._views.values() if view.failure]
        return list(dict.fromkeys(found))

    @cached_property
    def trials(self):
        """Return one row per trial, in run order within each campaign: trials.csv's columns, typed, and what counts."""
        import pandas as pd

        parts = [_trial_rows(view) for view in self._views.values() if view.trials]
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["campaign", "kind_of_work",
                                                                                          *CSV_COLUMNS, *TRIAL_EXTRAS])
        # As trials.csv: a kind of work's own columns only where a trial carries its object.
        extra = [*(GENERATION_COLUMNS if "has_generation" in frame and frame["has_generation"].any() else ()),
                 *(ADAPTATION_COLUMNS if "has_adaptation" in frame and frame["has_adaptation"].any() else ()),
                 *(PER_CARD_COLUMNS if "has_per_card" in frame and frame["has_per_card"].any() else ())]
        variant = sorted(column for column in frame.columns if column.startswith("variant_"))
        return _typed(frame[["campaign", "kind_of_work", *CSV_COLUMNS, *extra, *TRIAL_EXTRAS, *variant]])

    @cached_property
    def campaigns(self):
        """Return one row per campaign: its kind of work, runs, trials (ok, failed, counted; excluded by an exclusion's
        rule and measured as disturbed, each apart) and rentals."""
        return _typed(_frame([_campaign_row(view) for view in self._views.values()], CAMPAIGN_COLUMNS))

    @cached_property
    def manifests(self):
        """Return one row per run's manifest: model, corpus, machine, software and CUDA's initialisation."""
        rows = [_manifest_row(view.name, manifest) for view in self._views.values() for manifest in view.manifests]
        return _typed(_frame(rows, MANIFEST_COLUMNS))

    @cached_property
    def rentals(self):
        """Return one row per rental, money as Decimal; a voided rental is kept, marked voided (it counts nowhere)."""
        rows = [_rental_row(view.name, rental, voided) for view in self._views.values()
                for voided, rentals in ((False, view.rentals), (True, _of_kind(view.voided, "rental")))
                for rental in rentals]
        return _typed(_frame(rows, RENTAL_COLUMNS))

    def decide(self, campaign: str, *, lang: str = language.DEFAULT) -> dict:
        """Return CAMPAIGN's decision report, the data ``iteralab decide CAMPAIGN --json`` prints (its --lang: LANG)."""
        report = self._report(campaign)
        with language.speaking(_language(lang)):
            data = text.report_dict(report, said_in=lang)
        # As the CLI's JSON holds it (cli/options.emit): plain str for each sentence object, lists for tuples.
        return json.loads(json.dumps(data, ensure_ascii=False))

    def chart(self, campaign: str, name: str, *, lang: str = language.DEFAULT):
        """Return the Altair chart NAME that the site draws for CAMPAIGN (it draws inline in Jupyter).

        NAME is one of CHARTS: ``durations`` (each counted trial's measured window), ``memory`` (peak memory per
        configuration), ``phase-memory`` (an adaptation's peaks per phase), ``quality`` (accuracy per length bucket),
        ``planned-spend`` and ``projected-hours`` (the decision page's). Where the records give a chart nothing to draw
        (every trial set aside as disturbed, say), the chart returned says why in words; a name that is not a chart is
        an error listing the campaign's charts.
        """
        import altair as alt

        view = self._view(campaign)
        with language.speaking(_language(lang)):
            drawn = campaign_charts(view) + (decision_charts(self._report(campaign)) if view.failure is None else [])
            specs = {block["id"]: block["spec"] for block in drawn}
            if name in specs:
                return alt.Chart.from_dict(specs[name])
            if name not in CHARTS:
                raise UserError(f"campaign {campaign} has no chart {name!r}; its charts: {', '.join(specs) or 'none'} "
                                f"(the charts of a campaign: {', '.join(CHARTS)})")
            why = language.say(_nothing_to_draw(view, name))
        return (alt.Chart(alt.Data(values=[{"why": why}]), title=f"{campaign}: {name}").mark_text(align="left", x=0)
                .encode(text="why:N").properties(width=600, height=30))

    def _view(self, campaign: str) -> CampaignView:
        if campaign not in self._views:
            raise UserError(f"campaign {campaign} has no records in {self.path}; campaigns there: "
                            f"{', '.join(self._views) or 'none'}")
        return self._views[campaign]

    def _report(self, campaign: str) -> Report:
        # decide's own path after loading (decision_report): a campaign whose records cannot be decided raises, naming why.
        if campaign not in self._reports:
            self._reports[campaign] = decide_guarded(self._view(campaign), load_catalog(self.catalog))
        return self._reports[campaign]


# Every chart a campaign may have, as the site names them (pages.figures): its own, then its decision page's.
CHARTS = ("durations", "memory", "phase-memory", "quality", "planned-spend", "projected-hours")
NOTHING = {"memory": Text("Nothing to draw: no counted trial measured a memory counter."),
           "phase-memory": Text("Nothing to draw: only an adaptation's trials record their memory per phase."),
           "quality": Text("Nothing to draw: no counted trial scored accuracy per length bucket (a generation campaign "
                           "scores agreement with its reference instead)."),
           "planned-spend": Text("Nothing to draw: no configuration runs on a card the catalog prices, so none has a "
                                 "planned package."),
           "projected-hours": Text("Nothing to draw: no configuration has a projection.")}


def _nothing_to_draw(view: CampaignView, name: str) -> Text:
    """Say why the records give chart NAME of a campaign nothing to draw: no trial counts (and why each is left out), or
    what that chart needs."""
    if view.failure:
        return Text("Nothing to draw: the campaign's records could not be read ({reason}).", reason=view.failure)
    if not any(summary.seconds for summary in view.variants):
        counts: dict[str, int] = {}
        for summary in view.variants:
            for reason, count in summary.left_out_counts().items():
                counts[reason] = counts.get(reason, 0) + count
        return (Text("Nothing to draw: no trial counts ({left_out}).", left_out=left_out_words(counts)) if counts
                else Text("Nothing to draw: the campaign has no trial yet."))
    return NOTHING.get(name, Text("Nothing to draw: no successful trial."))


def _language(code: str) -> str:
    if code not in language.LANGUAGES:
        raise UserError(f"language {code!r} is not one of {', '.join(language.LANGUAGES)}")
    return code


def _trial_rows(view: CampaignView):
    """Return the campaign's trial table (the site's) with its campaign, kinds of work, flags and variant fields."""
    import pandas as pd

    table = trial_table(view)
    manifests = {manifest["record_id"]: manifest for manifest in view.manifests}
    summary_of = {trial["record_id"]: summary for summary in view.variants for trial in summary.trials}
    counted = {trial["record_id"] for summary in view.variants for trial in summary.counted if trial["status"] == "ok"}
    of_run = [manifests.get(trial.get("manifest_id")) or {} for trial in view.trials]
    table.insert(0, "campaign", view.name)
    table.insert(1, "kind_of_work", [kind_of(manifest) for manifest in of_run])
    table["excluded"] = table["excluded_by"].notna()
    table["counted"] = [trial["record_id"] in counted for trial in view.trials]
    table["left_out"] = [summary_of[trial["record_id"]].left_out(trial) for trial in view.trials]
    table["reference"] = [trial["variant"] == (manifest.get("protocol") or {}).get("reference_variant")
                          for trial, manifest in zip(view.trials, of_run, strict=True)]
    settings = pd.DataFrame([summary_of[trial["record_id"]].config for trial in view.trials], dtype=object)
    for field in settings.columns:
        table[f"variant_{field}"] = settings[field].to_numpy()
    return table


def _typed(frame):
    """Return FRAME with each column's type: float seconds and figures, nullable whole numbers and flags, UTC times, text;
    money stays Decimal (an object column), never a float."""
    import pandas as pd

    typed = {}
    for column in frame.columns:
        values = frame[column]
        if column in FLOATS:
            typed[column] = pd.to_numeric(values, errors="coerce").astype("float64")
        elif column in WHOLE:
            typed[column] = pd.array([None if v is None or v != v else int(v) for v in values], dtype="Int64")
        elif column in FLAGS:
            typed[column] = pd.array([None if v is None or v != v else bool(v) for v in values], dtype="boolean")
        elif column in TIMES:
            typed[column] = pd.to_datetime(values, utc=True, format="ISO8601")
        else:
            typed[column] = _inferred(values, money=column in MONEY)
    return pd.DataFrame(typed, index=frame.index)


def _inferred(values, *, money: bool):
    """Type a column no table names (a variant's fields): whole numbers, flags or floats where every value is one; money,
    lists and mappings kept as they are; else text."""
    import pandas as pd

    present = [value for value in values if value is not None]
    if money or any(isinstance(value, (list, dict, Decimal)) for value in present):
        return values.astype(object)
    if present and all(isinstance(value, bool) for value in present):
        return pd.array(list(values), dtype="boolean")
    if present and all(isinstance(value, int) and not isinstance(value, bool) for value in present):
        return pd.array(list(values), dtype="Int64")
    if present and all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in present):
        return pd.to_numeric(values).astype("float64")
    return values.astype("string")


def _frame(rows: list[dict], columns: list[str]):
    import pandas as pd

    return pd.DataFrame(rows, columns=columns, dtype=object)


def _of_kind(records, kind: str) -> list[dict]:
    return [record for record in records if record["kind"] == kind]


CAMPAIGN_COLUMNS = ["campaign", "title", "kind_of_work", "manifests", "trials", "ok_trials", "failed_trials", "counted_trials",
                    "excluded_trials", "disturbed_trials",
                    "configurations", "rentals", "deliverables", "expenses", "first_at", "last_at", "problems", "failure"]


def _campaign_row(view: CampaignView) -> dict:
    statuses = [trial["status"] for trial in view.trials]
    counted = sum(1 for summary in view.variants for trial in summary.counted if trial["status"] == "ok")
    kinds = dict.fromkeys(kind_of(manifest) for manifest in view.manifests)
    times = [record["created_at"] for record in (*view.manifests, *view.trials)]
    return {"campaign": view.name, "title": view.title, "kind_of_work": ", ".join(kinds) or None,
            "manifests": len(view.manifests), "trials": len(view.trials), "ok_trials": statuses.count("ok"),
            "failed_trials": sum(1 for status in statuses if status != "ok"), "counted_trials": counted,
            "excluded_trials": len(view.excluded),  # by an exclusion's rule; disturbed ones set aside apart (#60)
            "disturbed_trials": sum(len(summary.disturbed) for summary in view.variants),
            "configurations": len(view.variants), "rentals": len(view.rentals),
            "deliverables": len(view.deliverables), "expenses": len(view.expenses),
            "first_at": min(times, default=None), "last_at": max(times, default=None),
            "problems": len(view.problems), "failure": view.failure}


MANIFEST_COLUMNS = ["campaign", "record_id", "run_id", "created_at", "title", "kind_of_work", "protocol_fingerprint",
                    "reference_variant", "variants", "model", "corpus", "corpus_entries", "corpus_fingerprint", "cpu",
                    "gpu_count", "gpu_names", "torch", "transformers", "code_version", "device_initialisation_s",
                    "device_initialisation_reason"]


def _manifest_row(campaign: str, manifest: dict) -> dict:
    environment, corpus = manifest.get("environment") or {}, manifest.get("corpus") or {}
    libraries, started = environment.get("libraries") or {}, initialisation(manifest)
    return {"campaign": campaign, "record_id": manifest["record_id"], "run_id": manifest["run_id"],
            "created_at": manifest["created_at"], "title": manifest.get("title"), "kind_of_work": kind_of(manifest),
            "protocol_fingerprint": manifest.get("protocol_fingerprint"),
            "reference_variant": (manifest.get("protocol") or {}).get("reference_variant"),
            "variants": ", ".join(manifest.get("variants") or {}), "model": (manifest.get("model") or {}).get("directory_name"),
            "corpus": corpus.get("source_name") or corpus.get("path"), "corpus_entries": corpus.get("entries"),
            "corpus_fingerprint": corpus.get("fingerprint"), "cpu": (environment.get("cpu") or {}).get("model"),
            "gpu_count": environment.get("gpu_count"),
            "gpu_names": ", ".join(gpu.get("name") or "" for gpu in environment.get("gpus") or ()) or None,
            "torch": libraries.get("torch"), "transformers": libraries.get("transformers"),
            "code_version": (manifest.get("code_version") or {}).get("version"),
            "device_initialisation_s": started["seconds"],
            "device_initialisation_reason": None if started["reason"] is None else str(started["reason"])}


RENTAL_COLUMNS = ["campaign", "record_id", "run_id", "created_at", "gpu", "gpus", "cards_per_lot", "lots", "days", "start",
                  "end", "catalog_version", "currency", "price_per_lot", "total", "runs", "note", "receipt_sha256", "voided"]


def _rental_row(campaign: str, rental: dict, voided: bool) -> dict:
    return {"campaign": campaign, **{name: rental.get(name) for name in RENTAL_COLUMNS[1:13]},
            **{name: None if rental.get(name) is None else Decimal(str(rental[name])) for name in MONEY}, "runs": ", ".join(rental.get("runs") or ()) or None,
            "note": rental.get("note"), "receipt_sha256": (rental.get("receipt") or {}).get("sha256"), "voided": voided}

