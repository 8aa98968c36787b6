"""Run a campaign: protocol frozen first, rotated trials, every outcome appended as a record."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

from iteralab.core.errors import UserError
from iteralab.core.files import copy_atomically, writing
from iteralab.core.language import Text
from iteralab.core.paths import DEFAULT_RUNS
from iteralab.declared.corpus import Corpus, load_corpus
from iteralab.machine import devices, fatal
from iteralab.machine.facts import code_version, machine_facts, model_config, model_files
from iteralab.machine.interference import Watch, busy_warnings
from iteralab.machine.phases import (
    LOADING,
    Interrupted,
    PhaseClock,
    TrialPlace,
    describe,
    gpu_memory_context,
    out_of_memory_errors,
    release,
    settled_heap,
    weights_dtypes,
)
from iteralab.machine.placement import cards
from iteralab.machine.rental import check_machine, find_rental, rental_link
from iteralab.money.quantized import dynamic_int8_bytes
from iteralab.run import per_card
from iteralab.run.campaign import (
    Campaign,
    load_campaign,
    protocol_fingerprint,
    refuse_changed_model,
    refuse_changed_protocol,
    rotation,
)
from iteralab.run.resume import Resumption, continue_run, find_resumable, refuse_changed_numerics, start_record
from iteralab.run.signals import Signals
from iteralab.run.stages import SKIPPED, STAGE_PHASE, StageFailed, failure_message, kept_if_failed, validate_all
from iteralab.run.summary import Progress, plan_data
from iteralab.store import questions, reading, records
from iteralab.workloads import WORKLOADS


@dataclass
class Prepared:
    """Everything fixed before the first timing: inputs, fingerprints, plan."""

    campaign: Campaign
    corpus: Corpus
    corpus_copy: str
    fingerprint: str
    model: dict  # what the model check found: the architecture loaded, what loading said, the labels of a classifier
    token_counts: dict[str, int]
    bucket_of: dict[str, str]
    bucket_counts: dict[str, int]
    truncated: int
    plan: list[tuple[str, int]]
    existing: list[dict]
    reference: dict | None = None
    environment: dict | None = None  # this machine, read once before any model loads
    rental: dict | None = None  # the rental the run is tied to (--rental)
    resumption: Resumption | None = None  # the run --resume continues
    stages: dict | None = None  # each variant's validation stages, run before any timing (or why not)
    failed_stages: dict = field(default_factory=dict)  # variant name -> its failed stage: its trials are failure rows
    device_initialisation: dict | None = None  # CUDA's initialisation, timed once before anything touched it
    model_identity: dict = field(default_factory=dict)  # the model folder's revision and file hashes, read once

    @property
    def workload(self):
        """Return the module of the campaign's kind of work."""
        return WORKLOADS[self.campaign.kind]


@dataclass
class RunResult:
    """What one runner invocation wrote."""

    run_id: str
    records_file: Path | None
    manifest: dict | None
    trials: list[dict] = field(default_factory=list)
    interrupted: bool = False
    resumed: dict | None = None  # the resumption record, when --resume continued the run
    earlier: list[dict] = field(default_factory=list)  # a resumed run's trials recorded before this invocation
    warnings: list[str] = field(default_factory=list)
    poisoned: str | None = None  # a fatal GPU error stopped the run: why, and how to run the rest (#63)


def prepare(campaign_file: Path | str, runs_dir: Path | str, *, rental_id: str | None = None,
            resume: bool = False, retry: bool = True, rerun_disturbed: bool = False) -> Prepared:
    """Validate the campaign, corpus, model folder, machine and existing records; plan the trials.

    RENTAL_ID ties the run to a recorded rental (refused on a machine without its card); RESUME finds the unfinished run
    to continue (refused when the protocol, the variants, the machine or the software differ), running its interrupted
    repetitions again unless RETRY is False.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    fatal.refuse()  # a fatal GPU error earlier in this process lost its CUDA context (#63)
    campaign = load_campaign(campaign_file)
    initialisation = devices.initialise_devices(campaign)  # timed first: the device checks below would initialise CUDA untimed
    devices.check_devices(campaign)  # before any model loads: a device this machine lacks, or determinism CUDA cannot hold
    devices.check_determinism(campaign)
    runs_dir = Path(runs_dir)
    environment = machine_facts()
    rental = None
    if rental_id is not None:
        # Before any model or tokenizer loads: a machine without the rented card is refused at once.
        rental = find_rental(runs_dir, campaign.name, rental_id)
        check_machine(rental, environment)
    workload, protocol = WORKLOADS[campaign.kind], campaign.protocol
    # A random head, no vocabulary or a model of another kind of work is refused here, before any timing.
    model = workload.check_model(campaign.model_path, model_config(campaign.model_path), protocol)
    if any(variant.quantization == "dynamic-int8" for variant in campaign.variants):
        model["dynamic_int8"] = dynamic_int8_bytes(campaign.model_path)  # what the int8 variants keep, for the estimate
    corpus = load_corpus(campaign.corpus_path, protocol.get("corpus_columns"))  # the columns [corpus] names
    workload.check_corpus(corpus, model, campaign)
    token_counts = _token_counts(campaign, corpus)
    over = [entry.id for entry in corpus.entries if token_counts[entry.id] > protocol["max_length"]]
    if over and protocol["truncation"] == "refuse":
        raise UserError(f"{campaign.corpus_path}: {len(over)} entries exceed max_length {protocol['max_length']} tokens "
                        f"(first: {', '.join(over[:5])}) and the protocol refuses truncation")
    bucket_of = {entry_id: _bucket(count, protocol["buckets"]) for entry_id, count in token_counts.items()}
    fingerprint = protocol_fingerprint(protocol, corpus.fingerprint)
    questions.check_revision(question={"protocol": protocol, "workload": {"kind": campaign.kind},
                                       "corpus": {"fingerprint": corpus.fingerprint, "split": campaign.split}},
                             campaign=campaign.name, runs=runs_dir, source=campaign.source)  # before any timing (#35)
    existing = _campaign_records(runs_dir, campaign.name)
    identity = model_files(campaign.model_path, campaign.model_revision)  # hashed once: checked here, recorded in the manifest
    refuse_changed_model(campaign, existing, identity)  # a resumed run too: a swapped model would join its trials
    resumption = (find_resumable(campaign, existing, fingerprint, environment, retry=retry, rerun_disturbed=rerun_disturbed)
                  if resume else None)
    if resumption is None:
        refuse_changed_protocol(campaign, existing, fingerprint)
    else:
        refuse_changed_numerics(resumption.manifest, devices.applied_determinism(campaign.protocol))
    if resumption is not None and rental_id is not None and rental_id != (resumption.manifest.get("rental") or {}).get("rental_id"):
        raise UserError(f"run {resumption.manifest['run_id']} was not started with --rental {rental_id}: a resumed run keeps "
                        "its own rental link; leave --rental out, or link the rental with rental add --run")
    plan = rotation([variant.name for variant in campaign.variants], protocol["repetitions"], protocol["reference_variant"])
    prepared = Prepared(
        campaign, corpus, f"{campaign.name}/inputs/{corpus.file_sha256[:16]}{campaign.corpus_path.suffix.lower()}",
        fingerprint, model, token_counts, bucket_of,
        {bucket["name"]: sum(1 for b in bucket_of.values() if b == bucket["name"]) for bucket in protocol["buckets"]},
        len(over), plan, existing, environment=environment, rental=rental, resumption=resumption,
        device_initialisation=initialisation, model_identity=identity)
    return prepared


def _token_counts(campaign: Campaign, corpus: Corpus) -> dict[str, int]:
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(campaign.model_path, local_files_only=True)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load the tokenizer from {campaign.model_path}: {str(error).splitlines()[0]}") from None
    return WORKLOADS[campaign.kind].count_tokens(tokenizer, campaign.protocol, corpus.entries)


def _bucket(count: int, buckets: list[dict]) -> str:
    for bucket in buckets:
        if bucket["max_tokens"] is None or count <= bucket["max_tokens"]:
            return bucket["name"]
    return "above every bucket limit"


def _campaign_records(runs_dir: Path, name: str) -> list[dict]:
    folder = runs_dir / name
    if not folder.is_dir():
        return []
    return reading.load(folder).of_campaign(name)


def _reference_from_records(prepared: Prepared, runs_dir: Path) -> dict | None:
    name = prepared.campaign.protocol["reference_variant"]
    for record in prepared.existing:
        if record["kind"] == "trial" and record["variant"] == name and record["status"] == "ok" and record["predictions"]:
            path = runs_dir / record["predictions"]["path"]
            if path.is_file():
                return {"variant": name, "trial_id": record["record_id"], "predictions": prepared.workload.read_outputs(path)}
    return None


@settled_heap()
def run_campaign(*, campaign_file: Path | str, runs_dir: Path | str = DEFAULT_RUNS, quiet: bool = False,
                 progress=None, rental_id: str | None = None, resume: bool = False, retry: bool = True,
                 warn=None, stages: bool = True, rerun_disturbed: bool = False) -> RunResult:
    """Run every planned trial of a campaign and append manifest and trial records.

    RENTAL_ID ties the new run to a recorded rental; RESUME continues the latest unfinished run instead of starting one,
    running each interrupted repetition again as a new trial that names it (not with RETRY False).
    STAGES runs each variant's validation stages before any timing (recorded in the manifest either way).
    WARN receives warnings (a clock outside the rental's period, a variant that failed a stage) as they arise.
    """
    runs_dir = Path(runs_dir)
    prepared = prepare(campaign_file, runs_dir, rental_id=rental_id, resume=resume, retry=retry, rerun_disturbed=rerun_disturbed)
    campaign = prepared.campaign
    _copy_corpus(prepared, runs_dir)
    state = prepared.resumption
    _validate_stages(prepared, stages, warn)
    manifest = state.manifest if state else _manifest(prepared)
    result = RunResult(manifest["run_id"], None, manifest)
    if prepared.rental is not None and not manifest["rental"]["within_period"]:
        _, warning = rental_link(prepared.rental, dt.datetime.fromisoformat(manifest["created_at"].replace("Z", "+00:00")))
        result.warnings.append(warning)
        if warn:
            warn(warning)
    result.warnings += busy_warnings(per_card.devices_of(campaign), warn)  # every card a trial uses, before any trial (#49)
    progress = progress or Progress(quiet=quiet)
    prepared.reference = _reference_from_records(prepared, runs_dir)
    steps = state.remaining if state else [(n, name, rep, None) for n, (name, rep) in enumerate(prepared.plan, start=1)]
    with Signals() as signals:
        try:
            if state:  # the resumption record, a failure row per trial in flight, their files set aside
                result.earlier = [r for r in prepared.existing if r["kind"] == "trial" and r["manifest_id"] == manifest["record_id"]]
                continue_run(state, runs_dir, prepared.existing, prepared.environment, signals, result, warn)
            else:
                result.records_file = signals.append(runs_dir, manifest)
            for done, (sequence, name, repetition, retry_of) in enumerate(steps, start=1):  # a trial, or a set per card (#44)
                step = per_card.run_step(execute, prepared, runs_dir, manifest, campaign.variant(name), repetition, sequence,
                                         signals, progress, retry_of=retry_of)
                result.trials += step
                if any(trial["status"] == "interrupted" for trial in step):
                    result.interrupted = True
                    break
                if fatal.poisoned():  # every later trial would fail in this process: --resume runs them in a new one
                    result.poisoned = fatal.stopped(len(steps) - done, result.warnings, warn)
                    break
        except Interrupted:
            result.interrupted = True
    return result


def _validate_stages(prepared: Prepared, stages: bool, warn) -> None:
    """Run each variant's validation stages (a new run, unless STAGES is off) or take the resumed run's; warn of failures."""
    state = prepared.resumption
    if state is None:
        # Nothing is written yet: Ctrl-C here is the CLI's plain KeyboardInterrupt, not a recorded interruption.
        prepared.stages = (validate_all(campaign=prepared.campaign, entries=list(prepared.corpus.entries),
                                        token_counts=prepared.token_counts, workload=prepared.workload)
                           if stages else {"ran": False, "reason": SKIPPED})
    else:
        prepared.stages = state.manifest.get("stages")
    prepared.failed_stages = {name: found for name, found in ((prepared.stages or {}).get("variants") or {}).items()
                              if not found["passed"]}
    for name, found in prepared.failed_stages.items():
        if warn and state is None:
            warn(failure_message(name, found) + "; its planned trials are recorded as failures")


def _manifest(prepared: Prepared) -> dict:
    """Return a new run's manifest: everything fixed before the first timing, and its rental link when tied to one."""
    campaign = prepared.campaign
    manifest = records.make_record(
        "manifest", campaign=campaign.name, run_id=records.new_run_id(),
        title=campaign.title, protocol_fingerprint=prepared.fingerprint, protocol=campaign.protocol,
        workload={"kind": campaign.kind},
        corpus={"path": prepared.corpus_copy, "fingerprint": prepared.corpus.fingerprint, "file_sha256": prepared.corpus.file_sha256,
                "entries": len(prepared.corpus.entries), "split": campaign.split, "labelled": prepared.corpus.labelled,
                "processing_order": "file order; variants with length_sorted sort by token count inside the measured window",
                "bucket_counts": prepared.bucket_counts, "truncated_entries": prepared.truncated,
                "source_name": campaign.corpus_path.name},
        model={**prepared.model_identity, **prepared.model},
        **prepared.workload.manifest_fields(campaign),  # an adaptation's training split
        environment=prepared.environment, code_version=code_version(),
        variants={variant.name: variant.config() for variant in campaign.variants},
        plan=plan_data(prepared)["plan"],
        seed=campaign.protocol["seed"], deterministic=campaign.protocol["deterministic"],
        determinism=devices.applied_determinism(campaign.protocol), device_initialisation=prepared.device_initialisation,
        stages=prepared.stages,
    )
    if prepared.rental is not None:
        manifest["rental"], _ = rental_link(prepared.rental, dt.datetime.fromisoformat(manifest["created_at"].replace("Z", "+00:00")))
    return manifest


def _copy_corpus(prepared: Prepared, runs_dir: Path) -> None:
    """Copy the corpus, and the inputs its kind of work reads beside it (an adaptation's training split), into runs/."""
    campaign = prepared.campaign
    for source, copy in [(campaign.corpus_path, prepared.corpus_copy), *prepared.workload.inputs(campaign)]:
        target = runs_dir / copy
        if not target.exists():
            with writing(target, "the corpus copy"):
                copy_atomically(source, target)


@dataclass
class Outcome:
    """What a trial produced before it ended, however it ended."""

    work: object = None
    outputs: list | None = None
    window: list | None = None  # what the measured window returned (the outputs, or an adaptation's update losses)
    figures: dict = field(default_factory=dict)
    id_check: dict | None = None
    quality: dict | None = None
    output_file: dict | None = None
    watch: Watch | None = None  # what else used the machine during the measured window (#49)
    dtypes: dict | None = None  # the dtypes the loaded model's weights hold (#63)
    repetition: int = 1


def execute(prepared: Prepared, runs_dir: Path, manifest: dict, variant, repetition: int, sequence: int,
            signals: Signals, progress, *, retry_of: str | None = None, keep_cache: bool = False) -> dict:
    """Execute one trial and append its record, whatever happened; RETRY_OF names the interrupted trial it runs again;
    KEEP_CACHE leaves the memory to the caller (a per_card set releases it once every card's window is over)."""
    campaign, workload = prepared.campaign, prepared.workload
    trial_id = records.new_id("trial")
    clock, status, error = PhaseClock.over(variant.device, cards(variant, campaign.protocol)), "ok", None
    got = Outcome(repetition=repetition)
    expected = (workload.expected(prepared.corpus, campaign.protocol) if hasattr(workload, "expected")  # a level's requests
                else len(prepared.corpus.entries) * workload.passes(campaign.protocol))  # a sampling pass per seed
    progress.start(f"{sequence}/{len(prepared.plan)} {variant.name} rep {repetition}", expected)
    try:
        # Written first: after a kill, a start without its trial record is the trial that was in flight (never dropped).
        signals.append(runs_dir, start_record(manifest, trial_id, variant.name, repetition, sequence, retry_of))
        if variant.name in prepared.failed_stages:
            raise StageFailed(prepared.failed_stages[variant.name])
        _measure(prepared, runs_dir, variant, trial_id, clock, progress, got)
    except out_of_memory_errors() as exc:
        status, error = "oom", describe(exc)
    except Interrupted as exc:
        status, error = "interrupted", f"received {exc.args[0]}"
    except StageFailed as exc:
        status, error, clock.current = exc.found["outcome"], failure_message(variant.name, exc.found), STAGE_PHASE
    except Exception as exc:
        status, error = "error", describe(exc)
        fatal.mark(exc, trial_id)
    failed_phase = clock.current if status != "ok" else None
    completed = got.work.completed if got.work is not None and clock.current in workload.COUNTED_PHASES else 0
    accepted = (status == "ok" and got.id_check["ids_match"] and got.quality["format_ok"] and got.quality["passed"])
    trial = records.make_record(
        "trial", campaign=campaign.name, run_id=manifest["run_id"], protocol_fingerprint=prepared.fingerprint,
        manifest_id=manifest["record_id"], variant=variant.name, variant_config=variant.config(),
        series=variant.series, repetition=repetition, sequence=sequence, status=status, failed_phase=failed_phase,
        error=error, entries_expected=expected,
        entries_completed=completed if status != "ok" else len(got.outputs),
        truncated_entries=prepared.truncated, phases=clock.finish(failed_phase, workload.PHASES),
        gpu_event_durations=None, gpu_event_durations_reason=Text("not recorded: host timers with CUDA synchronisation are the measure"),
        memory=gpu_memory_context(variant.device, clock.host_scope, clock.cards),
        predictions=got.output_file, id_check=got.id_check, quality=got.quality, corpus_accepted=bool(accepted),
        throughput_entries_per_s=clock.rate(got.work.window_units(got.window)) if status == "ok" else None,
        **got.figures,
        **({"retry_of": retry_of} if retry_of else {}), **({"weights_dtypes": got.dtypes} if got.dtypes else {}),
        **({"interference": got.watch.record} if got.watch and got.watch.record else {}))
    trial["record_id"] = trial_id
    del got
    progress.done(status)
    signals.append(runs_dir, trial)  # before the memory is released: after a fatal GPU error releasing raises (#63)
    if not keep_cache:
        fatal.release_safely(release, variant.device, trial_id)
    return trial


def _measure(prepared: Prepared, runs_dir: Path, variant, trial_id: str, clock: PhaseClock, progress, got: Outcome) -> None:
    """Run the trial's phases in order, filling GOT as they complete; any failure propagates to the caller."""
    campaign, protocol, workload = prepared.campaign, prepared.campaign.protocol, prepared.workload
    with clock.phase("environment_check"):
        devices.check_environment(variant, protocol)
    with clock.phase("model_load"), LOADING:
        tokenizer, model = workload.load_model(campaign.model_path, variant, protocol)
    got.dtypes = weights_dtypes(model)
    got.work = _compiled(clock, prepared, variant, tokenizer, model)
    got.work.repetition = got.repetition  # a serving trial rotates its load levels by it
    got.work.before_window(clock, prepared, runs_dir)  # the warm-up, or an adaptation's first forward, backward, update
    got.work.completed = 0
    progress.attach(got.work)
    got.watch = Watch(variant.device, protocol)
    # The rows are kept outside the phase: the window's phase ends where it did before they were kept (#64).
    with got.watch.window(), kept_if_failed(prepared, runs_dir, trial_id, got), clock.phase("measured_window"):
        got.window = got.work.measured(runs_dir / prepared.corpus_copy)
    # Phases of this kind outside the window: prefill and decode, or an adaptation's validation and export.
    got.outputs = got.work.after_window(clock, got.window, TrialPlace(runs_dir, campaign.name, trial_id))
    got.figures = got.work.figures(clock, got.outputs)
    with clock.phase("evaluation"):
        got.id_check, got.quality, reference = workload.evaluate_outputs(prepared=prepared, variant=variant,
                                                                         trial_id=trial_id, outputs=got.outputs)
    with clock.phase("writing_results"):
        got.output_file = workload.write_outputs(runs_dir, campaign.name, trial_id, got.outputs)
    if prepared.reference is None and variant.name == protocol["reference_variant"]:
        prepared.reference = reference


def _compiled(clock: PhaseClock, prepared: Prepared, variant, tokenizer, model):
    """Return the unit of work, compiled (and run once, which compiles it) in its own phase when the variant says so."""
    inference = prepared.workload.Work(tokenizer, model, variant, prepared.campaign.protocol)
    if not variant.compile:
        clock.skip("compilation", Text("torch.compile is off for this variant"))
        return inference
    with clock.phase("compilation"):
        inference.compile()
        inference.warmup(list(prepared.corpus.entries), prepared.token_counts, 1, 1)
    return inference
