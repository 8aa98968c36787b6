"""Stop a run cleanly on SIGINT or SIGTERM, but never while a record is being appended."""

from __future__ import annotations

import signal
from pathlib import Path

from iteralab.machine.phases import Interrupted
from iteralab.store import records


class Signals:
    """Turn SIGINT/SIGTERM into Interrupted, but never while a record is being appended."""

    def __init__(self):
        self.received, self.delivered, self.protected, self.previous = None, False, False, {}

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

    def append(self, runs_dir: Path, record: dict) -> Path:
        self.protected = True
        try:
            return records.append(runs_dir, record)
        finally:
            self.protected = False
            if self.received and not self.delivered:
                self.delivered = True
                raise Interrupted(self.received)
