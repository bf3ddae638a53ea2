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
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import delete, func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session as OrmSession

from app.core.documents import Document as CoreDocument
from app.core.engine.types import KVState
from app.store.blobs import pack, pack_tokens, unpack, unpack_tokens
from app.store.db import Database, StoreError, describe_failure
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

T = TypeVar("T")


class RepositoryError(ValueError):
    """An action the history cannot take (unknown id, deleted item); one sentence."""


@dataclass(frozen=True)
class VersionInfo:
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
class SavedKV:
    """A stored KV state: the prompt is its first ``prompt_tokens`` tokens; ``version`` is the
    version it was saved for (an ancestor when the asked-for version is a rollback copy)."""

    state: KVState
    prompt_tokens: int
    version: int


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
        return self.write(lambda s: _add_document(s, doc, blob))

    def _text_blob(self, doc: CoreDocument) -> bytes | None:
        """The text compressed for the store, or None when the store has it already: encoding
        a 50 MB text holds the GIL ~50 ms, a stall of the window for every job on it."""
        if self.read(lambda s: s.get(DocumentText, doc.sha256) is not None):
            return None
        return _pack_text(doc)

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
        return self.write(lambda s: _create_session(s, name, document_id))

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
            v = _save_version(s, session_id, parent_id, content)
            return _info(v, v.parent_id)

        return self.write(action)

    def get_version(self, version_id: int) -> VersionInfo:
        def action(s: OrmSession) -> VersionInfo:
            v = _version(s, version_id)
            return _info(v, _visible_parent(s, v))

        return self.read(action)

    def history(self, session_id: int | None = None) -> list[VersionInfo]:
        """Versions (of one session, or all) in creation order, each with its children: a tree.
        A version whose parent was deleted hangs from its nearest remaining ancestor."""

        def action(s: OrmSession) -> list[VersionInfo]:
            query = select(PromptVersion).join(Session).where(Session.deleted.is_(None))
            if session_id is not None:
                query = query.where(PromptVersion.session_id == session_id)
            rows = s.scalars(query.order_by(PromptVersion.session_id, PromptVersion.number)).all()
            by_id = {v.id: v for v in rows}
            parents = {v.id: _visible_parent(s, v) for v in rows if v.deleted is None}
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
            rows = s.execute(
                select(Session, Document.path, count)
                .outerjoin(Document, Session.document_id == Document.id)
                .where(Session.deleted.is_(None))
                .order_by(Session.id)
            )
            return [{"id": row.id, "name": row.name, "document": path, "versions": n,
                     "created": as_utc(row.created).isoformat()}
                    for row, path, n in rows]  # fmt: skip

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
            _version(s, version_id).deleted = now()

        self.write(action)
        self._undo.append(("version", version_id))

    def delete_session(self, session_id: int) -> None:
        """Soft delete of a whole session, like :meth:`delete_version`."""

        def action(s: OrmSession) -> None:
            _session(s, session_id).deleted = now()

        self.write(action)
        self._undo.append(("session", session_id))

    def undo_delete(self) -> tuple[str, int] | None:
        """Bring back the last deleted version or session: ("version" or "session", its id), or
        None when there is nothing to undo."""
        if not self._undo:
            return None
        kind, item = self._undo.pop()
        model = PromptVersion if kind == "version" else Session

        def action(s: OrmSession) -> None:
            row = s.get(model, item)
            if row is not None:
                row.deleted = None

        self.write(action)
        return kind, item

    def purge_deleted(self) -> int:
        """Remove for good what is marked deleted (also what a crashed run left marked): runs,
        KV states, versions (children move to the nearest remaining ancestor), sessions, and
        documents no session uses. The number of versions removed."""
        self._undo.clear()
        return self.write(_purge)

    # ----- runs and KV states -----

    def save_run(self, version_id: int, result: Any) -> int:
        """Record a job result (app.core.jobs.tasks.JobResult) under a version."""
        return self.write(lambda s: _save_run(s, version_id, result.as_dict()))

    def runs(self, version_id: int) -> list[dict[str, Any]]:
        def action(s: OrmSession) -> list[dict[str, Any]]:
            rows = s.scalars(select(Run).where(Run.version_id == version_id).order_by(Run.id))
            return [{"id": r.id, "strategy": r.strategy, "finish_reason": r.finish_reason,
                     "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                     "kv_peak_cells": r.kv_peak_cells, "outputs": r.outputs,
                     "truncated": r.truncated, "timings": r.timings, "error": r.error,
                     "refused": r.refused} for r in rows]  # fmt: skip

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
        packed = _PackedKV.of(state, model_sha256, prompt_tokens, ring)
        return self.write(lambda s: _save_kv(s, version_id, packed))

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
            else _PackedKV.of(e.state, e.content.get("model_sha256", ""), e.prompt_tokens)
            for e in entries
        ]  # fmt: skip

        def action(s: OrmSession) -> list[int]:
            if session is None:
                into, under = _create_session(s, name, _add_document(s, doc, blob)), None
            else:
                into, under = session, _parent_in(s, session, parent, doc)
            ids: list[int] = []
            for entry, kv in zip(entries, packed, strict=True):
                above = ids[-1] if entry.follows_previous and ids else under
                v = _save_version(s, into, above, dict(entry.content), root=above is None)
                _save_run(s, v.id, entry.result.as_dict())
                if kv is not None:
                    _save_kv(s, v.id, kv)
                ids.append(v.id)
            return ids

        return self.write(action)

    def session_info(self, session_id: int) -> dict[str, Any]:
        """One session that is not deleted: id, name, its document's path and sha256, its
        newest version (None: none yet); RepositoryError when there is none."""

        def action(s: OrmSession) -> dict[str, Any]:
            row = _session(s, session_id)
            doc = s.get(Document, row.document_id) if row.document_id is not None else None
            return {"id": row.id, "name": row.name,
                    "document": doc.path if doc is not None else None,
                    "document_sha256": doc.sha256 if doc is not None else None,
                    "newest": _newest(s, row.id)}  # fmt: skip

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
            return None if found is None else (found, _newest(s, found))

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
            v: PromptVersion | None = _version(s, version_id)
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
                    _check_saved(row, state, v.id)
                    return SavedKV(state, row.prompt_tokens, v.id)
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
            rows = s.scalars(
                select(KVStateRow)
                .where(KVStateRow.version_id == version_id)
                .order_by(KVStateRow.id)
            )
            return [{"id": r.id, "model_sha256": r.model_sha256, "n_ctx": r.n_ctx,
                     "cache_type": r.cache_type, "prompt_tokens": r.prompt_tokens,
                     "state_bytes": r.state_bytes, "created": r.created.isoformat()}
                    for r in rows]  # fmt: skip

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


@dataclass(frozen=True)
class _PackedKV:
    """A KV state compressed before the transaction, so the writer is not held up packing."""

    model_sha256: str
    n_ctx: int
    cache_type: str
    tokens: bytes
    data: bytes
    state_bytes: int
    prompt_tokens: int
    ring: dict[str, Any]

    @classmethod
    def of(cls, state: KVState, model_sha256: str, prompt_tokens: int,
           ring: dict[str, Any] | None = None) -> _PackedKV:  # fmt: skip
        if not 0 < prompt_tokens <= len(state.tokens):
            raise RepositoryError("a KV state must say which of its tokens are the prompt")
        return cls(model_sha256, state.n_ctx, state.kv_cache_type, pack_tokens(state.tokens),
                   pack(state.data), len(state.data), prompt_tokens, ring or {})  # fmt: skip


def _check_saved(row: KVStateRow, state: KVState, version_id: int) -> None:
    """RepositoryError unless a stored state is whole and of its own tokens, before anything
    hands it to llama.cpp: its bytes as many as were recorded when it was kept, its prompt
    within its tokens, its tokens within its context. (Imported states were also checked
    against llama.cpp's layout on the way in: app/store/kv_layout.py.)"""
    size, tokens = len(state.data), len(state.tokens)
    problem = None
    if row.state_bytes and size != row.state_bytes:  # 0: kept before the size was recorded
        problem = f"{size:,} bytes where {row.state_bytes:,} were kept"
    elif not 0 < row.prompt_tokens <= tokens <= row.n_ctx:
        problem = (f"{tokens:,} tokens with a prompt of {row.prompt_tokens:,} in a context of "
                   f"{row.n_ctx:,}")  # fmt: skip
    if problem is not None:
        raise RepositoryError(
            f"the saved KV state of version {version_id} is damaged ({problem}); roll back "
            "without resuming from it"
        )


def _version(s: OrmSession, version_id: int) -> PromptVersion:
    v = s.get(PromptVersion, version_id)
    if v is None or v.deleted is not None or v.session.deleted is not None:
        raise RepositoryError(f"there is no version {version_id}")
    return v


def _pack_text(doc: CoreDocument) -> bytes:
    return pack(doc.text.encode("utf-8", "surrogatepass"), level=3)


def _add_document(s: OrmSession, doc: CoreDocument, blob: bytes | None) -> int:
    """The document's row; its text's too unless stored (``blob`` None: it was, when looked)."""
    if s.get(DocumentText, doc.sha256) is None:
        blob = blob if blob is not None else _pack_text(doc)  # deleted since it was looked up
        s.add(DocumentText(sha256=doc.sha256, chars=len(doc.text), compressed=blob))
        s.flush()  # the text row first: the document refers to it
    row = Document(path=str(doc.path or doc.name), sha256=doc.sha256, size=doc.size,
                   encoding=doc.encoding)  # fmt: skip
    s.add(row)
    s.flush()
    return row.id


def _create_session(s: OrmSession, name: str, document_id: int | None) -> int:
    row = Session(name=name, document_id=document_id)
    s.add(row)
    s.flush()
    return row.id


def _save_version(
    s: OrmSession, session_id: int, parent_id: int | None, content: dict[str, Any], *,
    root: bool = False,
) -> PromptVersion:
    """A new version numbered after the session's last, child of ``parent_id`` (None: of the
    session's newest version, or none at all when ``root``)."""
    session = s.get(Session, session_id)
    if session is None or session.deleted is not None:
        raise RepositoryError(f"there is no session {session_id}")
    parent = parent_id
    if parent is None and not root:
        parent = _newest(s, session_id)
    elif parent is not None and _version(s, parent).session_id != session_id:
        raise RepositoryError(f"version {parent} belongs to another session")
    highest = select(func.max(PromptVersion.number)).where(PromptVersion.session_id == session_id)
    number = (s.scalar(highest) or 0) + 1
    v = PromptVersion(session_id=session_id, parent_id=parent, number=number, **content)
    s.add(v)
    s.flush()
    return v


def _save_run(s: OrmSession, version_id: int, data: dict[str, Any]) -> int:
    _version(s, version_id)
    run = Run(version_id=version_id, strategy=data["strategy"], plan=data["plan"],
              outputs=data["outputs"], prompt_tokens=data["prompt_tokens"],
              completion_tokens=data["completion_tokens"], kv_peak_cells=data["kv_peak_cells"],
              timings={"seconds": data["seconds"], "ttft_s": data["ttft_s"],
                       "evaluated_tokens": data["evaluated_tokens"],
                       "lanes": data.get("lanes")},
              finish_reason=data["finish_reason"], truncated=data["truncated"],
              error=data.get("error"), refused=data.get("refused"))  # fmt: skip
    s.add(run)
    s.flush()
    return run.id


def _save_kv(s: OrmSession, version_id: int, kv: _PackedKV) -> int:
    _version(s, version_id)
    row = KVStateRow(version_id=version_id, model_sha256=kv.model_sha256, n_ctx=kv.n_ctx,
                     cache_type=kv.cache_type, tokens=kv.tokens, data=kv.data, ring=kv.ring,
                     prompt_tokens=kv.prompt_tokens, state_bytes=kv.state_bytes)  # fmt: skip
    s.add(row)
    s.flush()
    return row.id


def _session(s: OrmSession, session_id: int) -> Session:
    row = s.get(Session, session_id)
    if row is None or row.deleted is not None:
        raise RepositoryError(f"there is no session {session_id}")
    return row


def _newest(s: OrmSession, session_id: int) -> int | None:
    """The session's newest version that is not deleted (None: it has none)."""
    return s.scalar(
        select(PromptVersion.id)
        .where(PromptVersion.session_id == session_id, PromptVersion.deleted.is_(None))
        .order_by(PromptVersion.number.desc())
        .limit(1)
    )


def _parent_in(s: OrmSession, session_id: int, parent: int | None,
               doc: CoreDocument) -> int | None:  # fmt: skip
    """Where new versions of a document go in a session: under ``parent`` (None: the newest
    version). RepositoryError, before anything is written, when the session is gone or on
    another document, or the parent is not one of its versions."""
    row = _session(s, session_id)
    on = s.get(Document, row.document_id) if row.document_id is not None else None
    if on is None or on.sha256 != doc.sha256:
        name = Path(on.path).name if on is not None else "no document"
        raise RepositoryError(f"session {session_id} is on another document ({name}), not on "
                              f"{doc.name}")  # fmt: skip
    if parent is None:
        return _newest(s, session_id)
    if _version(s, parent).session_id != session_id:
        raise RepositoryError(f"version {parent} belongs to another session, not {session_id}")
    return parent


def _visible_parent(s: OrmSession, v: PromptVersion) -> int | None:
    """The nearest ancestor that is not deleted (None at the root). Rows already loaded come
    from the session's identity map, so walking a loaded tree costs no queries."""
    parent = v.parent_id
    seen = {v.id}
    while parent is not None and parent not in seen:
        row = s.get(PromptVersion, parent)
        if row is None:
            return None
        if row.deleted is None:
            return parent
        seen.add(parent)
        parent = row.parent_id
    return None


def _purge(s: OrmSession) -> int:
    gone_sessions = set(s.scalars(select(Session.id).where(Session.deleted.is_not(None))))
    versions = s.scalars(select(PromptVersion)).all()
    gone = {v.id for v in versions if v.deleted is not None or v.session_id in gone_sessions}
    for v in versions:
        if v.id not in gone and v.parent_id in gone:
            v.parent_id = _visible_parent(s, v)
    for v in versions:
        if v.id in gone:
            v.parent_id = None  # no row refers to another that is about to go
    s.flush()
    if gone:
        s.execute(delete(KVStateRow).where(KVStateRow.version_id.in_(gone)))
        s.execute(delete(Run).where(Run.version_id.in_(gone)))
        s.execute(delete(PromptVersion).where(PromptVersion.id.in_(gone)))
    if gone_sessions:
        s.execute(delete(Session).where(Session.id.in_(gone_sessions)))
    used = select(Session.document_id).where(Session.document_id.is_not(None))
    s.execute(delete(Document).where(Document.id.not_in(used)))
    s.execute(delete(DocumentText).where(DocumentText.sha256.not_in(select(Document.sha256))))
    return len(gone)
