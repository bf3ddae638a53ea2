"""Special tokens first: llama.cpp's ``tokenizer_st_partition``, exactly.

Apart from the tokenizer (``vocab_tokenizer.py``) because every encoder of a GGUF vocabulary
splits the text this way before anything else, whatever encodes the pieces between: longest
token first over the whole text, user-defined tokens even when special tokens are not parsed,
lstrip/rstrip tokens swallowing the whitespace beside them.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.vocab_gguf import (
    ATTR_CONTROL,
    ATTR_LSTRIP,
    ATTR_RSTRIP,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    Vocab,
)

_C_SPACE = " \t\n\v\f\r"  # C isspace(): what llama.cpp's lstrip/rstrip remove


@dataclass(frozen=True)
class Special:
    text: str
    id: int
    lstrip: bool = False
    rstrip: bool = False


def specials_of(vocab: Vocab, parse_special: bool) -> list[Special]:
    """The tokens llama.cpp splits the text on, in its order (longest UTF-8 first).

    User-defined tokens always; control and unknown ones only when special tokens are parsed.
    llama.cpp sorts with an unstable sort, so equal lengths are ordered by id here; they differ
    only where two such tokens overlap in a text.
    """
    skip = 0 if parse_special else ATTR_CONTROL | ATTR_UNKNOWN
    found: list[Special] = []
    for tid, (text, attr) in enumerate(zip(vocab.tokens, vocab.attrs, strict=True)):
        if not attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) or attr & skip or not text:
            continue
        found.append(Special(text, tid, bool(attr & ATTR_LSTRIP), bool(attr & ATTR_RSTRIP)))
    found.sort(key=lambda s: (-len(s.text.encode("utf-8", "surrogatepass")), s.id))
    return found


Fragment = str | int  # raw text, or a special token's id


def partition(text: str, specials: Sequence[Special]) -> list[Fragment]:
    """Split ``text`` on ``specials`` exactly as llama.cpp does.

    Each token, longest first, claims its leftmost non-overlapping occurrences that lie wholly in
    text no longer token claimed; lstrip/rstrip tokens also swallow the whitespace beside them.
    When the tokens present cannot overlap one another (runs of one character aside, where
    both orders agree), one regular expression that tries the longest first at each position
    splits the same way; else occurrences are found once per present token, so the cost grows
    with the matches, not with the number of special tokens times the length of the text.
    """
    present = tuple(sp for sp in specials if sp.text in text)
    if not present:
        return [text] if text else []
    splitter = _simple_splitter(present)
    if splitter is not None:
        pattern, ids = splitter
        parts = pattern.split(text)
        out: list[Fragment] = []
        for i, part in enumerate(parts):
            if i % 2:
                out.append(ids[part])
            elif part:
                out.append(part)
        return out
    return _partition_exact(text, present)


@functools.lru_cache(maxsize=64)
def _simple_splitter(present: tuple[Special, ...]) -> tuple[re.Pattern[str], dict[str, int]] | None:
    """One alternation, longest first, when it splits as llama.cpp does (see partition)."""
    if len(present) > 64 or any(sp.lstrip or sp.rstrip for sp in present):
        return None  # many tokens (a chat transcript): the pairwise check costs more than it saves
    texts = [sp.text for sp in present]
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            if _same_char_runs(a, b):
                continue
            if a in b or b in a or _overlaps(a, b) or _overlaps(b, a):
                return None
    ordered = sorted(present, key=lambda sp: (-len(sp.text), sp.id))
    pattern = re.compile("(" + "|".join(re.escape(sp.text) for sp in ordered) + ")")
    return pattern, {sp.text: sp.id for sp in present}


def _same_char_runs(a: str, b: str) -> bool:
    return len(set(a)) == 1 and set(a) == set(b)


def _overlaps(a: str, b: str) -> bool:
    """Some end of ``a`` is a beginning of ``b``."""
    return any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b))))


def _partition_exact(text: str, specials: Sequence[Special]) -> list[Fragment]:
    """partition, token by token as llama.cpp does (for tokens that may overlap)."""
    starts: list[int] = []  # claimed intervals, disjoint, sorted: [start, end) and what they hold
    ends: list[int] = []
    what: list[int | None] = []  # a token id, or None for stripped whitespace
    for sp in specials:
        size = len(sp.text)
        new: list[tuple[int, int, int | None]] = []
        last_end = 0
        p = text.find(sp.text)
        while p >= 0:
            i = bisect.bisect_left(starts, p + size) - 1
            if p >= last_end and not (i >= 0 and ends[i] > p):  # not inside an earlier claim
                lo, hi = p, p + size
                if sp.lstrip:
                    floor = max(last_end, ends[i] if i >= 0 else 0)
                    while lo > floor and text[lo - 1] in _C_SPACE:
                        lo -= 1
                if sp.rstrip:
                    j = bisect.bisect_left(starts, hi)
                    ceiling = starts[j] if j < len(starts) else len(text)
                    while hi < ceiling and text[hi] in _C_SPACE:
                        hi += 1
                if lo < p:
                    new.append((lo, p, None))
                new.append((p, p + size, sp.id))
                if hi > p + size:
                    new.append((p + size, hi, None))
                last_end = hi
            p = text.find(sp.text, p + 1)
        for lo, hi, w in new:  # each claim slots in between the claims of longer tokens
            k = bisect.bisect_left(starts, lo)
            starts.insert(k, lo)
            ends.insert(k, hi)
            what.insert(k, w)
    out: list[Fragment] = []
    pos = 0
    for s, e, w in zip(starts, ends, what, strict=True):
        if s > pos:
            out.append(text[pos:s])
        if w is not None:
            out.append(w)
        pos = e
    if pos < len(text):
        out.append(text[pos:])
    return out
