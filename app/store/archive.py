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
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import itertools
import json
import os
import re
import sqlite3
import struct
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
from pydantic import ValidationError
from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session as OrmSession

import app
from app.store.archive_schema import (
    KVStateModel,
    ManifestModel,
    MemberModel,
    SessionFileModel,
    VersionModel,
    stored,
)
from app.store.blobs import unpack
from app.store.kv_layout import KVLayoutError, check_state
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
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # 10,000 members take ~1.2 MB
MAX_SESSION_JSON_BYTES = 64 * 1024 * 1024
MAX_PARSE_BYTES = 1024 * 1024 * 1024  # what parsing one JSON member may cost, estimated
MAX_DOCUMENT_BYTES = 200 * 1024 * 1024
MAX_KV_MEMBER_BYTES = 2 * 1024 * 1024 * 1024
MAX_KV_TOKENS = 1 << 21  # a state's checked cell records are held at once: 24 bytes a token
MAX_RATIO = 200  # inflated : compressed, for members over RATIO_FLOOR_BYTES (KV: stored only)
RATIO_FLOOR_BYTES = 1024 * 1024
CHUNK = 1024 * 1024
ROWS_PER_BATCH = 500  # versions or runs inserted at once: a cancel is heard between batches

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


def _cap_for(name: str) -> int:
    if name == MANIFEST:
        return MAX_MANIFEST_BYTES
    if name == SESSION:
        return MAX_SESSION_JSON_BYTES
    if name == DOCUMENT:
        return MAX_DOCUMENT_BYTES
    return MAX_KV_MEMBER_BYTES


def _check_headers(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    """Everything the zip's own directory says, checked before a byte of a member is read: a
    bomb is refused here, at once, by what it declares."""
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
    for info in infos:
        _check_header(path, info)


def _check_header(path: Path, info: zipfile.ZipInfo) -> None:
    name = info.filename
    cap = _cap_for(name)
    if info.flag_bits & 0x1:
        raise _fail(path, f"holds an encrypted member ({_show(name)}).")
    if name.startswith("kv/"):
        # the exporter stores KV data (it is near-random): stored, it is as large in the file
        # as it is read, so no KV member can inflate
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise _fail(path, f"holds compressed KV data ({_show(name)}); exports store it as is.")
    elif info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
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


@dataclass(frozen=True)
class _Blob:
    """Packed bytes waiting in the spool: where, how many."""

    offset: int
    length: int


class _Spool:
    """The packed document and KV data of one import, in a temporary file (beside the database,
    where there is room for them anyway) until the transaction copies them into their rows: an
    import never holds a whole member in memory."""

    def __init__(self, folder: Path | None) -> None:
        prefix = ".ctxlens-import-"
        try:  # closed by close()
            self._file = tempfile.TemporaryFile(prefix=prefix, dir=folder)  # noqa: SIM115
        except OSError:  # a folder that cannot take it: the system's temporary folder
            self._file = tempfile.TemporaryFile(prefix=prefix)  # noqa: SIM115

    def close(self) -> None:
        self._file.close()

    def packer(self, size: int, level: int) -> _Packer:
        self._file.seek(0, os.SEEK_END)
        return _Packer(self._file, size, level)

    def chunks(self, blob: _Blob) -> Iterator[bytes]:
        self._file.seek(blob.offset)
        left = blob.length
        while left > 0:
            chunk = self._file.read(min(CHUNK, left))
            if not chunk:
                raise OSError("the import's temporary file ended early")
            left -= len(chunk)
            yield chunk


class _Packer:
    """One member packed as app/store/blobs.py packs (a zstd frame that names its size, so
    ``unpack`` reads it), written to the spool as it comes."""

    def __init__(self, out: IO[bytes], size: int, level: int) -> None:
        self._out = out
        self._start = out.tell()
        self._zstd = zstandard.ZstdCompressor(level=level).compressobj(size=size)

    def write(self, data: bytes) -> None:
        self._out.write(self._zstd.compress(data))

    def close(self) -> _Blob:
        self._out.write(self._zstd.flush())
        return _Blob(self._start, self._out.tell() - self._start)


class _MemberStream:
    """One member read once, in order, in chunks of at most CHUNK bytes: each chunk is hashed,
    counted against the member's declared size and cap, reported to the meter and (with a
    packer) packed into the spool as it passes. ``take`` and ``skip`` make it the
    :class:`~app.store.kv_layout.Source` that a KV state's layout is checked through."""

    def __init__(
        self, path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, meter: _Meter,
        packer: _Packer | None = None,
    ) -> None:  # fmt: skip
        self._path = path
        self._name = info.filename
        self._declared = min(info.file_size, _cap_for(info.filename))
        self._meter = meter
        self.packer = packer
        self._digest = hashlib.sha256()
        self.size = 0  # bytes read from the zip
        self._held = bytearray()  # read, not yet handed out by take()
        try:
            self._src = zf.open(info)
        except _ZIP_ERRORS as exc:
            raise _fail(path, _DAMAGED) from exc

    def _pull(self) -> bytes:
        try:
            chunk = self._src.read(CHUNK)
        except _ZIP_ERRORS as exc:
            raise _fail(self._path, _DAMAGED) from exc
        if len(chunk) > self._declared - self.size:
            raise _fail(
                self._path, f"holds a member larger than it declares ({_show(self._name)})."
            )
        self.size += len(chunk)
        self._digest.update(chunk)
        if self.packer is not None:
            self.packer.write(chunk)
        self._meter.advance(len(chunk))
        return chunk

    def left(self) -> int:
        return self._declared - self.size + len(self._held)

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise KVLayoutError("it ends early")
        while len(self._held) < n:
            chunk = self._pull()
            if not chunk:
                raise KVLayoutError("it ends early")
            self._held += chunk
        data = bytes(self._held[:n])
        del self._held[:n]
        return data

    def skip(self, n: int) -> None:
        if n > self.left():
            raise KVLayoutError("it ends early")
        kept = min(n, len(self._held))
        del self._held[:kept]
        n -= kept
        while n > 0:
            chunk = self._pull()
            if not chunk:
                raise KVLayoutError("it ends early")
            if len(chunk) > n:
                self._held += chunk[n:]
            n -= min(n, len(chunk))

    def rest(self) -> Iterator[bytes]:
        """The bytes not handed out yet, in chunks (all of them pass the hash and packer)."""
        if self._held:
            yield bytes(self._held)
            self._held.clear()
        while chunk := self._pull():
            yield chunk

    def finish(self) -> str:
        """Read to the end; the sha256 of everything read."""
        for _ in self.rest():
            pass
        self._src.close()
        return self._digest.hexdigest()


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    message = " ".join(str(err["msg"]).split())
    return f"{where}: {message}" if where else message


def _parse_cost(raw: bytes) -> int:
    """An upper estimate of the memory that parsing ``raw`` as JSON takes: a few bytes per
    byte, ~100 per value (one a comma, counted with the commas inside strings), ~200 per array
    or object. Measured on 64 MiB of ``[[[[...]]]],`` parsing took 5.2 GiB, of ``{},`` 2.3 GiB,
    of ``"ab",`` 1.4 GiB, of ``0,`` 1.4 GiB; a real 42 MB session of 200,000 versions costs
    ~0.5 GiB by this estimate."""
    containers = raw.count(b"[") + raw.count(b"{")
    return 4 * len(raw) + 100 * raw.count(b",") + 200 * containers


def _read_json(
    path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, meter: _Meter
) -> tuple[bytes, str]:
    """A JSON member's bytes (capped) and their sha256, refused when parsing them could cost
    too much memory."""
    stream = _MemberStream(path, zf, info, meter)
    raw = b"".join(stream.rest())
    digest = stream.finish()
    cost = _parse_cost(raw)
    if cost > MAX_PARSE_BYTES:
        raise _fail(
            path,
            f"holds a {_show(info.filename)} too intricate to import (reading it would take "
            f"about {cost >> 20:,} MiB; at most {MAX_PARSE_BYTES >> 20:,} MiB).",
        )
    return raw, digest


def _read_manifest(
    path: Path, zf: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], meter: _Meter
) -> ManifestModel:
    info = infos.get(MANIFEST)
    if info is None:
        raise _fail(path, "is not a ContextLens export (it has no manifest).")
    raw, _ = _read_json(path, zf, info, meter)
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
    del loose
    try:
        return ManifestModel.model_validate_json(raw)
    except ValidationError as exc:
        raise _fail(path, f"has an invalid manifest ({_first_error(exc)}).") from exc


@dataclass
class _KV:
    tokens: _Blob
    data: _Blob


@dataclass
class _Plan:
    """Everything an import writes, validated; the packed blobs wait in the spool."""

    body: SessionFileModel
    spool: _Spool
    document: _Blob | None  # the UTF-8 text packed as Repository.add_document packs it
    text_sha256: str  # the sha256 of that text
    chars: int
    order: list[VersionModel]  # parents first
    kv: dict[int, _KV]  # id -> tokens and state, packed as save_kv_state packs them
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


def _blob_limit() -> int:
    """The longest value SQLite stores (1,000,000,000 bytes unless built otherwise)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as con:
        return con.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)


class _Reader:
    """The members of one archive, each read once against the manifest."""

    def __init__(
        self, path: Path, zf: zipfile.ZipFile, *, by_name: dict[str, zipfile.ZipInfo],
        listed: dict[str, MemberModel], meter: _Meter, spool: _Spool,
    ) -> None:  # fmt: skip
        self.path = path
        self.zf = zf
        self.by_name = by_name
        self.listed = listed
        self.meter = meter
        self.spool = spool
        self.limit = _blob_limit()

    def declared(self, name: str) -> int:
        """The member's size, the same in the zip's directory and in the manifest."""
        info = self.by_name[name]
        if info.file_size != self.listed[name].size:
            raise _fail(
                self.path, f"has a member whose size does not match its manifest ({_show(name)})."
            )
        return info.file_size

    def stream(self, name: str, level: int | None = None) -> _MemberStream:
        size = self.declared(name)
        packer = None if level is None else self.spool.packer(size, level)
        return _MemberStream(self.path, self.zf, self.by_name[name], self.meter, packer)

    def close(self, name: str, stream: _MemberStream) -> None:
        """Read the rest; ArchiveError unless it is exactly what the manifest lists."""
        digest = stream.finish()
        want = self.listed[name]
        if stream.size != want.size or digest != want.sha256:
            raise _fail(
                self.path,
                f"has a member whose content does not match its manifest ({_show(name)}).",
            )

    def packed(self, name: str, stream: _MemberStream) -> _Blob:
        """Where the member went in the spool (read and checked already)."""
        assert stream.packer is not None
        blob = stream.packer.close()
        if blob.length > self.limit:
            raise _fail(
                self.path,
                f"holds a member too large for the history database ({_show(name)}, "
                f"{blob.length:,} bytes packed; at most {self.limit:,}).",
            )
        return blob

    def json(self, name: str) -> bytes:
        self.declared(name)
        raw, digest = _read_json(self.path, self.zf, self.by_name[name], self.meter)
        want = self.listed[name]
        if len(raw) != want.size or digest != want.sha256:
            raise _fail(
                self.path,
                f"has a member whose content does not match its manifest ({_show(name)}).",
            )
        return raw

    def document(self) -> tuple[_Blob, int]:
        """The document's text packed into the spool, and its length in characters."""
        stream = self.stream(DOCUMENT, level=3)
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        chars = 0
        try:
            for chunk in stream.rest():
                chars += len(decoder.decode(chunk))
            chars += len(decoder.decode(b"", final=True))
        except UnicodeDecodeError as exc:
            raise _fail(self.path, "holds a document that is not UTF-8 text.") from exc
        self.close(DOCUMENT, stream)
        return self.packed(DOCUMENT, stream), chars

    def kv(self, k: KVStateModel) -> _KV:
        """A KV state's tokens and data, packed into the spool, the data's layout checked
        against its tokens as it streams (app/store/kv_layout.py) before anything keeps it."""
        tokens_name, state_name = f"kv/{k.id}.tokens", f"kv/{k.id}.state"
        tokens_size = self.declared(tokens_name)
        if tokens_size % 4:
            raise _fail(self.path, f"has KV state {k.id} whose tokens are not whole int32 values.")
        count = tokens_size // 4
        if k.prompt_tokens > count:
            raise _fail(self.path, f"has KV state {k.id} with more prompt tokens than tokens.")
        if not 0 < count <= min(k.n_ctx, MAX_KV_TOKENS):
            raise _fail(
                self.path,
                f"has KV state {k.id} of {count:,} tokens, which does not fit its context "
                f"({k.n_ctx:,}; at most {MAX_KV_TOKENS:,} tokens are imported).",
            )
        if self.declared(state_name) != k.state_bytes:
            raise _fail(
                self.path, f"has KV state {k.id} whose data is not the size session.json gives."
            )
        stream = self.stream(tokens_name, level=1)
        self.close(tokens_name, stream)
        tokens = self.packed(tokens_name, stream)
        stream = self.stream(state_name, level=1)
        try:
            check_state(stream, tokens=count, cache_type=k.cache_type)
        except KVLayoutError as exc:
            raise _fail(
                self.path,
                f"has KV state {k.id} that is not a state of its {count:,} tokens "
                f"({exc}); export it again, or without KV states.",
            ) from exc
        if stream.left():
            raise _fail(
                self.path, f"has KV state {k.id} with {stream.left():,} bytes after its state."
            )
        self.close(state_name, stream)
        return _KV(tokens, self.packed(state_name, stream))


def _validate(path: Path, zf: zipfile.ZipFile, meter: _Meter, spool: _Spool) -> _Plan:
    """Read and check everything; the meter's first half is these reads (by the members'
    declared sizes, which are capped), its second half the insert (see :func:`_insert`)."""
    infos = zf.infolist()
    _check_headers(path, infos)
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
    reader = _Reader(path, zf, by_name=by_name, listed=listed, meter=meter, spool=spool)

    raw = reader.json(SESSION)
    try:
        body = SessionFileModel.model_validate_json(raw)
    except ValidationError as exc:
        raise _fail(path, f"has an invalid session.json ({_first_error(exc)}).") from exc
    del raw
    meter.check()  # parsing a large session.json takes a while
    order = _check_body(path, body)

    document, chars, text_sha256 = None, 0, ""
    if (body.document is None) != (DOCUMENT not in listed):
        raise _fail(path, "does not hold the document its session.json describes.")
    if body.document is not None:
        document, chars = reader.document()
        text_sha256 = listed[DOCUMENT].sha256  # checked: the hash of the text read

    states = {k.id: k for k in body.kv_states}
    for kv_id, kinds in kv_members.items():
        if kv_id not in states:
            raise _fail(path, f"holds KV data for a state (kv/{kv_id}) that session.json lacks.")
        if kinds != {"tokens", "state"}:
            raise _fail(path, f"holds only part of KV state {kv_id}.")
    for k in body.kv_states:
        if k.id not in kv_members:
            raise _fail(path, f"lacks the data of KV state {k.id}.")
    kv = {k.id: reader.kv(k) for k in body.kv_states}
    meter.reach(read_total)
    sizes = {name: info.file_size for name, info in by_name.items()}
    return _Plan(body, spool, document, text_sha256, chars, order, kv, sizes)


def _copy_blob(
    s: OrmSession, where: tuple[str, str, int], blob: _Blob, *, plan: _Plan, meter: _Meter,
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


def _insert_rows(
    s: OrmSession, table: Any, rows: Iterable[dict[str, Any]], *, count: int, meter: _Meter,
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


def _insert(plan: _Plan, s: OrmSession, meter: _Meter) -> ImportSummary:
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
        document_id = s.execute(insert(Document).values(
            path=doc.path, sha256=key, size=doc.size, encoding=doc.encoding)
        ).inserted_primary_key[0]  # fmt: skip
    session_id = s.execute(insert(Session).values(
        name=body.session.name, document_id=document_id, created=body.session.created)
    ).inserted_primary_key[0]  # fmt: skip
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
        kv_id = s.execute(insert(KVStateRow).values(
            version_id=new_ids[k.version], model_sha256=k.model_sha256, n_ctx=k.n_ctx,
            cache_type=k.cache_type, tokens=func.zeroblob(blobs.tokens.length),
            data=func.zeroblob(blobs.data.length), ring=k.ring, prompt_tokens=k.prompt_tokens,
            state_bytes=k.state_bytes, created=k.created)
        ).inserted_primary_key[0]  # fmt: skip
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
    store's writer thread; it ends at total. Once ``cancel`` is set, ArchiveCancelled comes
    instead (within a batch of rows or a chunk) and nothing is added (a started transaction is
    rolled back)."""
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
    try:
        spool = _Spool(repo.folder)
    except OSError as exc:
        handle.close()
        raise _fail(source, f"could not be imported ({exc.strerror or exc}).") from exc
    with handle, contextlib.closing(spool):
        try:
            zf = zipfile.ZipFile(handle)
        except _ZIP_ERRORS as exc:
            raise _fail(source, _DAMAGED) from exc
        try:  # an OSError here is the temporary file's (the zip's own become ArchiveError)
            with zf:
                plan = _validate(source, zf, meter, spool)
            return repo.write(lambda s: _insert(plan, s, meter))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise _fail(source, f"could not be imported ({reason}); nothing was added.") from exc
