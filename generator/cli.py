"""The ``iteralab`` command line: a thin layer over the library functions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iteralab import __version__
from iteralab.core.errors import UsageError, UserError

COMMANDS = {}


def command(*arguments):
    """Register a command; its docstring is its --help text."""

    def register(function):
        COMMANDS[function.__name__.removeprefix("cmd_").replace("_", "-")] = (function, arguments)
        return function

    return register


def arg(*names, **options):
    """Describe one argparse argument of a command."""
    return names, options


def positive_int(text: str) -> int:
    """Parse a whole number of at least 1."""
    return _whole(text, minimum=1)


def non_negative_int(text: str) -> int:
    """Parse a whole number of at least 0."""
    return _whole(text, minimum=0)


def _whole(text: str, *, minimum: int) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text} is below {minimum}")
    return value


def emit(args, data: dict, text: str) -> None:
    """Print DATA as JSON with --json, else the human TEXT."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True))
    else:
        print(text)


JSON = arg("--json", action="store_true", help="print the result as JSON")
CATALOG = arg("--catalog", type=Path, metavar="FILE", help="price catalog CSV (default: the shipped 2026-09-24 catalog)")


@command(
    arg("--gpu", required=True, help="GPU as the catalog names it, e.g. rtx-4090, rtx-6000-ada, b200"),
    arg("--days", required=True, type=int, help="package length in days: 3, 7 or 30"),
    arg("--lots", required=True, type=positive_int, help="number of lots (a lot may hold several cards)"),
    arg("--accepted-results", type=non_negative_int, metavar="K",
        help="distinct validated corpora actually accepted; adds cost per validated corpus"),
    CATALOG, JSON,
)
def cmd_cost(args) -> int:
    """Price a rental package: lot price x lots, never multiplied again by cards per lot."""
    from iteralab.money.catalog import load_catalog, quote

    result = quote(load_catalog(args.catalog), gpu=args.gpu, days=args.days, lots=args.lots,
                   accepted_results=args.accepted_results)
    price, gpu = result.price, result.price.gpu
    lines = [
        f"{result.total} {price.currency} for {result.gpus} GPU{'s' * (result.gpus != 1)}: "
        f"{result.lots} lot{'s' * (result.lots != 1)} of {gpu.name} x {price.days} days "
        f"at {price.price_per_lot} {price.currency} per lot "
        f"({gpu.cards_per_lot} card{'s' * (gpu.cards_per_lot != 1)} per lot, catalog {result.catalog_version})",
        "The whole package is paid even if part of the period stays unused.",
    ]
    if result.accepted_results is not None:
        if result.cost_per_validated_corpus is None:
            lines.append(f"Cost per validated corpus: {result.undefined_reason}; the spend of {result.total} {price.currency} stands.")
        else:
            lines.append(
                f"Cost per validated corpus: {result.cost_per_validated_corpus} {price.currency} "
                f"({result.total} / {result.accepted_results} accepted result{'s' * (result.accepted_results != 1)})"
            )
    emit(args, {
        "catalog_version": result.catalog_version, "gpu": gpu.slug, "gpu_name": gpu.name,
        "days": price.days, "lots": result.lots, "cards_per_lot": gpu.cards_per_lot, "gpus": result.gpus,
        "price_per_lot": str(price.price_per_lot), "total": str(result.total), "currency": price.currency,
        "accepted_results": result.accepted_results,
        "cost_per_validated_corpus": None if result.cost_per_validated_corpus is None else str(result.cost_per_validated_corpus),
        "cost_per_validated_corpus_note": result.undefined_reason if result.accepted_results is not None else None,
    }, "\n".join(lines))
    return 0


@command(
    arg("--start", required=True, help="window start, e.g. '2026-09-28 09:00' (an offset like +07:00 is kept)"),
    arg("--end", required=True, help="window end"),
    arg("--tz", help="IANA time zone of times without an offset, e.g. Europe/Berlin (default UTC)"),
    arg("--gpu", help="also price each package for this GPU"),
    arg("--lots", type=positive_int, default=1, help="lots to price with --gpu (default 1)"),
    CATALOG, JSON,
)
def cmd_schedule(args) -> int:
    """Measure a rental window in real elapsed hours and show which packages cover it."""
    from iteralab.money.catalog import load_catalog
    from iteralab.money.schedule import format_hours, plan_window

    catalog = load_catalog(args.catalog) if args.gpu else None
    window = plan_window(start=args.start, end=args.end, tz=args.tz, catalog=catalog, gpu=args.gpu, lots=args.lots)
    lines = [f"Window {window.start.isoformat()} to {window.end.isoformat()} ({window.zone}): "
             f"{format_hours(window.hours)} h elapsed"]
    rows = []
    for fit in window.fits:
        if fit.covers:
            line = f"  {fit.days}-day package ({fit.hours} h): covers the window ({format_hours(fit.hours - window.hours)} h to spare)"
        else:
            line = (f"  {fit.days}-day package ({fit.hours} h): does not cover it; it would take "
                    f"{fit.periods_needed} consecutive periods bought explicitly (no automatic extension)")
        if args.gpu:
            if fit.price_per_period is None:
                line += f"; price {fit.price_note}"
            elif fit.covers:
                line += f"; {fit.price_per_period} USD for {args.lots} lot{'s' * (args.lots != 1)}"
            else:
                line += f"; {fit.periods_needed} x {fit.price_per_period} = {fit.total_for_periods} USD for {args.lots} lot{'s' * (args.lots != 1)}"
        lines.append(line)
        rows.append({
            "days": fit.days, "hours": fit.hours, "covers": fit.covers, "periods_needed": fit.periods_needed,
            "price_per_period": None if fit.price_per_period is None else str(fit.price_per_period),
            "total_for_periods": None if fit.total_for_periods is None else str(fit.total_for_periods),
            "price_note": fit.price_note,
        })
    lines.append("Covering a window does not prove the work finishes in it: measure the processing time.")
    emit(args, {
        "start": window.start.isoformat(), "end": window.end.isoformat(), "time_zone": window.zone,
        "elapsed_hours": format_hours(window.hours), "packages": rows,
        "catalog_version": catalog.version if catalog else None, "gpu": args.gpu, "lots": args.lots if args.gpu else None,
    }, "\n".join(lines))
    return 0


@command(
    arg("runs", nargs="?", type=Path, default=Path("runs"), help="runs folder (default: runs)"),
    JSON,
)
def cmd_check(args) -> int:
    """Validate every record under the runs folder and list each problem as file:line: reason."""
    from iteralab.store.records import load

    loaded = load(args.runs)
    counts = {kind: len(loaded.of_kind(kind)) for kind in ("manifest", "trial", "rental", "deliverable")}
    summary = (f"{len(loaded.records)} records ({', '.join(f'{n} {k}' for k, n in counts.items())}); "
               f"{len(loaded.problems)} problem{'s' * (len(loaded.problems) != 1)}")
    text = "\n".join([*loaded.problems, summary])
    emit(args, {"records": len(loaded.records), "by_kind": counts, "problems": loaded.problems}, text)
    return 1 if loaded.problems else 0


@command(
    arg("campaign", type=Path, help="campaign file (TOML): corpus, model, protocol, variants"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder to append records to (default: runs)"),
    arg("--dry-run", action="store_true", help="validate everything and print the plan without loading the model"),
    arg("--quiet", action="store_true", help="no progress bar"),
    JSON,
)
def cmd_run(args) -> int:
    """Run a benchmark campaign: protocol fixed first, rotated trials, every outcome recorded."""
    from iteralab.run.runner import format_summary, prepare, run_campaign, summarize

    if args.dry_run:
        prepared = prepare(args.campaign, args.runs)
        plan = [{"sequence": index, "variant": name, "repetition": repetition}
                for index, (name, repetition) in enumerate(prepared.plan, start=1)]
        campaign = prepared.campaign
        lines = [f"Campaign {campaign.name}: {len(prepared.corpus.entries)} entries "
                 f"({', '.join(f'{n} {k}' for k, n in prepared.bucket_counts.items())}), "
                 f"{prepared.truncated} longer than max_length {campaign.protocol['max_length']} "
                 f"({'truncated' if campaign.protocol['truncation'] == 'truncate' else 'refused'})",
                 f"Protocol fingerprint {prepared.fingerprint}", "Plan (trials in order):"]
        lines += [f"  {step['sequence']:>3}. {step['variant']} (repetition {step['repetition']})" for step in plan]
        emit(args, {"campaign": campaign.name, "protocol_fingerprint": prepared.fingerprint, "plan": plan,
                    "bucket_counts": prepared.bucket_counts, "truncated_entries": prepared.truncated}, "\n".join(lines))
        return 0
    result = run_campaign(campaign_file=args.campaign, runs_dir=args.runs, quiet=args.quiet or args.json)
    rows = summarize(result.trials)
    text = format_summary(rows) + f"\nRecords: {result.records_file}"
    if result.interrupted:
        text += "\nInterrupted: the trial in progress was recorded as interrupted; earlier records are intact."
    emit(args, {"run_id": result.run_id, "records_file": str(result.records_file), "summary": rows,
                "interrupted": result.interrupted}, text)
    return 130 if result.interrupted else 0


@command(
    arg("--runs", type=Path, default=Path("runs"), help="runs folder to append records to (default: runs)"),
    arg("--out", type=Path, default=Path("site"), help="where to build the site afterwards (default: site)"),
    arg("--again", action="store_true", help="run the campaign again even if it already has trials (appends a new run)"),
    arg("--quiet", action="store_true", help="no progress bar"),
)
def cmd_demo(args) -> int:
    """Run the embedded demo campaign: 1,000 real reviews, a real fine-tuned encoder, offline."""
    from iteralab.demo import CAMPAIGN, describe_time, run_demo
    from iteralab.run.runner import format_summary, summarize

    def log(message):
        print(message, file=sys.stderr, flush=True)

    result = run_demo(runs_dir=args.runs, out=args.out, again=args.again, quiet=args.quiet, log=None if args.quiet else log)
    if result["skipped"]:
        print(f"Campaign {CAMPAIGN} already has {len(result['trials'])} trials in {args.runs}; records left untouched "
              "(pass --again to append another run).")
    print(format_summary(summarize(result["trials"])))
    print(f"Campaign file: {result['campaign_file']}")
    print(f"Records: {args.runs / CAMPAIGN / 'records'}")
    if result["interrupted"]:
        return 130
    for sheet in result["sheets"]:
        print(f"Example qualification sheet: {sheet} (iteralab qualify {sheet.parent} --runs {args.runs})")
    decision = result["index"].resolve().parent / "campaigns" / CAMPAIGN / "decision.html"
    print(f"Open the decision page: {decision}")
    print(f"Try next: iteralab decide {CAMPAIGN} (the same answer as text), iteralab note new {CAMPAIGN} (draft the "
          "decision note), iteralab check runs/; the README's 'After the demo' lists the rest.")
    print(f"Site: {result['index'].resolve()}")
    print(describe_time(result["seconds"], [] if result["skipped"] else result["trials"]))
    return 0


@command(
    arg("--runs", type=Path, default=Path("runs"), help="runs folder to read (default: runs)"),
    arg("--out", type=Path, default=Path("site"), help="output folder (default: site)"),
    arg("--notes", type=Path, help="folder of Markdown decision notes (default: notes/ beside the runs folder)"),
    arg("--sheets", type=Path, help="folder of qualification sheets (default: qualification/ beside the runs folder)"),
    arg("--processes", type=positive_int,
        help="render campaigns on this many processes (default: one per core once there are thousands of trials)"),
    CATALOG, JSON,
)
def cmd_build(args) -> int:
    """Render the records, the catalog and decision notes into a static site."""
    from iteralab.site.build import build_site

    result = build_site(runs=args.runs, out=args.out, notes=args.notes, catalog=args.catalog, sheets=args.sheets,
                        processes=args.processes)
    rendered = result["rendered"]
    named = ", ".join(rendered[:10]) + (f" and {len(rendered) - 10} more" if len(rendered) > 10 else "")
    on = f" on {result['processes']} processes" if result["processes"] > 1 else ""
    lines = [f"{result['campaigns']} campaign(s); re-rendered: {named or 'none (unchanged)'}{on}; "
             f"{result['written']} file(s) written, {result['unchanged']} unchanged"]
    if result["problems"]:
        lines.append(f"{len(result['problems'])} problem(s) in the records are listed on the index page (iteralab check shows them)")
    lines.append(f"Site: {result['index'].resolve()}")
    emit(args, {**result, "index": str(result["index"].resolve())}, "\n".join(lines))
    return 0


@command(
    arg("--out", type=Path, default=Path("site"), help="folder to serve (default: site)"),
    arg("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)"),
)
def cmd_serve(args) -> int:
    """Preview the built site on http://127.0.0.1:PORT/ (localhost only)."""
    import functools
    import http.server

    if not (args.out / "index.html").is_file():
        raise UserError(f"{args.out}/index.html does not exist: run iteralab build first")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(args.out))
    with http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler) as server:
        print(f"Serving {args.out} on http://127.0.0.1:{args.port}/ (Ctrl-C to stop)", flush=True)
        server.serve_forever()
    return 0


@command(
    arg("action", choices=["add", "list"], help="add a rental, or list the campaign's rentals"),
    arg("--campaign", required=True, help="campaign the rental paid for"),
    arg("--gpu", help="GPU as the catalog names it (add)"),
    arg("--lots", type=positive_int, help="number of lots (add)"),
    arg("--days", type=int, help="package length in days: 3, 7 or 30 (add)"),
    arg("--start", help="start of the rental, e.g. 2026-09-28T09:00+07:00 (add)"),
    arg("--end", help="end of the rental; refused when longer than the package (add)"),
    arg("--receipt", type=Path, metavar="FILE", help="receipt (PDF, image, any file up to 50 MiB) copied beside the records (add)"),
    arg("--note", help="free text kept with the rental (add)"),
    arg("--run", action="append", default=[], metavar="RUN_ID", dest="paid_runs",
        help="a run this package paid for (repeatable); its manifest must show the rented GPU (add)"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder (default: runs)"),
    CATALOG, JSON,
)
def cmd_rental(args) -> int:
    """Record a GPU package bought (catalog price and receipt kept), or list the rentals of a campaign."""
    from iteralab.decision.rentals import add_rental
    from iteralab.store.records import load

    if args.action == "list":
        rentals = [r for r in load(args.runs).of_kind("rental") if r["campaign"] == args.campaign] if args.runs.is_dir() else []
        lines = [f"{r['record_id']}: {r['lots']} lot(s) {r['gpu']} x {r['days']} days from {r['start']}, {r['total']} {r['currency']}"
                 f" (catalog {r['catalog_version']}){', receipt ' + r['receipt']['path'] if r['receipt'] else ', no receipt'}"
                 for r in rentals] or [f"no rental recorded for {args.campaign}"]
        emit(args, {"rentals": rentals}, "\n".join(lines))
        return 0
    missing = [f"--{name}" for name in ("gpu", "lots", "days", "start") if getattr(args, name) is None]
    if missing:
        raise UsageError(f"rental add needs {', '.join(missing)}")
    record = add_rental(runs_dir=args.runs, campaign=args.campaign, gpu=args.gpu, lots=args.lots, days=args.days,
                        start=args.start, end=args.end, receipt=args.receipt, catalog=args.catalog, note=args.note,
                        runs=args.paid_runs)
    receipt = f"; receipt {record['receipt']['path']} (sha256 {record['receipt']['sha256'][:12]}…)" if record["receipt"] else "; no receipt"
    emit(args, record, f"Recorded {record['record_id']}: {record['total']} {record['currency']} for {record['gpus']} "
                       f"GPU{'s' * (record['gpus'] != 1)} ({record['lots']} lot{'s' * (record['lots'] != 1)} x "
                       f"{record['price_per_lot']}, catalog {record['catalog_version']}){receipt}"
                       + (f"; paid for run(s) {', '.join(record['runs'])}" if record["runs"] else
                          "; linked to no run: it counts in the campaign's spend, for no configuration (add --run RUN_ID)"))
    return 0


@command(
    arg("campaign", help="campaign to decide"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder (default: runs)"),
    CATALOG, JSON,
)
def cmd_decide(args) -> int:
    """Answer which configuration gets the campaign's result for the lowest planned spend, and why."""
    from iteralab.decision.report import decision_report
    from iteralab.decision.text import describe_report, report_dict

    report = decision_report(campaign=args.campaign, runs=args.runs, catalog=args.catalog)
    emit(args, report_dict(report), describe_report(report))
    return 0


@command(
    arg("action", choices=["new"], help="new: draft a decision note from the decision report"),
    arg("campaign", help="campaign the note decides"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder (default: runs)"),
    arg("--notes", type=Path, help="notes folder (default: notes/ beside the runs folder)"),
    arg("--author", default="to fill in", help="author named in the front matter"),
    CATALOG, JSON,
)
def cmd_note(args) -> int:
    """Draft a decision note (Markdown) from the decision report, for the team to edit before publishing."""
    from iteralab.decision.report import decision_report
    from iteralab.site.notes import write_draft

    report = decision_report(campaign=args.campaign, runs=args.runs, catalog=args.catalog)
    path = write_draft(report, folder=args.notes or args.runs.parent / "notes", author=args.author)
    emit(args, {"path": str(path)}, f"Drafted {path}: edit it, then iteralab build")
    return 0


@command(
    arg("--campaign", required=True, help="campaign of the trial"),
    arg("--trial", required=True, metavar="TRIAL_ID", help="an accepted trial whose predictions are the deliverable"),
    arg("--name", help="what was delivered, e.g. 'October reviews, classified'"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder (default: runs)"),
    JSON,
)
def cmd_deliver(args) -> int:
    """Record a distinct validated corpus as delivered; repetitions never count twice."""
    from iteralab.decision.rentals import deliver

    record = deliver(runs_dir=args.runs, campaign=args.campaign, trial_id=args.trial, name=args.name)
    emit(args, record, f"Recorded deliverable {record['record_id']}: {record['name']} (corpus {record['corpus_fingerprint'][:19]}…)")
    return 0


@command(
    arg("campaign", help="campaign to bundle"),
    arg("-o", "--output", type=Path, required=True, metavar="FILE.zip", help="where to write the bundle"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder (default: runs)"),
    arg("--notes", type=Path, help="decision notes folder (default: notes/ beside the runs folder)"),
    CATALOG, JSON,
)
def cmd_bundle(args) -> int:
    """Write a campaign's evidence bundle: a deterministic zipped BagIt bag with checksums."""
    from iteralab.site.bundle import write_bundle

    path, digest = write_bundle(campaign=args.campaign, out=args.output, runs=args.runs, notes=args.notes, catalog=args.catalog)
    emit(args, {"path": str(path), "sha256": digest}, f"{path}\nsha256 {digest}")
    return 0


@command(arg("bundle", type=Path, help="evidence bundle (.zip)"), JSON)
def cmd_verify(args) -> int:
    """Check an evidence bundle: safe entries, every file present, every checksum right, nothing extra."""
    from iteralab.site.bundle import verify_bundle

    problems = verify_bundle(args.bundle)
    emit(args, {"bundle": str(args.bundle), "problems": problems, "valid": not problems},
         "\n".join(problems) if problems else f"{args.bundle}: valid (every file present and matching its sha256)")
    return 1 if problems else 0


@command(
    arg("--params", help="parameter count, e.g. 7e9 (or read from --model)"),
    arg("--model", type=Path, metavar="DIR", help="local model folder: parameters from safetensors headers, architecture from config.json"),
    arg("--bits", type=positive_int, default=16, help="bits per weight (default 16)"),
    arg("--reserve-gib", default="0", metavar="GIB", help="reserve you choose for activations, workspace, fragmentation (GiB)"),
    arg("--table", action="store_true", help="show the 32, 16, 8 and 4 bit rows with the same reserve"),
    arg("--kv", action="store_true", help="add the KV cache as its own line"),
    arg("--tokens", type=positive_int, help="tokens per sequence for --kv"),
    arg("--sequences", type=positive_int, help="sequences held at once for --kv"),
    arg("--kv-bits", type=positive_int, default=16, help="bits per cached value (default 16)"),
    arg("--layers", type=positive_int, help="layers, when --model does not give them"),
    arg("--kv-heads", type=positive_int, help="key/value heads, when --model does not give them"),
    arg("--head-dim", type=positive_int, help="head dimension, when --model does not give it"),
    arg("--mode", choices=["inference", "training"], default="inference", help="training lists the further items to document"),
    CATALOG, JSON,
)
def cmd_size(args) -> int:
    """Estimate memory per GPU: weights, your reserve and KV cache, against the catalog's cards."""
    from iteralab.money.catalog import load_catalog
    from iteralab.money.sizing import describe, estimate

    if (args.params is None) == (args.model is None):
        raise UsageError("give either --params or --model")
    kv = {"tokens": args.tokens, "sequences": args.sequences, "bits": args.kv_bits, "layers": args.layers,
          "kv_heads": args.kv_heads, "head_dim": args.head_dim} if args.kv else None
    result = estimate(params=args.params, model=args.model, bits=args.bits, reserve_gib=args.reserve_gib, table=args.table,
                      kv=kv, training=args.mode == "training", catalog=load_catalog(args.catalog))
    emit(args, result, describe(result))
    return 0


@command(
    arg("sheets", nargs="?", type=Path, default=Path("qualification"), help="folder of qualification sheets (default: qualification)"),
    arg("--runs", type=Path, default=Path("runs"), help="runs folder with the campaigns' evidence (default: runs)"),
    CATALOG, JSON,
)
def cmd_qualify(args) -> int:
    """Settle each candidate's six criteria from evidence and sheets; rank the selected ones."""
    from iteralab.decision.qualification import qualify
    from iteralab.money.catalog import load_catalog
    from iteralab.store.records import Loaded, load

    loaded = load(args.runs) if args.runs.is_dir() else Loaded()
    sheets = qualify(args.sheets, loaded, load_catalog(args.catalog))
    lines = []
    for rank, sheet in enumerate(sheets, start=1):
        total = f"{sheet.total} USD" if sheet.total is not None else "not priced"
        lines.append(f"{rank}. {sheet.candidate}: {sheet.outcome.upper()} ({sheet.lots} lot(s) {sheet.gpu} x {sheet.days} days, "
                     f"{total}, variant {sheet.variant} of {sheet.campaign})")
        for criterion in sheet.criteria:
            origin = "override: " + criterion.override_reason if criterion.override_reason else ("derived" if criterion.derived else "entered")
            lines.append(f"     {criterion.name:<24} {criterion.status:<11} {criterion.note} [{origin}; {criterion.document or 'no document'}]")
    emit(args, {"sheets": [{"candidate": s.candidate, "outcome": s.outcome, "source": s.source, "gpu": s.gpu, "lots": s.lots,
                            "configuration": s.configuration,
                            "days": s.days, "total": None if s.total is None else str(s.total), "open_conditions": s.open_conditions,
                            "criteria": [vars(c) for c in s.criteria]} for s in sheets]},
         "\n".join(lines) or f"no *.toml sheet in {args.sheets}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every registered command."""
    parser = argparse.ArgumentParser(
        prog="iteralab",
        description="Benchmark rented GPUs offline and publish the evidence as a static site.",
    )
    parser.add_argument("--version", action="version", version=f"iteralab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (function, arguments) in COMMANDS.items():
        doc = (function.__doc__ or "").strip()
        sub = subparsers.add_parser(name, help=doc.splitlines()[0], description=doc)
        for names, options in arguments:
            sub.add_argument(*names, **options)
        sub.set_defaults(handler=function)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one iteralab command; user mistakes give a one-line message, not a traceback."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"iteralab {args.command}: error: {error}", file=sys.stderr)
        return 2
    except UserError as error:
        print(f"iteralab {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"iteralab {args.command}: interrupted", file=sys.stderr)
        return 130
