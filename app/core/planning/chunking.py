"""Semantic chunking under a token budget, and sliding windows over the chunks.

A chunk ends on the strongest boundary available: heading > paragraph > sentence > line end >
clause > word > character. Inside a code block only line ends (and blank lines) are boundaries,
so no chunk ends in the middle of a line of code unless one line alone is over the budget.
Chinese sentence and clause marks count like their Latin counterparts. A line end ranks below a
sentence end (prose is often hard-wrapped) but is what tables, logs and code read as plain text
offer, so it is the cut there instead of a comma or a word.

Cuts are placed before the whitespace that separates two units, so the whitespace opens the next
chunk; with GPT-2 style pre-tokenizers that keeps counts additive. Additivity is only used to
plan: every chunk's ``tokens`` is the exact count of its own text, and a chunk whose exact count
is over the budget is cut again.
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from app.core.documents import Block, BlockKind, Document
from app.core.tokens import TokenCounter


class Boundary(IntEnum):
    """How strong a cut point is; a cut is 'clean' from SENTENCE up."""

    CHAR = 0
    WORD = 1
    CLAUSE = 2
    LINE = 3
    SENTENCE = 4
    PARAGRAPH = 5
    HEADING = 6
    END = 7  # the start or end of the document


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
_LINE = re.compile(r"(?<=\S)[ \t\r]*\n(?=[ \t]*\S)")  # a line end with text on both sides
_WORD = re.compile(r"(?<=\S)\s")
_NEWLINE = re.compile(r"\n")
_WHITESPACE_RUN = re.compile(r"\s{16,}")  # long enough to be a unit of its own


class _Cuts:
    """The candidate cut points of a text that are sentence or line ends or stronger.

    Held as two sorted numpy arrays (position, strength) built in one vectorised pass; the
    clause and word cuts, needed only where a single line is over the budget, are found on demand.
    """

    def __init__(self, text: str, blocks: Sequence[Block]) -> None:
        self.text = text
        code = [(b.start, b.end) for b in blocks if b.kind == BlockKind.CODE]
        found: list[tuple[np.ndarray, int]] = []

        def collect(positions: Iterable[int], strength: Boundary) -> None:
            found.append((np.fromiter(positions, dtype=np.int64), int(strength)))

        collect((m.end() for m in _SENTENCE.finditer(text)), Boundary.SENTENCE)
        collect((m.start() for m in _LINE.finditer(text)), Boundary.LINE)
        collect((_trim_back(text, m.start()) for m in _PARA.finditer(text)), Boundary.PARAGRAPH)
        for m in _WHITESPACE_RUN.finditer(text):
            strength = Boundary.PARAGRAPH if "\n" in m.group() else Boundary.WORD
            collect((m.end(),), strength)
        headings = [b.start for b in blocks if b.kind == BlockKind.HEADING]
        collect((_trim_back(text, p) for p in headings), Boundary.HEADING)
        others = [b.start for b in blocks if b.kind != BlockKind.HEADING]
        collect((_trim_back(text, p) for p in others + [b.end for b in blocks]), Boundary.PARAGRAPH)
        positions = np.concatenate([p for p, _ in found]) if found else np.empty(0, np.int64)
        parts: list[np.ndarray] = [np.full(len(p), s, np.int8) for p, s in found]
        strengths = np.concatenate(parts or [np.empty(0)])
        if code:  # nothing above cuts inside code; its line ends are added next
            starts, ends = np.array(code, dtype=np.int64).T
            k = np.searchsorted(starts, positions, side="right") - 1
            inside = (k >= 0) & (positions > starts[k]) & (positions < ends[np.maximum(k, 0)])
            positions, strengths = positions[~inside], strengths[~inside]
            for start, end in code:
                newlines = [m.start() for m in _NEWLINE.finditer(text, start, end)]
                cuts = [(_trim_back(text, q), _blank_line_after(text, q)) for q in newlines]
                cuts = [(p, blank) for p, blank in cuts if start < p < end]
                line_ends = np.array([p for p, _ in cuts], np.int64)
                kinds = [Boundary.PARAGRAPH if blank else Boundary.SENTENCE for _, blank in cuts]
                line_strengths = np.array(kinds, np.int8)
                positions = np.concatenate([positions, line_ends])
                strengths = np.concatenate([strengths, line_strengths])
        keep = (positions > 0) & (positions < len(text))
        positions, strengths = positions[keep], strengths[keep]
        order = np.lexsort((-strengths.astype(np.int16), positions))  # by position, strongest first
        positions, strengths = positions[order], strengths[order]
        first = np.ones(len(positions), dtype=bool)
        first[1:] = positions[1:] != positions[:-1]
        self.positions, self.strengths = positions[first], strengths[first]
        self._code = code

    def at_least(self, strength: Boundary) -> np.ndarray:
        return self.positions[self.strengths >= strength]

    def strongest_in(self, lo: int, hi: int) -> tuple[int, Boundary] | None:
        """The last of the strongest cuts with ``lo < pos < hi``."""
        i = int(np.searchsorted(self.positions, lo, side="right"))
        j = int(np.searchsorted(self.positions, hi, side="left"))
        if i >= j:
            return None
        window = self.strengths[i:j]
        best = window.max()
        k = j - 1 - int(np.argmax(window[::-1] == best))
        return int(self.positions[k]), Boundary(int(best))

    def fine_in(self, lo: int, hi: int) -> tuple[int, Boundary] | None:
        """The last clause cut, else the last word cut, in ``(lo, hi]``."""
        fine = ((_CLAUSE, Boundary.CLAUSE, True), (_WORD, Boundary.WORD, False))
        for pattern, strength, after in fine:
            last = None
            for m in pattern.finditer(self.text, lo + 1, hi + 1):
                pos = m.end() if after else m.start()
                if lo < pos <= hi:
                    last = pos
            if last is not None:
                return last, strength
        return None


def _splits(text: str, pos: int) -> bool:
    """A non-space character then ASCII whitespace at ``pos``: a pre-token boundary for GPT-2."""
    return text[pos] in " \t\n\r\f\v" and not text[pos - 1].isspace()


def _trim_back(text: str, pos: int) -> int:
    while pos > 0 and text[pos - 1].isspace():
        pos -= 1
    return pos


def _blank_line_after(text: str, newline: int) -> bool:
    """Whether the line after the newline at ``newline`` is blank (a paragraph break in code)."""
    nxt = text.find("\n", newline + 1)
    return nxt >= 0 and not text[newline + 1 : nxt].strip()


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
        tokens = chunker.exact_sum(start, end)
        if tokens is None:
            tokens = counter.count(text[start:end])
        while tokens > max_tokens and end - start > 1:  # counts were not additive: cut earlier
            end, strength = chunker.fine_cut(start, end)
            tokens = counter.count(text[start:end])
        chunks.append(Chunk(len(chunks), start, end, tokens, strength))
        start = end
    return chunks


class _Chunker:
    """The cut points of one text and the estimated token counts of its units.

    Units are the text between consecutive line-or-stronger cuts, counted once in a batch; the
    token count from any unit edge to another is then a difference of prefix sums.
    """

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
        self.edges: list[int] = [0, *self.cuts.at_least(Boundary.LINE).tolist(), len(text)]
        # A unit longer than a few chunks (a line of megabytes) is counted only until it is
        # surely over the budget: no chunk holds it whole, so its exact size is never used.
        long = 8 * max_tokens + 64
        units = [text[a:b] if b - a <= long else "" for a, b in itertools.pairwise(self.edges)]
        counts = counter.count_many(units)
        for i, (a, b) in enumerate(itertools.pairwise(self.edges)):
            if b - a > long:
                counts[i] = self._count_head(a, b)
        self.prefix = [0, *itertools.accumulate(counts)]
        self.forced: list[int] = [] if split_at is None else self.cuts.at_least(split_at).tolist()
        # Unit edges across which counts provably add up (see TokenCounter.splits_at_spaces).
        unsafe = [0, *(0 if _splits(text, e) else 1 for e in self.edges[1:-1]), 0]
        self._unsafe_before = [0, *itertools.accumulate(unsafe)]
        self._additive = counter.splits_at_spaces

    def exact_sum(self, start: int, end: int) -> int | None:
        """The exact count of ``text[start:end]`` from unit counts, when they provably add up.

        (A long unit's count may be only a lower bound over the budget; the spans asked for here
        never hold one whole, since their estimated count is within the budget.)
        """
        if not self._additive:
            return None
        k = bisect.bisect_left(self.edges, start)
        j = bisect.bisect_left(self.edges, end)
        if j >= len(self.edges) or self.edges[k] != start or self.edges[j] != end:
            return None
        if self._unsafe_before[j] - self._unsafe_before[k + 1] > 0:  # an interior edge
            return None
        return self.prefix[j] - self.prefix[k]

    def next_cut(self, start: int) -> tuple[int, Boundary]:
        """Where the chunk starting at ``start`` should end; never past a forced cut."""
        end, strength = self._next_cut(start)
        i = bisect.bisect_right(self.forced, start)
        if i < len(self.forced) and self.forced[i] < end:
            found = self.cuts.strongest_in(self.forced[i] - 1, self.forced[i] + 1)
            assert found is not None  # forced cuts are cuts
            return found
        return end, strength

    def _next_cut(self, start: int) -> tuple[int, Boundary]:
        """Where the chunk starting at ``start`` should end, from the estimated unit counts."""
        text, edges, prefix, cuts = self.text, self.edges, self.prefix, self.cuts
        k = bisect.bisect_left(edges, start)  # first unit edge at or after start
        head = self._count_head(start, edges[k]) if edges[k] > start else 0
        if head > self.max_tokens:  # even the rest of this line is too long
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
        assert found is not None  # edges[j] itself is a cut after start
        return found

    def _count_head(self, start: int, end: int) -> int:
        """The count of ``text[start:end]`` (the rest of a line), or, for a long line, of a
        prefix of it as soon as that prefix alone is over the budget.

        Counting the whole rest of the line for every chunk made one 5 MB line (no newline)
        quadratic: hours. The prefix grows from about eight characters a token, so the cost is
        of the order of one chunk. A prefix over the budget only sends the chunk to
        :meth:`fine_cut`, which cuts with exact counts.
        """
        text, count, budget = self.text, self.counter.count, self.max_tokens
        span = 8 * budget + 64
        while end - start > span:
            n = count(text[start : start + span])
            if n > budget:
                return n
            span *= 2
        return count(text[start:end])

    def fine_cut(self, start: int, end: int) -> tuple[int, Boundary]:
        """The best cut in ``(start, end)`` that fits, found with exact counts.

        The search window grows from about four characters a token, so a long line costs counts
        of the order of one chunk, not of the whole line. Inside it, the furthest character the
        budget reaches is found by interpolating on the counts (tokens grow about linearly with
        the characters), then by bisection: a handful of counts a chunk, not a dozen.
        """
        text, count, budget = self.text, self.counter.count, self.max_tokens
        last = end - 1  # the furthest candidate
        a, fa = start, 0  # the furthest position known to fit, and its count
        b, fb = last + 1, 0  # the nearest position known not to fit (fb 0: none yet)
        hi = min(last, start + 4 * budget)
        while True:
            n = count(text[start:hi])
            if n > budget:
                b, fb = hi, n
                break
            a, fa = hi, n
            if hi >= last:
                break
            hi = min(last, start + 2 * (hi - start))
        probes = 0
        while b - a > 1:
            if fb and probes < 4:
                mid = a + int((b - a) * (budget + 0.5 - fa) / (fb - fa))
                mid = min(b - 1, max(a + 1, mid))
            else:
                mid = (a + b) // 2
            probes += 1
            n = count(text[start:mid])
            if n <= budget:
                a, fa = mid, n
            else:
                b, fb = mid, n
        reach = max(a, start + 1)
        floor = start + int((reach - start) * self.min_fill)
        found = self.cuts.strongest_in(max(start, floor - 1), reach + 1)
        if found is None:
            found = self.cuts.fine_in(max(start, floor - 1), reach)
        if found is None:
            found = self.cuts.strongest_in(start, reach + 1) or self.cuts.fine_in(start, reach)
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
