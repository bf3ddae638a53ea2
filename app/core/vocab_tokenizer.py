"""llama.cpp's tokenizers rebuilt from a GGUF vocabulary on Hugging Face ``tokenizers``.

Counting a long document through llama.cpp is slow for two reasons: its SentencePiece (SPM)
tokenizer scans the whole text once per user-defined token before it starts (Gemma 3 has 165 of
them: 0.03-0.05 MB/s on a 1.6 MB text), and every family runs on one thread. This module rebuilds
the same tokenizer in ``tokenizers`` (Rust, parallel over pieces) and keeps llama.cpp's rules where
they differ from a Hugging Face tokenizer.json:

* **Special tokens first.** llama.cpp splits the text on its special tokens before anything else,
  longest token first over the whole text (``tokenizer_st_partition``); user-defined tokens are
  split even when special tokens are not parsed. :func:`~app.core.vocab_specials.partition`
  does exactly that.
* **SPM** (Llama 2, Mistral, Gemma 1-3, Phi-3, Baichuan). llama.cpp merges adjacent pieces whose
  concatenation is a vocabulary entry, best score first, leftmost on ties, then falls back to byte
  tokens. That is a BPE whose merge list is every split of every entry into two entries, ranked by
  the entry's score: :func:`spm_merges`. Merges can only join characters that sit side by side in
  some entry, so the text is cut where no entry spans the two characters (before a "▁" that no
  entry has inside it after that character) and the pieces are encoded in parallel.
* **BPE** with llama.cpp's pre-tokenizer for each ``tokenizer.ggml.pre`` (a cascade of regular
  expressions, each splitting the pieces of the one before: ``Split(..., "isolated")``), GPT-2's
  byte map unless the family uses raw UTF-8, and ``ignore_merges`` where llama.cpp sets it.

The vocabulary as llama.cpp reads it is ``vocab_gguf.py``'s, the special-token partition
``vocab_specials.py``'s, the BPE pre-tokenizers ``vocab_pretokenizers.py``'s table; this module
builds the tokenizers and counts with them (:class:`VocabCounter`).

Exactness is proven, not assumed: :func:`app.core.tokens.exact_counter` checks the result against
llama.cpp's own tokenizer on a probe text before trusting it, and the differential tests run every
family's vocabulary from llama.cpp's tokenizer tests.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from app.core.textutil import scrub
from app.core.vocab_gguf import (
    ATTR_CONTROL,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    Vocab,
    VocabUnsupported,
    read_vocab,
    tokenizer_header,
)
from app.core.vocab_pretokenizers import BPE_PRE_TOKENIZERS
from app.core.vocab_specials import Special, partition, specials_of

__all__ = [
    "ATTR_CONTROL",  # ATTR_*, Vocab, VocabUnsupported, read_vocab, tokenizer_header: vocab_gguf's,
    "ATTR_UNKNOWN",  # named here for the callers
    "ATTR_USER_DEFINED",
    "LONE_NEWLINE",
    "PieceEncoder",
    "Vocab",
    "VocabCounter",
    "VocabUnsupported",
    "build_bpe",
    "build_spm",
    "cut_text",
    "encode_in_chunks",
    "pool",
    "read_vocab",
    "spm_merges",
    "tokenizer_header",
    "unicode_to_byte",
    "workers",
]

_SPACE = "\u2581"  # SentencePiece's visible space


# ---------------------------------------------------------------------------------------------
# building the tokenizers


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every split of every entry into two entries, best score first (ties: lower id, then the
    split further left). llama.cpp merges any two neighbours whose text is an entry, by that
    entry's score; two splits of one entry never compete for the same characters."""
    to_id = vocab.to_id()
    scored: list[tuple[float, int, int, str, str]] = []
    for tid, text in enumerate(vocab.tokens):
        if len(text) < 2 or to_id.get(text) != tid:
            continue
        score = vocab.scores[tid]
        for k in range(1, len(text)):
            left, right = text[:k], text[k:]
            if left in to_id and right in to_id:
                scored.append((-score, tid, k, left, right))
    scored.sort(key=lambda c: (c[0], c[1], c[2]))
    return [(left, right) for *_, left, right in scored]


def _spm_cut_pattern(vocab: Vocab) -> str:
    """Where SPM text may be cut: before a "▁" that no entry holds after the character before it.
    (Characters are merged only when an entry holds them side by side.)"""
    before = {t[k - 1] for t in vocab.tokens for k in range(1, len(t)) if t[k] == _SPACE}
    before.add(_SPACE)
    return f"(?<![{''.join(re.escape(c) for c in sorted(before))}]){_SPACE}"


def build_spm(vocab: Vocab) -> Tokenizer:
    model = models.BPE(vocab=vocab.to_id(), merges=spm_merges(vocab), byte_fallback=True)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_spm_cut_pattern(vocab)), "merged_with_next")
    return tok


def build_bpe(vocab: Vocab) -> Tokenizer:
    pre = BPE_PRE_TOKENIZERS.get(vocab.pre)
    if pre is None:
        raise VocabUnsupported(f"pre-tokenizer {vocab.pre!r} has no fast form here")
    merges: list[tuple[str, str]] = []
    for merge in vocab.merges:
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right:
            raise VocabUnsupported(f"malformed merge {merge!r}")
        merges.append((left, right))
    # Raw-UTF-8 families fall back to <0xXX> byte tokens for a character the vocabulary lacks;
    # byte-level ones drop such a byte, as tokenizers does without byte_fallback.
    model = models.BPE(vocab=vocab.to_id(), merges=merges, ignore_merges=pre.ignore_merges,
                       byte_fallback=not pre.byte_encode)  # fmt: skip
    tok = Tokenizer(model)
    steps: list[pre_tokenizers.PreTokenizer] = [
        pre_tokenizers.Split(Regex(r), "isolated") for r in pre.regexes
    ]
    if pre.byte_encode:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    return tok


# ---------------------------------------------------------------------------------------------
# the counter


def encode_in_chunks(
    encode_one: Callable[[str], list[int]], pieces: list[str]
) -> list[list[int]]:
    """``encode_one`` over ``pieces`` on a few threads (the encoders release the GIL), the pieces
    grouped in chunks of similar size so that thousands of short lines cost few hand-offs."""
    total = sum(map(len, pieces))
    n_workers = workers()
    if n_workers < 2 or total < _PIECE_CHARS:
        return [encode_one(p) for p in pieces]
    target = max(_PIECE_CHARS // 4, total // (n_workers * 4))
    chunks: list[list[str]] = [[]]
    size = 0
    for piece in pieces:
        if size >= target:
            chunks.append([])
            size = 0
        chunks[-1].append(piece)
        size += len(piece)
    done = pool().map(lambda chunk: [encode_one(p) for p in chunk], chunks)
    return [ids for chunk in done for ids in chunk]


@functools.cache
def workers() -> int:
    """Threads for encoding: the cores, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


@functools.cache
def pool() -> ThreadPoolExecutor:
    """One pool for every counter's threads (the encoders release the GIL)."""
    return ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="tokens")


class PieceEncoder(Protocol):
    """Encodes raw fragments, each on its own, to token ids (another engine for the same BPE)."""

    method: str  # what it is, for a person: "tiktoken"

    def encode_many(self, pieces: list[str]) -> list[list[int]]: ...


_PIECE_CHARS = 1 << 16  # long raw fragments are cut into pieces of about this size, in parallel


class VocabCounter:
    """An exact counter for a GGUF vocabulary (implements ``app.core.tokens.TokenCounter``)."""

    exact = True
    splits_at_spaces = False  # counts of texts cut at spaces need not add up (SPM: "▁" merges)

    def __init__(
        self,
        vocab: Vocab,
        *,
        name: str,
        model_path: Path | None = None,
        pieces: PieceEncoder | None = None,
        continuation: bool = False,
    ) -> None:
        """``pieces`` encodes raw text fragments (after the special-token partition) when given,
        for example a tiktoken encoding of the same BPE; else the vocabulary is rebuilt on
        ``tokenizers``. ``continuation``: ``vocab`` is the file's with its space prefix switched
        off, so texts count as they stand inside a prompt (see EngineHost.tokenize)."""
        self.name = name
        self.model_path = model_path
        self.continuation = continuation
        self.kind = vocab.kind
        family = f"{vocab.model}/{vocab.pre}" if self.kind == "bpe" else "spm"
        self.family = f"{family}, {pieces.method if pieces else 'tokenizers'}"
        self.fingerprint = vocab.fingerprint() + (f":{pieces.method}" if pieces else "")
        self._vocab = vocab
        self._pieces_encoder = pieces
        self._tok = None
        if pieces is None:
            self._tok = build_spm(vocab) if self.kind == "spm" else build_bpe(vocab)
        self._specials = specials_of(vocab, False)
        self._all_specials = specials_of(vocab, True)
        self._pre = BPE_PRE_TOKENIZERS.get(vocab.pre) if self.kind == "bpe" else None
        self._cut = re.compile(_spm_cut_pattern(vocab)) if self.kind == "spm" else LONE_NEWLINE

    # -- TokenCounter

    def encode(self, text: str) -> list[int]:
        return self._encode(text, self._specials)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def encode_special(self, text: str) -> list[int]:
        return self._encode(text, self._all_specials)

    def count_special(self, text: str) -> int:
        return len(self.encode_special(text))

    def special_texts(self) -> list[str]:
        """The texts of the tokens parsed as special (control, user-defined, unknown)."""
        return [sp.text for sp in self._all_specials]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (special tokens as their text); ValueError for an unknown id."""
        out: list[bytes] = []
        tokens = self._vocab.tokens
        for tid in ids:
            if not 0 <= tid < len(tokens):
                raise ValueError("a token id is outside the vocabulary")
            out.append(self._piece(tokens[tid]))
        return b"".join(out).decode("utf-8", "replace")

    # -- internals

    def _piece(self, token: str) -> bytes:
        if self.kind == "spm" or (self._pre is not None and not self._pre.byte_encode):
            m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
            if m and self.kind == "spm":
                return bytes([int(m.group(1), 16)])
            return token.replace(_SPACE, " ").encode("utf-8", "surrogatepass")
        table = unicode_to_byte()
        try:
            return bytes(table[c] for c in token)
        except KeyError:
            return token.encode("utf-8", "surrogatepass")

    def _encode(self, text: str, specials: Sequence[Special]) -> list[int]:
        frags = partition(scrub(text), specials)
        jobs: list[str] = []  # raw pieces, in order; a fragment may become several pieces
        layout: list[int | tuple[int, int]] = []  # token id, or (first piece, piece count)
        prev_special = True
        for frag in frags:
            if isinstance(frag, int):
                layout.append(frag)
                prev_special = True
                continue
            pieces = self._pieces(frag, prev_special)
            layout.append((len(jobs), len(pieces)))
            jobs.extend(pieces)
            prev_special = False
        if not jobs:
            encoded: list[list[int]] = []
        elif self._pieces_encoder is not None:
            encoded = self._pieces_encoder.encode_many(jobs)
        else:
            assert self._tok is not None  # built whenever no piece encoder was given
            if len(jobs) == 1:
                encoded = [self._tok.encode(jobs[0], add_special_tokens=False).ids]
            else:
                encoded = [e.ids for e in self._tok.encode_batch(jobs, add_special_tokens=False)]
        out: list[int] = []
        for item in layout:
            if isinstance(item, int):
                out.append(item)
            else:
                first, n = item
                for ids in encoded[first : first + n]:
                    out.extend(ids)
        return out

    def _pieces(self, frag: str, prev_special: bool) -> list[str]:
        if self.kind == "spm":
            text = frag.replace(" ", _SPACE)
            if self._vocab.add_space_prefix and prev_special:
                text = _SPACE + text
            return cut_text(text, self._cut) if len(text) > _PIECE_CHARS else [text]
        if self._pre is not None and self._pre.escape_whitespace:
            frag = frag.replace(" ", _SPACE)
        return cut_text(frag, self._cut) if len(frag) > _PIECE_CHARS else [frag]


# A lone newline between two non-space characters: no pre-tokenizer above lets a pre-token span
# it (they isolate newlines, end a run of letters, digits or punctuation before it, or take it as
# a whitespace run that the next non-space character ends), so BPE text may be cut just after it.
LONE_NEWLINE = re.compile(r"(?<=[^\s]\n)(?=[^\s])")


def cut_text(text: str, at: re.Pattern[str] | None, size: int = _PIECE_CHARS) -> list[str]:
    """``text`` in pieces of about ``size`` characters, cut only at matches of ``at`` (a cut
    before the match's start); whole when ``at`` is None."""
    if at is None:
        return [text]
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        m = at.search(text, start + size)
        if m is None:
            break
        pieces.append(text[start : m.start()])
        start = m.start()
    pieces.append(text[start:])
    return pieces


@functools.cache
def unicode_to_byte() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable character map, as character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}
