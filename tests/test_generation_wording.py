"""What the pages say of a generation campaign (#61): each rate with its unit, the two host-RSS figures each named for
what it is, a CPU trial's decode never "timed with CUDA synchronised", the minimum quality without a stray "; ",
trials.csv's columns by the kind of work whatever the outcomes, and a disturbed trial's acceptance as the
configuration's table counts it."""

from __future__ import annotations

import csv
import io

import pytest
from bs4 import BeautifulSoup

from iteralab.run.stages import failure_message
from iteralab.site.build import build_site
from iteralab.store import records
from iteralab.store.trials import CSV_COLUMNS, GENERATION_COLUMNS
from tests import factory
from tests.test_disturbed_records import interference
from tests.test_generation_pages import generation_manifest, generation_trial

CPU = "gen-cpu"
FAILED = "gen-failed"


# What a variant that failed its longest validation stage keeps as its trials' error (run.stages.failure_message).
STAGE = {"failed_stage": "longest", "failed_phase": "decode", "points_to": None,
         "error": "IndexError: index out of range in self (at sparse.py:190)",
         "failed_at": {"generation_phase": "decode", "decode_step": 3, "entries": 2, "entry_ids": ["doc-007", "long-1"],
                       "tokens": {"min": 30, "max": 41, "padded_to": 41}}}


def failed_generation_trial(manifest: dict, repetition: int) -> dict:
    """A generation trial that raised in its measured window: prefill and decode never reached, no generation object."""
    trial = factory.trial(manifest, "b1", status="error", repetition=repetition, sequence=repetition,
                          failed_phase="measured_window", error=failure_message("b1", STAGE))
    phases = list(trial["phases"].items())
    unreached = {"duration_ns": None, "reason": "not reached: the trial stopped in measured_window"}
    trial["phases"] = dict([*phases[:5], ("prefill", unreached), ("decode", dict(unreached)), *phases[5:]])
    return trial


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    runs = tmp_path_factory.mktemp("wording") / "runs"
    manifest = generation_manifest(CPU, "run-cpu")  # no quality threshold; agreement with b1 at least 0.9
    records.append(runs, manifest)
    trials = [generation_trial(manifest, "b1", seconds=1 + r / 10, repetition=r, sequence=2 * r - 1, rate=192.6)
              for r in (1, 2)]
    trials += [generation_trial(manifest, "b4", seconds=0.5, repetition=r, sequence=2 * r, batch_size=4) for r in (1, 2)]
    trials[-1]["interference"] = interference(True)  # b4's second repetition: disturbed, accepted, set aside
    for trial in trials:
        records.append(runs, trial)
    failed = generation_manifest(FAILED, "run-failed")
    failed["protocol"]["min_agreement"] = None  # no threshold and no agreement: nothing declared
    records.append(runs, failed)
    for repetition in (1, 2):
        records.append(runs, failed_generation_trial(failed, repetition))
    out = tmp_path_factory.mktemp("wording-site") / "site"
    result = build_site(runs=runs, out=out, languages=("en",), processes=1, quiet=True)
    assert result["failed"] == {}
    return out


def page(site, *parts) -> BeautifulSoup:
    return BeautifulSoup(site.joinpath(*parts).read_text(encoding="utf-8"), "html.parser")


def text_of(site, *parts) -> str:
    return " ".join(page(site, *parts).get_text(" ").split())


def variant_row(site, campaign: str, variant: str):
    """The variants table's row of VARIANT (its id holds the configuration's key: variant-generate-b1-cpu-…)."""
    return page(site, "campaigns", campaign, "index.html").find(id=lambda i: i and i.startswith(f"variant-generate-{variant}-"))


def test_each_rate_says_its_unit(site):
    b1 = variant_row(site, CPU, "b1")
    cells = [cell.get_text(" ", strip=True) for cell in b1.find_all("td")]
    assert any(cell.endswith("entries/s") for cell in cells), cells
    # The generation table's header names its unit ("Output tokens per second"), so its cells say "/s" alone.
    assert "192.6/s" in text_of(site, "campaigns", CPU, "index.html")
    assert "Throughput (median, entries/s)" in text_of(site, "campaigns", CPU, "index.html")
    assert "192.6 tokens/s" in text_of(site, "campaigns", CPU, "trials.html")


def test_the_two_host_rss_figures_are_each_named_for_what_they_are(site):
    said = text_of(site, "campaigns", CPU, "index.html")
    assert "host peak RSS, whole process" in said
    assert "Observed host peak RSS above the baseline before the model loads" in said
    assert "Host RSS here is the runner process's whole peak" in said
    assert "the exact bytes are in the memory table below" not in said


def test_a_cpu_trials_decode_is_never_said_to_be_timed_with_cuda_synchronised(site):
    """The records (written as before #61) say CUDA; the page says the clock the CPU trial had, outside the record."""
    trials = page(site, "campaigns", CPU, "trials.html")
    said = " ".join(" ".join(section.get_text(" ").split()) for section in trials.select("section[id$='-phases']"))
    assert "timed with the host's clock, with no device to synchronise" in said
    assert "CUDA synchronised at every boundary" not in said


def test_the_minimum_quality_reads_without_a_stray_separator(site):
    quality = page(site, "campaigns", CPU, "decision.html").find("dt", string="Minimum quality").find_next("dd")
    assert quality.get_text(" ", strip=True) == "agreement with b1 ≥ 0.9"
    nothing = page(site, "campaigns", FAILED, "decision.html").find("dt", string="Minimum quality").find_next("dd")
    assert nothing.get_text(" ", strip=True) == "none declared"
    thresholds = page(site, "campaigns", CPU, "index.html").find("dt", string="Thresholds").find_next("dd")
    assert thresholds.get_text(" ", strip=True) == "agreement with b1 ≥ 0.9"


def test_trials_csv_has_the_generation_columns_when_no_trial_succeeded(site):
    for campaign in (CPU, FAILED):
        rows = list(csv.reader(io.StringIO(site.joinpath("campaigns", campaign, "trials.csv").read_text(encoding="utf-8"))))
        assert rows[0] == [*CSV_COLUMNS, *GENERATION_COLUMNS], campaign
    failed = list(csv.DictReader(io.StringIO(site.joinpath("campaigns", FAILED, "trials.csv").read_text(encoding="utf-8"))))
    assert [row["status"] for row in failed] == ["error", "error"] and {row["output_tokens_per_s"] for row in failed} == {""}


def test_a_disturbed_trials_acceptance_says_it_counts_in_no_figure_as_the_configurations_table_does(site):
    campaign = page(site, "campaigns", CPU, "index.html")
    b4 = variant_row(site, CPU, "b4")
    assert [cell.get_text(" ", strip=True) for cell in b4.find_all("td")][11] == "1/1"  # accepted of the counted trials
    rows = campaign.find("caption", string="Every trial in run order").find_parent("table").select("tbody tr")
    accepted = [row.find_all("td")[8].get_text(" ", strip=True) for row in rows]
    assert accepted == ["yes", "yes", "yes", "yes disturbed: counts in no figure"]
    trial_id = rows[-1].find_all("td")[1].get_text(strip=True)
    meta = page(site, "campaigns", CPU, "trials.html").find(id=trial_id).find("p", class_="meta").get_text(" ", strip=True)
    assert meta.endswith("corpus accepted: yes (disturbed: counts in no figure)")


def test_the_length_buckets_say_which_count_they_are_made_of(site):
    buckets = page(site, "campaigns", CPU, "index.html").find("dt", string="Length buckets").find_next("dd")
    assert buckets.get_text(" ", strip=True).endswith("each entry counted by its tokens before the cut at max_length")


def test_a_failed_stages_batch_ids_and_tokens_stand_beside_the_error_on_the_campaign_and_trials_pages(site):
    said = ("in decode step 3 (new token 4), on a batch of 2 entries (doc-007, long-1) of 30 to 41 tokens, padded to 41")
    failures = page(site, "campaigns", FAILED, "index.html").find(id="failures")
    assert [said in row.get_text(" ") for row in failures.select("tbody tr")] == [True, True]
    trials = page(site, "campaigns", FAILED, "trials.html")
    assert [said in warning.get_text(" ") for warning in trials.select("article.trial p.warning")][:1] == [True]
