"""What a plan is: the spans of a document that reach the model and those left out, with their
exact token counts and reasons, and for a multi-pass strategy its windows. Value types only,
apart from the strategies that make them (strategies.py), so the plan cache and its codec
(cache.py, codec.py) depend on the plan, not on the planner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.planning.chunking import Boundary, Chunk


@dataclass(frozen=True, slots=True)
class Span:
    start: int  # character offsets, end exclusive
    end: int
    tokens: int
    reason: str
    # Why a span of a plan made for a question (`retrieve`) is kept or dropped, in figures: its
    # BM25 score, its rank among the parts that match (None: it matches nothing), the question's
    # words it holds, and for a neighbour kept as context the rank of the match it is next to.
    score: float | None = None
    rank: int | None = None
    terms: tuple[str, ...] = ()
    next_to: int | None = None

    @property
    def scored(self) -> bool:
        return self.score is not None

    def as_dict(self) -> dict[str, Any]:
        """Its fields; those of a scored span only when it is one (other plans stay as before)."""
        out: dict[str, Any] = {"start": self.start, "end": self.end, "tokens": self.tokens,
                               "reason": self.reason}  # fmt: skip
        if self.score is not None:
            out |= {"score": round(self.score, 4), "rank": self.rank, "terms": list(self.terms),
                    "next_to": self.next_to}  # fmt: skip
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Span:
        """A span as :meth:`as_dict` wrote it (a recorded plan read back)."""
        score = data.get("score")
        return cls(int(data["start"]), int(data["end"]), int(data["tokens"]), str(data["reason"]),
                   None if score is None else float(score), data.get("rank"),
                   tuple(data.get("terms") or ()), data.get("next_to"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class PlanWindow:
    """One pass of a multi-pass strategy: chunks ``first..last`` together in the context."""

    start: int
    end: int
    tokens: int
    first: int
    last: int


@dataclass(frozen=True)
class Plan:
    strategy: str
    budget: int
    total_tokens: int  # the whole document, as the chunks of this plan (what they evaluate)
    kept: tuple[Span, ...]
    dropped: tuple[Span, ...]
    windows: tuple[PlanWindow, ...] = ()
    refused: str | None = None  # the refusal message, for ``refuse`` when it does not fit
    boundary_integrity: float = 1.0
    seconds: float = field(default=0.0, compare=False)  # how long it took, not what it is
    chunks: tuple[Chunk, ...] = field(default=(), repr=False)
    question: str = ""  # what the document was ranked against (`retrieve`), else ""
    # the whole text counted as one (the document's count, as its header says it); 0: not known
    document_tokens: int = 0

    @property
    def kept_tokens(self) -> int:
        return sum(s.tokens for s in self.kept)

    def of_document(self) -> tuple[int, int]:
        """``(kept, total)`` said of the document: see :func:`kept_of_document`."""
        return kept_of_document(self.kept_tokens, self.total_tokens, self.document_tokens,
                                dropped=bool(self.dropped))  # fmt: skip

    @property
    def multi_pass(self) -> bool:
        return bool(self.windows)

    @property
    def peak_tokens(self) -> int:
        """The most tokens in the context at once: what the budget bounds."""
        if self.windows:
            return max(w.tokens for w in self.windows)
        return self.kept_tokens

    def kept_chunks(self) -> list[Chunk]:
        """The chunks inside kept spans, in document order (the segments a pass evaluates).

        One pass over both (spans and chunks are in document order): a 5 MB document has tens of
        thousands of chunks, and an entropy plan thousands of kept spans. A span kept inside a
        chunk (`retrieve`'s sentences) is a segment of its own, with that chunk's index.
        """
        out: list[Chunk] = []
        spans, i = self.kept, 0
        for c in self.chunks:
            while i < len(spans) and spans[i].end <= c.start:
                i += 1
            if i < len(spans) and spans[i].start <= c.start and c.end <= spans[i].end:
                out.append(c)
                continue
            j = i
            while j < len(spans) and spans[j].start < c.end:
                s = spans[j]
                if c.start <= s.start and s.end <= c.end:
                    edge = c.boundary if s.end == c.end else Boundary.SENTENCE
                    out.append(Chunk(c.index, s.start, s.end, s.tokens, edge))
                j += 1
        return out

    def needle_retention(self, needles: Sequence[tuple[int, int]]) -> float:
        """Share of ``needles`` (character ranges) that reach the model whole in one pass."""
        if not needles:
            return 1.0
        spans = [(w.start, w.end) for w in self.windows] or _joined(self.kept)
        hit = sum(any(a <= s and e <= b for a, b in spans) for s, e in needles)
        return hit / len(needles)

    def as_dict(self) -> dict[str, Any]:
        question = {"question": self.question} if self.question else {}
        return {
            "strategy": self.strategy,
            **question,
            "budget": self.budget,
            "kept": [s.as_dict() for s in self.kept],
            "dropped": [s.as_dict() for s in self.dropped],
            "windows": [asdict(w) for w in self.windows],
            "kept_tokens": self.kept_tokens,
            "total_tokens": self.total_tokens,
            "document_tokens": self.document_tokens,
            "peak_tokens": self.peak_tokens,
            "boundary_integrity": round(self.boundary_integrity, 4),
            "refused": self.refused,
            "seconds": round(self.seconds, 4),
        }


def _joined(spans: Sequence[Span]) -> list[tuple[int, int]]:
    """``spans`` (in document order) with adjacent ones joined: a fact kept sentence by
    sentence reaches the model whole."""
    out: list[tuple[int, int]] = []
    for s in spans:
        if out and out[-1][1] == s.start:
            out[-1] = (out[-1][0], s.end)
        else:
            out.append((s.start, s.end))
    return out


def kept_of_document(kept: int, in_chunks: int, document: int, *, dropped: bool) -> tuple[int, int]:
    """``(kept, total)`` as said beside the document's count, so that a document has one total.

    ``total`` is the whole text's count ``document`` (the chunks' sum ``in_chunks`` where that
    is not known, 0). The chunks' sum differs from it by the tokens a cut splits or joins, and
    that difference goes to the dropped part when there is one (``kept`` stays what the model
    evaluates, within the budget), else to the kept part: all of the document reaches the model.
    """
    total = document or in_chunks
    return (min(kept, total), total) if dropped else (total, total)
