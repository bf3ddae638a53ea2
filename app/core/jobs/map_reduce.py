"""``map-reduce`` and ``semantic`` summaries: each window of the plan summarized, then the
partial summaries combined (in groups, again, while they do not fit one call), each combined
output naming the document spans it stands for."""

from __future__ import annotations

from collections.abc import Generator

from app.core.jobs.call_runner import (
    CallRunner,
    CallWindow,
    TextSegment,
    call_made_from,
    chunk_segments,
    fit,
    union,
)
from app.core.jobs.events import Event
from app.core.planning.chunking import Boundary, Chunk, sliding_windows
from app.core.planning.frame import COMBINE, SUMMARIZE_PART
from app.core.planning.plan import Plan
from app.core.tokens import TokenCounter


def map_reduce(
    runner: CallRunner, text: str, plan: Plan, counter: TokenCounter, *, n_ctx: int, max_tokens: int
) -> Generator[Event, None, None]:
    # each part's reply must fit the room the plan kept free (``max_tokens``): a quarter of the
    # window, at least 32 tokens, never more than that room
    part_tokens = min(max_tokens, max(32, plan.budget // 4))
    windows = [
        CallWindow(f"part {i + 1}", chunk_segments(text, plan.chunks[w.first : w.last + 1]))
        for i, w in enumerate(plan.windows)
    ]  # fmt: skip
    outs = yield from runner.map(SUMMARIZE_PART, windows, part_tokens)
    if runner.cancel.is_set():
        return
    # each partial result with the document spans it stands for (a part: the chunks it held)
    partials = [(out.text, out.source_spans) for out in outs]
    level = 1
    frame = runner.frame(COMBINE)
    budget = max(1, n_ctx - frame.tokens - max_tokens)
    while True:
        if runner.cancel.is_set():
            return
        sizes = [max(1, counter.count(p)) for p, _ in partials]
        if sum(sizes) <= budget or len(partials) == 1:
            break
        # Too many partial summaries for one call: combine them in groups, then again.
        pseudo = [Chunk(i, 0, 0, n, Boundary.END) for i, n in enumerate(sizes)]
        groups = [partials[w.first : w.last + 1] for w in sliding_windows(pseudo, budget, 0.0)]
        combines = [
            CallWindow(f"combine {level}.{g + 1}", [TextSegment(p, None) for p, _ in group],
                    union([s for _, spans in group for s in spans]))
            for g, group in enumerate(groups)
        ]  # fmt: skip
        outs = yield from runner.map(COMBINE, combines, part_tokens)
        if runner.cancel.is_set():
            return
        merged = [(out.text, out.source_spans) for out in outs]
        if len(merged) >= len(partials):
            break  # no progress: the final call keeps what fits
        partials, level = merged, level + 1
    fits = fit([TextSegment(p, None) for p, _ in partials], counter, budget)
    if len(fits) < len(partials):
        runner.result.truncated = True
    made_from = [s for _, spans in partials[: len(fits)] for s in spans]  # what the call holds
    yield from call_made_from(runner, "summary", COMBINE, fits, max_tokens, made_from=made_from)
