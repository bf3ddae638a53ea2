"""What a saved KV state must look like before llama.cpp is handed it.

A state imported from a ``.ctxlens`` file is untrusted bytes that would reach llama.cpp's native
state reader (``llama_state_seq_set_data``), matched to a model only by a sha256 the file itself
chose. That reader checks each layer's type and row size against the loaded model, but it takes
cell positions as written, ignores bytes after what it needs, and restores however many cells the
state says while the app believes the token list beside it. So an import walks the state's layout
first, without the model, and refuses one that is not what this app's engine writes:

- one or two caches (a model with sliding-window layers keeps a second one), each one stream of
  ``cells`` cells; the first holds one cell per token, at positions exactly 0..tokens-1, each in
  sequence 0 alone; a second holds at most as many, at distinct positions among those;
- each cache's layers all of the recorded cache type, with row sizes whole multiples of that
  type's block, the bytes of every layer exactly ``cells`` rows (the per-token size the state
  declares, times its cells), and nothing after the last cache.

The layout is llama.cpp's own (a magic number and the saved sequence, -1 for the engine's
states; then ``llama_kv_cache::state_write``: ``n_stream``, then per stream
``cell_count``, per cell ``pos``, ``n_seq_id``, an extension record on M-RoPE and n-gram models,
the sequence ids; then ``v_trans``, ``n_layer`` and per layer the type, the row size and the rows
of K, then of V, transposed or not). A state in any other layout (a recurrent or hybrid model's)
is refused rather than guessed at. The bytes are read through a :class:`Source`, so a state is
checked as it streams out of an archive without being held whole.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

STATE_MAGIC = 0xAF143CD8  # llama_context::state_seq_get_data's first four bytes
SAVED_SEQUENCE = -1  # the engine saves every sequence (its context has one), then sequence -1
MAX_CACHES = 2  # a plain cache, or the base and sliding-window caches of an iSWA model
MAX_LAYERS = 4096
MAX_ROW_BYTES = 1 << 26  # one cell's row of one layer (llama.cpp's largest models: ~100 KiB)
CELL_EXT_BYTES = 12  # llama_kv_cell_ext: x, y (M-RoPE) and the token (n-gram embeddings)
META_BATCH = 1 << 16  # cells checked at a time (bounds what the check holds)


class KVLayoutError(ValueError):
    """The state is not laid out as this app's engine writes it; the message is a phrase
    (without a capital or full stop) for the caller's sentence."""


class Source(Protocol):
    """Bytes read in order: ``take`` and ``skip`` raise :class:`KVLayoutError` past the end."""

    def take(self, n: int) -> bytes: ...

    def skip(self, n: int) -> None: ...

    def left(self) -> int: ...


class BytesSource:
    """A :class:`Source` over bytes already in memory (a stored state)."""

    def __init__(self, data: bytes | memoryview) -> None:
        self._data = memoryview(data)
        self._at = 0

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise KVLayoutError("it ends early")
        self._at += n
        return bytes(self._data[self._at - n : self._at])

    def skip(self, n: int) -> None:
        if n > self.left():
            raise KVLayoutError("it ends early")
        self._at += n

    def left(self) -> int:
        return len(self._data) - self._at


@dataclass(frozen=True)
class Layout:
    """What a state's walk found: its caches' cell counts, the layers of the first cache and
    the bytes each cell takes across all caches' layers (K and V)."""

    cells: tuple[int, ...]
    layers: int
    bytes_per_cell: int


def _u32(src: Source) -> int:
    value: int = struct.unpack("<I", src.take(4))[0]
    return value


def _u64(src: Source) -> int:
    value: int = struct.unpack("<Q", src.take(8))[0]
    return value


def _type_of(cache_type: str) -> tuple[int, int, int]:
    """The ggml type id of a cache type name, its block size and its block's bytes."""
    try:
        ggml = GGMLQuantizationType[cache_type.upper()]
    except KeyError:
        raise KVLayoutError(f"its cache type {cache_type!r} is unknown") from None
    block, size = GGML_QUANT_SIZES[ggml]
    return int(ggml), block, size


def check_state(src: Source, *, tokens: int, cache_type: str) -> Layout:
    """Walk a state of ``tokens`` tokens saved with a ``cache_type`` cache; raise
    :class:`KVLayoutError` at the first thing that is not as this app's engine writes it."""
    if tokens < 1:
        raise KVLayoutError("it holds no tokens")
    ggml, block, size = _type_of(cache_type)
    if src.left() < 8 or _u32(src) != STATE_MAGIC:
        raise KVLayoutError("it does not start as a llama.cpp sequence state")
    saved_for = struct.unpack("<i", src.take(4))[0]
    if saved_for != SAVED_SEQUENCE:
        raise KVLayoutError(f"it was saved for sequence {saved_for:,}, not for every sequence")
    cells: list[int] = []
    layers = per_cell = 0
    while src.left() > 0:
        if len(cells) == MAX_CACHES:
            raise KVLayoutError(f"it holds more than {MAX_CACHES} caches")
        left = src.left()
        n_stream = _u32(src)
        if n_stream != 1 and cells:
            raise KVLayoutError(f"it holds {left:,} bytes after its cache")
        if n_stream != 1:
            raise KVLayoutError(f"it holds {n_stream:,} streams where the engine writes 1")
        count = _u32(src)
        first = not cells
        if first and count != tokens:
            raise KVLayoutError(f"it holds {count:,} cells for its {tokens:,} tokens")
        if count > tokens:
            raise KVLayoutError(f"a cache holds {count:,} cells for its {tokens:,} tokens")
        cells.append(count)
        if count == 0:
            continue  # llama.cpp writes nothing more for an empty stream
        _check_cells(src, count, tokens, whole=first)
        n_layer, cell_bytes = _check_rows(src, count, ggml, block, size)
        layers = layers or n_layer
        per_cell += cell_bytes
    if not cells:
        raise KVLayoutError("it is empty")
    return Layout(tuple(cells), layers, per_cell)


def _check_cells(src: Source, count: int, tokens: int, *, whole: bool) -> None:
    """The cells' records: each in sequence 0 alone, at distinct positions below ``tokens``,
    all of 0..tokens-1 in the ``whole`` first cache. A record is 12 bytes, or 24 where the model
    keeps llama.cpp's cell extension; the reading that fits every cell is the one (the records
    of one cache are held at once: at most 24 bytes a token)."""
    plain = np.frombuffer(src.take(12 * count), dtype="<i4").reshape(count, 3)
    if _fits(plain[:, 0], plain[:, 1], plain[:, 2], tokens, whole):
        return
    extended = np.concatenate(
        (plain.reshape(-1), np.frombuffer(src.take(CELL_EXT_BYTES * count), dtype="<i4"))
    ).reshape(count, 3 + CELL_EXT_BYTES // 4)
    if not _fits(extended[:, 0], extended[:, 1], extended[:, -1], tokens, whole):
        raise KVLayoutError("its cells are not those of its tokens in one sequence")


def _fits(pos: np.ndarray, n_seq: np.ndarray, seq: np.ndarray, tokens: int, whole: bool) -> bool:
    if not (np.all(n_seq == 1) and np.all(seq == 0)):
        return False
    if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= tokens):
        return False
    hits = np.bincount(pos, minlength=tokens)
    return bool(np.all(hits == 1)) if whole else bool(hits.max(initial=0) <= 1)


def _check_rows(src: Source, count: int, ggml: int, block: int, size: int) -> tuple[int, int]:
    """One cache's data: the layers' K rows, then their V rows (transposed or not); returns the
    layer count and the bytes one cell takes across them."""
    v_trans = _u32(src)
    n_layer = _u32(src)
    if v_trans not in (0, 1):
        raise KVLayoutError(f"its value layout flag is {v_trans:,}")
    if not 1 <= n_layer <= MAX_LAYERS:
        raise KVLayoutError(f"it has {n_layer:,} layers")
    if v_trans and block != 1:
        raise KVLayoutError("its values are transposed in a quantized cache")
    per_cell = 0
    for _ in range(2 * n_layer if not v_trans else n_layer):  # K rows (and V rows when plain)
        row = _typed_row(src, ggml, size)
        src.skip(count * row)
        per_cell += row
    if v_trans:
        for _ in range(n_layer):
            kind = _u32(src)
            element = _u32(src)
            width = _u32(src)
            if kind != ggml or element != size:
                raise KVLayoutError("a layer's values are not of its cache type")
            if not 1 <= width * element <= MAX_ROW_BYTES:
                raise KVLayoutError(f"a layer's values are {width:,} wide")
            src.skip(width * count * element)
            per_cell += width * element
    return n_layer, per_cell


def _typed_row(src: Source, ggml: int, size: int) -> int:
    kind = _u32(src)
    row = _u64(src)
    if kind != ggml:
        raise KVLayoutError(f"a layer is of ggml type {kind:,}, not of its cache type")
    if not 0 < row <= MAX_ROW_BYTES or row % size:
        raise KVLayoutError(f"a layer's rows are {row:,} bytes")
    return row
