"""What a plan is: the spans of a document that reach the model and those left out, with their
exact token counts and reasons, and for a multi-pass strategy its windows. Value types only,
apart from the strategies that make them (strategies.py), so the plan cache and its codec
(cache.py, codec.py) depend on the plan, not on the planner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.planning.chunking import Chunk


@dataclass(frozen=True, slots=True)
class Span:
    start: int  # character offsets, end exclusive
    end: int
    tokens: int
    reason: str


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
    total_tokens: int  # the whole document, as the chunks of this plan
    kept: tuple[Span, ...]
    dropped: tuple[Span, ...]
    windows: tuple[PlanWindow, ...] = ()
    refused: str | None = None  # the refusal message, for ``refuse`` when it does not fit
    boundary_integrity: float = 1.0
    seconds: float = field(default=0.0, compare=False)  # how long it took, not what it is
    chunks: tuple[Chunk, ...] = field(default=(), repr=False)

    @property
    def kept_tokens(self) -> int:
        return sum(s.tokens for s in self.kept)

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
        thousands of chunks, and an entropy plan thousands of kept spans.
        """
        out: list[Chunk] = []
        spans, i = self.kept, 0
        for c in self.chunks:
            while i < len(spans) and spans[i].end <= c.start:
                i += 1
            if i < len(spans) and spans[i].start <= c.start and c.end <= spans[i].end:
                out.append(c)
        return out

    def needle_retention(self, needles: Sequence[tuple[int, int]]) -> float:
        """Share of ``needles`` (character ranges) that reach the model whole in one pass."""
        if not needles:
            return 1.0
        spans = [(w.start, w.end) for w in self.windows] or [(s.start, s.end) for s in self.kept]
        hit = sum(any(a <= s and e <= b for a, b in spans) for s, e in needles)
        return hit / len(needles)

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "kept": [asdict(s) for s in self.kept],
            "dropped": [asdict(s) for s in self.dropped],
            "windows": [asdict(w) for w in self.windows],
            "kept_tokens": self.kept_tokens,
            "total_tokens": self.total_tokens,
            "peak_tokens": self.peak_tokens,
            "boundary_integrity": round(self.boundary_integrity, 4),
            "refused": self.refused,
            "seconds": round(self.seconds, 4),
        }
