"""A model file's card for a listing, read from its GGUF header once and then remembered.

Listing every model a person has means reading the headers of many large files; a header with a
quarter-million-token vocabulary takes about 0.3 s to read and check. Only the header is read
(:func:`app.core.engine.gguf.read_gguf` never touches the weights), and what it said is kept per
file, keyed by the real path, size and modification time: in memory for the process and on disk
(``diskcache`` in the cache folder) for the next one, so ``contextlens-cli models`` run again,
or the window's list refreshed, reads only files that changed. A cache that cannot be opened or
read costs time, never a wrong card.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import diskcache

from app.core.disk_store import ForeignStore, open_store
from app.core.engine.gguf import GGUFError, model_info, read_gguf

FORMAT = 2  # bump when Card or its disk form changes (2: JSON bytes, no pickle)
DISK_BYTES = 16 * 1024 * 1024
_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout, TypeError, ValueError, KeyError)
PROJECTOR_TYPES = frozenset({"mmproj", "clip-vision", "projector"})


@dataclass(frozen=True)
class Card:
    """What a listing shows of one GGUF file (a split's part: of that part alone)."""

    family: str  # general.architecture
    name: str | None  # general.name
    parameters: int  # elements of this file's tensors
    quantization: str
    n_ctx_train: int | None
    file_size: int
    kind: str  # "model", "adapter" (LoRA), "projector" (vision), "vocabulary" (no tensors)
    split_count: int = 1  # split.count: the parts of the model this file belongs to
    split_no: int = 0  # split.no: this part, from 0


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _kind(general_type: Any, family: str, n_tensors: int, split_count: int) -> str:
    if general_type == "adapter":
        return "adapter"
    if general_type in PROJECTOR_TYPES or family == "clip":
        return "projector"
    if n_tensors == 0 and split_count == 1:
        return "vocabulary"
    return "model"


def read_card_uncached(path: Path) -> Card:
    """The card of ``path`` from its header; GGUFError in one sentence when it is not a GGUF
    file llama.cpp could read."""
    gf = read_gguf(path)
    split_count = max(1, _int(gf.get("split.count"), 1))
    split_no = _int(gf.get("split.no"), 0)
    parameters = sum(t.n_elements for t in gf.tensors)
    kind = _kind(gf.get("general.type"), gf.architecture, len(gf.tensors), split_count)
    if split_no > 0:  # a later part holds tensors only; the first part says what the model is
        return Card(gf.architecture, None, parameters, "", None, gf.file_size, kind,
                    split_count, split_no)  # fmt: skip
    info = model_info(gf)
    return Card(info.architecture, info.name, parameters, info.quantization, info.n_ctx_train,
                info.file_size, kind, split_count, split_no)  # fmt: skip


def _disk_key(key: tuple[str, int, int]) -> str:
    return json.dumps([FORMAT, *key])


def _encode(found: Card | str) -> bytes:
    """A card, or the sentence a file that is not a model gave, as JSON bytes."""
    return json.dumps(found if isinstance(found, str) else asdict(found)).encode()


def _decode(stored: bytes) -> Card | str:
    """What :func:`_encode` wrote; ValueError or TypeError for anything else."""
    value = json.loads(stored)
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise ValueError("not a card")
    card = Card(**value)
    for name, kind in (("family", str), ("parameters", int), ("quantization", str),
                       ("file_size", int), ("kind", str), ("split_count", int),
                       ("split_no", int)):  # fmt: skip
        if not isinstance(getattr(card, name), kind):
            raise TypeError(f"a card whose {name} is not a {kind.__name__}")
    return card


class CardCache:
    """Cards by (real path, size, mtime): in memory, and in ``folder`` on disk when given."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder
        self._disk: diskcache.Cache | None = None
        self._disk_failed = False
        self._memory: dict[tuple[str, int, int], Card | str] = {}
        self._lock = threading.Lock()
        self.headers_read = 0  # files whose header was read (not found in a cache)

    def card(self, path: Path) -> Card:
        """``path``'s card, read only when its real file changed since it was last read."""
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError as exc:
            raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from None
        key = (real, st.st_size, st.st_mtime_ns)
        found = self._memory.get(key)
        if found is None:
            found = self._from_disk(key)
        if found is None:
            found = self._read(Path(path))
            self._to_disk(key, found)
        self._memory[key] = found
        if isinstance(found, str):
            raise GGUFError(found)
        return found

    def _read(self, path: Path) -> Card | str:
        self.headers_read += 1
        try:
            return read_card_uncached(path)
        except GGUFError as exc:
            return str(exc)

    def _open(self) -> diskcache.Cache | None:
        with self._lock:
            if self._disk is None and self._folder is not None and not self._disk_failed:
                try:  # bytes only, nothing in the folder trusted (app/core/disk_store.py)
                    self._disk = open_store(self._folder, DISK_BYTES)
                except (*_DISK_ERRORS, ForeignStore):
                    self._disk_failed = True
            return self._disk

    def _from_disk(self, key: tuple[str, int, int]) -> Card | str | None:
        disk = self._open()
        if disk is None:
            return None
        try:
            stored = disk.get(_disk_key(key))
            if stored is None:
                return None
            return _decode(stored)
        except _DISK_ERRORS:
            return None

    def _to_disk(self, key: tuple[str, int, int], found: Card | str) -> None:
        disk = self._open()
        if disk is None:
            return
        with contextlib.suppress(*_DISK_ERRORS):
            disk.set(_disk_key(key), _encode(found))

    def close(self) -> None:
        with self._lock:
            if self._disk is not None:
                self._disk.close()
                self._disk = None
