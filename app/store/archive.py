"""Export and import of one history session as a ``.ctxlens`` file (a zip archive).

A person moves work between machines, or keeps it safe, as one file: the session, its document,
its tree of prompt versions, their runs and (optionally) their saved KV states. The file comes
from outside, so an import trusts nothing in it: every member is read in bounded chunks against
size and compression-ratio caps and checked against the manifest's sizes and sha256 hashes, the
JSON is validated against strict schemas, and the tree is checked for dangling references and
cycles, all before a single row is written; then everything goes in as one transaction with new
ids, so a bad file leaves the database exactly as it was. An export is written to a temporary file
beside the target and renamed over it only once complete and synced, so a failed export never
damages an earlier one.

Both can take minutes on large KV states, so both report progress and can be cancelled; a
cancellation takes the same way out as a failure, so it too leaves everything as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Literal

import zstandard
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession

import app
from app.store.blobs import pack, unpack
from app.store.models import Document, DocumentText, KVStateRow, PromptVersion, Run, Session, as_utc

if TYPE_CHECKING:
    from app.store.repository import Repository

FORMAT = "contextlens-session"
FORMAT_VERSION = 1

MANIFEST = "manifest.json"
SESSION = "session.json"
DOCUMENT = "document.txt"

# Caps on what an import reads (module constants so tests can make them small).
MAX_MEMBERS = 10_000
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_SESSION_JSON_BYTES = 64 * 1024 * 1024
MAX_DOCUMENT_BYTES = 200 * 1024 * 1024
MAX_KV_MEMBER_BYTES = 2 * 1024 * 1024 * 1024
MAX_RATIO = 200  # inflated : compressed, for members over RATIO_FLOOR_BYTES
RATIO_FLOOR_BYTES = 1024 * 1024
CHUNK = 1024 * 1024

_KV_MEMBER = re.compile(r"kv/(-?[0-9]{1,19})\.(tokens|state)")
_DRIVE = re.compile(r"^[A-Za-z]:")


class ArchiveError(ValueError):
    """A session file cannot be written or read; the message is one sentence naming the file."""


class ArchiveCancelled(ArchiveError):
    """The person cancelled an export or import; nothing was written or added."""


Progress = Callable[[int, int], None]


class _Meter:
    """Progress and cancellation in one place, so every step reports and checks the same way.

    ``done`` only grows and never passes ``total``; the cancel event is checked after each
    report, so a cancel set from the progress callback itself takes effect at once."""

    def __init__(
        self, progress: Progress | None, cancel: threading.Event | None, cancelled: str
    ) -> None:
        self._progress = progress
        self._cancel = cancel
        self._cancelled = cancelled
        self.done = 0
        self.total = 0

    def check(self) -> None:
        """Raise ArchiveCancelled when the cancel event is set."""
        if self._cancel is not None and self._cancel.is_set():
            raise ArchiveCancelled(" ".join(self._cancelled.split()))

    def start(self, total: int) -> None:
        self.total = max(total, 0)
        self._report()

    def advance(self, amount: int) -> None:
        self.reach(self.done + amount)

    def reach(self, done: int) -> None:
        """Move to ``done`` (reported only when it moves), then check for a cancel."""
        done = min(max(done, self.done), self.total)
        if done != self.done:
            self.done = done
            self._report()
        else:
            self.check()

    def finish(self) -> None:
        self.reach(self.total)

    def _report(self) -> None:
        if self._progress is not None:
            self._progress(self.done, self.total)
        self.check()


@dataclass(frozen=True)
class ExportSummary:
    path: Path
    versions: int
    runs: int
    kv_states: int
    bytes: int


@dataclass(frozen=True)
class ImportSummary:
    session_id: int
    versions: int
    runs: int
    kv_states: int


def _fail(path: Path, detail: str) -> ArchiveError:
    text = f"{path.name or path} {detail}"
    return ArchiveError(" ".join(text.split()))


def _show(name: str) -> str:
    """A member name fit for a one-line message."""
    shown = ascii(name)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _iso(value: datetime) -> str:
    return as_utc(value).isoformat()


# ----- the file's schema -----

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class MemberModel(_Strict):
    sha256: Sha256
    size: Count


class ManifestModel(_Strict):
    format: Literal["contextlens-session"]
    format_version: Annotated[int, Field(ge=1)]
    app_version: str
    created: datetime
    members: dict[str, MemberModel]


class SessionModel(_Strict):
    name: str
    created: datetime


class DocumentModel(_Strict):
    path: str
    sha256: Sha256
    size: Count
    encoding: str


class VersionModel(_Strict):
    id: int
    parent: int | None
    number: Annotated[int, Field(ge=1)]
    task: str
    prompt: str
    strategy: str
    model_path: str
    model_sha256: str
    settings: dict[str, Any]
    created: datetime


class RunModel(_Strict):
    id: int
    version: int
    strategy: str
    plan: dict[str, Any]
    outputs: list[Any]
    prompt_tokens: Count
    completion_tokens: Count
    kv_peak_cells: Count
    timings: dict[str, Any]
    finish_reason: str
    truncated: bool
    created: datetime
    error: str | None = None  # absent from files written before runs kept their errors
    refused: str | None = None


class KVStateModel(_Strict):
    id: int
    version: int
    model_sha256: str
    n_ctx: Count
    cache_type: str
    ring: dict[str, Any]
    prompt_tokens: Count
    state_bytes: Count
    created: datetime


class SessionFileModel(_Strict):
    session: SessionModel
    document: DocumentModel | None
    versions: list[VersionModel]
    runs: list[RunModel]
    kv_states: list[KVStateModel]


# ----- export -----


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


def _chunks(data: bytes, weight: int, meter: _Meter) -> Iterator[bytes]:
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
    zf: zipfile.ZipFile, name: str, chunks: Iterable[bytes], members: dict[str, dict[str, Any]]
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


def _write_zip(out: IO[bytes], snap: _Snapshot, meter: _Meter) -> None:
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
        raise _fail(target, f"could not be written ({exc.strerror or exc}).") from exc
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
            raise _fail(target, f"could not be written ({reason}); nothing was changed.") from exc
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
    history's packed bytes) and ends at total; once ``cancel`` is set, ArchiveCancelled comes
    instead and no file (nor temporary file) is left, an earlier one untouched."""
    target = Path(path)
    cancelled = f"Export to {target.name or target} cancelled; nothing was written."
    meter = _Meter(progress, cancel, cancelled)
    if target.is_dir():
        raise _fail(target, "is a folder; choose a file name to export to.")
    meter.check()
    snap = repo.read(lambda s: _snapshot(s, session_id, include_kv))
    if snap is None:
        raise _fail(target, f"was not written: there is no session {session_id}.")
    try:
        size = _write_atomic(target, lambda out: _write_zip(out, snap, meter))
    except UnicodeEncodeError as exc:
        detail = "was not written: the session holds text that is not valid Unicode."
        raise _fail(target, detail) from exc
    except (zlib.error, zstandard.ZstdError) as exc:
        raise _fail(target, "was not written: data stored in the history is damaged.") from exc
    body = snap.body
    return ExportSummary(
        target, len(body["versions"]), len(body["runs"]), len(body["kv_states"]), size
    )


# ----- import -----

_DAMAGED = "is not a ContextLens export (damaged or not a zip file)."
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    OSError,
    ValueError,
    struct.error,
    NotImplementedError,
    RuntimeError,
    zlib.error,
)


@dataclass
class _Member:
    size: int
    sha256: str
    data: bytes


def _cap_for(name: str) -> int:
    if name == MANIFEST:
        return MAX_MANIFEST_BYTES
    if name == SESSION:
        return MAX_SESSION_JSON_BYTES
    if name == DOCUMENT:
        return MAX_DOCUMENT_BYTES
    return MAX_KV_MEMBER_BYTES


def _check_names(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    if len(infos) > MAX_MEMBERS:
        raise _fail(path, f"has too many members ({len(infos):,}; at most {MAX_MEMBERS:,}).")
    seen: set[str] = set()
    for info in infos:
        name = info.filename
        if (
            not name
            or name.startswith("/")
            or "\\" in name
            or ".." in name
            or _DRIVE.match(name)
            or "\x00" in name
        ):
            raise _fail(path, f"holds a member with an unsafe name ({_show(name)}).")
        if name in seen:
            raise _fail(path, f"holds the member {_show(name)} more than once.")
        seen.add(name)


def _read_member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, meter: _Meter) -> _Member:
    """Read one member in bounded chunks, never trusting its header."""
    name = info.filename
    cap = _cap_for(name)
    if info.flag_bits & 0x1:
        raise _fail(path, f"holds an encrypted member ({_show(name)}).")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _fail(path, f"uses an unsupported compression for {_show(name)}.")
    if info.file_size > cap:
        raise _fail(
            path, f"holds a member too large to import ({_show(name)}, over {cap:,} bytes)."
        )
    if info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_RATIO * max(
        info.compress_size, 1
    ):
        ratio = info.file_size // max(info.compress_size, 1)
        detail = f"compressed {ratio:,}:1 ({_show(name)}), which looks like a zip bomb."
        raise _fail(path, f"holds a member {detail}")
    digest = hashlib.sha256()
    size = 0
    parts: list[bytes] = []
    try:
        with zf.open(info) as src:
            while chunk := src.read(CHUNK):
                size += len(chunk)
                if size > cap or size > info.file_size:
                    raise _fail(path, f"holds a member larger than it declares ({_show(name)}).")
                digest.update(chunk)
                parts.append(chunk)
                meter.advance(len(chunk))
    except ArchiveError:
        raise
    except _ZIP_ERRORS as exc:
        raise _fail(path, _DAMAGED) from exc
    return _Member(size, digest.hexdigest(), b"".join(parts))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def _read_manifest(
    path: Path, zf: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], meter: _Meter
) -> ManifestModel:
    info = infos.get(MANIFEST)
    if info is None:
        raise _fail(path, "is not a ContextLens export (it has no manifest).")
    raw = _read_member(path, zf, info, meter).data
    try:
        loose = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _fail(path, "is not a ContextLens export (its manifest is not JSON).") from exc
    if not isinstance(loose, dict) or loose.get("format") != FORMAT:
        raise _fail(path, "is not a ContextLens export (its manifest names another format).")
    version = loose.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise _fail(
            path,
            f"was written by a newer ContextLens (format {version}); update the app to import it.",
        )
    try:
        return ManifestModel.model_validate_json(raw)
    except ValidationError as exc:
        raise _fail(path, f"has an invalid manifest ({_first_error(exc)}).") from exc


@dataclass
class _Plan:
    """Everything an import writes, validated."""

    body: SessionFileModel
    document: bytes | None  # the UTF-8 text packed as Repository.add_document packs it
    chars: int
    order: list[VersionModel]  # parents first
    kv: dict[int, tuple[bytes, bytes]]  # id -> tokens, state, packed as save_kv_state does
    sizes: dict[str, int]  # member -> bytes read: the insert reports progress in the same unit


def _version_order(path: Path, versions: list[VersionModel]) -> list[VersionModel]:
    """Versions with every parent before its children; ArchiveError on a cycle."""
    by_id = {v.id: v for v in versions}
    depth: dict[int, int] = {}
    for v in versions:
        chain: list[int] = []
        on_chain: set[int] = set()
        current: int | None = v.id
        while current is not None and current not in depth:
            if current in on_chain:
                raise _fail(path, f"has a cycle among the parents of version {current}.")
            chain.append(current)
            on_chain.add(current)
            current = by_id[current].parent
        base = -1 if current is None else depth[current]
        for i, vid in enumerate(reversed(chain), start=1):
            depth[vid] = base + i
    return sorted(versions, key=lambda v: (depth[v.id], v.number))


def _check_body(path: Path, body: SessionFileModel) -> list[VersionModel]:
    def unique(what: str, values: list[int]) -> None:
        seen: set[int] = set()
        for value in values:
            if value in seen:
                raise _fail(path, f"lists {what} {value} more than once.")
            seen.add(value)

    unique("version id", [v.id for v in body.versions])
    unique("version number", [v.number for v in body.versions])
    unique("run id", [r.id for r in body.runs])
    unique("KV state id", [k.id for k in body.kv_states])
    ids = {v.id for v in body.versions}
    for v in body.versions:
        if v.parent is not None and v.parent not in ids:
            raise _fail(path, f"gives version {v.id} a parent ({v.parent}) that is not in it.")
    for r in body.runs:
        if r.version not in ids:
            raise _fail(path, f"has run {r.id} of a version ({r.version}) that is not in it.")
    for k in body.kv_states:
        if k.version not in ids:
            raise _fail(path, f"has KV state {k.id} of a version ({k.version}) that is not in it.")
    return _version_order(path, body.versions)


def _validate(path: Path, zf: zipfile.ZipFile, meter: _Meter) -> _Plan:
    """Read and check everything; the meter's first half is these reads (by the members'
    declared sizes, which are capped), its second half the insert (see :func:`_insert`)."""
    infos = zf.infolist()
    _check_names(path, infos)
    by_name = {i.filename: i for i in infos}
    read_total = sum(i.file_size for i in infos)
    meter.start(2 * read_total)
    manifest = _read_manifest(path, zf, by_name, meter)
    listed = manifest.members
    for name in by_name:
        if name != MANIFEST and name not in listed:
            raise _fail(path, f"holds a member not listed in its manifest ({_show(name)}).")
    for name in listed:
        if name not in by_name:
            raise _fail(path, f"lacks the member {_show(name)} listed in its manifest.")
    kv_members: dict[int, set[str]] = {}
    for name in listed:
        match = _KV_MEMBER.fullmatch(name)
        if match and match.group(1) == str(int(match.group(1))):  # one spelling per id
            kv_members.setdefault(int(match.group(1)), set()).add(match.group(2))
        elif name not in (SESSION, DOCUMENT):
            raise _fail(path, f"holds an unexpected member ({_show(name)}).")
    if SESSION not in listed:
        raise _fail(path, "is not a ContextLens export (it has no session.json).")

    def read(name: str) -> _Member:
        info = by_name[name]
        want = listed[name]
        if info.file_size != want.size:
            raise _fail(
                path, f"has a member whose size does not match its manifest ({_show(name)})."
            )
        member = _read_member(path, zf, info, meter)
        if member.size != want.size or member.sha256 != want.sha256:
            raise _fail(
                path, f"has a member whose content does not match its manifest ({_show(name)})."
            )
        return member

    try:
        body = SessionFileModel.model_validate_json(read(SESSION).data)
    except ValidationError as exc:
        raise _fail(path, f"has an invalid session.json ({_first_error(exc)}).") from exc
    order = _check_body(path, body)

    document = None
    chars = 0
    if (body.document is None) != (DOCUMENT not in listed):
        raise _fail(path, "does not hold the document its session.json describes.")
    if body.document is not None:
        raw = read(DOCUMENT).data
        try:
            chars = len(raw.decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError as exc:
            raise _fail(path, "holds a document that is not UTF-8 text.") from exc
        document = pack(raw, level=3)
        del raw

    kv: dict[int, tuple[bytes, bytes]] = {}
    states = {k.id: k for k in body.kv_states}
    for kv_id, kinds in kv_members.items():
        if kv_id not in states:
            raise _fail(path, f"holds KV data for a state (kv/{kv_id}) that session.json lacks.")
        if kinds != {"tokens", "state"}:
            raise _fail(path, f"holds only part of KV state {kv_id}.")
    for k in body.kv_states:
        if k.id not in kv_members:
            raise _fail(path, f"lacks the data of KV state {k.id}.")
        tokens = read(f"kv/{k.id}.tokens")
        if tokens.size % 4:
            raise _fail(path, f"has KV state {k.id} whose tokens are not whole int32 values.")
        if k.prompt_tokens > tokens.size // 4:
            raise _fail(path, f"has KV state {k.id} with more prompt tokens than tokens.")
        state = read(f"kv/{k.id}.state")
        kv[k.id] = (pack(tokens.data), pack(state.data))
        meter.check()  # packing a large state takes a while
    meter.reach(read_total)
    sizes = {name: info.file_size for name, info in by_name.items()}
    return _Plan(body, document, chars, order, kv, sizes)


def _insert(plan: _Plan, s: OrmSession, meter: _Meter) -> ImportSummary:
    """Add the plan's rows; the meter moves by each part's member sizes as it is flushed, and a
    cancel raises inside the transaction, which rolls it back."""
    body = plan.body
    meter.check()
    document_id = None
    if body.document is not None and plan.document is not None:
        doc = body.document
        if s.get(DocumentText, doc.sha256) is None:
            s.add(DocumentText(sha256=doc.sha256, chars=plan.chars, compressed=plan.document))
            s.flush()
        row = Document(path=doc.path, sha256=doc.sha256, size=doc.size, encoding=doc.encoding)
        s.add(row)
        s.flush()
        document_id = row.id
        meter.advance(plan.sizes.get(DOCUMENT, 0))
    session = Session(name=body.session.name, document_id=document_id,
                      created=as_utc(body.session.created))  # fmt: skip
    s.add(session)
    s.flush()
    new_ids: dict[int, int] = {}
    for v in plan.order:
        pv = PromptVersion(
            session_id=session.id, parent_id=None if v.parent is None else new_ids[v.parent],
            number=v.number, task=v.task, prompt=v.prompt, strategy=v.strategy,
            model_path=v.model_path, model_sha256=v.model_sha256, settings=v.settings,
            created=as_utc(v.created),
        )  # fmt: skip
        s.add(pv)
        s.flush()
        new_ids[v.id] = pv.id
    for r in sorted(body.runs, key=lambda r: r.id):
        s.add(Run(version_id=new_ids[r.version], strategy=r.strategy, plan=r.plan,
                  outputs=r.outputs, prompt_tokens=r.prompt_tokens,
                  completion_tokens=r.completion_tokens, kv_peak_cells=r.kv_peak_cells,
                  timings=r.timings, finish_reason=r.finish_reason, truncated=r.truncated,
                  created=as_utc(r.created), error=r.error, refused=r.refused))  # fmt: skip
    s.flush()
    meter.advance(plan.sizes.get(SESSION, 0))
    for k in sorted(body.kv_states, key=lambda k: k.id):
        tokens, data = plan.kv[k.id]
        s.add(KVStateRow(version_id=new_ids[k.version], model_sha256=k.model_sha256,
                         n_ctx=k.n_ctx, cache_type=k.cache_type, tokens=tokens, data=data,
                         ring=k.ring, prompt_tokens=k.prompt_tokens, state_bytes=k.state_bytes,
                         created=as_utc(k.created)))  # fmt: skip
        s.flush()
        meter.advance(plan.sizes[f"kv/{k.id}.tokens"] + plan.sizes[f"kv/{k.id}.state"])
    meter.finish()  # the last moment a cancel is heard: then the transaction commits
    return ImportSummary(session.id, len(body.versions), len(body.runs), len(body.kv_states))


def import_session(
    repo: Repository,
    path: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> ImportSummary:
    """Validate a ``.ctxlens`` file completely, then add it as a new session in one
    transaction; ArchiveError (database untouched) when the file cannot be imported.

    ``progress(done, total)`` counts the members' bytes twice, read then inserted: per chunk
    of at most CHUNK bytes on this thread, then per group of rows on the store's writer thread;
    it ends at total. Once ``cancel`` is set, ArchiveCancelled comes instead and nothing is
    added (a started transaction is rolled back)."""
    source = Path(path)
    cancelled = f"Import of {source.name or source} cancelled; nothing was added."
    meter = _Meter(progress, cancel, cancelled)
    if not source.exists():
        raise _fail(source, "does not exist.")
    if not source.is_file():
        raise _fail(source, "is not a file.")
    meter.check()
    try:
        handle = open(source, "rb")  # noqa: SIM115 - held open for the whole validation
    except OSError as exc:
        raise _fail(source, f"could not be read ({exc.strerror or exc}).") from exc
    with handle:
        try:
            zf = zipfile.ZipFile(handle)
        except _ZIP_ERRORS as exc:
            raise _fail(source, _DAMAGED) from exc
        with zf:
            plan = _validate(source, zf, meter)
    return repo.write(lambda s: _insert(plan, s, meter))
