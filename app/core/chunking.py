"""Semantic chunking under a token budget, and sliding windows over the chunks.

A chunk ends on the strongest boundary available: heading > paragraph > sentence > clause >
word > character. Inside a code block only line ends (and blank lines) are boundaries, so no chunk
ends in the middle of a line of code unless one line alone is over the budget. Chinese sentence
and clause marks count like their Latin counterparts.

Cuts are placed before the whitespace that separates two units, so the whitespace opens the next
chunk; with GPT-2 style pre-tokenizers that keeps counts additive. Additivity is only used to
plan: every chunk's ``tokens`` is the exact count of its own text, and a chunk whose exact count
is over the budget is cut again.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from app.core.documents import Block, BlockKind, Document
from app.core.tokens import TokenCounter


class Boundary(IntEnum):
    """How strong a cut point is; a cut is 'clean' from SENTENCE up."""

    CHAR = 0
    WORD = 1
    CLAUSE = 2
    SENTENCE = 3
    PARAGRAPH = 4
    HEADING = 5
    END = 6  # the start or end of the document


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    start: int  # character offsets into the document text, end exclusive
    end: int
    tokens: int  # exact count of text[start:end] by the counter used
    boundary: Boundary  # strength of the cut at ``end``


@dataclass(frozen=True, slots=True)
class Window:
    """Consecutive chunks ``first..last`` (inclusive) evaluated together."""

    first: int
    last: int
    tokens: int  # sum of the chunks' tokens: each chunk is its own segment in the context


# Sentence ends: Latin marks followed by closing quotes/brackets then whitespace; CJK full-width
# marks anywhere (Chinese puts no space after them). Clause marks likewise.
_SENTENCE = re.compile(r"""[.!?…][)"'\]»”’]*(?=\s)|[。！？；][)」』”’）]*""")
_CLAUSE = re.compile(r"""[,;:][)"'\]»”’]*(?=\s)|[，、：）]|—""")
_PARA = re.compile(r"\n[ \t\r\f\v]*\n")
_WORD = re.compile(r"(?<=\S)\s")
_LINE_END = re.compile(r"\n")
_WHITESPACE_RUN = re.compile(r"\s{16,}")  # long enough to be a unit of its own


class _Cuts:
    """Candidate cut points of a text with their strengths, searchable by position."""

    def __init__(self, text: str, blocks: Sequence[Block]) -> None:
        self.text = text
        code = _code_spans(blocks)
        strengths: dict[int, int] = {}

        def add(pos: int, strength: Boundary) -> None:
            if 0 < pos < len(text) and strengths.get(pos, -1) < strength and not _in(code, pos):
                strengths[pos] = strength

        for m in _SENTENCE.finditer(text):
            add(m.end(), Boundary.SENTENCE)
        for m in _CLAUSE.finditer(text):
            add(m.end(), Boundary.CLAUSE)
        for m in _PARA.finditer(text):
            add(_trim_back(text, m.start()), Boundary.PARAGRAPH)
        for m in _WHITESPACE_RUN.finditer(text):
            add(m.end(), Boundary.PARAGRAPH if "\n" in m.group() else Boundary.WORD)
        for block in blocks:
            strength = Boundary.HEADING if block.kind == BlockKind.HEADING else Boundary.PARAGRAPH
            add(_trim_back(text, block.start), strength)
            add(_trim_back(text, block.end), Boundary.PARAGRAPH)
        for start, end in code:  # inside code: line ends only (blank lines are paragraphs)
            for m in _LINE_END.finditer(text, start, end):
                pos = _trim_back(text, m.start())
                if start < pos < end:
                    blank = _blank_after(text, m.end())
                    strength = Boundary.PARAGRAPH if blank else Boundary.SENTENCE
                    if strengths.get(pos, -1) < strength:
                        strengths[pos] = strength
        self.positions = sorted(strengths)
        self.strengths = [strengths[p] for p in self.positions]

    def word_cuts(self, start: int, end: int) -> list[int]:
        """Word boundaries in ``(start, end)``: before each whitespace run."""
        return [m.start() for m in _WORD.finditer(self.text, start, end)]

    def strongest_in(self, lo: int, hi: int) -> tuple[int, Boundary] | None:
        """The last of the strongest cuts with ``lo < pos < hi``."""
        i = bisect.bisect_right(self.positions, lo)
        j = bisect.bisect_left(self.positions, hi)
        if i >= j:
            return None
        best = max(self.strengths[i:j])
        for k in range(j - 1, i - 1, -1):
            if self.strengths[k] == best:
                return self.positions[k], Boundary(best)
        return None


def _code_spans(blocks: Sequence[Block]) -> list[tuple[int, int]]:
    return [(b.start, b.end) for b in blocks if b.kind == BlockKind.CODE]


def _in(spans: list[tuple[int, int]], pos: int) -> bool:
    i = bisect.bisect_right(spans, (pos, math.inf)) - 1
    return i >= 0 and spans[i][0] < pos < spans[i][1]


def _trim_back(text: str, pos: int) -> int:
    while pos > 0 and text[pos - 1].isspace():
        pos -= 1
    return pos


def _blank_after(text: str, pos: int) -> bool:
    nl = text.find("\n", pos)
    return nl >= 0 and not text[pos:nl].strip()


def _grapheme_safe(text: str, pos: int) -> int:
    """Move ``pos`` back so it does not split a combining sequence, ZWJ sequence or flag pair."""
    while 0 < pos < len(text):
        c, prev = text[pos], text[pos - 1]
        joins = (
            unicodedata.combining(c)
            or c in "\u200d\ufe0e\ufe0f"
            or prev == "\u200d"
            or 0x1F3FB <= ord(c) <= 0x1F3FF
            or (0x1F1E6 <= ord(c) <= 0x1F1FF and 0x1F1E6 <= ord(prev) <= 0x1F1FF)
        )
        if not joins:
            return pos
        pos -= 1
    return pos


def chunk_document(
    doc: Document | str,
    counter: TokenCounter,
    max_tokens: int,
    *,
    min_fill: float = 0.5,
    split_at: Boundary | None = None,
) -> list[Chunk]:
    """Cut the text into chunks of at most ``max_tokens`` tokens on the strongest boundaries.

    Each chunk is filled to at least ``min_fill`` of the budget where the text allows, and within
    that range ends on the strongest boundary (the last one, if several are equally strong).
    Only a single character that alone needs more tokens than the budget (an emoji under a
    budget of one token) makes a chunk over the budget; planners drop such chunks. With
    ``split_at``, every boundary at least that strong also ends a chunk (paragraph units).
    """
    if max_tokens < 1:
        raise ValueError("the chunk budget must be at least one token")
    text = doc if isinstance(doc, str) else doc.text
    blocks: Sequence[Block] = () if isinstance(doc, str) else doc.blocks
    if not text:
        return []
    chunker = _Chunker(
        text, blocks, counter, max_tokens=max_tokens, min_fill=min_fill, split_at=split_at
    )
    chunks: list[Chunk] = []
    start = 0
    while start < len(text):
        end, strength = chunker.next_cut(start)
        tokens = counter.count(text[start:end])
        while tokens > max_tokens and end - start > 1:  # counts were not additive: cut earlier
            end, strength = chunker.fine_cut(start, end)
            tokens = counter.count(text[start:end])
        chunks.append(Chunk(len(chunks), start, end, tokens, strength))
        start = end
    return chunks


class _Chunker:
    """The cut points of one text and the estimated token counts of its sentence units."""

    def __init__(
        self,
        text: str,
        blocks: Sequence[Block],
        counter: TokenCounter,
        *,
        max_tokens: int,
        min_fill: float,
        split_at: Boundary | None = None,
    ) -> None:
        self.text, self.counter = text, counter
        self.max_tokens, self.min_fill = max_tokens, min_fill
        self.cuts = _Cuts(text, blocks)
        # Units: the text between consecutive sentence-or-stronger cuts, counted in one batch.
        strong = zip(self.cuts.positions, self.cuts.strengths, strict=True)
        self.edges = [0, *(p for p, s in strong if s >= Boundary.SENTENCE), len(text)]
        units = [text[a:b] for a, b in itertools.pairwise(self.edges)]
        self.prefix = [0, *itertools.accumulate(counter.count_many(units))]
        pairs = zip(self.cuts.positions, self.cuts.strengths, strict=True)
        self.forced = [] if split_at is None else [(p, s) for p, s in pairs if s >= split_at]

    def next_cut(self, start: int) -> tuple[int, Boundary]:
        """Where the chunk starting at ``start`` should end; never past a forced cut."""
        end, strength = self._next_cut(start)
        i = bisect.bisect_right(self.forced, (start, math.inf))
        if i < len(self.forced) and self.forced[i][0] < end:
            return self.forced[i][0], Boundary(self.forced[i][1])
        return end, strength

    def _next_cut(self, start: int) -> tuple[int, Boundary]:
        """Where the chunk starting at ``start`` should end, from the estimated unit counts."""
        text, edges, prefix, cuts = self.text, self.edges, self.prefix, self.cuts
        k = bisect.bisect_left(edges, start)  # first unit edge at or after start
        head = self.counter.count(text[start : edges[k]]) if edges[k] > start else 0
        if head > self.max_tokens:  # even the rest of this sentence is too long
            return self.fine_cut(start, edges[k])
        offset = prefix[k] - head  # estimated tokens from start to edge e: prefix[e] - offset
        j = bisect.bisect_right(prefix, self.max_tokens + offset, lo=k) - 1  # last edge that fits
        if j == len(edges) - 1:
            return len(text), Boundary.END
        if j <= k and edges[k] == start:
            return self.fine_cut(start, edges[k + 1])
        lo = min(j, bisect.bisect_left(prefix, self.min_fill * self.max_tokens + offset, lo=k))
        found = cuts.strongest_in(max(start, edges[lo] - 1), edges[j] + 1)
        if found is None:
            found = cuts.strongest_in(start, edges[j] + 1)
        assert found is not None  # edges[j] itself is a clean cut after start
        return found

    def fine_cut(self, start: int, end: int) -> tuple[int, Boundary]:
        """The best cut in ``(start, end)`` that fits, found with exact counts."""
        text, count = self.text, self.counter.count
        lo, hi, reach = start + 1, end - 1, start + 1
        while lo <= hi:  # the furthest character the budget reaches
            mid = (lo + hi) // 2
            if count(text[start:mid]) <= self.max_tokens:
                reach, lo = mid, mid + 1
            else:
                hi = mid - 1
        floor = start + int((reach - start) * self.min_fill)
        found = self.cuts.strongest_in(max(start, floor - 1), reach + 1)
        if found is not None:
            return found
        words = [p for p in self.cuts.word_cuts(start, reach + 1) if start < p <= reach]
        if words:
            return words[-1], Boundary.WORD
        found = self.cuts.strongest_in(start, reach + 1)
        if found is not None:
            return found
        pos = _grapheme_safe(text, reach)
        return (pos if pos > start else reach), Boundary.CHAR


def sliding_windows(chunks: Sequence[Chunk], budget: int, overlap: float = 0.0) -> list[Window]:
    """Windows of consecutive chunks, each at most ``budget`` tokens, sharing about ``overlap``.

    The next window starts at the earliest chunk that keeps the shared tokens at or under
    ``overlap`` × the previous window's tokens, and always at least one chunk later, so the
    windows advance. A chunk larger than the budget is a window of its own (the plan marks it).
    """
    if not 0.0 <= overlap < 1.0:
        raise ValueError("the overlap must be at least 0 and less than 1")
    windows: list[Window] = []
    first = 0
    n = len(chunks)
    while first < n:
        last, total = first, chunks[first].tokens
        while last + 1 < n and total + chunks[last + 1].tokens <= budget:
            last += 1
            total += chunks[last].tokens
        windows.append(Window(first, last, total))
        if last == n - 1:
            break
        shared_cap = overlap * total
        nxt, shared = last + 1, 0
        while nxt - 1 > first and shared + chunks[nxt - 1].tokens <= shared_cap:
            nxt -= 1
            shared += chunks[nxt].tokens
        first = max(nxt, first + 1)
    return windows


def overlapping_chunks(
    doc: Document | str, counter: TokenCounter, max_tokens: int, overlap: float
) -> list[Chunk]:
    """Chunks of at most ``max_tokens`` that each repeat about ``overlap`` of the previous one.

    Built as sliding windows over finer chunks (a quarter of the budget), so every chunk still
    starts and ends on the strongest boundaries; each is one contiguous text, counted exactly.
    """
    if overlap <= 0:
        return chunk_document(doc, counter, max_tokens)
    text = doc if isinstance(doc, str) else doc.text
    fine = chunk_document(doc, counter, max(1, max_tokens // 4))
    out: list[Chunk] = []
    first, n = 0, len(fine)
    while first < n:
        last, total = first, fine[first].tokens
        while last + 1 < n and total + fine[last + 1].tokens <= max_tokens:
            last += 1
            total += fine[last].tokens
        tokens = counter.count(text[fine[first].start : fine[last].end])
        while tokens > max_tokens and last > first:  # the joined text counted more than its parts
            last -= 1
            tokens = counter.count(text[fine[first].start : fine[last].end])
        out.append(Chunk(len(out), fine[first].start, fine[last].end, tokens, fine[last].boundary))
        if last == n - 1:
            break
        nxt, shared = last + 1, 0
        while nxt - 1 > first and shared + fine[nxt - 1].tokens <= overlap * tokens:
            nxt -= 1
            shared += fine[nxt].tokens
        first = nxt
    return out
