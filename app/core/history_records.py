"""What the history holds, as the layers above the store read it: a version of a prompt, and
what exporting or importing a session did.

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
