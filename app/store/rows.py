"""The rows of the history inside one transaction: what the repository's writes and reads do
with a SQLAlchemy session of the writer thread (app/store/repository.py holds the transactions
and their order; these are their steps)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session as OrmSession

from app.core.documents import Document as CoreDocument
from app.core.engine.types import KVState
from app.store.blobs import pack, pack_tokens
from app.store.db import RepositoryError
from app.store.models import (
    Document,
    DocumentText,
    KVStateRow,
    PromptVersion,
    Run,
    Session,
)


@dataclass(frozen=True)
class PackedKV:
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
           ring: dict[str, Any] | None = None) -> PackedKV:  # fmt: skip
        if not 0 < prompt_tokens <= len(state.tokens):
            raise RepositoryError("a KV state must say which of its tokens are the prompt")
        return cls(model_sha256, state.n_ctx, state.kv_cache_type, pack_tokens(state.tokens),
                   pack(state.data), len(state.data), prompt_tokens, ring or {})  # fmt: skip


def check_saved(row: KVStateRow, state: KVState, version_id: int) -> None:
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


def version_row(s: OrmSession, version_id: int) -> PromptVersion:
    v = s.get(PromptVersion, version_id)
    if v is None or v.deleted is not None or v.session.deleted is not None:
        raise RepositoryError(f"there is no version {version_id}")
    return v


def pack_text(doc: CoreDocument) -> bytes:
    return pack(doc.text.encode("utf-8", "surrogatepass"), level=3)


def add_document(s: OrmSession, doc: CoreDocument, blob: bytes | None) -> int:
    """The document's row; its text's too unless stored (``blob`` None: it was, when looked)."""
    if s.get(DocumentText, doc.sha256) is None:
        blob = blob if blob is not None else pack_text(doc)  # deleted since it was looked up
        s.add(DocumentText(sha256=doc.sha256, chars=len(doc.text), compressed=blob))
        s.flush()  # the text row first: the document refers to it
    row = Document(path=str(doc.path or doc.name), sha256=doc.sha256, size=doc.size,
                   encoding=doc.encoding)  # fmt: skip
    s.add(row)
    s.flush()
    return row.id


def create_session(s: OrmSession, name: str, document_id: int | None) -> int:
    row = Session(name=name, document_id=document_id)
    s.add(row)
    s.flush()
    return row.id


def save_version(
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
        parent = newest(s, session_id)
    elif parent is not None and version_row(s, parent).session_id != session_id:
        raise RepositoryError(f"version {parent} belongs to another session")
    highest = select(func.max(PromptVersion.number)).where(PromptVersion.session_id == session_id)
    number = (s.scalar(highest) or 0) + 1
    v = PromptVersion(session_id=session_id, parent_id=parent, number=number, **content)
    s.add(v)
    s.flush()
    return v


def save_run(s: OrmSession, version_id: int, data: dict[str, Any]) -> int:
    version_row(s, version_id)
    run = Run(version_id=version_id, strategy=data["strategy"], plan=data["plan"],
              outputs=data["outputs"], prompt_tokens=data["prompt_tokens"],
              completion_tokens=data["completion_tokens"], kv_peak_cells=data["kv_peak_cells"],
              timings={"seconds": data["seconds"], "ttft_s": data["ttft_s"],
                       "evaluated_tokens": data["evaluated_tokens"],
                       "lanes": data.get("lanes"), "threads": data.get("threads"),
                       # every change of llama.cpp's thread count, its cause and figure
                       "thread_changes": data.get("thread_changes") or []},
              finish_reason=data["finish_reason"], truncated=data["truncated"],
              error=data.get("error"), refused=data.get("refused"))  # fmt: skip
    s.add(run)
    s.flush()
    return run.id


def save_kv(s: OrmSession, version_id: int, kv: PackedKV) -> int:
    version_row(s, version_id)
    row = KVStateRow(version_id=version_id, model_sha256=kv.model_sha256, n_ctx=kv.n_ctx,
                     cache_type=kv.cache_type, tokens=kv.tokens, data=kv.data, ring=kv.ring,
                     prompt_tokens=kv.prompt_tokens, state_bytes=kv.state_bytes)  # fmt: skip
    s.add(row)
    s.flush()
    return row.id


def session_row(s: OrmSession, session_id: int) -> Session:
    row = s.get(Session, session_id)
    if row is None or row.deleted is not None:
        raise RepositoryError(f"there is no session {session_id}")
    return row


def newest(s: OrmSession, session_id: int) -> int | None:
    """The session's newest version that is not deleted (None: it has none)."""
    return s.scalar(
        select(PromptVersion.id)
        .where(PromptVersion.session_id == session_id, PromptVersion.deleted.is_(None))
        .order_by(PromptVersion.number.desc())
        .limit(1)
    )


def parent_in(s: OrmSession, session_id: int, parent: int | None,
               doc: CoreDocument) -> int | None:  # fmt: skip
    """Where new versions of a document go in a session: under ``parent`` (None: the newest
    version). RepositoryError, before anything is written, when the session is gone or on
    another document, or the parent is not one of its versions."""
    row = session_row(s, session_id)
    on = s.get(Document, row.document_id) if row.document_id is not None else None
    if on is None or on.sha256 != doc.sha256:
        name = Path(on.path).name if on is not None else "no document"
        raise RepositoryError(f"session {session_id} is on another document ({name}), not on "
                              f"{doc.name}")  # fmt: skip
    if parent is None:
        return newest(s, session_id)
    if version_row(s, parent).session_id != session_id:
        raise RepositoryError(f"version {parent} belongs to another session, not {session_id}")
    return parent


def visible_parent(s: OrmSession, v: PromptVersion) -> int | None:
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


def purge(s: OrmSession) -> int:
    gone_sessions = set(s.scalars(select(Session.id).where(Session.deleted.is_not(None))))
    versions = s.scalars(select(PromptVersion)).all()
    gone = {v.id for v in versions if v.deleted is not None or v.session_id in gone_sessions}
    for v in versions:
        if v.id not in gone and v.parent_id in gone:
            v.parent_id = visible_parent(s, v)
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
