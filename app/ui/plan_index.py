"""What the document view draws of a plan, worked out where it cannot stall the window.

A plan of a 50 MB document has ~90k chunks. Sorting its spans, cutting the text into coloured
stretches and binning the chunk lengths walks them in Python: ~100 ms of the GUI thread while a
generation streamed (``bench_gui_responsiveness``, under load). :func:`index_plan` does that
work on the planning thread, and the view only installs the result. No Qt here.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.planning.plan import Plan, Span

# The kinds of stretch the view colours (its highlighter's formats are indexed by them).
KEPT_A, KEPT_B, KEPT_A_SHARED, KEPT_B_SHARED, DROPPED, SOURCE = range(6)
MAX_BINS = 40  # the chunk-length histogram's bars at most


@dataclass(frozen=True)
class ChunkHistogram:
    """Chunk token lengths in bins, split into chunks in kept spans and dropped ones."""

    centres: np.ndarray
    kept: np.ndarray
    dropped: np.ndarray
    width: float
    top: int  # the longest chunk's tokens


@dataclass(frozen=True)
class PlanIndex:
    """A plan's spans, windows and chunks as sorted offsets, for bisection on hover and paint."""

    spans: list[tuple[Span, bool]] = field(default_factory=list)  # (span, kept), by start
    span_starts: list[int] = field(default_factory=list)
    window_starts: list[int] = field(default_factory=list)
    window_ends: list[int] = field(default_factory=list)
    chunk_starts: list[int] = field(default_factory=list)
    stretches: tuple[list[int], list[int], list[int]] = ([], [], [])  # starts, ends, kinds
    histogram: ChunkHistogram | None = None  # None: no plan, or a plan without chunks

    def span_at(self, offset: int) -> tuple[Span, bool] | None:
        """The span holding character ``offset`` and whether it is kept, or None."""
        i = bisect.bisect_right(self.span_starts, offset) - 1
        if i >= 0 and offset < self.spans[i][0].end:
            return self.spans[i]
        return None


def index_plan(plan: Plan | None) -> PlanIndex:
    """Everything the view needs of ``plan`` (None: an empty index)."""
    if plan is None:
        return PlanIndex()
    spans = [(s, True) for s in plan.kept] + [(s, False) for s in plan.dropped]
    spans.sort(key=lambda item: item[0].start)
    index = PlanIndex(
        spans=spans,
        span_starts=[s.start for s, _ in spans],
        window_starts=[w.start for w in plan.windows],
        window_ends=[w.end for w in plan.windows],
        chunk_starts=[c.start for c in plan.chunks],
    )
    return replace(index, stretches=_stretches(index), histogram=_histogram(plan, index))


def _stretches(index: PlanIndex) -> tuple[list[int], list[int], list[int]]:
    """The plan as disjoint stretches (start, end, kind) in Python offsets: kept text takes the
    tint of its window (alternating, stronger where windows overlap), dropped text is dimmed."""
    starts: list[int] = []
    ends: list[int] = []
    kinds: list[int] = []
    if not index.window_starts:
        for span, kept in index.spans:
            starts.append(span.start)
            ends.append(span.end)
            kinds.append(KEPT_A if kept else DROPPED)
        return starts, ends, kinds
    cuts = sorted(
        {s.start for s, _ in index.spans}
        | {s.end for s, _ in index.spans}
        | set(index.window_starts)
        | set(index.window_ends)
    )
    for a, b in itertools.pairwise(cuts):
        found = index.span_at(a)
        if found is None:
            continue
        kind = DROPPED
        if found[1]:
            first = bisect.bisect_right(index.window_ends, a)
            covering = bisect.bisect_right(index.window_starts, a) - first
            if covering > 0:
                kind = (KEPT_A if first % 2 == 0 else KEPT_B) + (2 if covering > 1 else 0)
            else:
                kind = KEPT_A
        if kinds and kinds[-1] == kind and ends[-1] == a:
            ends[-1] = b
        else:
            starts.append(a)
            ends.append(b)
            kinds.append(kind)
    return starts, ends, kinds


def _histogram(plan: Plan, index: PlanIndex) -> ChunkHistogram | None:
    if not plan.chunks:
        return None
    n = len(plan.chunks)
    tokens = np.fromiter((c.tokens for c in plan.chunks), dtype=np.int64, count=n)
    starts = np.asarray(index.chunk_starts, dtype=np.int64)
    span_starts = np.asarray(index.span_starts, dtype=np.int64)
    span_kept = np.fromiter((kept for _, kept in index.spans), dtype=bool, count=len(index.spans))
    if not len(span_kept):  # no spans at all: every chunk counts as dropped
        kept = np.zeros(n, dtype=bool)
    else:
        kept = span_kept[np.clip(np.searchsorted(span_starts, starts, "right") - 1, 0, None)]
    top = int(tokens.max())
    bins = max(1, min(MAX_BINS, top))
    edges = np.linspace(0, top, bins + 1) if top > 0 else np.array([0.0, 1.0])
    kept_counts, _ = np.histogram(tokens[kept], bins=edges)
    dropped_counts, _ = np.histogram(tokens[~kept], bins=edges)
    return ChunkHistogram(
        centres=(edges[:-1] + edges[1:]) / 2,
        kept=kept_counts,
        dropped=dropped_counts,
        width=float(edges[1] - edges[0]),
        top=top,
    )
