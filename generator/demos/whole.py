"""The whole demo: prepare the three kinds' campaigns once, run each unless recorded, build the site, say what it did."""

from __future__ import annotations

import time
from pathlib import Path

from iteralab.core.paths import sheets_folder
from iteralab.demos import adapt as demo_adapt
from iteralab.demos import generate as demo_generate
from iteralab.demos import serve as demo_serve
from iteralab.demos.classify import (
    CAMPAIGN,
    REVISION,
    install_example_sheets,
    locate_inputs,
    prepare_workspace,
    revision_file,
)
from iteralab.run.runner import run_campaign
from iteralab.run.summary import format_summary, summarize
from iteralab.site.build import build_site
from iteralab.store.reading import load

# Both languages: the customers of a publishing team read Bahasa Indonesia (site/id/, linked from every page).
DEMO_LANGUAGES = ("en", "id")


def run_demo(*, runs_dir: Path, out: Path, again: bool = False, quiet: bool = False, log=None) -> dict:
    """Prepare once, measure the demo campaign unless it was measured already, then build the site."""
    runs_dir, out = Path(runs_dir), Path(out)
    started = time.perf_counter()
    campaign_file = prepare_workspace(log=log)
    workspace = campaign_file.parent
    generation_file = demo_generate.prepare_generation(workspace=workspace, tokenizer_dir=locate_inputs()[0], log=log)
    adaptation_file = demo_adapt.prepare_adaptation(workspace=workspace, model_dir=workspace / "model", log=log)
    serving_file = demo_serve.prepare_serving(generation_file=generation_file)
    seconds = {"preparation": time.perf_counter() - started}
    existing = load(runs_dir).of_campaign(CAMPAIGN, "trial") if (runs_dir / CAMPAIGN).is_dir() else []
    result = {"campaign_file": campaign_file, "skipped": bool(existing) and not again, "trials": existing,
              "interrupted": False, "sheets": [], "index": None, "seconds": seconds}
    if not result["skipped"]:
        if log:
            log(f"running {campaign_file}")
        started = time.perf_counter()
        run = run_campaign(campaign_file=campaign_file, runs_dir=runs_dir, quiet=quiet)
        seconds["trials"] = time.perf_counter() - started
        result.update(trials=run.trials, interrupted=run.interrupted)
    asked = load(runs_dir).of_campaign(REVISION, "trial") if (runs_dir / REVISION).is_dir() else []
    result["revision"] = {"file": revision_file(campaign_file), "trials": asked, "ran": False}
    if not result["interrupted"] and not asked:  # the same question asked again, once (#35)
        if log:
            log(f"asking the same question again with eager attention: {revision_file(campaign_file)}")
        started = time.perf_counter()
        run = run_campaign(campaign_file=revision_file(campaign_file), runs_dir=runs_dir, quiet=quiet)
        seconds["revision"] = time.perf_counter() - started
        result["revision"].update(trials=run.trials, ran=True)
        result["interrupted"] = run.interrupted
    result["generation"] = _once(demo_generate.GENERATE_CAMPAIGN, generation_file, runs_dir, result, seconds, quiet, log)
    result["adaptation"] = _once(demo_adapt.ADAPT_CAMPAIGN, adaptation_file, runs_dir, result, seconds, quiet, log)
    # Without validation stages: each would start the engine once more before timing (about 10 s a variant here).
    result["serving"] = _once(demo_serve.SERVE_CAMPAIGN, serving_file, runs_dir, result, seconds, quiet, log, stages=False)
    if not result["interrupted"]:
        started = time.perf_counter()
        result["sheets"] = install_example_sheets(sheets_folder(runs_dir))
        # Both languages: the customers of a publishing team read Bahasa Indonesia (site/id/, linked from every page).
        result["index"] = build_site(runs=runs_dir, out=out, languages=DEMO_LANGUAGES)["index"]
        seconds["site"] = time.perf_counter() - started
    return result


def _once(name: str, campaign_file: Path, runs_dir: Path, result: dict, seconds: dict, quiet: bool, log,
          stages: bool = True) -> dict:
    """Run campaign NAME once: the generation campaign (#42, a causal LM writing each review's verdict word), the
    adaptation campaign (#43, the encoder fine-tuned phase by phase) and the serving campaign (#64); a run that has its
    records keeps them."""
    found = load(runs_dir).of_campaign(name, "trial") if (runs_dir / name).is_dir() else []
    ran = {"file": campaign_file, "trials": found, "ran": False}
    if not result["interrupted"] and not found:
        if log:
            log(f"running {name}: {campaign_file}")
        started = time.perf_counter()
        run = run_campaign(campaign_file=campaign_file, runs_dir=runs_dir, quiet=quiet, stages=stages)
        seconds[name] = time.perf_counter() - started
        ran.update(trials=run.trials, ran=True)
        result["interrupted"] = run.interrupted
    return ran


def describe_time(seconds: dict, trials: list[dict]) -> str:
    """Say where the demo's time went: preparation, the trials (their measured windows apart) and the site."""
    parts = [f"preparation {seconds['preparation']:.0f} s (corpora and fine-tuning on a first run, else hashing inputs)"]
    if "trials" in seconds:
        windows = [t["phases"]["measured_window"]["duration_ns"] for t in trials
                   if (t["phases"].get("measured_window") or {}).get("duration_ns") is not None]
        parts.append(f"{len(trials)} trials {seconds['trials']:.0f} s, of which measured windows {sum(windows) / 1e9:.0f} s")
    if "revision" in seconds:
        parts.append(f"the question asked again {seconds['revision']:.0f} s")
    for name, what in ((demo_generate.GENERATE_CAMPAIGN, "the generation campaign"),
                       (demo_adapt.ADAPT_CAMPAIGN, "the adaptation campaign"),
                       (demo_serve.SERVE_CAMPAIGN, "the serving campaign")):
        if name in seconds:
            parts.append(f"{what} {seconds[name]:.0f} s")
    if "site" in seconds:
        parts.append(f"site {seconds['site']:.0f} s")
    return "Time in this command: " + ", ".join(parts) + f"; {sum(seconds.values()):.0f} s in all (setup not included)."


def describe_result(result: dict, runs: Path) -> str:
    """Say what the demo did: the summary table, where the records, sheets and pages are, what to try next."""
    lines = []
    if result["skipped"]:
        lines.append(f"Campaign {CAMPAIGN} already has {len(result['trials'])} trials in {runs}; records left untouched "
                     "(pass --again to append another run).")
    lines += [format_summary(summarize(result["trials"])), f"Campaign file: {result['campaign_file']}",
              f"Records: {Path(runs) / CAMPAIGN / 'records'}"]
    if result["interrupted"]:
        return "\n".join(lines)
    lines += [f"Example qualification sheet: {sheet} (iteralab qualify {sheet.parent} --runs {runs})" for sheet in result["sheets"]]
    index = result["index"].resolve()
    revision = result["revision"]
    lines += [f"Asked again: {REVISION} ({len(revision['trials'])} trials with eager attention, 2 repetitions instead of 5 "
              f"to keep the demo short): iteralab compare {CAMPAIGN} {REVISION}; every revision side by side: "
              f"{index.parent / 'questions' / (CAMPAIGN + '.html')}"]
    lines += demo_generate.describe_generation(result["generation"], index)
    lines += demo_adapt.describe_adaptation(result["adaptation"], index)
    lines += demo_serve.describe_serving(result["serving"], index)
    lines += [f"Open the decision page: {index.parent / 'campaigns' / CAMPAIGN / 'decision.html'}",
              f"Try next: iteralab decide {CAMPAIGN} (the same answer as text), iteralab note new {CAMPAIGN} (draft the "
              "decision note), iteralab check runs/; the manual's 'After the demo' (docs/getting-started.md) lists the rest.",
              f"Site: {index} (Bahasa Indonesia: {index.parent / 'id' / 'index.html'})", describe_time(result["seconds"], [] if result["skipped"] else result["trials"])]
    return "\n".join(lines)
