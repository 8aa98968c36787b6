"""Valid records with chosen figures, written through the real record store (no model needed)."""

from __future__ import annotations

import datetime as dt

from iteralab.run.campaign import MEASURED_WINDOW
from iteralab.store import records

FINGERPRINT = "a" * 64
SHA = "b" * 64
CATALOG_HEADER = "catalog_version,gpu,gpu_name,cards_per_lot,memory_per_card_gb,days,price_per_lot,currency\n"
# A later catalog with one cheaper RTX 4090 package: tests that a given catalog, not the shipped one, is read.
CHEAPER_CATALOG = CATALOG_HEADER + "2026-12-01,rtx-4090,RTX 4090,1,24,3,40.00,USD\n"
PHASES = ("environment_check", "model_load", "compilation", "warmup", "measured_window", "evaluation", "writing_results")


def machine(gpu=None, *, count=1, cpu="Test CPU", torch="2.13.0", cuda=None, driver=None, threads=2):
    """Return a manifest's environment as the runner would observe it on one machine."""
    gpus = [{"index": i, "name": gpu, "total_memory_bytes": 24 * 10**9} for i in range(count)] if gpu else None
    return {"cpu": {"model": cpu, "usable_cores": threads}, "threads": {"torch_intra_op": threads},
            "gpus": gpus, "gpus_reason": None if gpu else "no CUDA device visible to torch", "gpu_count": count if gpu else 0,
            "cuda_version": cuda, "driver_version": driver, "libraries": {"torch": torch, "transformers": "5.0"}}


def manifest(campaign="camp", run_id="run-1", *, title="Test campaign", model_name="minilm", fingerprint=FINGERPRINT,
             environment=None, decision=None):
    protocol_extra = {"decision": decision} if decision else {}
    return records.make_record(
        "manifest", campaign=campaign, run_id=run_id, title=title, protocol_fingerprint=fingerprint,
        protocol={"repetitions": 5, "max_length": 64, "padding": "longest", "truncation": "truncate", "seed": 1,
                  "deterministic": True, "reference_variant": "b1",
                  "buckets": [{"name": "short", "min_tokens": 1, "max_tokens": 24}, {"name": "long", "min_tokens": 25, "max_tokens": None}],
                  "thresholds": {"accuracy": 0.7}, "min_agreement": 0.95,
                  "warmup": {"batches": 1, "passes": 1, "inputs": "first batches", "recompilation": "n/a"},
                  "measured_window": str(MEASURED_WINDOW), **protocol_extra},
        corpus={"path": f"{campaign}/inputs/c.jsonl", "fingerprint": "sha256:" + "c" * 64, "entries": 100, "split": "final",
                "labelled": True, "bucket_counts": {"short": 60, "long": 40}, "truncated_entries": 0, "source_name": "c.jsonl"},
        model={"directory_name": model_name, "files_sha256": {}, "tokenizer_files": [], "revision": "sha256:" + "d" * 64,
               "labels": ["neg", "pos"]},
        environment=environment or {"cpu": {"model": "Test CPU"}, "gpus": None, "gpus_reason": "no CUDA device visible to torch",
                                    "gpu_count": 0, "libraries": {"torch": "2.13.0", "transformers": "5.0"}},
        code_version={"version": "0.1.0"}, variants={}, plan=[],
    )


def trial(manifest_record, variant="b1", *, seconds=1.0, status="ok", repetition=1, sequence=1, batch_size=1,
          accuracy=0.8, agreement=1.0, accepted=True, entries_completed=None, error=None, failed_phase=None, gpu=False):
    ok = status == "ok"
    phases = {}
    for name in PHASES:
        if not ok and PHASES.index(name) > PHASES.index(failed_phase or "measured_window"):
            phases[name] = {"duration_ns": None, "reason": f"not reached: the trial stopped in {failed_phase}"}
            continue
        phase = {"duration_ns": int(seconds * 1e9) if name == "measured_window" else 1_000_000, "host_peak_rss_bytes": 300 * 2**20}
        if gpu:
            phase.update(gpu_peak_allocated_bytes=2 * 2**30, gpu_peak_reserved_bytes=3 * 2**30)
        phases[name] = phase
    quality = None
    if ok:
        quality = {"overall": {"entries": 100, "accuracy": accuracy, "macro_f1": accuracy, "agreement": agreement},
                   "buckets": {"short": {"entries": 60, "accuracy": accuracy, "macro_f1": accuracy, "agreement": agreement},
                               "long": {"entries": 40, "accuracy": accuracy - 0.1, "macro_f1": accuracy - 0.1, "agreement": agreement}},
                   "missing_reasons": {}, "reference": {"variant": "b1", "trial_id": "x"},
                   "verdicts": [{"metric": "accuracy", "threshold": 0.7, "comparison": ">=", "value": accuracy,
                                 "passed": accuracy >= 0.7, "reason": None}],
                   "passed": accuracy >= 0.7, "format_ok": True, "format_problems": []}
    record = records.make_record(
        "trial", campaign=manifest_record["campaign"], run_id=manifest_record["run_id"],
        protocol_fingerprint=manifest_record["protocol_fingerprint"], manifest_id=manifest_record["record_id"],
        variant=variant, variant_config={"series": "batch", "batch_size": batch_size, "precision": "fp32", "quantization": "none",
                                         "compile": False, "attention": "sdpa", "length_sorted": False,
                                         "device": "cuda" if gpu else "cpu"},
        series="batch", repetition=repetition, sequence=sequence, status=status, failed_phase=None if ok else failed_phase,
        error=error, entries_expected=100, entries_completed=100 if ok else (entries_completed or 0), truncated_entries=0,
        phases=phases, gpu_event_durations=None,
        memory={"device": "cuda" if gpu else "cpu", "gpu_capacity_bytes": 24 * 10**9 if gpu else None,
                "gpu_memory_reason": None if gpu else "no GPU: the variant runs on cpu", "host_rss_scope": "per phase"},
        predictions={"path": f"{manifest_record['campaign']}/predictions/p.csv", "sha256": SHA} if ok else None,
        id_check={"expected": 100, "observed": 100, "ids_match": True} if ok else None,
        quality=quality, corpus_accepted=ok and accepted and accuracy >= 0.7,
        throughput_entries_per_s=100 / seconds if ok else None,
    )
    return record


def rental(campaign="camp", total="47.14", lots=1, runs=None, gpu="rtx-4090", price="47.14", days=3):
    extra = {"runs": runs} if runs is not None else {}
    # Started a day ago: the runs the factory makes now fall inside the package's period.
    start = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(microsecond=0).isoformat()
    return records.make_record("rental", campaign=campaign, run_id=records.new_id("run-rental"), gpu=gpu, lots=lots, days=days,
                               start=start, end=None, catalog_version="2026-09-24", price_per_lot=price,
                               total=total, currency="USD", cards_per_lot=1, gpus=lots, receipt=None, **extra)


def deliverable(campaign, trial_record, corpus="c"):
    return records.make_record("deliverable", campaign=campaign, run_id=records.new_id("run-deliver"), trial_id=trial_record["record_id"],
                               name="final corpus", corpus_fingerprint="sha256:" + corpus * 64, predictions_sha256=SHA)


def price_file(path):
    """Write CHEAPER_CATALOG to PATH and return PATH."""
    path.write_text(CHEAPER_CATALOG, encoding="utf-8")
    return path


def _with_file(runs, holder: dict, checksum: str, content: bytes) -> None:
    """Write the file HOLDER names under RUNS and set its CHECKSUM key to the real sha256, as the runner does."""
    import hashlib
    from pathlib import Path

    path = Path(runs) / holder["path"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    holder[checksum] = hashlib.sha256(content).hexdigest()


def with_prediction_file(runs, trial_record, content: bytes = b"id,label\ne1,fresh\n") -> dict:
    """Write TRIAL_RECORD's prediction file under RUNS: a bundle must carry what its records name."""
    _with_file(runs, trial_record["predictions"], "sha256", content)
    return trial_record


def with_corpus_file(runs, manifest_record, content: bytes = b'{"id": "e1", "text": "x"}\n') -> dict:
    """Write MANIFEST_RECORD's corpus copy under RUNS, as the runner copies it."""
    _with_file(runs, manifest_record["corpus"], "file_sha256", content)
    return manifest_record
