"""What every kind's unit of work shares: the variant's processing order and the warm-up over its first batches."""

from __future__ import annotations

from iteralab.machine.phases import InBatch, batches

QUESTION_UNIT = "corpora"  # what [decision] counts for a kind that runs a model over corpora


def read_variant(table) -> dict:
    """Read what a variant sets beyond the shared settings: nothing, for a kind that only runs a model."""
    return {}


def check_variants(variants, protocol: dict) -> list[str]:
    """Return what is wrong between variants beyond the shared checks: nothing, for a kind that only runs a model."""
    return []


def inputs(campaign) -> list:
    """Return the files a run copies beside the corpus: none."""
    return []


def plan_lines(prepared) -> list[str]:
    """Return what a dry run says beyond the shared plan: nothing."""
    return []


def manifest_fields(campaign) -> dict:
    """Return what a run's manifest holds beyond the shared fields: nothing."""
    return {}


class Batched:
    """A unit of work over batches of the corpus: a kind gives `encode` and `step` (one batch through the model)."""

    variant = None
    progress_total, progress_unit = None, "entries"  # the progress bar's: the corpus's entries unless a kind says

    def encode(self, texts: list[str]):
        raise NotImplementedError

    def step(self, encoded):
        raise NotImplementedError

    def order(self, entries: list, token_counts: dict[str, int]) -> list:
        """Return ENTRIES in the variant's processing order: file order, or by token count when length-sorted."""
        if not self.variant.length_sorted:
            return entries
        return sorted(entries, key=lambda entry: token_counts[entry.id])

    def warmup(self, entries: list, token_counts: dict[str, int], batch_count: int, passes: int) -> None:
        """Run the first BATCH_COUNT batches in processing order PASSES times, untimed."""
        chosen = batches(self.order(entries, token_counts), self.variant.batch_size)[:batch_count]
        for _ in range(passes):
            for batch in chosen:
                with InBatch(batch) as where:  # a failure names the batch's ids and tokens (#61)
                    self.step(where.encoded(self.encode([entry.text for entry in batch])))

    def before_window(self, clock, prepared, runs_dir) -> None:
        """Warm up untimed over the protocol's first batches, in a phase of its own."""
        protocol = prepared.campaign.protocol
        with clock.phase("warmup"):
            self.warmup(list(prepared.corpus.entries), prepared.token_counts, protocol["warmup"]["batches"],
                        protocol["warmup"]["passes"])

    def window_units(self, outputs) -> int:
        """Return what the window's throughput counts: its outputs."""
        return len(outputs)
