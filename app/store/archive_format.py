"""The ``.ctxlens`` format and what its export and its import share.

An archive is written by :mod:`app.store.archive_export`, checked member by member by
:mod:`app.store.archive_validation` and added to the history by :mod:`app.store.archive` (the
import's transaction). What those sides must agree on lives here, below all of them: the
format's name and version, its member names, the chunk both stream in, the errors a person
sees, the summaries each returns and the meter that reports progress and hears a cancel.
"""

from __future__ import annotations

import threading
from pathlib import Path

from app.core.cancelled import Cancelled
from app.core.history_records import Progress

FORMAT = "contextlens-session"
FORMAT_VERSION = 1

MANIFEST = "manifest.json"
SESSION = "session.json"
DOCUMENT = "document.txt"

CHUNK = 1024 * 1024


class ArchiveError(ValueError):
    """A session file cannot be written or read; the message is one sentence naming the file."""


class Meter:
    """Progress and cancellation in one place, so every step reports and checks the same way.

    ``done`` only grows and never passes ``total``; the cancel event is checked after each
    report, so a cancel set from the progress callback itself takes effect at once."""

    def __init__(
        self, progress: Progress | None, cancel: threading.Event | None, cancelled: str
    ) -> None:
        self._progress = progress
        self._cancel = cancel
        self._cancelled = cancelled
        self.done = 0
        self.total = 0

    def check(self) -> None:
        """Raise Cancelled when the cancel event is set."""
        if self._cancel is not None and self._cancel.is_set():
            raise Cancelled(" ".join(self._cancelled.split()))

    def start(self, total: int) -> None:
        self.total = max(total, 0)
        self._report()

    def advance(self, amount: int) -> None:
        self.reach(self.done + amount)

    def reach(self, done: int) -> None:
        """Move to ``done`` (reported only when it moves), then check for a cancel."""
        done = min(max(done, self.done), self.total)
        if done != self.done:
            self.done = done
            self._report()
        else:
            self.check()

    def finish(self) -> None:
        self.reach(self.total)

    def _report(self) -> None:
        if self._progress is not None:
            self._progress(self.done, self.total)
        self.check()


def fail(path: Path, detail: str) -> ArchiveError:
    text = f"{path.name or path} {detail}"
    return ArchiveError(" ".join(text.split()))
