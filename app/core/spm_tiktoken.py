"""llama.cpp's SentencePiece merging run by tiktoken: the fastest exact SPM counter here.

llama.cpp's SPM tokenizer starts from characters and repeatedly joins the two neighbours whose
concatenation is a vocabulary entry with the best score (leftmost on ties). tiktoken's BPE joins
the two neighbours whose concatenated bytes have the lowest rank. So ranking, in this order,

1. the 256 single bytes (tiktoken starts from bytes),
2. the leading bytes of every character that occurs in an entry, then the character itself (so
   every character is whole before any join between characters, as llama.cpp starts),
3. every multi-character entry, best score first,

makes tiktoken take llama.cpp's steps. What is left that is not an entry (a character the
vocabulary lacks, or its leading bytes) becomes byte tokens, as llama.cpp's byte fallback does.
tiktoken returns a piece that is itself ranked as one token without merging; entries that
llama.cpp's merging never builds from their own characters are therefore left out of the ranks
(they are never a merge result either). Pieces are cut where no entry spans the cut
(:func:`app.core.vocab_tokenizer._spm_cut_pattern`), and encoded on several threads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import numpy as np
import tiktoken
from tokenizers import Tokenizer

from app.core.paths import cache_dir
from app.core.vocab_tokenizer import Vocab, VocabUnsupported, build_spm, encode_in_chunks

_SPACE = "\u2581"
_EXPAND = -1  # a rank that is not a token: its bytes become byte tokens


class SpmTiktoken:
    """A PieceEncoder for an SPM vocabulary (see the module docstring)."""

    method = "tiktoken"

    def __init__(self, vocab: Vocab, reference: Tokenizer | None = None) -> None:
        if vocab.kind != "spm":
            raise VocabUnsupported("not a SentencePiece vocabulary")
        to_id = vocab.to_id()
        byte_ids = [to_id.get(f"<0x{b:02X}>", _EXPAND) for b in range(256)]
        if _EXPAND in byte_ids:
            raise VocabUnsupported("the vocabulary lacks byte tokens for its byte fallback")
        ranks: dict[bytes, int] = {}
        ids: list[int] = []

        def add(key: bytes, tid: int) -> None:
            if key not in ranks:
                ranks[key] = len(ids)
                ids.append(tid)

        for b in range(256):
            add(bytes([b]), to_id.get(chr(b), byte_ids[b]) if b < 0x80 else _EXPAND)
        chars = sorted({c for text in to_id for c in text})
        for c in chars:
            raw = c.encode("utf-8", "surrogatepass")
            for k in range(2, len(raw)):
                add(raw[:k], _EXPAND)
            add(raw, to_id.get(c, _EXPAND))
        built = built_by_merging(vocab, reference)
        reachable = [(t, i) for t, i in to_id.items() if len(t) >= 2 and built[i]]
        reachable.sort(key=lambda ti: (-vocab.scores[ti[1]], ti[1]))
        for text, tid in reachable:
            add(text.encode("utf-8", "surrogatepass"), tid)
        self._ids = np.asarray(ids, dtype=np.int64)
        self._byte_ids = byte_ids
        self._encoding = tiktoken.Encoding(
            name="spm", pat_str=_piece_pattern(vocab), mergeable_ranks=ranks, special_tokens={}
        )
        self._bytes_of = {r: k for k, r in ranks.items() if ids[r] == _EXPAND}

    def encode_many(self, pieces: list[str]) -> list[list[int]]:
        encode = self._encoding.encode_ordinary
        return encode_in_chunks(lambda piece: self._ids_of(encode(piece)), pieces)

    def _ids_of(self, ranks: Sequence[int]) -> list[int]:
        arr = np.asarray(ranks, dtype=np.int64)
        out = self._ids[arr]
        if not (out == _EXPAND).any():
            ids: list[int] = out.tolist()
            return ids
        result: list[int] = []
        for rank, tid in zip(arr.tolist(), out.tolist(), strict=True):
            if tid != _EXPAND:
                result.append(tid)
            else:
                result.extend(self._byte_ids[b] for b in self._bytes_of[rank])
        return result


def built_by_merging(vocab: Vocab, reference: Tokenizer | None = None) -> np.ndarray:
    """For each token id, whether llama.cpp's merging builds that entry from its own characters
    (the reference is the same merging in ``tokenizers``). Kept per vocabulary in the cache
    folder: finding out takes seconds for a large vocabulary (Gemma: 262,144 entries)."""
    path = cache_dir() / "spm-merged" / f"{vocab.fingerprint()[:32]}.bits"
    n = len(vocab.tokens)
    with contextlib.suppress(OSError, ValueError):
        bits = np.unpackbits(np.frombuffer(path.read_bytes(), dtype=np.uint8))[:n]
        if bits.size == n:
            return bits.astype(bool)
    to_id = vocab.to_id()
    multi = [(t, i) for t, i in to_id.items() if len(t) >= 2]
    tok = reference or build_spm(vocab)
    encoded = tok.encode_batch([t for t, _ in multi], add_special_tokens=False)
    built = np.zeros(n, dtype=bool)
    for (_, tid), enc in zip(multi, encoded, strict=True):
        built[tid] = enc.ids == [tid]
    with contextlib.suppress(OSError):  # a cache: without it the next load finds out again
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(np.packbits(built).tobytes())
        os.replace(tmp, path)
    return built


def _piece_pattern(vocab: Vocab) -> str:
    """tiktoken's pieces: cut before a "▁" unless the character before is a "▁" or one that some
    entry holds just before a "▁" (those may join across)."""
    before = {t[k - 1] for t in vocab.tokens for k in range(1, len(t)) if t[k] == _SPACE}
    before.discard(_SPACE)
    if not before:
        return f"{_SPACE}*[^{_SPACE}]+|{_SPACE}+"
    cls = "".join(f"\\x{{{ord(c):X}}}" for c in sorted(before))  # no escape means anything else
    return f"{_SPACE}*(?:[^{_SPACE}{cls}]|[{cls}]{_SPACE}*)+|{_SPACE}+"
