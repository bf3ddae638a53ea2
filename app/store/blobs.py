"""Compression of the large values the history stores: document texts, token lists, KV states.

zstd at level 1: on a 44 MiB f16 KV state it packs in ~0.1 s and unpacks in ~0.08 s, where zlib
level 1 took 1.4 s and 0.3 s for the same size (both keep ~92%: KV values are close to random).
Rows written by the first schema used zlib; a zstd frame announces itself with its magic number,
so both read back.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import zstandard

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def pack(data: bytes, level: int = 1) -> bytes:
    return zstandard.ZstdCompressor(level=level).compress(data)


def unpack(blob: bytes) -> bytes:
    if blob[:4] == _ZSTD_MAGIC:
        return zstandard.ZstdDecompressor().decompress(blob)
    return zlib.decompress(blob)


def pack_tokens(tokens: Sequence[int]) -> bytes:
    """Token ids as int32 little-endian, packed."""
    return pack(np.asarray(tokens, dtype="<i4").tobytes())


def unpack_tokens(blob: bytes) -> tuple[int, ...]:
    return tuple(np.frombuffer(unpack(blob), dtype="<i4").tolist())
