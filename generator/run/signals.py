"""Stop a run cleanly on SIGINT or SIGTERM, but never while a record is being appended."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from iteralab.machine.phases import Interrupted
from iteralab.store import records


class Signals:
    """Turn SIGINT/SIGTERM into Interrupted, but never while a record is being appended."""

    def __init__(self):
        self.received, self.delivered, self.held_by, self.previous = None, False, 0, {}

    @property
    def protected(self) -> bool:
        """Tell whether a signal now waits for the end of a held block (a record appended, files set aside)."""
        return self.held_by > 0

    def __enter__(self):
        for number in (signal.SIGINT, signal.SIGTERM):
            self.previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc):
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _handle(self, number, frame):
        if self.received:
            return  # already stopping: a second signal must not cut the record of the first
        self.received = signal.Signals(number).name
        if not self.protected:
            self.delivered = True
            raise Interrupted(self.received)

    @contextlib.contextmanager
    def held(self):
        """Run the block whole: a signal received meanwhile stops the run when the outermost held block ends."""
        self.held_by += 1
        try:
            yield
        finally:
            self.held_by -= 1
            if not self.held_by and self.received and not self.delivered:
                self.delivered = True
                raise Interrupted(self.received)

    def append(self, runs_dir: Path, record: dict) -> Path:
        with self.held():
            return records.append(runs_dir, record)
