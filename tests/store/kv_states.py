"""KV state bytes laid out as llama.cpp's engine writes them (app/store/kv_layout.py), for tests
that store, export or import a state without loading a model."""

from __future__ import annotations

import struct
from collections.abc import Sequence

MAGIC = 0xAF143CD8
F16 = 1  # ggml type ids
Q8_0 = 8


def cache(
    positions: Sequence[int], *, layers: int = 2, row: int = 1024, kind: int = F16,
    v_trans: bool = False, ext: bool = False, fill: int = 0x5A,
) -> bytes:  # fmt: skip
    """One cache: one stream of cells at ``positions`` (sequence 0), ``layers`` layers of K and
    V rows of ``row`` bytes (V transposed as ``row // 2`` f16 values when ``v_trans``)."""
    out = bytearray(struct.pack("<II", 1, len(positions)))
    if not positions:
        return bytes(out)
    for pos in positions:
        out += struct.pack("<iI", pos, 1)
        if ext:
            out += struct.pack("<iii", 0, 0, 7)
        out += struct.pack("<i", 0)
    out += struct.pack("<II", int(v_trans), layers)
    body = bytes([fill]) * (len(positions) * row)
    for _ in range(layers):
        out += struct.pack("<iQ", kind, row) + body
    for _ in range(layers):
        if v_trans:
            out += struct.pack("<iII", kind, 2, row // 2) + body
        else:
            out += struct.pack("<iQ", kind, row) + body
    return bytes(out)


def engine_state(tokens: int, **kwargs: object) -> bytes:
    """A whole state of ``tokens`` tokens saved for every sequence, as the engine saves one."""
    return struct.pack("<Ii", MAGIC, -1) + cache(range(tokens), **kwargs)  # type: ignore[arg-type]
