"""What the history holds, as the layers above the store read it: a session, a version of a
prompt and its last run, and what exporting or importing a session did.

These are plain values. The store builds them from its rows (app/store/repository.py,
app/store/archive.py); the services hand them to the faces, which never name a store type
(import-linter's "the faces never touch the store...").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# how far a long history operation is: (done, total) in bytes or rows
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class VersionInfo:
    """One version of a session: its job (task, prompt, strategy, model, settings), where it
    stands in the tree (its parent and children) and its number in the session (v1, v2...)."""

    id: int
    session: int
    parent: int | None
    number: int
    created: datetime
    task: str
    strategy: str
    prompt: str
    model_path: str
    model_sha256: str
    settings: dict[str, Any] = field(default_factory=dict)
    children: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "session": self.session, "parent": self.parent,
            "number": self.number, "created": self.created.isoformat(), "task": self.task,
            "strategy": self.strategy, "prompt": self.prompt, "model_path": self.model_path,
            "model_sha256": self.model_sha256, "settings": self.settings,
            "children": list(self.children),
        }  # fmt: skip


@dataclass(frozen=True)
class SessionRow:
    """A session as a list of sessions shows it: its name, the document it is the line of work
    of (its path as recorded; None when no document was recorded), when it began and how many
    versions it has (deleted ones not counted)."""

    id: int
    name: str
    document: str | None
    created: datetime
    versions: int

    @property
    def document_name(self) -> str:
        """The document's file name ("" when none was recorded)."""
        return Path(self.document).name if self.document else ""


@dataclass(frozen=True)
class LastRun:
    """The last run of a version, as a view of the history shows it: how it finished, its token
    counts, its reply (the text of its last output: a multi-pass job's partial results come
    before it; "" when it has none) and, where it ended so, the error or the refusal, one
    sentence each."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reply: str
    error: str | None = None
    refused: str | None = None

    @property
    def cancelled(self) -> bool:
        """The person cancelled it: its reply is cut short, not a finished answer."""
        return self.finish_reason == "cancelled"


@dataclass(frozen=True)
class ExportSummary:
    """A session written to a ``.ctxlens`` file: the file, what it holds, its size."""

    path: Path
    versions: int
    runs: int
    kv_states: int
    bytes: int


@dataclass(frozen=True)
class ImportSummary:
    """A ``.ctxlens`` file added to the history: the new session and what came with it."""

    session_id: int
    versions: int
    runs: int
    kv_states: int
