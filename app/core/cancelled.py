"""One meaning of "cancelled" across the app: an operation someone stopped before it finished.

The person's Cancel or Ctrl+C, or the app itself when an answer is no longer wanted (another
file opened, a search superseded), stops a read, a scan, a download, a calibration, an export or
an import; each then raises :class:`Cancelled` and leaves behind nothing it would have written
(what it replaces untouched, a download resumable). Not an error: a face says it quietly, or
not at all. The engine's own cancelled request (``app.core.engine.types.CancelledError``) stays
an engine error, since it crosses the engine child's pipe as one.
"""

from __future__ import annotations


class Cancelled(Exception):
    """The operation was stopped before it finished; ``str()`` says what was stopped, or is
    empty."""
