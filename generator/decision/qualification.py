"""Qualification sheets: six mandatory criteria per candidate, derived from evidence where it exists."""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.language import Figure, Joined, Recorded, Text
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.money import compatibility
from iteralab.money.catalog import Catalog, load_catalog, lots_price
from iteralab.money.schedule import elapsed_hours, format_hours, parse_time
from iteralab.money.sizing import gib
from iteralab.store import adaptation, generation, names, reading
from iteralab.store.configuration import card_matches
from iteralab.store.reading import Loaded
from iteralab.store.trials import POINTS_TO
from iteralab.store.views import campaign_views

CRITERIA = ("workload_covered", "compatibility", "memory_per_gpu", "quality", "distribution_and_server", "budget_and_schedule")
STATUSES = ("acceptable", "to-confirm", "exclude")
TOP_KEYS = {"candidate", "campaign", "variant", "configuration", "gpu", "lots", "days", "periods", "window_start", "window_end",
            "budget", "criteria"}


@dataclass(frozen=True)
class Criterion:
    """One criterion's status, the document it rests on and why."""

    name: str
    status: str
    document: str | None
    note: str
    derived: bool = False
    override_reason: str | None = None


@dataclass(frozen=True)
class Sheet:
    """One candidate configuration with its six criteria and the outcome."""

    source: str
    candidate: str
    campaign: str
    variant: str
    gpu: str
    lots: int
    days: int
    total: Decimal | None
    margin_bytes: int | None
    spare_hours: Decimal | None
    criteria: tuple[Criterion, ...] = ()
    configuration: str | None = None  # the label of the configuration whose trials the derived criteria read
    currency: str | None = None  # the catalog's, for the total
    periods: int = 1  # consecutive packages of DAYS, each bought explicitly
    work: str = "inference"  # or "adaptation" (a campaign of kind adapt): what the sheet's first line says it qualifies

    @property
    def outcome(self) -> str:
        statuses = {c.status for c in self.criteria}
        return "excluded" if "exclude" in statuses else "selected" if statuses == {"acceptable"} else "to confirm"

    @property
    def open_conditions(self) -> list[str]:
        return [f"{c.name}: {c.note}" for c in self.criteria if c.status == "to-confirm"]


def _read(path: Path) -> dict:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}: not valid TOML ({error})") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(TOP_KEYS))}")
    for key, kind in (("candidate", str), ("campaign", str), ("variant", str), ("gpu", str), ("lots", int), ("days", int)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise UserError(f"{path}: {key} is required ({'text' if kind is str else 'a whole number'})")
    if data["lots"] < 1:
        raise UserError(f"{path}: lots must be at least 1")
    periods = data.setdefault("periods", 1)
    if isinstance(periods, bool) or not isinstance(periods, int) or periods < 1:
        raise UserError(f"{path}: periods must be a whole number of at least 1: consecutive packages, bought explicitly")
    for key in ("window_start", "window_end"):
        if key in data and not isinstance(data[key], str):
            raise UserError(f"{path}: {key} must be a date-time in quotes, e.g. \"2026-09-28T09:00\"")
    if "configuration" in data and not isinstance(data["configuration"], str):
        raise UserError(f"{path}: configuration must be text: a configuration's label or id from the decision page")
    if "budget" in data and (isinstance(data["budget"], bool) or not isinstance(data["budget"], str | int | float)):
        raise UserError(f"{path}: budget must be an amount such as \"100.00\"")
    criteria = data.get("criteria", {})
    if not isinstance(criteria, dict):
        raise UserError(f"{path}: [criteria] must be a table of the six criteria")
    for name, entry in criteria.items():
        where = f"{path}: [criteria.{name}]"
        if name not in CRITERIA:
            raise UserError(f"{where} is not a criterion; the six are {', '.join(CRITERIA)}")
        if not isinstance(entry, dict) or entry.get("status") not in STATUSES:
            raise UserError(f"{where} status must be one of {', '.join(STATUSES)}")
        if entry["status"] != "acceptable" and not entry.get("note"):
            raise UserError(f"{where} needs a note: the exact condition to confirm or the failure that excludes")
        if entry["status"] == "acceptable" and not entry.get("document"):
            raise UserError(f"{where} is acceptable only with the verifiable document it rests on (document = ...)")
    return data


def _trials(views: dict, data: dict, catalog: Catalog, source: Path) -> tuple[list[dict], str | None, str | None]:
    """Return the trials of the sheet's configuration, its label, and why there are none when quality must wait."""
    view = views.get(data["campaign"])
    summaries = [s for s in view.variants if s.name == data["variant"]] if view else []
    if not summaries:
        return [], None, None
    if data.get("configuration"):
        chosen = [s for s in [names.by_name(summaries).get(data["configuration"])] if s]
        if not chosen:
            raise UserError(f"{source}: configuration {data['configuration']!r} is not one of {data['variant']}'s: "
                            + "; ".join(f"{s.label} (id {s.key})" for s in summaries))
        summary = chosen[0]
        if not card_matches(catalog.gpu(data["gpu"]), summary.configuration.gpu_name):
            return [], summary.label, Text("{label} ran on {hardware}, not on the sheet's {card}", label=summary.label,
                                           hardware=summary.configuration.hardware, card=catalog.gpu(data["gpu"]).name)
        return summary.counted, summary.label, None
    card = catalog.gpu(data["gpu"])
    on_card = [s for s in summaries if card_matches(card, s.configuration.gpu_name)]
    if len(on_card) == 1:
        return on_card[0].counted, on_card[0].label, None
    if on_card:
        return [], None, Text("{count} configurations of {variant} ran on {card} with other software ({labels}): name one "
                              "with configuration = \"...\"", count=len(on_card), variant=data["variant"], card=card.name,
                              labels="; ".join(s.label for s in on_card))
    elsewhere = "; ".join(sorted({s.configuration.hardware for s in summaries if s.configuration}))
    return [], None, Text("{variant} was measured on {elsewhere}, not on {card}: a result on other hardware does not hold for "
                          "this one; measure {variant} on {card}", variant=data["variant"], elsewhere=elsewhere, card=card.name)


def derive_quality(trials: list[dict], variant: str, elsewhere: str | None = None) -> Criterion:
    """Acceptable when a successful trial passed every threshold with matching ids; exclude when all failed them."""
    if elsewhere:
        return Criterion("quality", "to-confirm", None, elsewhere, True)
    ok = [t for t in trials if t["status"] == "ok"]
    if not ok:
        return Criterion("quality", "to-confirm", None, Text("no successful trial of {variant}: run the campaign for it",
                                                             variant=variant), True)
    accepted = [t for t in ok if t["corpus_accepted"]]
    if accepted:
        return Criterion("quality", "acceptable", Text("trial {trial}", trial=accepted[0]["record_id"]),
                         Text("{accepted}/{ok} successful trials passed every threshold with all ids", accepted=len(accepted),
                              ok=len(ok)), True)
    failed = sorted({(v["metric"], round(v["value"], 3), v["threshold"]) for t in ok
                     for v in (t.get("quality") or {}).get("verdicts", []) if not v["passed"] and v["value"] is not None})
    said = [Text("{metric} {value} < {threshold}", metric=metric, value=Figure(value, 3, grouped=False), threshold=limit)
            for metric, value, limit in failed]
    return Criterion("quality", "exclude", Text("trial {trial}", trial=ok[0]["record_id"]),
                     Text("no successful trial met the protocol: {failed}",
                          failed=Joined("; ", said) if said else Text("ids or format did not match")), True)


def derive_memory(trials: list[dict], catalog: Catalog, gpu: str, elsewhere: str | None = None,
                  variant_trials: list[dict] | None = None, work: str = "inference") -> tuple[Criterion, int | None]:
    """Compare the highest observed GPU reserved peak with the card's capacity; beside it, a KV cache's or (WORK adaptation)
    an adaptation's estimate and measurement, each labelled, the estimate from VARIANT_TRIALS (it holds on any card)."""
    criterion, margin = _memory(trials, catalog, gpu, elsewhere)
    notes = [note for note in (_kv_cache(trials or variant_trials or [], None if trials else elsewhere),
                               _adaptation(trials, variant_trials or trials, elsewhere) if work == "adaptation" else None)
             if note is not None]
    return (dataclasses.replace(criterion, note=Joined("; ", [criterion.note, *notes])) if notes else criterion), margin


def _bytes(value, reason) -> Text:
    """Say a memory figure: '3,584 B (0.00 GiB)', or 'empty (why)'."""
    if value is None:
        return Text("empty ({reason})", reason=reason if isinstance(reason, Text) else Recorded(reason))
    return Text("{bytes} B ({gib} GiB)", bytes=Figure(value), gib=gib(value))


def _kv_cache(trials: list[dict], elsewhere: str | None) -> Text | None:
    """Say the KV cache's estimate and measurement, or None without one; ELSEWHERE: why a measurement does not stand."""
    if not generation.has_block(trials):
        return None
    kv = generation.kv_cache(trials)
    measured = _bytes(None, elsewhere) if elsewhere and kv["measured"] is not None else _bytes(kv["measured"], kv["measured_reason"])
    return Text("KV cache: estimate {estimate}; measured {measured}", estimate=_bytes(kv["estimate"], kv["estimate_reason"]),
                measured=measured)


def _adaptation(trials: list[dict], variant_trials: list[dict], elsewhere: str | None) -> Text:
    """Say an adaptation's memory estimate beside its peaks measured here, each labelled, and each failure's pointer."""
    memory, measured = adaptation.memory(variant_trials), adaptation.memory(trials)["measured"]
    peak = {key: _bytes(None, Text("not measured on this card")) if elsewhere else _bytes(measured[key]["value"], measured[key]["reason"])
            for key in ("gpu_peak_reserved_bytes", "host_above_baseline_bytes")}
    return Joined("; ", [Text("adaptation memory, estimate (weights + gradients + optimizer state): {estimate}; measured: GPU "
                              "peak reserved {reserved}, host RSS above the baseline before the model loads {host}",
                              estimate=_bytes((memory["estimate"] or {}).get("total_bytes"), memory["estimate_reason"]),
                              reserved=peak["gpu_peak_reserved_bytes"], host=peak["host_above_baseline_bytes"]),
                         *[Text("trial {trial} failed in {phase}: the source points to {pointer}", trial=t["record_id"],
                                phase=t["failed_phase"], pointer=POINTS_TO.get(t["failed_phase"]) or Text("nothing here"))
                           for t in variant_trials if t["status"] != "ok" and t.get("failed_phase")]])


def _memory(trials: list[dict], catalog: Catalog, gpu: str, elsewhere: str | None) -> tuple[Criterion, int | None]:
    card = catalog.gpu(gpu)
    peaks = [(phase["gpu_peak_reserved_bytes"], t["record_id"]) for t in trials if t["status"] == "ok"
             for phase in t["phases"].values() if phase.get("gpu_peak_reserved_bytes") is not None]
    if card.memory_per_card_gb is None:
        return Criterion("memory_per_gpu", "to-confirm", Text("catalog row {card}", card=card.slug),
                         Text("the catalog does not state {card}'s memory: confirm the capacity per card", card=card.name),
                         True), None
    capacity = int(card.memory_per_card_gb * Decimal(10**9))
    if not peaks:
        ooms = [t for t in trials if t["status"] == "oom"]
        why = (Text("{count} trial(s) ran out of memory and none succeeded", count=len(ooms)) if ooms else
               elsewhere or Text("the campaign ran without a GPU, so no GPU peak was observed"))
        return Criterion("memory_per_gpu", "to-confirm", None,
                         Text("{why}: measure the variant on a {card} ({capacity} GiB per card)", why=why, card=card.name,
                              capacity=gib(capacity)), True), None
    peak, trial_id = max(peaks)
    margin = capacity - peak
    document = Text("trial {trial} (peak reserved {peak} B) against catalog {card} {memory} GB", trial=trial_id,
                    peak=Figure(peak), card=card.name, memory=card.memory_per_card_gb)
    if margin < 0:
        return Criterion("memory_per_gpu", "exclude", document, Text("observed peak {peak} GiB exceeds {capacity} GiB",
                                                                     peak=gib(peak), capacity=gib(capacity)), True), margin
    return Criterion("memory_per_gpu", "acceptable", document, Text("margin {margin} GiB per card", margin=gib(margin)),
                     True), margin


def derive_compatibility(trials: list[dict], manifests, entry: dict | None) -> Criterion:
    """Settle compatibility from the matrices: the weakest verdict of TRIALS' GPU runs, naming run, matrix row and version.
    The sheet's ENTRY stands where the matrix gives no evidence (no GPU run, a combination it does not know) and where it
    excludes what the matrix accepts; otherwise the verdict stands, saying what it replaced, unless override_reason."""
    manifest, found = compatibility.runs_verdict(list(manifests), [t["run_id"] for t in trials])
    entered = None if entry is None else Criterion("compatibility", entry["status"], entry.get("document"), entry.get("note", ""))
    if found is None or (entered is not None and found.status == "to-confirm"):
        return entered or Criterion("compatibility", "to-confirm", None, Text(
            "not documented: add [criteria.{name}] with the document it rests on", name="compatibility"))
    derived = Criterion("compatibility", found.status, Text("run {run}: {row}; matrix {matrix}", run=manifest["run_id"],
                        row=found.row or Text("no row"), matrix=found.matrix),
                        Text("{reason}: {quote}", reason=found.reason, quote=found.quote) if found.quote else found.reason, True)
    if entry is None or entry["status"] == found.status:
        return derived
    if entry.get("override_reason"):
        return dataclasses.replace(entered, derived=True, override_reason=f"{entry['override_reason']} (evidence said "
                                   f"{derived.status}: {derived.note})")
    if entry["status"] == "exclude" and found.status == "acceptable":
        return entered
    return dataclasses.replace(derived, note=Text("{note} (the sheet said {status}; to keep it, add override_reason = "
                                                  "\"...\" saying why)", note=derived.note, status=entry["status"]))


def derive_budget(data: dict, catalog: Catalog, source: str) -> tuple[Criterion, Decimal | None, Decimal | None]:
    """Price the package from the catalog and hold the window and budget against it."""
    card = catalog.gpu(data["gpu"])
    row = catalog.prices.get((card.slug, data["days"]))
    if row is None:
        return Criterion("budget_and_schedule", "exclude", Text("catalog {catalog}", catalog=catalog.version),
                         Text("no {days}-day package for {card}; listed: {listed}", days=data["days"], card=card.name,
                              listed=catalog.options(card.slug)), True), None, None
    periods = data.get("periods", 1)
    # Consecutive periods are each a package bought again (never an extension): lot price × lots × periods.
    total = lots_price(row.price_per_lot, data["lots"] * periods)
    bought = data["lots"] if periods == 1 else Text("{lots} x {periods} consecutive periods", lots=data["lots"], periods=periods)
    document = Text("catalog {catalog}: {price} {currency} per lot x {bought} = {total} {currency}", catalog=catalog.version,
                    price=row.price_per_lot, currency=row.currency, bought=bought, total=total)
    if not data.get("window_start") or not data.get("window_end"):
        return Criterion("budget_and_schedule", "to-confirm", document,
                         Text("no window stated: give window_start and window_end to check the schedule"), True), total, None
    hours = elapsed_hours(parse_time(data["window_start"], None, "window_start"), parse_time(data["window_end"], None, "window_end"))
    covered = data["days"] * 24 * periods
    spare = Decimal(covered) - hours
    if spare < 0:
        return Criterion("budget_and_schedule", "exclude", document,
                         Text("the window is {hours} h, longer than the {covered} h bought (no automatic extension; add "
                              "consecutive periods with periods = N)", hours=Decimal(format_hours(hours)), covered=covered),
                         True), total, spare
    if data.get("budget") is not None:
        try:
            budget = Decimal(str(data["budget"]))
        except InvalidOperation:
            raise UserError(f"{source}: budget {data['budget']!r} is not an amount") from None
        if total > budget:
            return Criterion("budget_and_schedule", "exclude", document, Text("{total} exceeds the budget {budget}", total=total,
                                                                              budget=budget), True), total, spare
    within = (Text("{hours} h", hours=covered) if periods == 1 else
              Text("{periods} consecutive {days}-day periods ({hours} h), bought explicitly", periods=periods, days=data["days"],
                   hours=covered))
    return Criterion("budget_and_schedule", "acceptable", document,
                     Text("{hours} h window within {within} ({spare} h spare)", hours=Decimal(format_hours(hours)),
                          within=within, spare=Decimal(format_hours(spare))), True), total, spare


def qualify_sheet(path: Path, loaded: Loaded, catalog: Catalog, views: dict | None = None) -> Sheet:
    """Read one sheet and settle its six criteria from the trials of its configuration only."""
    data = _read(path)
    views = views if views is not None else {view.name: view for view in campaign_views(loaded)}
    trials, label, elsewhere = _trials(views, data, catalog, path)
    quality = derive_quality(trials, data["variant"], elsewhere)
    view = views.get(data["campaign"])
    variant_trials = [t for s in (view.variants if view else ()) if s.name == data["variant"] for t in s.counted]
    work = "adaptation" if view and tuple(view.kinds) == ("adapt",) else "inference"
    memory, margin = derive_memory(trials, catalog, data["gpu"], elsewhere, variant_trials, work)
    budget, total, spare = derive_budget(data, catalog, str(path))
    derived = {"quality": quality, "memory_per_gpu": memory, "budget_and_schedule": budget}
    card = catalog.gpu(data["gpu"])
    entries, criteria = data.get("criteria", {}), []
    for name in CRITERIA:
        entry = entries.get(name)
        if name == "compatibility":
            criterion = derive_compatibility(trials, view.manifests if view else (), entry)
        elif name in derived:
            criterion = derived[name]
            if entry is not None:
                if not entry.get("override_reason"):
                    raise UserError(f"{path}: [criteria.{name}] is derived from evidence ({criterion.status}: {criterion.note}); "
                                    "to override it, add override_reason = \"...\" saying why")
                criterion = Criterion(name, entry["status"], entry.get("document"), entry.get("note", ""), True,
                                      f"{entry['override_reason']} (evidence said {criterion.status}: {criterion.note})")
        elif entry is None:
            criterion = Criterion(name, "to-confirm", None, Text("not documented: add [criteria.{name}] with the document it rests "
                                                                 "on", name=name))
        else:
            criterion = Criterion(name, entry["status"], entry.get("document"), entry.get("note", ""))
        criteria.append(criterion)
    return Sheet(str(path), data["candidate"], data["campaign"], data["variant"], card.slug, data["lots"], data["days"],
                 total, margin, spare, tuple(criteria), configuration=label, currency=getattr(catalog.prices.get((card.slug, data["days"])), "currency", None),
                 periods=data["periods"], work=work)


def qualify(folder: Path | str, loaded: Loaded, catalog: Catalog, problems: list[str] | None = None,
            campaigns: list[str] | None = None) -> list[Sheet]:
    """Settle every ``*.toml`` sheet in FOLDER; selected ones first, ranked by cost, then margin, then spare time. With
    PROBLEMS (the build's list), a sheet that cannot be settled is named there, with its file, and left out, and a sheet
    naming a campaign with no records is named there too; without it, the first such sheet stops with its file.
    CAMPAIGNS: every campaign with records, when LOADED holds only the sheets' campaigns (the closest name is among them)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder of qualification sheets (*.toml)")
    views = {view.name: view for view in campaign_views(loaded)}
    sheets = []
    for path in sorted(folder.glob("*.toml")):
        try:
            sheet = qualify_sheet(path, loaded, catalog, views)
        except UserError as error:
            message = str(error) if str(error).startswith(str(path)) else f"{path}: {error}"
            if problems is None:
                raise UserError(message) from None
            problems.append(f"{message}; the sheet is left out")
            continue
        if problems is not None and sheet.campaign not in views:
            close = difflib.get_close_matches(sheet.campaign, list(views) if campaigns is None else campaigns, n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else "."
            problems.append(f"{path}: campaign {sheet.campaign!r} has no records here{hint} Its quality and memory stay "
                            "to confirm until that campaign's records are here")
        sheets.append(sheet)
    return rank(sheets)


def qualify_folder(*, sheets: Path | str = "qualification", runs: Path | str = DEFAULT_RUNS,
                   catalog: Path | str | None = None) -> list[Sheet]:
    """Settle every sheet of the folder SHEETS against the records under RUNS (none yet is no evidence)."""
    return qualify(sheets, reading.load(Path(runs)) if Path(runs).is_dir() else reading.Loaded(), load_catalog(catalog))


def rank(sheets: list[Sheet]) -> list[Sheet]:
    """Order selected sheets by total cost, larger memory margin, more spare hours; then the others."""
    order = {"selected": 0, "to confirm": 1, "excluded": 2}
    return sorted(sheets, key=lambda s: (order[s.outcome], s.total if s.total is not None else Decimal("Infinity"),
                                         -(s.margin_bytes or 0), -(s.spare_hours or 0), s.candidate))


def describe_sheets(sheets: list[Sheet]) -> str:
    """List each candidate's outcome and criteria, ranked, as the qualify command prints them."""
    lines = []
    for rank_, sheet in enumerate(sheets, start=1):
        total = f"{sheet.total} {sheet.currency}" if sheet.total is not None else "not priced"
        days = f"{sheet.days} days" if sheet.periods == 1 else f"{sheet.periods} consecutive {sheet.days}-day periods"
        lines.append(f"{rank_}. {sheet.work}: {sheet.candidate}: {sheet.outcome.upper()} ({sheet.lots} lot(s) {sheet.gpu} x "
                     f"{days}, {total}, variant {sheet.variant} of {sheet.campaign})")
        for criterion in sheet.criteria:
            origin = "override: " + criterion.override_reason if criterion.override_reason else ("derived" if criterion.derived else "entered")
            lines.append(f"     {criterion.name:<24} {criterion.status:<11} {criterion.note} [{origin}; {criterion.document or 'no document'}]")
    return "\n".join(lines)


def sheets_data(sheets: list[Sheet]) -> dict:
    """Return the ranked sheets as plain data, amounts as decimal strings."""
    return {"sheets": [{"candidate": s.candidate, "outcome": s.outcome, "source": s.source, "gpu": s.gpu, "lots": s.lots,
                        "configuration": s.configuration, "days": s.days, "periods": s.periods, "work": s.work, "total": None if s.total is None else str(s.total),
                        "open_conditions": s.open_conditions, "criteria": [vars(c) for c in s.criteria]} for s in sheets]}
