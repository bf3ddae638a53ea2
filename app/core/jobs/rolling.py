"""``rolling``: a running summary carried through the document, window by window.

Where the engine's cache can shift, the document streams through the ring in one pass
(:func:`app.core.jobs.streaming.rolling_stream`); where it cannot, each window is prompted again
with the summary so far, and the job says why (:class:`RingFallback`)."""

from __future__ import annotations

from collections.abc import Generator

from app.core.jobs.call_runner import CallRunner, TextSegment, chunk_segments
from app.core.jobs.events import (
    ChunkEvicted,
    Event,
    OutputSpan,
    PartialResult,
    PassStarted,
    RingFallback,
)
from app.core.jobs.job_setup import disjoint_windows
from app.core.jobs.streaming import rolling_stream, shift_refusal
from app.core.planning.frame import ROLLING, SUMMARIZE_PART
from app.core.planning.plan import Plan


def rolling(
    runner: CallRunner, text: str, plan: Plan, max_tokens: int
) -> Generator[Event, None, None]:
    """The document in order, window by window, through the KV ring in one pass
    (:mod:`app.core.jobs.streaming`); where the cache cannot shift, each window re-prompted
    with the summary so far, and the reason said."""
    windows = disjoint_windows(plan)
    reason = shift_refusal(runner.engine)
    if reason is None:
        yield from rolling_stream(runner, text, plan, windows, max_tokens)
        return
    runner.result.fallback = reason
    yield RingFallback("rolling", reason)
    summary = ""
    seen: list[tuple[int, int]] = []
    for i, (first, last) in enumerate(windows):
        if runner.cancel.is_set():
            return
        chunks = plan.chunks[first : last + 1]
        segs = [TextSegment(f"Summary so far:\n{summary}\n\nNext part:\n", None)] if summary else []
        segs += chunk_segments(text, chunks)
        instruction = ROLLING if summary else SUMMARIZE_PART
        yield PassStarted(f"window {i + 1}", i + 1, len(windows))
        out = yield from runner.call(f"window {i + 1}", instruction, segs, max_tokens)
        if out.text:
            summary = out.text
        for c in plan.chunks[first : last + 1]:
            yield ChunkEvicted(f"window {i + 1}", c.start, c.end)
        seen.append((chunks[0].start, chunks[-1].end))
        yield PartialResult(out.step, summary, (seen[-1],))
    if runner.result.outputs:
        previous = runner.result.outputs[-1]
        final = OutputSpan("summary", summary, tuple(seen), previous.ring_version,
                           previous.finish_reason)  # fmt: skip
        runner.result.outputs.append(final)
