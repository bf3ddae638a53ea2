"""An export: one history session written to a ``.ctxlens`` file, atomically.

The session, its document, its tree of prompt versions, their runs and (optionally) their saved
KV states are read in one database transaction, then streamed into a zip with a manifest of
every member's size and sha256. The zip is written to a temporary file beside the target and
renamed over it only once complete and synced, so a failed or cancelled export never damages an
earlier one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import zstandard
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession

import app
from app.core.history_records import ExportSummary, Progress
from app.store.archive_format import (
    CHUNK,
    DOCUMENT,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SESSION,
    Meter,
    fail,
)
from app.store.blobs import unpack
from app.store.models import Document, DocumentText, KVStateRow, PromptVersion, Run, Session, as_utc

if TYPE_CHECKING:
    from app.store.repository import Repository


def _iso(value: datetime) -> str:
    return as_utc(value).isoformat()


@dataclass
class _Snapshot:
    """What one export writes, read in one database transaction (blobs still compressed)."""

    body: dict[str, Any]
    document: bytes | None  # the UTF-8 text, packed (app/store/blobs.py)
    kv: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # id, packed tokens, data


def _begin_snapshot(s: OrmSession) -> None:
    """Make the session's reads one SQLite read transaction: pysqlite does not BEGIN for
    SELECTs, so without this each query would see the database as of its own moment."""
    raw = s.connection().connection.dbapi_connection
    if raw is not None and not getattr(raw, "in_transaction", True):
        raw.execute("BEGIN")


def _snapshot(s: OrmSession, session_id: int, include_kv: bool) -> _Snapshot | None:
    _begin_snapshot(s)
    session = s.get(Session, session_id)
    if session is None or session.deleted is not None:
        return None
    rows = s.scalars(select(PromptVersion).where(PromptVersion.session_id == session_id)).all()
    by_id = {v.id: v for v in rows}
    kept = sorted((v for v in rows if v.deleted is None), key=lambda v: v.number)

    def visible_parent(v: PromptVersion) -> int | None:
        seen = {v.id}
        parent = v.parent_id
        while parent is not None and parent in by_id and parent not in seen:
            if by_id[parent].deleted is None:
                return parent
            seen.add(parent)
            parent = by_id[parent].parent_id
        return None

    ids = select(PromptVersion.id).where(
        PromptVersion.session_id == session_id, PromptVersion.deleted.is_(None)
    )
    versions = [
        {"id": v.id, "parent": visible_parent(v), "number": v.number, "task": v.task,
         "prompt": v.prompt, "strategy": v.strategy, "model_path": v.model_path,
         "model_sha256": v.model_sha256, "settings": v.settings or {}, "created": _iso(v.created)}
        for v in kept
    ]  # fmt: skip
    runs = [
        {"id": r.id, "version": r.version_id, "strategy": r.strategy, "plan": r.plan or {},
         "outputs": r.outputs or [], "prompt_tokens": r.prompt_tokens,
         "completion_tokens": r.completion_tokens, "kv_peak_cells": r.kv_peak_cells,
         "timings": r.timings or {}, "finish_reason": r.finish_reason,
         "truncated": bool(r.truncated), "created": _iso(r.created), "error": r.error,
         "refused": r.refused}
        for r in s.scalars(select(Run).where(Run.version_id.in_(ids)).order_by(Run.id))
    ]  # fmt: skip
    kv_meta: list[dict[str, Any]] = []
    kv_blobs: list[tuple[int, bytes, bytes]] = []
    if include_kv:
        query = select(KVStateRow).where(KVStateRow.version_id.in_(ids)).order_by(KVStateRow.id)
        for k in s.scalars(query):
            kv_meta.append(
                {"id": k.id, "version": k.version_id, "model_sha256": k.model_sha256,
                 "n_ctx": k.n_ctx, "cache_type": k.cache_type, "ring": k.ring or {},
                 "prompt_tokens": k.prompt_tokens, "state_bytes": k.state_bytes,
                 "created": _iso(k.created)}
            )  # fmt: skip
            kv_blobs.append((k.id, k.tokens, k.data))
    document = None
    doc_meta = None
    if session.document_id is not None:
        doc = s.get(Document, session.document_id)
        if doc is not None:
            text = s.get(DocumentText, doc.sha256)
            document = text.compressed if text is not None else None
            doc_meta = {"path": doc.path, "sha256": doc.sha256, "size": doc.size,
                        "encoding": doc.encoding}  # fmt: skip
    body = {
        "session": {"name": session.name, "created": _iso(session.created)},
        "document": doc_meta if document is not None else None,
        "versions": versions,
        "runs": runs,
        "kv_states": kv_meta,
    }
    return _Snapshot(body, document, kv_blobs)


def _chunks(data: bytes, weight: int, meter: Meter) -> Iterator[memoryview]:
    """``data`` in chunks for the zip writer; the meter moves by ``weight`` as they are written
    (an export counts the packed bytes it reads from the history: they are known beforehand)."""
    view = memoryview(data)
    base = meter.done
    for start in range(0, len(view), CHUNK):
        end = min(start + CHUNK, len(view))
        yield view[start:end]
        meter.reach(base + weight * end // len(view))
    meter.reach(base + weight)


def _packed_size(snap: _Snapshot) -> int:
    document = len(snap.document) if snap.document is not None else 0
    return document + sum(len(tokens) + len(data) for _, tokens, data in snap.kv)


def _put_member(
    zf: zipfile.ZipFile,
    name: str,
    chunks: Iterable[memoryview],
    members: dict[str, dict[str, Any]],
) -> None:
    """Write one member, recording its sha256 and size for the manifest."""
    digest = hashlib.sha256()
    size = 0
    target: str | zipfile.ZipInfo = name
    if name.startswith("kv/"):  # KV values are near-random: deflate saves ~8% at ~30 s per GB
        target = zipfile.ZipInfo(name, datetime.now(UTC).timetuple()[:6])
        target.compress_type = zipfile.ZIP_STORED
    with zf.open(target, "w", force_zip64=name.startswith("kv/")) as out:
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    members[name] = {"sha256": digest.hexdigest(), "size": size}


def _write_zip(out: IO[bytes], snap: _Snapshot, meter: Meter) -> None:
    members: dict[str, dict[str, Any]] = {}
    body = json.dumps(snap.body, ensure_ascii=False).encode("utf-8")
    meter.start(len(body) + _packed_size(snap))
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:

        def put(name: str, packed: bytes) -> None:  # one at a time: never all unpacked at once
            _put_member(zf, name, _chunks(unpack(packed), len(packed), meter), members)

        _put_member(zf, SESSION, _chunks(body, len(body), meter), members)
        if snap.document is not None:
            put(DOCUMENT, snap.document)
        for kv_id, tokens, data in snap.kv:
            put(f"kv/{kv_id}.tokens", tokens)
            put(f"kv/{kv_id}.state", data)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "app_version": app.__version__,
            "created": _iso(datetime.now(UTC)),
            "members": members,
        }
        zf.writestr(MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False))
    meter.finish()  # the last moment a cancel is heard: then the file is synced and renamed


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the rename has happened regardless
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(target: Path, write: Callable[[IO[bytes]], None]) -> int:
    """Write through a temporary file in the target's folder, then rename it over the target."""
    folder = target.parent
    mode = None
    with contextlib.suppress(OSError):
        mode = target.stat().st_mode & 0o777
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise fail(target, f"could not be written ({exc.strerror or exc}).") from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            if mode is not None and hasattr(os, "fchmod"):  # keep an earlier export's mode
                os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        size = tmp.stat().st_size
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            reason = exc.strerror or str(exc)
            raise fail(target, f"could not be written ({reason}); nothing was changed.") from exc
        raise
    _fsync_folder(folder)
    return size


def export_session(
    repo: Repository,
    session_id: int,
    path: str | os.PathLike[str],
    *,
    include_kv: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> ExportSummary:
    """Write one session (document, non-deleted versions, their runs, optionally their KV
    states) to ``path`` atomically; ArchiveError when it cannot.

    ``progress(done, total)`` is called on this thread per chunk of at most CHUNK bytes (the
    history's packed bytes) and ends at total; once ``cancel`` is set, Cancelled comes
    instead and no file (nor temporary file) is left, an earlier one untouched."""
    target = Path(path)
    cancelled = f"Export to {target.name or target} cancelled; nothing was written."
    meter = Meter(progress, cancel, cancelled)
    if target.is_dir():
        raise fail(target, "is a folder; choose a file name to export to.")
    meter.check()
    snap = repo.read(lambda s: _snapshot(s, session_id, include_kv))
    if snap is None:
        raise fail(target, f"was not written: there is no session {session_id}.")
    try:
        size = _write_atomic(target, lambda out: _write_zip(out, snap, meter))
    except UnicodeEncodeError as exc:
        detail = "was not written: the session holds text that is not valid Unicode."
        raise fail(target, detail) from exc
    except (zlib.error, zstandard.ZstdError) as exc:
        raise fail(target, "was not written: data stored in the history is damaged.") from exc
    body = snap.body
    return ExportSummary(
        target, len(body["versions"]), len(body["runs"]), len(body["kv_states"]), size
    )
