"""What every kind's unit of work shares: the variant's processing order and the warm-up over its first batches."""

from __future__ import annotations

from iteralab.run.trial import batches


class Batched:
    """A unit of work over batches of the corpus: a kind gives `encode` and `step` (one batch through the model)."""

    variant = None

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
                self.step(self.encode([entry.text for entry in batch]))
