"""Export and import of one history session as a ``.ctxlens`` file (a zip archive).

A person moves work between machines, or keeps it safe, as one file: the session, its document,
its tree of prompt versions, their runs and (optionally) their saved KV states. The file comes
from outside, so an import trusts nothing in it: the zip's directory is checked first (names,
sizes, compression ratios; KV data must be stored, so it cannot inflate), then every member is
streamed in bounded chunks, checked against the manifest's sizes and sha256 hashes and packed
into a temporary file as it passes; the JSON is refused when parsing it could cost too much
memory, then validated against strict, bounded schemas (app/store/archive_schema.py); the tree
is checked for dangling references and cycles, each KV state's layout against its tokens
(app/store/kv_layout.py), and the document's text keyed by its own hash; all before a single
row is written. Then everything goes in as one transaction with new ids, in batches, so a bad
file leaves the database exactly as it was. An export is written to a temporary file beside the
target and renamed over it only once complete and synced, so a failed export never damages an
earlier one.

Both can take minutes on large KV states or long histories, so both report progress and can be
cancelled; a cancellation takes the same way out as a failure, so it too leaves everything as
it was.

The parts, each with one concern: the format, errors and progress meter both sides share
(archive_format.py), the export (archive_export.py), the import's reading and checking
(archive_validation.py), and here the import's transaction; callers import all of it from here.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import threading
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import CursorResult, Insert, func, insert, select, text
from sqlalchemy.orm import Session as OrmSession

from app.core.cancelled import Cancelled
from app.core.history_records import ExportSummary, ImportSummary, Progress
from app.store.archive_export import export_session
from app.store.archive_format import (
    DOCUMENT,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SESSION,
    ArchiveError,
    Meter,
    fail,
)
from app.store.archive_schema import stored
from app.store.archive_validation import (
    DAMAGED,
    ZIP_ERRORS,
    Blob,
    ImportPlan,
    Spool,
    validate,
)
from app.store.models import Document, DocumentText, KVStateRow, PromptVersion, Run, Session

if TYPE_CHECKING:
    from app.store.repository import Repository

# What callers import from here (the export, the format and the checks live in the modules
# above; this one is the import's transaction).
__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ROWS_PER_BATCH",
    "ArchiveError",
    "Cancelled",
    "ExportSummary",
    "ImportSummary",
    "Progress",
    "export_session",
    "import_session",
]

ROWS_PER_BATCH = 500  # versions or runs inserted at once: a cancel is heard between batches


def _copy_blob(
    s: OrmSession, where: tuple[str, str, int], blob: Blob, *, plan: ImportPlan, meter: Meter,
    weight: int,
) -> None:  # fmt: skip
    """Copy a spooled blob into the zero-filled value of a new row (``where``: table, column,
    rowid), chunk by chunk through SQLite's incremental blob I/O, the meter moving by
    ``weight`` over it (a cancel is heard between chunks)."""
    raw = s.connection().connection.dbapi_connection
    assert isinstance(raw, sqlite3.Connection)
    table, column, rowid = where
    base, done = meter.done, 0
    with raw.blobopen(table, column, rowid) as out:
        for chunk in plan.spool.chunks(blob):
            out.write(chunk)
            done += len(chunk)
            meter.reach(base + weight * done // max(blob.length, 1))
    meter.reach(base + weight)


def _next_id(s: OrmSession, column: Any) -> int:
    """The id after the table's highest: the transaction holds the write lock, so the ids an
    import gives its rows are its own."""
    return int(s.scalar(select(func.max(column))) or 0) + 1


def _inserted_id(s: OrmSession, statement: Insert) -> int:
    """The primary key of the row ``statement`` inserts."""
    result = s.execute(statement)
    # what an INSERT of one row without RETURNING gives: a cursor's result, with the row's key
    assert isinstance(result, CursorResult) and result.inserted_primary_key is not None
    row_id: int = result.inserted_primary_key[0]
    return row_id


def _insert_rows(
    s: OrmSession, table: Any, rows: Iterable[dict[str, Any]], *, count: int, meter: Meter,
    weight: int,
) -> None:  # fmt: skip
    """Insert ``count`` rows in batches of ROWS_PER_BATCH (made as they go in, never all at
    once), the meter moving by ``weight`` over them and a cancel heard after each batch."""
    base, done = meter.done, 0
    it = iter(rows)
    while batch := list(itertools.islice(it, ROWS_PER_BATCH)):
        s.execute(insert(table), batch)
        done += len(batch)
        meter.reach(base + weight * done // max(count, 1))
    meter.reach(base + weight)


def _insert(plan: ImportPlan, s: OrmSession, meter: Meter) -> ImportSummary:
    """Add the plan's rows; the meter moves as rows go in, and a cancel raises inside the
    transaction (within ROWS_PER_BATCH rows or one CHUNK of a blob), which rolls it back."""
    body = plan.body
    meter.check()
    document_id = None
    if body.document is not None and plan.document is not None:
        doc = body.document
        # the stored text is keyed by the hash of the text itself: a file naming another
        # document's hash keys its own text apart instead of taking that document's place
        key = doc.sha256 if doc.sha256 == plan.text_sha256 else plan.text_sha256
        weight = plan.sizes.get(DOCUMENT, 0)
        if s.get(DocumentText, key) is None:
            zeros = func.zeroblob(plan.document.length)
            s.execute(insert(DocumentText).values(sha256=key, chars=plan.chars, compressed=zeros))
            rowid = s.scalar(select(text("rowid")).select_from(DocumentText)
                             .where(DocumentText.sha256 == key))  # fmt: skip
            _copy_blob(s, ("document_texts", "compressed", rowid), plan.document, plan=plan,
                       meter=meter, weight=weight)  # fmt: skip
        else:
            meter.advance(weight)
        document_id = _inserted_id(s, insert(Document).values(
            path=doc.path, sha256=key, size=doc.size, encoding=doc.encoding)
        )  # fmt: skip
    session_id = _inserted_id(s, insert(Session).values(
        name=body.session.name, document_id=document_id, created=body.session.created)
    )  # fmt: skip
    first = _next_id(s, PromptVersion.id)
    new_ids = {v.id: first + i for i, v in enumerate(plan.order)}
    versions = (
        {"id": new_ids[v.id], "session_id": session_id,
         "parent_id": None if v.parent is None else new_ids[v.parent], "number": v.number,
         "task": v.task, "prompt": v.prompt, "strategy": v.strategy,
         "model_path": v.model_path, "model_sha256": v.model_sha256,
         "settings": stored(v.settings), "created": v.created, "deleted": None}
        for v in plan.order
    )  # fmt: skip
    runs = (
        {"version_id": new_ids[r.version], "strategy": r.strategy, "plan": r.plan,
         "outputs": [stored(o) for o in r.outputs], "prompt_tokens": r.prompt_tokens,
         "completion_tokens": r.completion_tokens, "kv_peak_cells": r.kv_peak_cells,
         "timings": stored(r.timings), "finish_reason": r.finish_reason,
         "truncated": r.truncated, "created": r.created, "error": r.error, "refused": r.refused}
        for r in sorted(body.runs, key=lambda r: r.id)
    )  # fmt: skip
    n_versions, n_runs = len(body.versions), len(body.runs)
    weight = plan.sizes.get(SESSION, 0) + plan.sizes.get(MANIFEST, 0)
    part = weight * n_versions // max(n_versions + n_runs, 1)
    _insert_rows(s, PromptVersion, versions, count=n_versions, meter=meter, weight=part)
    _insert_rows(s, Run, runs, count=n_runs, meter=meter, weight=weight - part)
    for k in sorted(body.kv_states, key=lambda k: k.id):
        blobs = plan.kv[k.id]
        kv_id = _inserted_id(s, insert(KVStateRow).values(
            version_id=new_ids[k.version], model_sha256=k.model_sha256, n_ctx=k.n_ctx,
            cache_type=k.cache_type, tokens=func.zeroblob(blobs.tokens.length),
            data=func.zeroblob(blobs.data.length), ring=k.ring, prompt_tokens=k.prompt_tokens,
            state_bytes=k.state_bytes, created=k.created)
        )  # fmt: skip
        for column, blob, name in (("tokens", blobs.tokens, f"kv/{k.id}.tokens"),
                                   ("data", blobs.data, f"kv/{k.id}.state")):  # fmt: skip
            _copy_blob(s, ("kv_states", column, kv_id), blob, plan=plan, meter=meter,
                       weight=plan.sizes[name])  # fmt: skip
    meter.finish()  # the last moment a cancel is heard: then the transaction commits
    return ImportSummary(session_id, len(body.versions), len(body.runs), len(body.kv_states))


def import_session(
    repo: Repository,
    path: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> ImportSummary:
    """Validate a ``.ctxlens`` file completely, then add it as a new session in one
    transaction; ArchiveError (database untouched) when the file cannot be imported.

    Members are streamed: hashed, checked and packed into a temporary file beside the database
    as they are read, then copied into their rows in chunks, so what an import holds in memory
    is bounded by the parsed session.json (itself capped by what parsing may cost), not by the
    size of the document or of the KV states.

    ``progress(done, total)`` counts the members' bytes twice, read then inserted: per chunk
    of at most CHUNK bytes on this thread, then per batch of rows or chunk of a blob on the
    store's writer thread; it ends at total. Once ``cancel`` is set, Cancelled comes
    instead (within a batch of rows or a chunk) and nothing is added (a started transaction is
    rolled back)."""
    source = Path(path)
    cancelled = f"Import of {source.name or source} cancelled; nothing was added."
    meter = Meter(progress, cancel, cancelled)
    if not source.exists():
        raise fail(source, "does not exist.")
    if not source.is_file():
        raise fail(source, "is not a file.")
    meter.check()
    try:
        handle = open(source, "rb")  # noqa: SIM115 - held open for the whole validation
    except OSError as exc:
        raise fail(source, f"could not be read ({exc.strerror or exc}).") from exc
    try:
        spool = Spool(repo.folder)
    except OSError as exc:
        handle.close()
        raise fail(source, f"could not be imported ({exc.strerror or exc}).") from exc
    with handle, contextlib.closing(spool):
        try:
            zf = zipfile.ZipFile(handle)
        except ZIP_ERRORS as exc:
            raise fail(source, DAMAGED) from exc
        try:  # an OSError here is the temporary file's (the zip's own become ArchiveError)
            with zf:
                plan = validate(source, zf, meter, spool)
            return repo.write(lambda s: _insert(plan, s, meter))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise fail(source, f"could not be imported ({reason}); nothing was added.") from exc
