"""The pages and the decision show a generation campaign's figures (#42, parts 3 and 5), read from the records' own
generation object: tokens and rates per configuration, prefill and decode as phases, cut outputs, agreement and reference
match with their definitions, the protocol's decoding, the KV cache estimated and measured side by side, tokens per second
beside the corpus time. A classification campaign in the same site is shown exactly as before.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics

import pytest
from bs4 import BeautifulSoup

from iteralab.decision.qualification import qualify_folder
from iteralab.decision.report import decide
from iteralab.money.catalog import load_catalog
from iteralab.run.runner import run_campaign
from iteralab.site.build import build_site
from iteralab.store import reading, records
from iteralab.store.trials import CSV_COLUMNS, GENERATION_COLUMNS
from iteralab.store.views import campaign_views
from tests import factory
from tests.test_cache import FIXTURE
from tests.tiny import build_causal_lm, corpus_rows, write_corpus, write_generation_campaign

CLASSIFY = "demo-rotten-tomatoes"
TINY = "tiny-generate"
GPU = "gen-gpu"
HOSTILE_TEMPLATE = "<script>alert(1)</script> {text} & </code>"
RTX_4090 = factory.machine("NVIDIA GeForce RTX 4090", cuda="12.8", driver="570.1")
DEFINITIONS = {"agreement": "exact token-sequence match with the reference variant's output for the same id and seed (the new "
                            "tokens up to and including the end-of-sequence token)",
               "reference_match": "exact match: the output text, stripped of surrounding spaces, equals the reference output"}
SAMPLING = {"seeds": [11, 12], "temperature": 0.9, "top_p": 1.0}


def generation_manifest(campaign: str, run_id: str, *, template: str = "{text}", sampling: dict | None = None,
                        environment=None, decision=None) -> dict:
    """A manifest as a generation run writes it: [workload] kind and the protocol's generation settings."""
    manifest = factory.manifest(campaign, run_id, environment=environment, decision=decision)
    manifest["workload"] = {"kind": "generate"}
    manifest["protocol"].update(thresholds={}, min_agreement=0.9, generation={
        "prompt_template": template, "padding_side": "left", "max_new_tokens": 16, "kv_cache": True,
        "decoding": "sampling" if sampling else "greedy", "sampling": sampling, "reference_metric": "exact",
        "stop": "the end-of-sequence token, or max_new_tokens"})
    return manifest


def generation_trial(manifest: dict, variant: str = "b1", *, seconds: float = 1.0, repetition: int = 1, sequence: int = 1,
                     batch_size: int = 1, rate: float = 50.0, decode: float | None = 0.002, cut: int = 3,
                     measured: int | None = None, seeds: bool = False, gpu: bool = False) -> dict:
    """A trial record shaped as a generation trial writes it: prefill and decode phases, the generation object, and its
    quality (agreement, reference match, outputs cut) beside an empty accuracy."""
    trial = factory.trial(manifest, variant, seconds=seconds, repetition=repetition, sequence=sequence, batch_size=batch_size,
                          gpu=gpu)
    phases = list(trial["phases"].items())
    decode_phase = ({"duration_ns": int(decode * 1e9 * 300), "completed": True, "derived": "the generation calls of the "
                     "measured window less the prefill phase for each pass (as optimum-benchmark derives decode); timed "
                     "with CUDA synchronised at every boundary"} if decode is not None else
                    {"duration_ns": None, "reason": "no output had a token after the first: there was nothing to decode"})
    trial["phases"] = dict([*phases[:5], ("prefill", {"duration_ns": 40_000_000, "completed": True}), ("decode", decode_phase),
                            *phases[5:]])
    reason = None if measured is not None else ("not measured: no CUDA device (the KV cache is observed with torch.cuda's "
                                                "allocator counters, which a run on cpu does not have)")
    trial["generation"] = {
        "outputs": 100, "input_tokens": 2_400, "output_tokens": 1_000, "output_tokens_per_s": rate, "stopped_at_eos": 100 - cut,
        "cut_by_max_new_tokens": cut, "prefill_s_per_batch": 0.04 / 100 * batch_size, "decode_s_per_new_token": decode,
        "decode_reason": None if decode is not None else "no output had a token after the first: there was nothing to decode",
        "kv_cache": {"estimate_bytes": 2 * 2 * 4 * 16 * 40 * batch_size * 4, "estimate_reason": None,
                     "shape": {"layers": 2, "kv_heads": 4, "head_dim": 16}, "tokens": 40, "sequences": batch_size, "bits": 32,
                     "estimate_formula": "2 × layers × KV heads × head dim × tokens × sequences × bytes per value",
                     "measured_bytes": measured, "measured_reason": reason,
                     "measured_as": "peak allocated while generating (measured window) less the memory allocated after "
                                    "loading: the cache and the activations"}}
    scores = {"entries": 100, "accuracy": None, "macro_f1": None, "agreement": 0.97, "reference_match": 0.41,
              "cut_by_max_new_tokens": cut}
    no_labels = "a generation campaign has no labels to count: see reference_match"
    trial["quality"] = {
        "overall": scores, "buckets": {"short": {**scores, "entries": 60}, "long": {**scores, "entries": 40}},
        "seeds": {"11": scores, "12": scores} if seeds else None,
        "missing_reasons": {"accuracy": no_labels, "macro_f1": no_labels}, "reference": {"variant": "b1", "trial_id": "x"},
        "definitions": DEFINITIONS, "verdicts": [{"metric": "agreement", "threshold": 0.9, "comparison": ">=", "value": 0.97,
                                                   "passed": True, "reason": None}],
        "passed": True, "format_ok": True, "format_problems": []}
    trial["corpus_accepted"] = True
    return trial


def write_gpu_campaign(runs, campaign: str = GPU, **options) -> list[dict]:
    """A generation campaign on an RTX 4090 that sampled with two seeds: the KV cache measured beside its estimate."""
    manifest = generation_manifest(campaign, f"run-{campaign}", template=HOSTILE_TEMPLATE, sampling=SAMPLING,
                                   environment=RTX_4090, **options)
    records.append(runs, manifest)
    trials = [generation_trial(manifest, "b1", seconds=2 + r / 10, repetition=r, sequence=2 * r - 1, rate=40.0 + r,
                               measured=9_000 + r, seeds=True, gpu=True, decode=None if r == 3 else 0.002) for r in (1, 2, 3)]
    trials += [generation_trial(manifest, "b4", seconds=1 + r / 10, repetition=r, sequence=2 * r, batch_size=4,
                                rate=120.0 + r, measured=30_000, seeds=True, gpu=True) for r in (1, 2, 3)]
    for trial in trials:
        records.append(runs, trial)
    return trials


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """A real run of a tiny GPT-2 (1 layer) over 24 prompts, 2 variants × 2 repetitions, on this CPU."""
    folder = tmp_path_factory.mktemp("tiny-generate")
    model = build_causal_lm(folder / "lm")
    corpus = write_corpus(folder / "corpus.jsonl", corpus_rows())
    result = run_campaign(campaign_file=write_generation_campaign(folder, model, corpus), runs_dir=folder / "runs", quiet=True)
    assert [trial["status"] for trial in result.trials] == ["ok"] * 4
    return folder / "runs"


@pytest.fixture(scope="module")
def runs(tiny_runs, tmp_path_factory):
    """The tiny GPT-2's records, a generation campaign on a GPU asked again, and the demo's classification records."""
    folder = tmp_path_factory.mktemp("generation-pages") / "runs"
    shutil.copytree(FIXTURE, folder)
    shutil.copytree(tiny_runs, folder, dirs_exist_ok=True)
    question = {"corpora": 4, "window_hours": "96"}
    write_gpu_campaign(folder, decision=question)
    write_gpu_campaign(folder, f"{GPU}-r2", decision={**question, "asks_again": GPU})
    return folder


@pytest.fixture(scope="module")
def sheets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generation-sheets")
    for campaign, variant in ((TINY, "b4"), (GPU, "b4")):
        (folder / f"{campaign}.toml").write_text(
            f'candidate = "{campaign} on an RTX 4090"\ncampaign = "{campaign}"\nvariant = "{variant}"\ngpu = "rtx-4090"\n'
            'lots = 1\ndays = 7\n', encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def site(runs, sheets, tmp_path_factory):
    out = tmp_path_factory.mktemp("generation-site") / "site"
    result = build_site(runs=runs, out=out, sheets=sheets, languages=("en", "id"), processes=1)
    assert result["failed"] == {}
    return out


def page(site, *parts) -> BeautifulSoup:
    return BeautifulSoup(site.joinpath(*parts).read_text(encoding="utf-8"), "html.parser")


def tiny_trials(runs) -> dict[str, list[dict]]:
    trials: dict[str, list[dict]] = {}
    for trial in reading.load(runs / TINY).of_kind("trial"):
        trials.setdefault(trial["variant"], []).append(trial)
    return trials


def cells(row) -> list[str]:
    return [cell.get_text(" ", strip=True) for cell in row.find_all("td")]


def test_the_campaign_page_shows_each_configurations_generation_figures_over_its_repetitions(site, runs):
    section = page(site, "campaigns", TINY, "index.html").find(id="generation")
    heads = [th.get_text() for th in section.select("thead th")]
    assert heads == ["Configuration", "Output tokens per second", "Prefill per batch", "Decode per new token", "Input tokens",
                     "Output tokens", "Cut by max_new_tokens", "Stopped at end of sequence", "Agreement", "Reference match"]
    rows = {row.th.get_text().split(" · ")[0]: cells(row) for row in section.select("tbody tr")}
    for variant, trials in tiny_trials(runs).items():
        rates = [trial["generation"]["output_tokens_per_s"] for trial in trials]
        prefill = [trial["generation"]["prefill_s_per_batch"] * 1e3 for trial in trials]
        rate, prefill_cell, _, inputs, outputs, cut, eos, agreement, reference = rows[variant]
        assert rate == (f"{statistics.median(rates):,.1f}/s {min(rates):,.1f}/s – {max(rates):,.1f}/s")  # the header says tokens
        assert prefill_cell == f"{statistics.median(prefill):.3f} ms {min(prefill):.3f} ms – {max(prefill):.3f} ms"
        assert (inputs, outputs) == ("344 344 – 344", "96 96 – 96")
        # Random weights: every output runs to max_new_tokens; each cut output is counted, never hidden.
        assert (cut, eos) == ("24 24 – 24", "0 0 – 0")
        assert agreement == "1.000 1.000 – 1.000" and reference == "0.000 0.000 – 0.000"
    definitions = {dt.get_text(): dt.find_next_sibling("dd").get_text() for dt in section.select("dl.definitions dt")}
    assert definitions["Agreement"].startswith("exact token-sequence match with the reference variant's output")
    assert definitions["Reference match"].startswith("normalised match: both texts case-folded")
    # A classification campaign's trials carry no generation object: its page is as it was.
    classify = page(site, "campaigns", CLASSIFY, "index.html")
    assert classify.find(id="generation") is None and classify.find(id="kv-cache-note") is None
    assert "KV cache" not in classify.find(id="memory-estimate").get_text()
    assert [dt.get_text() for dt in classify.find(id="protocol").select("dt")][-2:] == ["Seed", "Corpus"]


def test_a_figure_some_repetitions_lack_is_empty_with_its_reason_and_never_zero(site):
    rows = page(site, "campaigns", GPU, "index.html").select("#generation tbody tr")
    decode = {row.th.get_text().split(" · ")[0]: cells(row)[2] for row in rows}
    assert decode["b1"] == ("2.000 ms 2.000 ms – 2.000 ms 2 of 3 repetitions; the others: no output had a token after the "
                            "first: there was nothing to decode")
    assert decode["b4"] == "2.000 ms 2.000 ms – 2.000 ms"


def test_the_protocol_says_the_decoding_and_the_prompt_template_escaped(site):
    tiny = page(site, "campaigns", TINY, "index.html").find(id="protocol")
    said = {dt.get_text(): dt.find_next_sibling("dd").get_text(" ", strip=True) for dt in tiny.select("dt")}
    assert said["Decoding"] == ("greedy; at most 4 new tokens per output (max_new_tokens); stops at the end-of-sequence token, "
                                "or max_new_tokens")
    assert said["Prompt template"] == "{text} -> ; padding side: left" and said["KV cache"] == "on"
    assert said["Reference match"] == "normalised"
    html = (site / "campaigns" / GPU / "index.html").read_text(encoding="utf-8")
    gpu = BeautifulSoup(html, "html.parser")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; {text} &amp; &lt;/code&gt;" in html and gpu.find("script", string="alert(1)") is None
    said = {dt.get_text(): dt.find_next_sibling("dd") for dt in gpu.find(id="protocol").select("dt")}
    assert said["Prompt template"].code.get_text() == HOSTILE_TEMPLATE
    assert said["Decoding"].get_text().startswith("sampling with the seeds 11, 12 (temperature 0.9, top_p 1.0), each seed's "
                                                  "outputs kept apart")


def test_the_kv_cache_estimate_and_measurement_stand_side_by_side_on_the_campaign_and_sizing_pages(site):
    section = page(site, "campaigns", TINY, "index.html").find(id="memory-estimate")
    heads = [th.get_text() for th in section.select("thead th")]
    assert heads[-2:] == ["KV cache: estimate", "KV cache: measured"]
    for row in section.select("tbody tr"):
        estimate, measured = cells(row)[-2:]
        batch = 4 if row.th.get_text().startswith("b4") else 1
        assert estimate.startswith(f"{2 * 1 * 2 * 8 * 28 * batch * 4:,} B")  # 1 layer, 2 heads of 8, 28 tokens, fp32
        assert f"28 tokens (longest prompt + max_new_tokens) × {batch} sequence(s), 32 bit" in estimate
        assert measured.startswith(f"{2 * 1 * 2 * 8 * 27 * batch * 4:,} B")  # the cache's tensors: 27 of 28 tokens (#63)
    assert "2 × layers × KV heads × head dim × tokens" in section.find(id="kv-cache-note").get_text()
    sizing = page(site, "sizing.html")
    assert [th.get_text() for th in sizing.select("thead th")][-2:] == ["KV cache: estimate", "KV cache: measured"]
    rows = {(row.td.get_text(), row.th.get_text().split(" · ")[0]): cells(row)[-2:] for row in sizing.select("tbody tr")}
    assert rows[(GPU, "b4")][0].startswith("163,840 B") and rows[(GPU, "b4")][1] == "30,000 B (0.0 MiB)"
    assert rows[(CLASSIFY, "fp32-b8")] == ["— no trial recorded a KV cache"] * 2


def test_a_trials_page_shows_prefill_and_decode_in_run_order_its_figures_and_its_quality_columns(site, runs):
    trials = page(site, "campaigns", TINY, "trials.html")
    trial = tiny_trials(runs)["b1"][0]
    section = trials.find(id=trial["record_id"])
    phases = [row.th.get_text() for row in section.find(id=f"{trial['record_id']}-phases").select("tbody tr")]
    assert phases == ["environment_check", "model_load", "compilation", "warmup", "measured_window", "prefill", "decode",
                      "evaluation", "writing_results"]
    figures = section.find(id=f"{trial['record_id']}-generation")
    said = {dt.get_text(): dt.find_next_sibling("dd").get_text(" ", strip=True) for dt in figures.select("dt")}
    generation = trial["generation"]
    assert said["Outputs"] == "24" and said["Cut by max_new_tokens"] == "24" and said["Stopped at end of sequence"] == "0"
    assert said["Output tokens per second"] == f"{generation['output_tokens_per_s']:,.1f} tokens/s"  # its unit (#61)
    assert said["KV cache: measured"].startswith(f"{generation['kv_cache']['measured_bytes']:,} B")  # on any device (#63)
    assert said["KV cache: estimate"].startswith(f"{generation['kv_cache']['estimate_bytes']:,} B")
    quality = section.find(id=f"{trial['record_id']}-quality")
    assert [th.get_text() for th in quality.select("thead th")][-3:] == ["Agreement", "Reference match", "Cut by max_new_tokens"]
    overall = cells(quality.select("tbody tr")[0])
    assert overall[-3:] == ["1.000", "0.000", "24"] and overall[1].startswith("— a generation campaign has no labels")
    assert "exact token-sequence match" in quality.select_one("dl.definitions").get_text()
    classify = page(site, "campaigns", CLASSIFY, "trials.html").select("article.trial")[0]
    assert [row.th.get_text() for row in classify.select("section[id$='-phases'] tbody tr")] == [
        "environment_check", "model_load", "compilation", "warmup", "measured_window", "evaluation", "writing_results"]
    assert [th.get_text() for th in classify.select("section[id$='-quality'] thead th")][-3:] == ["Accuracy", "Macro-F1",
                                                                                               "Agreement"]
    assert classify.select("[id$='-generation']") == [] and classify.select("dl.definitions") == []


def test_a_decode_phase_derived_from_others_says_how_and_sampling_seeds_have_their_quality_rows(site):
    trials = page(site, "campaigns", GPU, "trials.html")
    first = trials.select("article.trial")[0]
    assert "decode: the generation calls of the measured window less the prefill phase" in first.get_text(" ")
    rows = [row.th.get_text() for row in first.select("section[id$='-quality'] tbody tr")]
    assert rows == ["overall", "long", "short", "seed 11", "seed 12"]


def test_the_qualification_sheets_memory_criterion_says_the_kv_cache_estimated_and_measured(runs, sheets, site):
    found = {sheet.campaign: sheet for sheet in qualify_folder(sheets=sheets, runs=runs)}
    memory = {name: next(c for c in sheet.criteria if c.name == "memory_per_gpu") for name, sheet in found.items()}
    # Measured on a CPU: the sheet's card has no trial of b4, but the estimate holds on any card; the measurement is empty.
    assert memory[TINY].status == "to-confirm"
    # The cache measured on the CPU (#63) is not the sheet's card's: its measurement is empty with that reason.
    assert "; KV cache: estimate 14,336 B (0.00 GiB); measured empty (b4 was measured on CPU " in memory[TINY].note
    assert memory[TINY].note.endswith("measure b4 on RTX 4090)")
    assert memory[GPU].status == "acceptable"
    assert memory[GPU].note.endswith("; KV cache: estimate 163,840 B (0.00 GiB); measured 30,000 B (0.00 GiB)")
    sheet = page(site, "campaigns", GPU, "qualification.html")
    row = next(tr for tr in sheet.select("tbody tr") if tr.th and tr.th.get_text() == "memory per gpu")
    assert "KV cache: estimate 163,840 B (0.00 GiB); measured 30,000 B (0.00 GiB)" in row.get_text()


def test_decide_says_tokens_per_second_beside_the_corpus_time_ranked_by_the_same_rule(runs, cli, tmp_path):
    code, out, err = cli("decide", GPU, "--runs", runs)
    assert code == 0, err
    lines = out.splitlines()
    corpus_time = next(index for index, line in enumerate(lines) if line.strip().startswith("median 1.200 s per corpus"))
    assert lines[corpus_time + 1].strip() == ("output tokens per second: median 122.0, min 121.0, max 123.0 (over the "
                                               "measured window)")
    found = json.loads(cli("decide", GPU, "--runs", runs, "--json")[1])
    rates = {row["variant"]: row["output_tokens_per_s"] for row in found["ranked"] + found["infeasible"]}
    assert rates == {"b1": {"min": 41.0, "median": 42.0, "max": 43.0}, "b4": {"min": 121.0, "median": 122.0, "max": 123.0}}
    classify = json.loads(cli("decide", CLASSIFY, "--runs", runs, "--json")[1])
    assert all("output_tokens_per_s" not in row for row in classify["ranked"] + classify["infeasible"])
    assert "output tokens per second" not in cli("decide", CLASSIFY, "--runs", runs)[1]
    # The same trials without their generation object rank the same: tokens per second are said, never ranked on.
    catalog = load_catalog(None)
    stripped = tmp_path / "runs"
    for record in reading.load(runs / GPU).records:
        records.append(stripped, {key: value for key, value in record.items() if key != "generation"})
    with_figures = decide(campaign_views(reading.load(runs / GPU))[0], catalog)
    without = decide(campaign_views(reading.load(stripped))[0], catalog)
    assert [row.key for row in with_figures.ranked] == [row.key for row in without.ranked]
    assert [row.key for row in with_figures.infeasible] == [row.key for row in without.infeasible]


def test_the_decision_and_question_pages_say_tokens_per_second_beside_the_corpus_time(site):
    decision = page(site, "campaigns", GPU, "decision.html")
    details = [cells(row)[4] for row in decision.select("table.decision-details tbody tr")]
    assert details == ["1.200 s 1.100 s · 1.300 s Output tokens per second: 122.0 tokens/s 121.0 tokens/s – 123.0 tokens/s",
                       "2.200 s 2.100 s · 2.300 s Output tokens per second: 42.0 tokens/s 41.0 tokens/s – 43.0 tokens/s"]
    question = page(site, "questions", f"{GPU}.html")
    table = question.select_one("#chart-revision-medians table")
    assert [th.get_text() for th in table.select("thead th")] == ["revision", "configuration", "seconds",
                                                                  "output tokens per second (median)"]
    assert {cells(row)[3] for row in table.select("tbody tr")} == {"42.0", "122.0"}
    assert page(site, "campaigns", CLASSIFY, "decision.html").select(".tokens") == []


def test_trials_csv_gains_the_generation_columns_at_the_end_and_a_classification_campaign_keeps_its_own(site, runs):
    rows = list(csv.DictReader(io.StringIO((site / "campaigns" / TINY / "trials.csv").read_text(encoding="utf-8"))))
    assert list(rows[0]) == [*CSV_COLUMNS, *GENERATION_COLUMNS]
    by_id = {trial["record_id"]: trial for trials in tiny_trials(runs).values() for trial in trials}
    for row in rows:
        trial = by_id[row["record_id"]]
        assert float(row["output_tokens_per_s"]) == pytest.approx(trial["generation"]["output_tokens_per_s"])
        assert row["cut_by_max_new_tokens"] == "24" and row["reference_match"] == "0.0" and row["kv_cache_measured_bytes"] == str(
            trial["generation"]["kv_cache"]["measured_bytes"])
        assert float(row["prefill_s"]) == pytest.approx(trial["phases"]["prefill"]["duration_ns"] / 1e9, abs=1e-6)
    header = (site / "campaigns" / CLASSIFY / "trials.csv").read_text(encoding="utf-8").split("\n", 1)[0]
    assert header == ",".join(CSV_COLUMNS)


def test_the_indonesian_pages_say_the_generation_figures_in_their_words(site):
    campaign = page(site, "id", "campaigns", TINY, "index.html")
    heads = [th.get_text() for th in campaign.select("#generation thead th")]
    assert heads[1:4] == ["Token keluaran per detik", "Prefill per batch", "Decode per token baru"]
    assert [th.get_text() for th in campaign.select("#memory-estimate thead th")][-2:] == ["Cache KV: estimasi",
                                                                                          "Cache KV: terukur"]
    assert "cache itu sendiri, di perangkat apa pun" in campaign.find(id="memory-estimate").get_text()  # #63
    trials = page(site, "id", "campaigns", TINY, "trials.html")
    phases = [row.th.get_text() for row in trials.select("article.trial")[0].select("section[id$='-phases'] tbody tr")]
    assert phases[5:7] == ["prefill", "decode"]
