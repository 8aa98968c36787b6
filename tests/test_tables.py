"""Campaign views read straight from records: what changed, per-bucket quality, verdicts, peaks, labels (no pages)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from iteralab.core.language import say
from iteralab.store import reading, records
from iteralab.store.configuration import setting_text
from iteralab.store.views import campaign_views
from tests import factory


def _view(folder, *written):
    for record in written:
        records.append(folder, record)
    views = campaign_views(reading.load(folder))
    assert len(views) == 1
    return views[0]


def _with_config(trial, **changes):
    trial["variant_config"] = {**trial["variant_config"], **changes}
    return trial


def test_compared_and_constant_name_what_changed_across_variants_and_machines(tmp_path):
    first = factory.manifest("camp", "run-1", environment=factory.machine(None, cpu="CPU A", torch="2.13.0"))
    second = factory.manifest("camp", "run-2", environment=factory.machine("NVIDIA GeForce RTX 4090", cpu="CPU B",
                                                                            torch="2.13.0+cu128"))
    view = _view(tmp_path, first, second,
                 _with_config(factory.trial(first, "b1"), precision="fp32"),
                 _with_config(factory.trial(first, "b4", batch_size=4), precision="bf16"),
                 _with_config(factory.trial(second, "b4", batch_size=4, gpu=True), precision="bf16"))
    compared, constant = view.compared_and_constant()
    assert compared == {"batch_size": ["1", "4"], "precision": ["bf16", "fp32"], "device": ["cpu", "cuda"],
                        "CPU": ["CPU A", "CPU B"], "GPUs": ["NVIDIA GeForce RTX 4090", "none"],
                        "torch": ["2.13.0", "2.13.0+cu128"]}
    # A flag is said as on or off, never as Python's False (#45), and in the reader's language on the page.
    assert constant == {"quantization": ["none"], "compile": ["off"], "attention": ["sdpa"], "length_sorted": ["off"],
                        "model revision": ["sha256:" + "d" * 64], "corpus fingerprint": ["sha256:" + "c" * 64],
                        "transformers": ["5.0"]}
    assert list(compared) == ["batch_size", "precision", "device", "CPU", "GPUs", "torch"]
    assert say(constant["compile"][0], "id") == "mati" and say(setting_text(None), "id") != "None"


def test_several_gpus_of_one_machine_are_listed_together(tmp_path):
    manifest = factory.manifest(environment=factory.machine("NVIDIA H100", count=2))
    view = _view(tmp_path, manifest, factory.trial(manifest, "b1", gpu=True))
    _, constant = view.compared_and_constant()
    assert constant["GPUs"] == ["NVIDIA H100, NVIDIA H100"] and constant["CPU"] == ["Test CPU"]


def test_bucket_quality_is_the_median_over_trials_with_a_value(tmp_path):
    manifest = factory.manifest()
    trials = [factory.trial(manifest, "b1", accuracy=value, repetition=n, sequence=n)
              for n, value in enumerate((0.9, 0.7, 0.8), start=1)]
    trials[1]["quality"]["buckets"]["long"]["accuracy"] = None  # not measured in that trial: left out, not zero
    failed = factory.trial(manifest, "b1", status="error", failed_phase="measured_window", error="boom", sequence=4, repetition=4)
    view = _view(tmp_path, manifest, *trials, failed)
    (summary,) = view.variants
    assert summary.bucket_quality("accuracy") == {"short": pytest.approx(0.8), "long": pytest.approx((0.8 + 0.7) / 2)}
    assert summary.bucket_quality("agreement") == {"short": 1.0, "long": 1.0}
    for trial in trials:
        for scores in trial["quality"]["buckets"].values():
            scores["macro_f1"] = None
    assert _view(tmp_path / "again", manifest, *trials).variants[0].bucket_quality("macro_f1") == {"short": None, "long": None}


def test_verdicts_give_median_passes_and_judged_per_metric(tmp_path):
    manifest = factory.manifest()
    trials = [factory.trial(manifest, "b1", accuracy=value, repetition=n, sequence=n)
              for n, value in enumerate((0.9, 0.6, 0.8), start=1)]
    trials[2]["quality"]["verdicts"].append({"metric": "agreement", "threshold": 0.95, "comparison": ">=", "value": None,
                                             "passed": False, "reason": "no reference"})
    (summary,) = _view(tmp_path, manifest, *trials).variants
    assert summary.verdicts() == [
        {"metric": "accuracy", "threshold": 0.7, "values": [0.9, 0.6, 0.8], "passed": 2, "judged": 3, "reason": None,
         "median": 0.8},
        {"metric": "agreement", "threshold": 0.95, "values": [], "passed": 0, "judged": 1, "reason": "no reference",
         "median": None}]


def test_peaks_read_ok_trials_only_and_say_why_when_none(tmp_path):
    manifest = factory.manifest(environment=factory.machine("NVIDIA GeForce RTX 4090"))
    ok = factory.trial(manifest, "b1", gpu=True)
    ok["phases"]["warmup"]["host_peak_rss_bytes"] = 500 * 2**20
    failed = factory.trial(manifest, "b1", gpu=True, status="oom", failed_phase="measured_window", sequence=2)
    failed["phases"]["model_load"]["host_peak_rss_bytes"] = 900 * 2**20  # a failed trial's peak is not the variant's
    (summary,) = _view(tmp_path, manifest, ok, failed).variants
    assert summary.peak("host_peak_rss_bytes") == (500 * 2**20, None)
    assert summary.peak("gpu_peak_reserved_bytes") == (3 * 2**30, None)
    cpu_manifest = factory.manifest("cpu")
    broken = factory.trial(cpu_manifest, "b1", status="error", failed_phase="model_load")
    (cpu_summary,) = _view(tmp_path / "cpu", cpu_manifest, broken).variants
    assert cpu_summary.peak("host_peak_rss_bytes") == (None, "no successful trial measured it")
    assert cpu_summary.peak("gpu_peak_allocated_bytes") == (None, "no GPU: the variant runs on cpu")
    other = factory.trial(cpu_manifest, "b1", status="error", failed_phase="model_load", sequence=2)
    other["memory"]["gpu_memory_reason"] = "a) driver too old"
    (two_reasons,) = _view(tmp_path / "two", cpu_manifest, broken, other).variants
    assert two_reasons.peak("gpu_peak_allocated_bytes") == (None, "a) driver too old; no GPU: the variant runs on cpu")
    broken["memory"]["gpu_memory_reason"] = None
    (unexplained,) = _view(tmp_path / "unexplained", cpu_manifest, broken).variants
    assert unexplained.peak("gpu_peak_allocated_bytes") == (None, "no successful trial measured it")


def test_ids_match_is_unknown_without_checks_and_false_when_any_trial_failed_it(tmp_path):
    manifest = factory.manifest()
    good, bad = factory.trial(manifest, "b1"), factory.trial(manifest, "b1", sequence=2, repetition=2)
    bad["id_check"]["ids_match"] = False
    assert _view(tmp_path / "a", manifest, good).variants[0].ids_match is True
    assert _view(tmp_path / "b", manifest, good, bad).variants[0].ids_match is False
    failed = factory.trial(manifest, "b1", status="error", failed_phase="model_load")
    assert _view(tmp_path / "c", manifest, failed).variants[0].ids_match is None


def test_counts_durations_and_throughput_of_one_configuration(tmp_path):
    manifest = factory.manifest()
    trials = [factory.trial(manifest, "b1", seconds=s, repetition=n, sequence=n) for n, s in enumerate((2.0, 4.0, 1.0), 1)]
    rejected = factory.trial(manifest, "b1", seconds=5.0, accuracy=0.5, sequence=4, repetition=4)
    failed = factory.trial(manifest, "b1", status="oom", failed_phase="measured_window", sequence=5, repetition=5)
    stopped = factory.trial(manifest, "b1", status="interrupted", failed_phase="warmup", sequence=6, repetition=6)
    (summary,) = _view(tmp_path, manifest, *trials, rejected, failed, stopped).variants
    assert (summary.ok, summary.failed, summary.accepted) == (4, 2, 3)
    assert summary.seconds == [2.0, 4.0, 1.0, 5.0]
    assert (summary.median, summary.minimum, summary.maximum) == (3.0, 1.0, 5.0)
    assert summary.throughput == 37.5  # median of 50, 25, 100 and 20 entries/s; the failed trial has none
    assert summary.series == "batch" and summary.name == "b1"


def test_a_view_keeps_order_fingerprints_times_and_failures(tmp_path):
    first = factory.manifest("camp", "run-1")
    second = factory.manifest("camp", "run-2", fingerprint="e" * 64, title="Second title")
    failed = factory.trial(second, "b1", status="error", failed_phase="warmup")
    ok = factory.trial(first, "b1")
    first["created_at"], ok["created_at"] = "2026-09-28T09:00:00Z", "2026-09-28T08:00:00Z"  # a clock set back
    second["created_at"], failed["created_at"] = "2026-09-29T09:00:00Z", "2026-09-30T09:00:00Z"
    view = _view(tmp_path, first, ok, second, failed)
    assert view.fingerprints == ["a" * 64, "e" * 64]
    assert view.failures == [failed]
    assert (view.first_at, view.last_at) == ("2026-09-28T08:00:00Z", "2026-09-30T09:00:00Z")
    assert view.title == "Second title" and view.protocol == second["protocol"] and view.corpus == second["corpus"]


def test_cost_counts_distinct_corpora_and_refuses_mixed_currencies(tmp_path):
    manifest = factory.manifest()
    trial = factory.trial(manifest, "b1")
    euro = factory.rental(total="10.00")
    euro["currency"] = "EUR"
    view = _view(tmp_path, manifest, trial, factory.rental(total="47.14"), factory.rental(total="52.86"),
                 factory.deliverable("camp", trial, "c"), factory.deliverable("camp", trial, "c"),
                 factory.deliverable("camp", trial, "d"))
    cost = view.cost()
    assert (cost["spend"], cost["currency"], cost["deliverables"]) == (Decimal("100.00"), "USD", 2)
    assert cost["cost_per_validated_corpus"] == Decimal("50.00") and cost["reason"] is None
    mixed = _view(tmp_path / "mixed", manifest, trial, factory.rental(total="47.14"), euro).cost()
    assert mixed["cost_per_validated_corpus"] is None and mixed["reason"] == "undefined: rentals mix currencies (EUR, USD)"
    none = _view(tmp_path / "none", manifest, trial, factory.rental(total="47.14")).cost()
    assert none["cost_per_validated_corpus"] is None and none["reason"] == "undefined: no accepted deliverable"
    free = _view(tmp_path / "free", manifest, trial).cost()
    assert free["spend"] is None and free["currency"] is None
    assert free["reason"] == "undefined: no rental recorded, so the spend is unknown"


def test_separation_compares_every_pair_once_in_variant_order(tmp_path):
    manifest = factory.manifest()
    written = [manifest]
    for variant, base in (("b1", 10.0), ("b4", 5.0), ("b8", 2.0)):
        written += [factory.trial(manifest, variant, seconds=base + n / 10, repetition=n, sequence=n, batch_size=int(variant[1:]))
                    for n in range(1, 6)]
    view = _view(tmp_path, *written)
    statements = view.separation()
    names = [tuple(label.split(" · ")[0] for label in s["pair"]) for s in statements]
    assert names == [("b1", "b4"), ("b1", "b8"), ("b4", "b8")]
    assert all(s["separated"] for s in statements)


def _summary(name, seconds):
    from iteralab.store.views import VariantSummary

    return VariantSummary(name, "batch", {}, [], durations=[(f"t{i}", value) for i, value in enumerate(seconds)])


def test_separation_says_separated_overlapping_or_spread_as_large_as_the_gap():
    """Regression for #13: the separation rule had no fixture of its own."""
    from iteralab.store.views import separate

    fast, slow = _summary("fast", [1.0, 1.05, 1.1, 1.15, 1.2]), _summary("slow", [2.0, 2.05, 2.1, 2.15, 2.2])
    for statement in (separate(slow, fast), separate(fast, slow)):
        assert statement["separated"] is True
        assert statement["text"] == ("fast was faster than slow in every repetition: slowest 1.200 s against fastest "
                                     "2.000 s; medians 1.100 s and 2.100 s (48% less time).")
    assert separate(slow, fast)["pair"] == ("slow", "fast")
    overlapping = separate(_summary("a", [1.0, 1.5, 2.0]), _summary("b", [1.8, 2.5, 3.0]))
    assert overlapping == {"pair": ("a", "b"), "separated": False,
                           "text": "a and b: the series has not separated them. The spread of the repetitions (1.200 s) is "
                                   "comparable to the difference between medians (1.000 s) and their ranges overlap."}
    # No overlap, but the spread (1.0 s) is as large as the gap between medians (1.0 s): not separated.
    wide = separate(_summary("c", [1.0, 1.5, 2.0]), _summary("d", [2.1, 2.5, 2.6]))
    assert wide["separated"] is False and wide["text"] == (
        "c and d: the series has not separated them. The spread of the repetitions (1.000 s) is comparable to the "
        "difference between medians (1.000 s).")
    # Ranges that only touch overlap: the slowest of one is the fastest of the other.
    touching = separate(_summary("g", [1.0, 1.0, 2.0]), _summary("h", [2.0, 3.0, 3.0]))
    assert touching["separated"] is False and touching["text"].endswith("and their ranges overlap.")
    # A gap just larger than the spread separates.
    assert separate(_summary("i", [1.0, 1.1, 1.1, 1.1, 1.2]), _summary("j", [1.3, 1.4, 1.4, 1.4, 1.5]))["separated"] is True


def test_fewer_repetitions_than_the_protocols_five_never_separate():
    """#45: compare said "faster in every repetition (2 % less time)" over two repetitions each, as over five."""
    from iteralab.store.views import separate

    short = separate(_summary("fast", [1.0, 1.1]), _summary("slow", [2.0, 2.1, 2.2, 2.3, 2.4]))
    assert short["separated"] is None and short["text"] == (
        "fast and slow: the series is too short to separate them, 2 successful repetitions for at least one of them "
        "where the protocol asks for 5; their ranges do not overlap (medians 1.050 s for fast and 2.200 s for slow) but "
        "so few repetitions cannot say it holds.")
    assert separate(_summary("a", [1.0, 1.0, 1.1, 1.1]), _summary("b", [2.0] * 4))["separated"] is None
    assert separate(_summary("a", [1.0, 1.0, 1.1, 1.1, 1.1]), _summary("b", [2.0] * 5))["separated"] is True
    # Overlapping ranges are not separated whatever the count: the conservative answer needs no five.
    assert separate(_summary("c", [1.0, 2.0]), _summary("d", [1.5, 2.5]))["separated"] is False


@pytest.mark.parametrize(("first", "second"), [([1.0], [2.0, 2.1]), ([1.0, 1.1], [2.0]), ([], []), ([1.0], [2.0])])
def test_separation_needs_two_successful_trials_of_each(first, second):
    from iteralab.store.views import separate

    statement = separate(_summary("e", first), _summary("f", second))
    assert statement == {"pair": ("e", "f"), "separated": None,
                         "text": "e and f: cannot be compared, fewer than two successful trials for at least one of them."}
    assert separate(_summary("e", [1.0, 1.1] * 3), _summary("f", [2.0, 2.1] * 3))["separated"] is True


def test_problems_go_to_the_campaign_folder_their_file_names_and_shared_ones_to_all():
    from types import SimpleNamespace

    first, second = factory.manifest("alpha", "run-1"), factory.manifest("beta", "run-2")
    problems = ["alpha/records/run-1.jsonl:3: incomplete last line", "catalog.csv:2: price is negative, see beta/x: y",
                "beta/records/run-2.jsonl:1: not valid UTF-8", "alpha/records/run-1.jsonl:9: total: 1 is not of type 'string'",
                "beta/records/deep/run 3.jsonl:2: predictions.path: 'alpha/../x' must be a path relative to the runs folder"]
    alpha, beta = campaign_views(SimpleNamespace(records=[first, second], problems=problems))
    assert alpha.problems == (problems[0], problems[1], problems[3])
    assert beta.problems == (problems[1], problems[2], problems[4])


def test_a_summary_is_labelled_by_its_name_until_told_otherwise_and_keeps_the_trials_series(tmp_path):
    from iteralab.store.views import VariantSummary

    assert VariantSummary("b1", "batch", {}, []).label == "b1"
    assert VariantSummary("b1", "batch", {}, [], label="b1 · CPU").label == "b1 · CPU"
    manifest = factory.manifest()
    older = factory.trial(manifest, "b1")
    del older["series"]  # an older record kept the series only in its variant settings
    older["variant_config"]["series"] = "precision"
    (summary,) = _view(tmp_path, manifest, older).variants
    assert summary.series == "precision"
    own = factory.trial(manifest, "b2", batch_size=2)
    own["series"] = "sorted"  # the trial's own field wins over its settings
    bare = factory.trial(manifest, "b3", batch_size=3)
    del bare["series"], bare["variant_config"]["series"]
    summaries = {s.name: s for s in _view(tmp_path / "more", manifest, own, bare).variants}
    assert (summaries["b2"].series, summaries["b3"].series) == ("sorted", "main")


def test_trials_says_an_interrupted_window_was_interrupted_never_a_duration(tmp_path, cli):
    """#45: `iteralab trials` printed an interrupted trial's partial window ("1.252 s") like a whole one."""
    import json

    manifest = factory.manifest()
    whole = factory.trial(manifest, "b1", seconds=2.5)
    stopped = factory.trial(manifest, "b1", seconds=1.252, status="interrupted", failed_phase="measured_window",
                            repetition=2, sequence=2, accepted=False, entries_completed=40)
    stopped["phases"]["measured_window"]["completed"] = False
    for record in (manifest, whole, stopped):
        records.append(tmp_path, record)
    code, text, _ = cli("trials", manifest["campaign"], "--runs", tmp_path)
    first, second = text.strip().split("\n")
    assert code == 0 and first.endswith("  2.500 s") and "interrupted" not in first
    assert second.endswith("  window interrupted after 1.252 s (part of the corpus)")
    code, out, _ = cli("trials", manifest["campaign"], "--runs", tmp_path, "--json")
    rows = json.loads(out)["trials"]
    assert [row["measured_window_completed"] for row in rows] == [True, False]

