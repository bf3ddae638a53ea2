"""The history's operations, each answering what it changed.

Rollback, branch, delete (and its undo), export and import of a ``.ctxlens`` archive: the window's
History panel and ``contextlens-cli snapshots`` call these, never the store, and a face redraws
from what comes back instead of guessing (Anki's ``CollectionOp`` and ``OpChanges`` are the
model). Each returns a frozen :class:`Changes` (sessions and versions added, removed, changed; the
version to select next) with what the operation made: the new version, how many deletions undo
can bring back, the archive's summary.

Each takes the open :class:`History` a face holds, never the store's repository, and says the
store's errors as the services' own (BadRequest, Cancelled, HistoryUnavailable), so neither face
names a store type.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from app.core.cancelled import Cancelled
from app.core.default_model import sha256_of
from app.core.history_records import (
    ExportSummary,
    ImportSummary,
    LastRun,
    Progress,
    SessionRow,
    VersionInfo,
)
from app.services import versions
from app.services.errors import BadRequest, HistoryUnavailable
from app.services.jobs import ResumeSpec
from app.services.versions import History, history, open_history, said
from app.store import archive
from app.store.repository import Repository, RepositoryError

__all__ = [
    "BadRequest",
    "Cancelled",
    "Changes",
    "Deleted",
    "ExportSummary",
    "Exported",
    "History",
    "HistoryUnavailable",
    "HistoryView",
    "ImportSummary",
    "Imported",
    "LastRun",
    "NewVersion",
    "NothingToResume",
    "Progress",
    "ResumeOn",
    "RolledBack",
    "SavedState",
    "SessionRow",
    "Undone",
    "VersionInfo",
    "branch",
    "delete",
    "delete_session",
    "delete_version",
    "export_session",
    "history",
    "import_session",
    "no_saved_state",
    "open_history",
    "read_history",
    "rollback",
    "undo_delete",
]


@dataclass(frozen=True, kw_only=True)
class Changes:
    """What an operation changed in the history. ``sessions_changed``: sessions that gained or
    lost versions (not those added or removed whole); ``select``: the version a view selects
    next (None: it keeps its selection)."""

    sessions_added: tuple[int, ...] = ()
    sessions_removed: tuple[int, ...] = ()
    sessions_changed: tuple[int, ...] = ()
    versions_added: tuple[int, ...] = ()
    versions_removed: tuple[int, ...] = ()
    select: int | None = None

    @property
    def changed(self) -> bool:
        """Whether anything a view of the history shows has changed (read it again)."""
        return any((self.sessions_added, self.sessions_removed, self.sessions_changed,
                    self.versions_added, self.versions_removed))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class NewVersion(Changes):
    """A rollback or a branch: the version it made (selected next)."""

    version: VersionInfo


@dataclass(frozen=True, kw_only=True)
class Deleted(Changes):
    """A deletion: ``undoable`` is how many :func:`undo_delete` calls bring it all back (one per
    version or session asked for; a session's versions come back with it)."""

    undoable: int = 0


@dataclass(frozen=True, kw_only=True)
class Undone(Changes):
    """An undone deletion: what came back ("version" or "session", and its id), or ``kind``
    None when there was nothing to undo (then nothing changed)."""

    kind: str | None = None
    item: int | None = None


@dataclass(frozen=True, kw_only=True)
class Exported(Changes):
    """An export: the file written (the history is unchanged)."""

    summary: ExportSummary


@dataclass(frozen=True, kw_only=True)
class Imported(Changes):
    """An import: the session it added, with its versions."""

    summary: ImportSummary


_New = TypeVar("_New", bound=NewVersion)


def _made(version: VersionInfo, kind: type[_New], **more: Any) -> _New:
    """The change report of an operation that made ``version`` (selected next)."""
    return kind(version=version, versions_added=(version.id,),
                sessions_changed=(version.session,), select=version.id, **more)  # fmt: skip


@dataclass(frozen=True)
class ResumeOn:
    """What a rollback is to resume its reply on: the model file (None: the one the version ran
    on), its sha256 ("": read from the file) and, where a model is loaded already (the
    window), the context and cache type it is loaded with. ``max_tokens``: the reply's length
    (None: the version's own)."""

    model: Path | None = None
    model_sha256: str = ""
    n_ctx: int | None = None
    cache_type: str | None = None
    max_tokens: int | None = None


class NothingToResume(BadRequest):
    """A rollback asked to resume, and the version has no saved KV state it can resume from on
    that model: nothing was written."""


@dataclass(frozen=True, kw_only=True)
class RolledBack(NewVersion):
    """A rollback: the new version (a child of ``copied``, equal to it), the document its session
    is of, and, when a resume was asked for, how to generate its reply again from the saved
    KV state (``resume``)."""

    copied: VersionInfo
    document_sha256: str
    resume: ResumeSpec | None = None


@said
def rollback(h: History, version_id: int, *, resume_on: ResumeOn | None = None) -> RolledBack:
    """A new version equal to ``version_id`` (its child), so nothing after it is lost. With
    ``resume_on``, the saved KV state is looked up first, and a version without one for that
    model (and context) is refused with :class:`NothingToResume` before anything is written;
    BadRequest for a version that ran on a server (it keeps no KV state) or is gone,
    HistoryUnavailable when nothing could be written. Both faces roll back through here: the
    same tree and the same refusal."""
    repo = h.repo
    old = repo.get_version(version_id)
    spec = _resume_spec(repo, old, resume_on) if resume_on is not None else None
    new = repo.rollback(version_id)
    document = repo.session_info(new.session)["document_sha256"]
    return _made(new, RolledBack, copied=old, resume=spec, document_sha256=document)


def _resume_spec(repo: Repository, old: VersionInfo, on: ResumeOn) -> ResumeSpec:
    model = on.model or Path(old.model_path)
    sha = on.model_sha256
    if not sha and old.settings.get("engine", "local") == "local":  # a server's: refused below
        if not model.is_file():
            raise NothingToResume(
                f"version {old.id} resumes on the model it ran on, which is not at {model}: "
                "name the model file to resume on; nothing was changed"
            )
        sha = sha256_of(model)
    spec = versions.resume_spec(repo, old, model_sha256=sha, n_ctx=on.n_ctx,
                                cache_type=on.cache_type, model_path=str(model),
                                max_tokens=on.max_tokens)  # fmt: skip
    if spec is None:
        raise NothingToResume(no_saved_state(old.id, model.name))
    return spec


def no_saved_state(version_id: int, model_name: str) -> str:
    """The refusal of a resume without a saved KV state (one sentence, both faces)."""
    return (f"version {version_id} has no saved KV state for {model_name} (run it with the KV "
            "state kept to save one); nothing was changed")  # fmt: skip


@said
def branch(h: History, version_id: int, **changes: Any) -> NewVersion:
    """A new version from ``version_id`` with ``changes`` (prompt, task, strategy, settings...),
    beside the versions made from it before."""
    return _made(h.repo.branch(version_id, **changes), NewVersion)


@said
def delete(h: History, *, versions: tuple[int, ...] | list[int] = (),
           sessions: tuple[int, ...] | list[int] = ()) -> Deleted:  # fmt: skip
    """Soft-delete versions and whole sessions (a version in a session deleted too is passed
    over): hidden at once, back with :func:`undo_delete` until the repository closes."""
    repo = h.repo
    session_set = set(sessions)
    versions_of = {sid: tuple(v.id for v in repo.history(sid)) for sid in dict.fromkeys(sessions)}
    mine = [(vid, repo.get_version(vid).session) for vid in dict.fromkeys(versions)]
    mine = [(vid, sid) for vid, sid in mine if sid not in session_set]
    for vid, _ in mine:
        repo.delete_version(vid)
    for sid in versions_of:
        repo.delete_session(sid)
    removed = [vid for vid, _ in mine] + [vid for ids in versions_of.values() for vid in ids]
    changed = dict.fromkeys(sid for _, sid in mine)
    return Deleted(versions_removed=tuple(dict.fromkeys(removed)),
                   sessions_removed=tuple(versions_of), sessions_changed=tuple(changed),
                   undoable=len(mine) + len(versions_of))  # fmt: skip


def delete_version(h: History, version_id: int) -> Deleted:
    return delete(h, versions=(version_id,))


def delete_session(h: History, session_id: int) -> Deleted:
    return delete(h, sessions=(session_id,))


@said
def undo_delete(h: History) -> Undone:
    """Bring back the last version or session deleted (the version is selected next)."""
    repo = h.repo
    undone = repo.undo_delete()
    if undone is None:
        return Undone()
    kind, item = undone
    if kind == "session":
        back = tuple(v.id for v in repo.history(item))
        return Undone(kind=kind, item=item, sessions_added=(item,), versions_added=back)
    try:
        session: tuple[int, ...] = (repo.get_version(item).session,)
    except RepositoryError:  # its session is deleted still: the version comes back with it
        session = ()
    return Undone(kind=kind, item=item, versions_added=(item,), sessions_changed=session,
                  select=item)  # fmt: skip


@said
def export_session(
    h: History,
    session_id: int,
    path: str | os.PathLike[str],
    *,
    include_kv: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Exported:
    """Write one session to a ``.ctxlens`` file (see app.store.archive); BadRequest when it
    cannot be, Cancelled once ``cancel`` is set (no file left, an earlier one untouched)."""
    summary = archive.export_session(h.repo, session_id, path, include_kv=include_kv,
                                     progress=progress, cancel=cancel)  # fmt: skip
    return Exported(summary=summary)


@said
def import_session(
    h: History,
    path: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Imported:
    """Add the session a ``.ctxlens`` file holds as a new session, checked completely first;
    BadRequest (nothing added) when it cannot be, Cancelled once ``cancel`` is set."""
    repo = h.repo
    summary = archive.import_session(repo, Path(path), progress=progress, cancel=cancel)
    added = tuple(v.id for v in repo.history(summary.session_id))
    return Imported(summary=summary, sessions_added=(summary.session_id,),
                    versions_added=added)  # fmt: skip


# ----- the version tree as the History panel shows it -----

# what makes two versions the same job (a rollback copies all of it from its parent)
_CONTENT = ("task", "prompt", "strategy", "model_path", "model_sha256", "settings")


@dataclass(frozen=True)
class SavedState:
    """A resumable KV state of a version (its own, or the one its rollback copy shares)."""

    n_ctx: int
    cache_type: str
    prompt_tokens: int
    state_bytes: int
    version: int  # the version it was saved for


@dataclass(frozen=True)
class HistoryView:
    """One consistent reading of what the panel shows, made off the GUI thread: the sessions,
    the versions (of one session or all, in creation order: a parent before its children),
    each version's last run and resumable KV state by its id."""

    sessions: list[SessionRow]
    versions: list[VersionInfo]
    last_runs: dict[int, LastRun]
    states: dict[int, SavedState]


def _session_row(row: dict[str, Any]) -> SessionRow:
    """A session as ``Repository.sessions()`` gives it, typed."""
    return SessionRow(id=row["id"], name=row["name"], document=row["document"],
                      created=datetime.fromisoformat(row["created"]),
                      versions=row["versions"])  # fmt: skip


def _last_run(run: dict[str, Any]) -> LastRun:
    """A run as ``Repository.runs()`` gives it, as the history shows it: its reply is the text
    of its last output."""
    outputs = run.get("outputs") or []
    reply = str(outputs[-1].get("text", "")) if outputs else ""
    return LastRun(finish_reason=run["finish_reason"], prompt_tokens=run["prompt_tokens"],
                   completion_tokens=run["completion_tokens"], reply=reply,
                   error=run.get("error"), refused=run.get("refused"))  # fmt: skip


@said
def read_history(h: History, session_id: int | None) -> HistoryView:
    """Sessions, versions, each version's last run and resumable KV state (slow: many reads)."""
    repo = h.repo
    sessions = [_session_row(s) for s in repo.sessions()]
    if session_id is not None and all(s.id != session_id for s in sessions):
        session_id = None  # the session is gone: show all
    versions = repo.history(session_id)
    by_id = {v.id: v for v in versions}
    last_runs: dict[int, LastRun] = {}
    own: dict[int, SavedState] = {}
    for v in versions:
        runs = repo.runs(v.id)
        if runs:
            last_runs[v.id] = _last_run(runs[-1])
        usable = [
            k
            for k in repo.kv_states(v.id)
            if k["model_sha256"] == v.model_sha256 and k["prompt_tokens"] > 0
        ]
        if usable:
            k = usable[-1]
            own[v.id] = SavedState(
                k["n_ctx"], k["cache_type"], k["prompt_tokens"], k["state_bytes"], v.id
            )
    states = dict(own)
    for v in versions:
        if v.id not in own and _may_share_state(v, by_id, own):
            saved = repo.kv_state(v.id, model_sha256=v.model_sha256)  # the exact rule
            if saved is not None:
                st = saved.state
                states[v.id] = SavedState(
                    st.n_ctx, st.kv_cache_type, saved.prompt_tokens, len(st.data), saved.version
                )
    return HistoryView(sessions, versions, last_runs, states)


def _may_share_state(
    v: VersionInfo, by_id: dict[int, VersionInfo], own: dict[int, SavedState]
) -> bool:
    """A rollback copy (equal to its parent, and so on up) may use an ancestor's state."""
    seen = {v.id}
    while v.parent is not None and v.parent in by_id and v.parent not in seen:
        parent = by_id[v.parent]
        if any(getattr(parent, k) != getattr(v, k) for k in _CONTENT):
            return False
        if parent.id in own:
            return True
        seen.add(parent.id)
        v = parent
    return False
