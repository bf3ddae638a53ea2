"""The database schema: documents, sessions, a tree of prompt versions, runs and KV states.

Typed SQLAlchemy 2 models. Large payloads (document text, KV state bytes, token lists) are stored
compressed; a document's text is stored once per sha256 however many sessions use it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite gives back naive times (stored as UTC); callers and files get aware ones."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class DocumentText(Base):
    """The text of a document, once per content hash, compressed UTF-8 (app/store/blobs.py)."""

    __tablename__ = "document_texts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    chars: Mapped[int] = mapped_column(Integer)
    compressed: Mapped[bytes] = mapped_column(LargeBinary)


class Document(Base):
    __tablename__ = "documents"
    id: Mapped[int] = mapped_column(primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(ForeignKey("document_texts.sha256"), index=True)
    size: Mapped[int] = mapped_column(Integer)
    encoding: Mapped[str] = mapped_column(String(64))
    created: Mapped[datetime] = mapped_column(default=now)


class Session(Base):
    """One piece of work on one document: the root of a tree of prompt versions."""

    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    document_id: Mapped[int | None] = mapped_column(ForeignKey("documents.id"))
    created: Mapped[datetime] = mapped_column(default=now)
    deleted: Mapped[datetime | None] = mapped_column(default=None)
    versions: Mapped[list[PromptVersion]] = relationship(
        back_populates="session", order_by="PromptVersion.number"
    )


class PromptVersion(Base):
    """A prompt as run or edited; ``parent`` makes the history a tree (editing an old one
    branches)."""

    __tablename__ = "prompt_versions"
    __table_args__ = (UniqueConstraint("session_id", "number"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("prompt_versions.id"))
    number: Mapped[int] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(32))
    prompt: Mapped[str] = mapped_column(Text, default="")
    strategy: Mapped[str] = mapped_column(String(32))
    model_path: Mapped[str] = mapped_column(Text, default="")
    model_sha256: Mapped[str] = mapped_column(String(64), default="")
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created: Mapped[datetime] = mapped_column(default=now)
    deleted: Mapped[datetime | None] = mapped_column(default=None)
    session: Mapped[Session] = relationship(back_populates="versions")


class Run(Base):
    """One execution of a version under a strategy: plan metrics, outputs, figures."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("prompt_versions.id"), index=True)
    strategy: Mapped[str] = mapped_column(String(32))
    plan: Mapped[dict[str, Any]] = mapped_column(default=dict)
    outputs: Mapped[list[Any]] = mapped_column(default=list)  # [{text, source_spans, ...}]
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    kv_peak_cells: Mapped[int] = mapped_column(Integer, default=0)
    timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    finish_reason: Mapped[str] = mapped_column(String(16))
    truncated: Mapped[bool] = mapped_column(default=False)
    created: Mapped[datetime] = mapped_column(default=now)
    # why a run ended in error, one sentence: the engine's failure (the outputs keep the text
    # generated before it), or the refusal of a request that does not fit
    error: Mapped[str | None] = mapped_column(Text, default=None)
    refused: Mapped[str | None] = mapped_column(Text, default=None)


class KVStateRow(Base):
    """A saved KV cache for a version, usable only with the same model, n_ctx and cache type.
    ``tokens`` are the prompt (its first ``prompt_tokens``) and the reply that followed."""

    __tablename__ = "kv_states"
    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("prompt_versions.id"), index=True)
    model_sha256: Mapped[str] = mapped_column(String(64))
    n_ctx: Mapped[int] = mapped_column(Integer)
    cache_type: Mapped[str] = mapped_column(String(16))
    tokens: Mapped[bytes] = mapped_column(LargeBinary)  # int32 little-endian, compressed
    data: Mapped[bytes] = mapped_column(LargeBinary)  # llama.cpp's sequence state, compressed
    ring: Mapped[dict[str, Any]] = mapped_column(default=dict)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    state_bytes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created: Mapped[datetime] = mapped_column(default=now)
