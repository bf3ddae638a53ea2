"""Chunkings, plans, whole-document counts and BM25 indexes, made once per document and tokenizer.

Counting is what planning costs: chunking a few MB takes seconds, a plan made from chunks that
are already counted takes milliseconds. Work is keyed by the document's sha256 and format, the
tokenizer's fingerprint and the work's own parameters, so switching strategy back, opening the
same bytes again (at any path), or asking in another process finds it done. In memory an LRU
bounded in rows (chunks and spans); on disk, optionally, a ``diskcache`` directory bounded in
bytes, oldest entries evicted first. Disk keys also hold a hash of the code that made the
entries, so a changed chunker never reads an older one's chunks. An entry that cannot be read
is dropped and made again: the cache can cost time, never a wrong plan or a crash.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

import diskcache
import numpy as np
import zstandard

from app.core import paths
from app.core.disk_store import ForeignStore, open_store
from app.core.planning.chunking import Boundary, Chunk
from app.core.planning.codec import pack_plan, unpack_plan
from app.core.planning.plan import Plan
from app.core.planning.retrieve import Index

FORMAT = 1  # bump when the stored layout changes
DISK_BYTES = 200 * 1024 * 1024
MEMORY_ROWS = 1_000_000  # chunks and spans held in memory, ~150 bytes each
MAX_PLANS = 64
MAX_INDEXES = 8  # BM25 indexes held in memory: a document's, at a few context sizes
_MAGIC = b"CLPC"
_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)
# The modules whose code decides what a document's chunks and plans are.
# Under app/core: every file that decides chunks, counts and plans.
_CODE = ("planning", "tokens.py", "textutil.py", "documents")

Key = tuple[Hashable, ...]


@dataclass
class CacheStats:
    """What was made and what was found made: tests and benchmarks read these."""

    chunkings_made: int = 0  # documents cut and counted
    chunkings_reused: int = 0
    plans_made: int = 0
    plans_reused: int = 0
    counts_made: int = 0  # whole documents counted
    counts_reused: int = 0
    indexes_made: int = 0  # BM25 indexes of a chunking (`retrieve`) built
    indexes_reused: int = 0
    disk_reads: int = 0  # of the reuses, those found on disk
    disk_writes: int = 0
    disk_errors: int = 0  # entries that could not be read or written (dropped, made again)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def doc_id(sha256: str, format: str) -> str:
    """A document's name in cache keys: the same bytes read as another format differ."""
    return f"{format}:{sha256}"


def text_id(text: str) -> str:
    """The name of an in-memory text with no file."""
    return doc_id(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), "str")


class BoundedLru:
    """Least recently used entries go first once there are more than ``max_items`` or more
    than ``max_rows`` rows; an entry heavier than ``max_rows`` is not held at all."""

    def __init__(self, max_items: int, max_rows: int) -> None:
        self.max_items, self.max_rows = max_items, max_rows
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._rows = 0

    def get(self, key: Hashable) -> Any | None:
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        return found[0]

    def put(self, key: Hashable, value: Any, rows: int) -> None:
        self.pop(key)
        if rows > self.max_rows:
            return
        self._items[key] = (value, rows)
        self._rows += rows
        while len(self._items) > self.max_items or self._rows > self.max_rows:
            _, (_, dropped) = self._items.popitem(last=False)
            self._rows -= dropped

    def pop(self, key: Hashable) -> None:
        found = self._items.pop(key, None)
        if found is not None:
            self._rows -= found[1]

    def __len__(self) -> int:
        return len(self._items)


_T = TypeVar("_T")


@dataclass(frozen=True)
class _Kind(Generic[_T]):
    """How one kind of entry is counted in the stats, weighed, and stored on disk."""

    name: str  # "chunkings" | "plans" | "counts" | "indexes": the stats fields' stem
    rows: Callable[[_T], int]
    encode: Callable[[_T], dict[str, np.ndarray]]
    decode: Callable[[dict[str, np.ndarray]], _T]


class PlanCache:
    """Chunkings, plans and counts by key; in memory, and under ``directory`` when given.

    Safe from several threads (work is done outside the lock: two threads may both make an
    entry, which is harmless). Keys are tuples of plain values naming document, tokenizer and
    parameters (see :class:`~app.core.planning.strategies.Planner`).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        disk_bytes: int = DISK_BYTES,
        memory_rows: int = MEMORY_ROWS,
        max_plans: int = MAX_PLANS,
    ) -> None:
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._memory = {
            "chunkings": BoundedLru(1 << 16, memory_rows),
            "plans": BoundedLru(max_plans, memory_rows),
            "counts": BoundedLru(1 << 12, 1 << 12),
            "indexes": BoundedLru(MAX_INDEXES, memory_rows),
        }
        self._disk = _open_disk(directory, disk_bytes) if directory is not None else None

    @property
    def on_disk(self) -> bool:
        return self._disk is not None

    def chunks(self, key: Key, make: Callable[[], list[Chunk]]) -> list[Chunk]:
        return self._get_or_make(_CHUNKS, key, make)

    def plan(self, key: Key, make: Callable[[], Plan]) -> Plan:
        return self._get_or_make(_PLANS, key, make)

    def count(self, key: Key, make: Callable[[], int]) -> int:
        return self._get_or_make(_COUNTS, key, make)

    def index(self, key: Key, make: Callable[[], Index]) -> Index:
        """A chunking's BM25 index (`retrieve`): built once, whatever the question."""
        return self._get_or_make(_INDEXES, key, make)

    def remember_plan(self, key: Key, plan: Plan) -> None:
        """Hold ``plan`` in memory (made elsewhere, which stored it on disk if it keeps one)."""
        with self._lock:
            self._memory["plans"].put(key, plan, _PLANS.rows(plan))

    def remember_chunks(self, key: Key, chunks: list[Chunk]) -> None:
        """Hold ``chunks`` in memory unless a chunking is held there already."""
        with self._lock:
            memory = self._memory["chunkings"]
            if memory.get(key) is None:
                memory.put(key, chunks, len(chunks))

    def close(self) -> None:
        if self._disk is not None:
            self._disk.close()

    # ----- plumbing -----

    def _get_or_make(self, kind: _Kind[_T], key: Key, make: Callable[[], _T]) -> _T:
        memory = self._memory[kind.name]
        with self._lock:
            found: _T | None = memory.get(key)
        if found is None:
            found = self._read(kind, key)
            if found is not None:
                self._add("disk_reads")
        if found is not None:
            self._add(f"{kind.name}_reused")
        else:
            found = make()
            self._add(f"{kind.name}_made")
            self._write(kind, key, found)
        with self._lock:
            memory.put(key, found, kind.rows(found))
        return found

    def _add(self, field: str) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def _read(self, kind: _Kind[_T], key: Key) -> _T | None:
        if self._disk is None:
            return None
        name = _disk_key(kind, key)
        try:
            blob = self._disk.get(name)
            if blob is None:
                return None
            return kind.decode(_unpack(blob))
        except Exception:  # a damaged entry, or a damaged index: made again, never fatal
            self._add("disk_errors")
            with contextlib.suppress(*_DISK_ERRORS):
                self._disk.delete(name)
            return None

    def _write(self, kind: _Kind[_T], key: Key, value: _T) -> None:
        if self._disk is None:
            return
        try:
            self._disk.set(_disk_key(kind, key), _pack(kind.encode(value)))
            self._add("disk_writes")
        except _DISK_ERRORS:  # a full or read-only disk: the entry stays in memory only
            self._add("disk_errors")


def on_disk() -> PlanCache:
    """The cache the planning process keeps under :func:`app.core.paths.cache_dir`."""
    return PlanCache(paths.cache_dir() / "plans")


def _open_disk(directory: Path, size_limit: int) -> diskcache.Cache | None:
    """The disk store (bytes only: app/core/disk_store.py); a damaged or foreign one is cleared
    and opened again, and None when that fails."""
    for attempt in range(2):
        try:
            return open_store(directory, size_limit, timeout=1,
                              eviction_policy="least-recently-stored")  # fmt: skip
        except (sqlite3.Error, OSError, ForeignStore):
            if attempt == 0:
                _clear(directory)
    return None


def _clear(directory: Path) -> None:
    """Remove a damaged store's files (only what ``diskcache`` makes: it owns the folder)."""
    if not directory.is_dir():
        return
    for path in sorted(directory.rglob("*"), reverse=True):
        with contextlib.suppress(OSError):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()


@functools.cache
def code_version() -> str:
    """A hash of the code that decides chunks and plans; the app's version where the sources
    cannot be read (a frozen build)."""
    core = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"format {FORMAT}".encode())
    try:
        for name in _CODE:
            path = core / name
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for file in files:
                h.update(file.name.encode() + b"\0" + file.read_bytes())
    except OSError:
        try:
            return f"{FORMAT}:{metadata.version('contextlens')}"
        except metadata.PackageNotFoundError:
            return f"{FORMAT}:unknown"
    return h.hexdigest()


def _disk_key(kind: _Kind[Any], key: Key) -> str:
    return hashlib.sha256(repr((code_version(), kind.name, key)).encode()).hexdigest()


def _pack(arrays: dict[str, np.ndarray]) -> bytes:
    """Arrays as one versioned, compressed blob (``np.savez``: no pickle on the way back)."""
    buffer = io.BytesIO()
    # numpy's stub has the names spread here fill savez's allow_pickle too; they name arrays only
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return _MAGIC + bytes([FORMAT]) + zstandard.ZstdCompressor(level=3).compress(buffer.getvalue())


def _unpack(blob: bytes) -> dict[str, np.ndarray]:
    if not isinstance(blob, bytes) or blob[:5] != _MAGIC + bytes([FORMAT]):
        raise ValueError("not a cache entry of this format")
    raw = zstandard.ZstdDecompressor().decompress(blob[5:])
    with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


# ----- the kinds of entries --------------------------------------------------------------------

_BOUNDARIES = {int(b): b for b in Boundary}


def _encode_chunks(chunks: list[Chunk]) -> dict[str, np.ndarray]:
    rows = [(c.start, c.end, c.tokens, int(c.boundary)) for c in chunks]
    return {"chunks": np.array(rows, dtype=np.int64).reshape(len(rows), 4)}


def _decode_chunks(arrays: dict[str, np.ndarray]) -> list[Chunk]:
    rows = arrays["chunks"]
    if rows.ndim != 2 or rows.shape[1] != 4:
        raise ValueError("chunk rows of the wrong shape")
    return [Chunk(i, s, e, t, _BOUNDARIES[b]) for i, (s, e, t, b) in enumerate(rows.tolist())]


def _encode_plan(plan: Plan) -> dict[str, np.ndarray]:
    packed = pack_plan(plan)
    arrays = {k: v for k, v in packed.items() if isinstance(v, np.ndarray)}
    rest = {k: v for k, v in packed.items() if not isinstance(v, np.ndarray)}
    arrays["meta"] = np.frombuffer(json.dumps(rest).encode(), dtype=np.uint8)
    return arrays


def _decode_plan(arrays: dict[str, np.ndarray]) -> Plan:
    packed: dict[str, Any] = json.loads(arrays.pop("meta").tobytes())
    return unpack_plan(packed | arrays)


def _plan_rows(plan: Plan) -> int:
    return len(plan.chunks) + len(plan.kept) + len(plan.dropped) + len(plan.windows) + 1


def _encode_count(n: int) -> dict[str, np.ndarray]:
    return {"count": np.array([n], dtype=np.int64)}


def _decode_count(arrays: dict[str, np.ndarray]) -> int:
    return int(arrays["count"][0])


_CHUNKS = _Kind("chunkings", len, _encode_chunks, _decode_chunks)
_PLANS = _Kind("plans", _plan_rows, _encode_plan, _decode_plan)
_COUNTS = _Kind("counts", lambda _n: 1, _encode_count, _decode_count)
_INDEXES = _Kind("indexes", lambda index: index.rows, Index.to_arrays, Index.from_arrays)
