"""The history API over the database: sessions, versions as a tree, runs, KV states.

Writes go through one serial worker thread, one transaction per user action; reads use
short-lived sessions. Nothing here knows about Qt: the UI and the CLI call these methods.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session as OrmSession

from app.core.documents import Document as CoreDocument
from app.core.engine.types import KVState
from app.core.history_records import VersionInfo
from app.store import rows
from app.store.blobs import unpack, unpack_tokens
from app.store.db import Database, RepositoryError, StoreError, describe_failure
from app.store.models import (
    Document,
    DocumentText,
    KVStateRow,
    PromptVersion,
    Run,
    Session,
    as_utc,
    now,
)

# RepositoryError is the store's (app/store/db.py), raised here and named by the callers here
__all__ = ["Entry", "Repository", "RepositoryError", "SavedKV"]

T = TypeVar("T")


@dataclass(frozen=True)
class SavedKV:
    """A stored KV state: the prompt is its first ``prompt_tokens`` tokens; ``version`` is the
    version it was saved for (an ancestor when the asked-for version is a rollback copy)."""

    state: KVState
    prompt_tokens: int
    version: int
    ring: dict[str, Any] = field(default_factory=dict)  # what the job recorded of its ring


_CONTENT = ("task", "prompt", "strategy", "model_path", "model_sha256", "settings")
_MATCHED = ("task", "prompt", "strategy", "model_path", "model_sha256")  # as columns


def _info(v: PromptVersion, parent: int | None, children: tuple[int, ...] = ()) -> VersionInfo:
    return VersionInfo(
        id=v.id, session=v.session_id, parent=parent,
        number=v.number, created=as_utc(v.created),
        task=v.task, strategy=v.strategy, prompt=v.prompt, model_path=v.model_path,
        model_sha256=v.model_sha256, settings=dict(v.settings or {}), children=children,
    )  # fmt: skip


class Repository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
        self._undo: list[tuple[str, int]] = []  # soft deletions that can be undone this run

    @property
    def database(self) -> Database:
        """The database this repository reads and writes."""
        return self._db

    @property
    def folder(self) -> Path:
        """The database's folder (an import spools its packed data there)."""
        return self._db.path.parent

    @property
    def read_only(self) -> bool:
        """The database cannot be written: browse only (every write raises StoreError)."""
        return self._db.read_only

    def close(self) -> None:
        """Deletions become final (no undo after closing), then the writer stops."""
        try:
            if not self._db.read_only:
                self.purge_deleted()
        except StoreError:
            pass  # cannot write now (disk full, busy): they stay hidden and go next time
        finally:
            self._writer.shutdown(wait=True)

    # ----- plumbing -----

    def write(self, action: Callable[[OrmSession], T]) -> T:
        """Run ``action`` in one transaction on the single writer thread."""

        if self._db.read_only:
            raise StoreError(f"{self._db.path.name} is read-only; nothing was saved.")

        def run() -> T:
            with OrmSession(self._db.writer, expire_on_commit=False) as s, s.begin():
                return action(s)

        try:
            return self._writer.submit(run).result()
        except DBAPIError as exc:  # disk full, locked, I/O error: one sentence, nothing half-saved
            raise StoreError(describe_failure(exc, self._db.path)) from exc

    def read(self, action: Callable[[OrmSession], T]) -> T:
        """Run ``action`` in a short-lived session on the calling thread."""
        with OrmSession(self._db.engine) as s:
            return action(s)

    # ----- documents and sessions -----

    def add_document(self, doc: CoreDocument) -> int:
        """Record a document; its text is stored once per sha256, compressed."""
        blob = self._text_blob(doc)
        return self.write(lambda s: rows.add_document(s, doc, blob))

    def _text_blob(self, doc: CoreDocument) -> bytes | None:
        """The text compressed for the store, or None when the store has it already: encoding
        a 50 MB text holds the GIL ~50 ms, a stall of the window for every job on it."""
        if self.read(lambda s: s.get(DocumentText, doc.sha256) is not None):
            return None
        return rows.pack_text(doc)

    def document_text(self, document_id: int) -> str:
        def action(s: OrmSession) -> str:
            doc = s.get(Document, document_id)
            if doc is None:
                raise RepositoryError(f"there is no document {document_id}")
            text = s.get(DocumentText, doc.sha256)
            assert text is not None  # a foreign key guarantees it
            return unpack(text.compressed).decode("utf-8", "surrogatepass")

        return self.read(action)

    def create_session(self, name: str, document_id: int | None = None) -> int:
        return self.write(lambda s: rows.create_session(s, name, document_id))

    # ----- versions -----

    def save_version(
        self,
        session_id: int,
        *,
        task: str,
        strategy: str,
        prompt: str = "",
        parent_id: int | None = None,
        model_path: str = "",
        model_sha256: str = "",
        settings: dict[str, Any] | None = None,
    ) -> VersionInfo:
        """A new version, numbered after the session's last; ``parent_id`` places it in the tree
        (by default after the session's newest version)."""
        content = {"task": task, "strategy": strategy, "prompt": prompt,
                   "model_path": model_path, "model_sha256": model_sha256,
                   "settings": settings or {}}  # fmt: skip

        def action(s: OrmSession) -> VersionInfo:
            v = rows.save_version(s, session_id, parent_id, content)
            return _info(v, v.parent_id)

        return self.write(action)

    def get_version(self, version_id: int) -> VersionInfo:
        def action(s: OrmSession) -> VersionInfo:
            v = rows.version_row(s, version_id)
            return _info(v, rows.visible_parent(s, v))

        return self.read(action)

    def history(self, session_id: int | None = None) -> list[VersionInfo]:
        """Versions (of one session, or all) in creation order, each with its children: a tree.
        A version whose parent was deleted hangs from its nearest remaining ancestor."""

        def action(s: OrmSession) -> list[VersionInfo]:
            query = select(PromptVersion).join(Session).where(Session.deleted.is_(None))
            if session_id is not None:
                query = query.where(PromptVersion.session_id == session_id)
            found = s.scalars(query.order_by(PromptVersion.session_id, PromptVersion.number)).all()
            by_id = {v.id: v for v in found}
            parents = {v.id: rows.visible_parent(s, v) for v in found if v.deleted is None}
            children: dict[int, list[int]] = {}
            for vid, parent in parents.items():
                if parent is not None:
                    children.setdefault(parent, []).append(vid)
            return [_info(by_id[vid], parents[vid], tuple(children.get(vid, ())))
                    for vid in parents]  # fmt: skip

        return self.read(action)

    def sessions(self) -> list[dict[str, Any]]:
        """The sessions that are not deleted, oldest first, with their document and size."""

        def action(s: OrmSession) -> list[dict[str, Any]]:
            count = (
                select(func.count(PromptVersion.id))
                .where(PromptVersion.session_id == Session.id, PromptVersion.deleted.is_(None))
                .scalar_subquery()
            )
            found = s.execute(
                select(Session, Document.path, count)
                .outerjoin(Document, Session.document_id == Document.id)
                .where(Session.deleted.is_(None))
                .order_by(Session.id)
            )
            return [{"id": row.id, "name": row.name, "document": path, "versions": n,
                     "created": as_utc(row.created).isoformat()}
                    for row, path, n in found]  # fmt: skip

        return self.read(action)

    def branch(self, version_id: int, **changes: Any) -> VersionInfo:
        """A new version from an old one with ``changes`` (task, prompt, strategy, settings...)."""
        unknown = set(changes) - set(_CONTENT)
        if unknown:
            raise RepositoryError(f"a version has no field {sorted(unknown)[0]!r}")
        old = self.get_version(version_id)
        content = {k: getattr(old, k) for k in _CONTENT} | changes
        return self.save_version(old.session, parent_id=old.id, **content)

    def rollback(self, version_id: int) -> VersionInfo:
        """A new version equal to an old one (its child), so nothing after it is lost."""
        return self.branch(version_id)

    def diff(self, a: int, b: int) -> str:
        """Unified diff of two versions: task, strategy, model, prompt, settings, and what
        their last runs answered (finish reason and reply): a rollback copy equals its version
        in everything it asked, and differs in what came back."""
        va, vb = self.get_version(a), self.get_version(b)

        def lines(v: VersionInfo) -> list[str]:
            head = [f"task: {v.task}", f"strategy: {v.strategy}", f"model: {v.model_path}"]
            settings = json.dumps(v.settings, indent=2, sort_keys=True).splitlines()
            return [*head, "prompt:", *v.prompt.splitlines(), "settings:", *settings,
                    *_reply_lines(self.runs(v.id))]  # fmt: skip

        return "\n".join(difflib.unified_diff(lines(va), lines(vb), f"version {va.number}",
                                              f"version {vb.number}", lineterm=""))  # fmt: skip

    def delete_version(self, version_id: int) -> None:
        """Soft delete: hidden from history, back with :meth:`undo_delete` until the repository
        closes; then it is gone (its children hang from its parent)."""

        def action(s: OrmSession) -> None:
            rows.version_row(s, version_id).deleted = now()

        self.write(action)
        self._undo.append(("version", version_id))

    def delete_session(self, session_id: int) -> None:
        """Soft delete of a whole session, like :meth:`delete_version`."""

        def action(s: OrmSession) -> None:
            rows.session_row(s, session_id).deleted = now()

        self.write(action)
        self._undo.append(("session", session_id))

    def undo_delete(self) -> tuple[str, int] | None:
        """Bring back the last deleted version or session: ("version" or "session", its id), or
        None when there is nothing to undo."""
        if not self._undo:
            return None
        kind, item = self._undo.pop()

        def action(s: OrmSession) -> None:
            row = s.get(PromptVersion, item) if kind == "version" else s.get(Session, item)
            if row is not None:
                row.deleted = None

        self.write(action)
        return kind, item

    def purge_deleted(self) -> int:
        """Remove for good what is marked deleted (also what a crashed run left marked): runs,
        KV states, versions (children move to the nearest remaining ancestor), sessions, and
        documents no session uses. The number of versions removed."""
        self._undo.clear()
        return self.write(rows.purge)

    # ----- runs and KV states -----

    def save_run(self, version_id: int, result: Any) -> int:
        """Record a job result (app.core.jobs.tasks.JobResult) under a version."""
        return self.write(lambda s: rows.save_run(s, version_id, result.as_dict()))

    def runs(self, version_id: int) -> list[dict[str, Any]]:
        def action(s: OrmSession) -> list[dict[str, Any]]:
            found = s.scalars(select(Run).where(Run.version_id == version_id).order_by(Run.id))
            return [{"id": r.id, "strategy": r.strategy, "finish_reason": r.finish_reason,
                     "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                     "kv_peak_cells": r.kv_peak_cells, "outputs": r.outputs,
                     "truncated": r.truncated, "timings": r.timings, "error": r.error,
                     "refused": r.refused} for r in found]  # fmt: skip

        return self.read(action)

    def last_plan(self, version_id: int) -> dict[str, Any]:
        """The plan (``Plan.as_dict``) of the version's last run; {} when it has none."""

        def action(s: OrmSession) -> dict[str, Any]:
            plan = s.scalar(select(Run.plan).where(Run.version_id == version_id)
                            .order_by(Run.id.desc()).limit(1))  # fmt: skip
            return dict(plan or {})

        return self.read(action)

    def output_sources(self, version_id: int) -> tuple[tuple[int, int], ...]:
        """The document spans the last output of the version's last run came from (a resumed
        prompt holds the same ones)."""
        runs = self.runs(version_id)
        outputs = runs[-1]["outputs"] if runs else []
        return tuple((a, b) for a, b in outputs[-1]["source_spans"]) if outputs else ()

    def save_kv_state(
        self,
        version_id: int,
        state: KVState,
        model_sha256: str,
        *,
        prompt_tokens: int,
        ring: dict[str, Any] | None = None,
    ) -> int:
        """Keep a KV state (the prompt, its first ``prompt_tokens`` tokens, and the reply) so a
        rollback to this version can resume without evaluating the prompt again."""
        packed = rows.PackedKV.of(state, model_sha256, prompt_tokens, ring)
        return self.write(lambda s: rows.save_kv(s, version_id, packed))

    def record(self, doc: CoreDocument, name: str, entries: Sequence[Entry], *,
               session: int | None = None, parent: int | None = None) -> list[int]:  # fmt: skip
        """What one command or click produced, in ONE transaction: a version per entry with its
        run and (when given) its KV state. The version ids.

        Without ``session``: the document and a new session, whose first versions they are
        (siblings at the root). With ``session``: added to that line of work on the same
        document, all children of ``parent`` (None: of the session's newest version), so a
        comparison of strategies branches once per strategy from where the person was. An
        entry that ``follows_previous`` is the child of the version made just before it (the
        questions of one job asked one after the other)."""
        blob = None if session is not None else self._text_blob(doc)
        packed = [
            None if e.state is None
            else rows.PackedKV.of(e.state, e.content.get("model_sha256", ""), e.prompt_tokens,
                                  e.ring)
            for e in entries
        ]  # fmt: skip

        def action(s: OrmSession) -> list[int]:
            if session is None:
                into, under = rows.create_session(s, name, rows.add_document(s, doc, blob)), None
            else:
                into, under = session, rows.parent_in(s, session, parent, doc)
            ids: list[int] = []
            for entry, kv in zip(entries, packed, strict=True):
                above = ids[-1] if entry.follows_previous and ids else under
                v = rows.save_version(s, into, above, dict(entry.content), root=above is None)
                rows.save_run(s, v.id, entry.result.as_dict())
                if kv is not None:
                    rows.save_kv(s, v.id, kv)
                ids.append(v.id)
            return ids

        return self.write(action)

    def session_info(self, session_id: int) -> dict[str, Any]:
        """One session that is not deleted: id, name, its document's path and sha256, its
        newest version (None: none yet); RepositoryError when there is none."""

        def action(s: OrmSession) -> dict[str, Any]:
            row = rows.session_row(s, session_id)
            doc = s.get(Document, row.document_id) if row.document_id is not None else None
            return {"id": row.id, "name": row.name,
                    "document": doc.path if doc is not None else None,
                    "document_sha256": doc.sha256 if doc is not None else None,
                    "newest": rows.newest(s, row.id)}  # fmt: skip

        return self.read(action)

    def latest_session(self, document_sha256: str) -> tuple[int, int | None] | None:
        """The newest session on a document with this text and its newest version (None: the
        document has no session), so reopening a document goes on with its line of work."""

        def action(s: OrmSession) -> tuple[int, int | None] | None:
            found = s.scalar(
                select(Session.id)
                .join(Document, Session.document_id == Document.id)
                .where(Document.sha256 == document_sha256, Session.deleted.is_(None))
                .order_by(Session.id.desc())
                .limit(1)
            )
            return None if found is None else (found, rows.newest(s, found))

        return self.read(action)

    def finished_version(self, document_sha256: str, content: dict[str, Any]) -> int | None:
        """A version that already did exactly this to this document and finished (its last run
        ended with ``stop``, ``length`` or ``repetition``, without an error or a refusal); None
        when there is none. A batch run again skips what it finds (resumable batches); the
        sampling settings are part of ``content["settings"]``, so a run sampled otherwise is
        not the same run. The model is matched by its sha256 when known (its path may be
        written relative by one face, absolute by the other)."""
        by_sha = bool(content.get("model_sha256"))
        matched = [k for k in _MATCHED if k in content and not (by_sha and k == "model_path")]

        def action(s: OrmSession) -> int | None:
            same = [getattr(PromptVersion, k) == content[k] for k in matched]
            query = (
                select(PromptVersion)
                .join(Session, PromptVersion.session_id == Session.id)
                .join(Document, Session.document_id == Document.id)
                .where(Document.sha256 == document_sha256)
                .where(Session.deleted.is_(None), PromptVersion.deleted.is_(None), *same)
                .order_by(PromptVersion.id.desc())
            )
            for v in s.scalars(query):
                if not _same_settings(v.settings or {}, content.get("settings", {})):
                    continue
                last = s.scalars(select(Run).where(Run.version_id == v.id)
                                 .order_by(Run.id.desc()).limit(1)).first()  # fmt: skip
                if (
                    last is not None
                    and last.finish_reason in ("stop", "length", "repetition")
                    and not (last.error or last.refused)
                ):
                    return v.id
            return None

        return self.read(action)

    def kv_state(
        self,
        version_id: int,
        *,
        model_sha256: str,
        n_ctx: int | None = None,
        cache_type: str | None = None,
        model_path: str = "",
    ) -> SavedKV | None:
        """The newest resumable state for a version with this model (and, when given, this n_ctx
        and cache type), or None. A version made by rollback has no state of its own: the state
        of the version it equals (its parent, and so on up) is used."""

        def action(s: OrmSession) -> SavedKV | None:
            v: PromptVersion | None = rows.version_row(s, version_id)
            while v is not None:
                query = select(KVStateRow).where(
                    KVStateRow.version_id == v.id, KVStateRow.model_sha256 == model_sha256,
                    KVStateRow.prompt_tokens > 0,
                )  # fmt: skip
                if n_ctx is not None:
                    query = query.where(KVStateRow.n_ctx == n_ctx)
                if cache_type is not None:
                    query = query.where(KVStateRow.cache_type == cache_type)
                row = s.scalar(query.order_by(KVStateRow.id.desc()).limit(1))
                if row is not None:
                    state = KVState(unpack_tokens(row.tokens), unpack(row.data), row.n_ctx,
                                    row.cache_type, model_path)  # fmt: skip
                    rows.check_saved(row, state, v.id)
                    return SavedKV(state, row.prompt_tokens, v.id, dict(row.ring or {}))
                parent = s.get(PromptVersion, v.parent_id) if v.parent_id is not None else None
                same = parent is not None and all(
                    getattr(parent, k) == getattr(v, k) for k in _CONTENT
                )
                v = parent if same else None
            return None

        return self.read(action)

    def kv_states(self, version_id: int) -> list[dict[str, Any]]:
        """What is saved for a version, without the bytes (for showing)."""

        def action(s: OrmSession) -> list[dict[str, Any]]:
            found = s.scalars(
                select(KVStateRow)
                .where(KVStateRow.version_id == version_id)
                .order_by(KVStateRow.id)
            )
            return [{"id": r.id, "model_sha256": r.model_sha256, "n_ctx": r.n_ctx,
                     "cache_type": r.cache_type, "prompt_tokens": r.prompt_tokens,
                     "state_bytes": r.state_bytes, "created": r.created.isoformat()}
                    for r in found]  # fmt: skip

        return self.read(action)


# ----- inside a write transaction -----


@dataclass(frozen=True)
class Entry:
    """One version to record: its content (task, strategy, prompt, model_path, model_sha256,
    settings), the job result, and optionally the KV state after it."""

    content: dict[str, Any]
    result: Any  # app.core.jobs.tasks.JobResult
    state: KVState | None = None
    prompt_tokens: int = 0
    follows_previous: bool = False  # the child of the entry before it, not of the parent given
    ring: dict[str, Any] | None = None  # kept with the state: its prompt's segments


def _reply_lines(runs: list[dict[str, Any]]) -> list[str]:
    """What a version's last run answered, as diff lines (a version never run says so)."""
    if not runs:
        return ["finish: (not run)", "reply:"]
    last = runs[-1]
    lines = [f"finish: {last['finish_reason']}"]
    if last.get("error") or last.get("refused"):
        lines.append(f"error: {last.get('error') or last.get('refused')}")
    lines.append("reply:")
    outputs = last.get("outputs") or []
    for out in outputs:
        if len(outputs) > 1:
            lines.append(f"[{out.get('step', '')}]")
        lines.extend(str(out.get("text", "")).splitlines())
    return lines


def _same_settings(recorded: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Equal settings; a local run recorded before the KV cache type was part of them ran with
    the default cache (f16)."""
    if "kv_cache_type" not in recorded and wanted.get("engine") == "local":
        recorded = {**recorded, "kv_cache_type": "f16"}
    return recorded == wanted
