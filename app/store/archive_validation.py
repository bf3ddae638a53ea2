"""An import's first half: a ``.ctxlens`` file read and checked completely, nothing written.

The file comes from outside, so nothing in it is trusted: the zip's directory is checked first
(names, sizes, compression ratios; KV data must be stored, so it cannot inflate), then every
member is streamed in bounded chunks, checked against the manifest's sizes and sha256 hashes
and packed into a temporary file (the spool) as it passes; the JSON is refused when parsing it
could cost too much memory, then validated against strict, bounded schemas
(app/store/archive_schema.py); the tree is checked for dangling references and cycles, and each
KV state's layout against its tokens (app/store/kv_layout.py). What comes out is an
:class:`ImportPlan`, which :mod:`app.store.archive` writes in one transaction.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import os
import re
import sqlite3
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import zstandard
from pydantic import ValidationError

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
from app.store.archive_schema import (
    KVStateModel,
    ManifestModel,
    MemberModel,
    SessionFileModel,
    VersionModel,
)
from app.store.kv_layout import KVLayoutError, check_state

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

_KV_MEMBER = re.compile(r"kv/(-?[0-9]{1,19})\.(tokens|state)")
_DRIVE = re.compile(r"^[A-Za-z]:")


def _show(name: str) -> str:
    """A member name fit for a one-line message."""
    shown = ascii(name)
    return shown if len(shown) <= 80 else shown[:77] + "..."


DAMAGED = "is not a ContextLens export (damaged or not a zip file)."
ZIP_ERRORS = (
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
        raise fail(path, f"has too many members ({len(infos):,}; at most {MAX_MEMBERS:,}).")
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
            raise fail(path, f"holds a member with an unsafe name ({_show(name)}).")
        if name in seen:
            raise fail(path, f"holds the member {_show(name)} more than once.")
        seen.add(name)
    for info in infos:
        _check_header(path, info)


def _check_header(path: Path, info: zipfile.ZipInfo) -> None:
    name = info.filename
    cap = _cap_for(name)
    if info.flag_bits & 0x1:
        raise fail(path, f"holds an encrypted member ({_show(name)}).")
    if name.startswith("kv/"):
        # the exporter stores KV data (it is near-random): stored, it is as large in the file
        # as it is read, so no KV member can inflate
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise fail(path, f"holds compressed KV data ({_show(name)}); exports store it as is.")
    elif info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise fail(path, f"uses an unsupported compression for {_show(name)}.")
    if info.file_size > cap:
        raise fail(path, f"holds a member too large to import ({_show(name)}, over {cap:,} bytes).")
    if info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_RATIO * max(
        info.compress_size, 1
    ):
        ratio = info.file_size // max(info.compress_size, 1)
        detail = f"compressed {ratio:,}:1 ({_show(name)}), which looks like a zip bomb."
        raise fail(path, f"holds a member {detail}")


@dataclass(frozen=True)
class Blob:
    """Packed bytes waiting in the spool: where, how many."""

    offset: int
    length: int


class Spool:
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

    def chunks(self, blob: Blob) -> Iterator[bytes]:
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

    def close(self) -> Blob:
        self._out.write(self._zstd.flush())
        return Blob(self._start, self._out.tell() - self._start)


class _MemberStream:
    """One member read once, in order, in chunks of at most CHUNK bytes: each chunk is hashed,
    counted against the member's declared size and cap, reported to the meter and (with a
    packer) packed into the spool as it passes. ``take`` and ``skip`` make it the
    :class:`~app.store.kv_layout.Source` that a KV state's layout is checked through."""

    def __init__(
        self, path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, meter: Meter,
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
        except ZIP_ERRORS as exc:
            raise fail(path, DAMAGED) from exc

    def _pull(self) -> bytes:
        try:
            chunk = self._src.read(CHUNK)
        except ZIP_ERRORS as exc:
            raise fail(self._path, DAMAGED) from exc
        if len(chunk) > self._declared - self.size:
            raise fail(self._path, f"holds a member larger than it declares ({_show(self._name)}).")
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
    path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, meter: Meter
) -> tuple[bytes, str]:
    """A JSON member's bytes (capped) and their sha256, refused when parsing them could cost
    too much memory."""
    stream = _MemberStream(path, zf, info, meter)
    raw = b"".join(stream.rest())
    digest = stream.finish()
    cost = _parse_cost(raw)
    if cost > MAX_PARSE_BYTES:
        raise fail(
            path,
            f"holds a {_show(info.filename)} too intricate to import (reading it would take "
            f"about {cost >> 20:,} MiB; at most {MAX_PARSE_BYTES >> 20:,} MiB).",
        )
    return raw, digest


def _read_manifest(
    path: Path, zf: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], meter: Meter
) -> ManifestModel:
    info = infos.get(MANIFEST)
    if info is None:
        raise fail(path, "is not a ContextLens export (it has no manifest).")
    raw, _ = _read_json(path, zf, info, meter)
    try:
        loose = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise fail(path, "is not a ContextLens export (its manifest is not JSON).") from exc
    if not isinstance(loose, dict) or loose.get("format") != FORMAT:
        raise fail(path, "is not a ContextLens export (its manifest names another format).")
    version = loose.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise fail(
            path,
            f"was written by a newer ContextLens (format {version}); update the app to import it.",
        )
    del loose
    try:
        return ManifestModel.model_validate_json(raw)
    except ValidationError as exc:
        raise fail(path, f"has an invalid manifest ({_first_error(exc)}).") from exc


@dataclass
class _KV:
    tokens: Blob
    data: Blob


@dataclass
class ImportPlan:
    """Everything an import writes, validated; the packed blobs wait in the spool."""

    body: SessionFileModel
    spool: Spool
    document: Blob | None  # the UTF-8 text packed as Repository.add_document packs it
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
                raise fail(path, f"has a cycle among the parents of version {current}.")
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
                raise fail(path, f"lists {what} {value} more than once.")
            seen.add(value)

    unique("version id", [v.id for v in body.versions])
    unique("version number", [v.number for v in body.versions])
    unique("run id", [r.id for r in body.runs])
    unique("KV state id", [k.id for k in body.kv_states])
    ids = {v.id for v in body.versions}
    for v in body.versions:
        if v.parent is not None and v.parent not in ids:
            raise fail(path, f"gives version {v.id} a parent ({v.parent}) that is not in it.")
    for r in body.runs:
        if r.version not in ids:
            raise fail(path, f"has run {r.id} of a version ({r.version}) that is not in it.")
    for k in body.kv_states:
        if k.version not in ids:
            raise fail(path, f"has KV state {k.id} of a version ({k.version}) that is not in it.")
    return _version_order(path, body.versions)


def _blob_limit() -> int:
    """The longest value SQLite stores (1,000,000,000 bytes unless built otherwise)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as con:
        return con.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)


class _Reader:
    """The members of one archive, each read once against the manifest."""

    def __init__(
        self, path: Path, zf: zipfile.ZipFile, *, by_name: dict[str, zipfile.ZipInfo],
        listed: dict[str, MemberModel], meter: Meter, spool: Spool,
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
            raise fail(
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
            raise fail(
                self.path,
                f"has a member whose content does not match its manifest ({_show(name)}).",
            )

    def packed(self, name: str, stream: _MemberStream) -> Blob:
        """Where the member went in the spool (read and checked already)."""
        assert stream.packer is not None
        blob = stream.packer.close()
        if blob.length > self.limit:
            raise fail(
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
            raise fail(
                self.path,
                f"has a member whose content does not match its manifest ({_show(name)}).",
            )
        return raw

    def document(self) -> tuple[Blob, int]:
        """The document's text packed into the spool, and its length in characters."""
        stream = self.stream(DOCUMENT, level=3)
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        chars = 0
        try:
            for chunk in stream.rest():
                chars += len(decoder.decode(chunk))
            chars += len(decoder.decode(b"", final=True))
        except UnicodeDecodeError as exc:
            raise fail(self.path, "holds a document that is not UTF-8 text.") from exc
        self.close(DOCUMENT, stream)
        return self.packed(DOCUMENT, stream), chars

    def kv(self, k: KVStateModel) -> _KV:
        """A KV state's tokens and data, packed into the spool, the data's layout checked
        against its tokens as it streams (app/store/kv_layout.py) before anything keeps it."""
        tokens_name, state_name = f"kv/{k.id}.tokens", f"kv/{k.id}.state"
        tokens_size = self.declared(tokens_name)
        if tokens_size % 4:
            raise fail(self.path, f"has KV state {k.id} whose tokens are not whole int32 values.")
        count = tokens_size // 4
        if k.prompt_tokens > count:
            raise fail(self.path, f"has KV state {k.id} with more prompt tokens than tokens.")
        if not 0 < count <= min(k.n_ctx, MAX_KV_TOKENS):
            raise fail(
                self.path,
                f"has KV state {k.id} of {count:,} tokens, which does not fit its context "
                f"({k.n_ctx:,}; at most {MAX_KV_TOKENS:,} tokens are imported).",
            )
        if self.declared(state_name) != k.state_bytes:
            raise fail(
                self.path, f"has KV state {k.id} whose data is not the size session.json gives."
            )
        stream = self.stream(tokens_name, level=1)
        self.close(tokens_name, stream)
        tokens = self.packed(tokens_name, stream)
        stream = self.stream(state_name, level=1)
        try:
            check_state(stream, tokens=count, cache_type=k.cache_type)
        except KVLayoutError as exc:
            raise fail(
                self.path,
                f"has KV state {k.id} that is not a state of its {count:,} tokens "
                f"({exc}); export it again, or without KV states.",
            ) from exc
        if stream.left():
            raise fail(
                self.path, f"has KV state {k.id} with {stream.left():,} bytes after its state."
            )
        self.close(state_name, stream)
        return _KV(tokens, self.packed(state_name, stream))


def validate(path: Path, zf: zipfile.ZipFile, meter: Meter, spool: Spool) -> ImportPlan:
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
            raise fail(path, f"holds a member not listed in its manifest ({_show(name)}).")
    for name in listed:
        if name not in by_name:
            raise fail(path, f"lacks the member {_show(name)} listed in its manifest.")
    kv_members: dict[int, set[str]] = {}
    for name in listed:
        match = _KV_MEMBER.fullmatch(name)
        if match and match.group(1) == str(int(match.group(1))):  # one spelling per id
            kv_members.setdefault(int(match.group(1)), set()).add(match.group(2))
        elif name not in (SESSION, DOCUMENT):
            raise fail(path, f"holds an unexpected member ({_show(name)}).")
    if SESSION not in listed:
        raise fail(path, "is not a ContextLens export (it has no session.json).")
    reader = _Reader(path, zf, by_name=by_name, listed=listed, meter=meter, spool=spool)

    raw = reader.json(SESSION)
    try:
        body = SessionFileModel.model_validate_json(raw)
    except ValidationError as exc:
        raise fail(path, f"has an invalid session.json ({_first_error(exc)}).") from exc
    del raw
    meter.check()  # parsing a large session.json takes a while
    order = _check_body(path, body)

    document, chars, text_sha256 = None, 0, ""
    if (body.document is None) != (DOCUMENT not in listed):
        raise fail(path, "does not hold the document its session.json describes.")
    if body.document is not None:
        document, chars = reader.document()
        text_sha256 = listed[DOCUMENT].sha256  # checked: the hash of the text read

    states = {k.id: k for k in body.kv_states}
    for kv_id, kinds in kv_members.items():
        if kv_id not in states:
            raise fail(path, f"holds KV data for a state (kv/{kv_id}) that session.json lacks.")
        if kinds != {"tokens", "state"}:
            raise fail(path, f"holds only part of KV state {kv_id}.")
    for k in body.kv_states:
        if k.id not in kv_members:
            raise fail(path, f"lacks the data of KV state {k.id}.")
    kv = {k.id: reader.kv(k) for k in body.kv_states}
    meter.reach(read_total)
    sizes = {name: info.file_size for name, info in by_name.items()}
    return ImportPlan(body, spool, document, text_sha256, chars, order, kv, sizes)
