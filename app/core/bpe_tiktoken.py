"""A GGUF's byte-level BPE vocabulary as a tiktoken ``Encoding``: the fastest exact counter.

For models whose pre-tokenizer one regular expression can express (:data:`PRE_TOKENIZERS`, the
patterns of llama.cpp's src/llama-vocab.cpp), the vocabulary and merges become tiktoken's ranks,
an order of magnitude faster than llama.cpp. :func:`gguf_encoding` builds it; whether it agrees
with llama.cpp is checked before it is trusted (:func:`app.core.tokens.verify`). SentencePiece
vocabularies have their own form in :mod:`app.core.spm_tiktoken`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tiktoken

from app.core.engine.gguf import GGUFFile
from app.core.token_counter import DROPPED_ID, TiktokenCounter, TokenizerUnsupported
from app.core.vocab_tokenizer import tokenizer_header, unicode_to_byte

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types

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
    to_byte = unicode_to_byte()
    vocab = {t: i for i, t in enumerate(tokens)}
    byte_char = {b: c for c, b in to_byte.items()}

    ranks: dict[bytes, int] = {}
    pairs: dict[tuple[bytes, bytes], int] = {}
    rank_ids: list[int] = []
    for b in range(256):
        # A byte with no token of its own is dropped by llama.cpp (it emits nothing for it);
        # tiktoken needs every byte ranked, so such bytes map to DROPPED_ID and are filtered out.
        ranks[bytes([b])] = b
        rank_ids.append(vocab.get(byte_char[b], DROPPED_ID))
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
