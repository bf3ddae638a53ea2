"""A document streamed through the KV ring once: the rolling summary as one continuous pass.

Re-prompting each window with the summary so far evaluates the instruction and the summary
again for every window. Streamed, the instruction stays pinned at the front of llama.cpp's
cache; each window's text is appended after what the cache holds, so llama.cpp evaluates only
the new tokens; the reply the model writes stays resident as a *notes* segment; when the next
window needs room, the oldest document segments leave the cache first
(``llama_memory_seq_rm``) and everything after them moves down (``llama_memory_seq_add``), the
notes last. Every document token is evaluated once. The ring mirrors each removal, the events
show it (:class:`KVShifted`, :class:`ChunkEvicted`), and the audit reads the cache back after
it.

A cache that cannot move positions (``llama_memory_can_shift`` is false for some sliding-window
and recurrent models) or a server's cache, which a client cannot edit, gets today's re-prompted
windows instead, with the reason said (:func:`shift_refusal`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.engine.api import Engine
from app.core.jobs.audit import Audit, LaidSegment, chunk_tokens
from app.core.jobs.events import (
    ChunkEvicted,
    ChunkQueued,
    Event,
    JobResult,
    KVShifted,
    OutputSpan,
    PartialResult,
    PassStarted,
)
from app.core.jobs.ring import Ring, RingError, Segment, SegmentKind
from app.core.planning.frame import ROLLING
from app.core.planning.plan import Plan

# Before each window after the first: the notes so far end, the document goes on.
NEXT_PART = "\n\nNext part of the document:\n"
Span = tuple[int, int]


class Framed(Protocol):
    before: list[int]
    after: list[int]


class RingCalls(Protocol):
    """What the stream needs from a job's call runner (``app.core.jobs.call_runner.CallRunner``)."""

    engine: Engine
    ring: Ring
    result: JobResult
    audit: Audit | None
    last_reply: list[int]  # the token ids of the last call's reply

    @property
    def cancelled(self) -> bool: ...

    def frame(self, instruction: str) -> Framed: ...

    def stream(
        self,
        step: str,
        prompt: Sequence[int],
        placed: Sequence[tuple[Any, Segment]],
        sources: tuple[Span, ...],
        max_tokens: int,
        *,
        laid: Sequence[LaidSegment] = (),
    ) -> Generator[Event, None, OutputSpan]: ...


@dataclass(frozen=True)
class _Piece:
    """A document chunk as the session's stream reports it evaluated."""

    text: str
    source: Span | None


def shift_refusal(engine: Engine) -> str | None:
    """Why ``engine``'s cache cannot stream a document (None: it can)."""
    if not callable(getattr(engine, "remove", None)):
        return "this engine cannot remove positions from its KV cache"
    usage = engine.kv_usage()
    if usage.reported_by != "llama.cpp":
        return "a server keeps its own KV cache, which a client cannot shift"
    if not usage.can_shift:
        return (
            "this model's KV cache cannot move positions (llama_memory_can_shift is false, as "
            "for some sliding-window and recurrent models)"
        )
    return None


def rolling_stream(
    session: RingCalls, text: str, plan: Plan, windows: Sequence[tuple[int, int]],
    max_tokens: int,
) -> Generator[Event, None, None]:  # fmt: skip
    """Summarize ``windows`` (runs of ``plan.chunks``, in order) in one pass through the ring;
    the last window's notes are the summary. The caller checked :func:`shift_refusal`."""
    ring, engine, result = session.ring, session.engine, session.result
    frame, laid, held = _pinned(session, ROLLING)
    label = engine.tokenize(NEXT_PART, add_special=False, parse_special=False, continuation=True)
    summary = ""
    seen: list[Span] = []
    for i, (first, last) in enumerate(windows):
        if session.cancelled:
            return
        step = f"window {i + 1}"
        chunks = plan.chunks[first : last + 1]
        pieces = [(_Piece(text[c.start : c.end], (c.start, c.end)),
                   chunk_tokens(engine, text[c.start : c.end])) for c in chunks]  # fmt: skip
        pieces = [(p, t) for p, t in pieces if t]
        lead = label if i else []
        need = len(lead) + sum(len(t) for _, t in pieces) + len(frame.after) + max_tokens
        yield from _make_room(session, step, need, laid, held)
        yield PassStarted(step, i + 1, len(windows))
        out = yield from _call(session, step, [
            *([(lead, None)] if lead else []), *[(t, p) for p, t in pieces], (frame.after, None),
        ], laid, held, max_tokens=max_tokens)  # fmt: skip
        seen.append((chunks[0].start, chunks[-1].end))
        reply = next((s for s in ring if s.kind is SegmentKind.OUTPUT), None)
        if reply is not None:  # the reply stays resident: the running notes, evicted last
            ring.retag(reply.id, SegmentKind.NOTES, source=(seen[0][0], seen[-1][1]))
        if out.text:
            summary = out.text
        yield PartialResult(step, summary, (seen[-1],))
        if out.finish_reason == "cancelled":
            return
    if result.outputs:
        end = result.outputs[-1]
        result.outputs.append(OutputSpan("summary", summary, tuple(seen), end.ring_version,
                                         end.finish_reason))  # fmt: skip


def _pinned(
    session: RingCalls, instruction: str
) -> tuple[Framed, dict[int, tuple[int, ...]], list[int]]:
    """A new pass: the ring holds the instruction's frame alone, pinned. Returns the frame,
    each segment's token ids by id, and the token at each KV position as the engine holds
    them (the first call evaluates whatever else the cache holds away)."""
    frame = session.frame(instruction)
    session.ring.clear()
    system = session.ring.append(SegmentKind.SYSTEM, len(frame.before), pinned=True)
    return frame, {system.id: tuple(frame.before)}, list(frame.before)


def _call(
    session: RingCalls, step: str, new: Sequence[tuple[Sequence[int], Any]],
    laid: dict[int, tuple[int, ...]], held: list[int], *, max_tokens: int,
) -> Generator[Event, None, OutputSpan]:  # fmt: skip
    """Append ``new`` (token ids, and the document chunk they are, or None for template text)
    after what the cache holds and generate: llama.cpp evaluates only what was appended.
    ``held`` follows the cache (the reply included)."""
    ring = session.ring
    placed = []
    appended: list[int] = []
    for tokens, piece in new:
        source = piece.source if piece is not None else None
        seg = ring.append(SegmentKind.CHUNK if source else SegmentKind.QUESTION, len(tokens),
                          source=source)  # fmt: skip
        laid[seg.id] = tuple(tokens)
        appended += tokens
        if source is not None:
            placed.append((piece, seg))
            yield ChunkQueued(step, source[0], source[1], seg.tokens)
    prompt = held + appended
    session.result.final_prompt, session.result.final_layout = tuple(prompt), layout(ring)
    sources = tuple(ring.resident_sources())
    order = [LaidSegment(s, laid[s.id]) for s in ring]
    out = yield from session.stream(step, prompt, placed, sources, max_tokens, laid=order)
    held[:] = _held_after(session, laid, prompt)
    return out


def _held_after(session: RingCalls, laid: dict[int, tuple[int, ...]],
                prompt: Sequence[int]) -> list[int]:  # fmt: skip
    """The cache's tokens after a call: the prompt, then the reply cut to what llama.cpp holds
    (its last sampled token is never evaluated), which the ring's output segment spans."""
    ring = session.ring
    held = [*prompt, *session.last_reply][: ring.used]
    reply = next((s for s in ring if s.kind is SegmentKind.OUTPUT), None)
    if reply is not None:
        laid[reply.id] = tuple(held[reply.pos : reply.end])
    return held


def windows_stream(
    session: RingCalls, instruction: str, windows: Sequence[Any], max_tokens: int
) -> Generator[Event, None, list[OutputSpan]]:
    """One reply to ``instruction`` per window, the windows overlapping (a sliding window with
    stride overlap): the chunks two windows share stay in the cache and only the new ones are
    evaluated. Each window (``step``, ``segments``) holds its chunks, then any text without a
    span (a question); its reply and that text leave before the next window, and its output
    names the chunks it held."""
    ring, engine = session.ring, session.engine
    frame, laid, held = _pinned(session, instruction)
    outs: list[OutputSpan] = []
    for i, win in enumerate(windows):
        if session.cancelled:
            break
        chunks, tail = _tokenized(engine, win.segments)
        wanted = [seg.source for seg, _ in chunks]
        resident = [s for s in ring if s.kind is SegmentKind.CHUNK]
        keep = next((resident[k:] for k in range(len(resident))
                     if [s.source for s in resident[k:]] == wanted[: len(resident) - k]),
                    [])  # fmt: skip
        kept = {s.id for s in keep}
        victims = [s for s in ring if not s.pinned and s.id not in kept]
        yield from _evict(session, win.step, victims, laid, held)
        yield PassStarted(win.step, i + 1, len(windows))
        out = yield from _call(session, win.step, [
            *[(t, seg) for seg, t in chunks[len(keep) :]], *[(t, None) for _, t in tail],
            (frame.after, None),
        ], laid, held, max_tokens=max_tokens)  # fmt: skip
        outs.append(out)
        yield PartialResult(out.step, out.text, out.source_spans)
        if out.finish_reason == "cancelled":
            break
    return outs


@dataclass(frozen=True)
class ResidentState:
    """What a job's resident calls left in llama.cpp's cache, for the next job on the same
    engine (a follow-up question in the window): the ring, each segment's tokens, the cache's
    tokens by position, and the instruction that frames them. Used only where the cache still
    holds exactly ``held`` (nothing else ran in between)."""

    instruction: str
    ring: dict[str, Any]
    laid: dict[int, tuple[int, ...]]
    held: tuple[int, ...]


class ResidentCalls:
    """Calls on one instruction whose document chunks stay in the cache from one call to the
    next: the questions of one `ask` under `retrieve`, each with its own plan.

    Before each call the chunks its plan shares with what is resident stay where they are (ring
    order, not document order), everything else that is not pinned leaves (the chunks it does
    not keep, the last question and reply), and its other chunks, its question and the frame's
    end are appended: llama.cpp evaluates only those. A prompt re-sent from the start would
    evaluate everything after the first chunk where two plans differ. The caller checked
    :func:`shift_refusal`.
    """

    def __init__(
        self, session: RingCalls, instruction: str, after: ResidentState | None = None
    ) -> None:
        """``after``: what an earlier job left resident; taken up when the cache still holds
        it for the same instruction and context, else the calls start from the frame."""
        self.session, self.instruction = session, instruction
        self.frame, self.laid, self.held = _pinned(session, instruction)
        if after is None or after.instruction != instruction:
            return
        ring = Ring.from_dict(after.ring)
        if ring.capacity != session.ring.capacity:
            return
        if list(session.engine.kv_tokens()) != list(after.held):
            return  # another job, a rollback or a reload changed the cache since
        session.ring = ring
        self.laid, self.held = dict(after.laid), list(after.held)

    def state(self) -> ResidentState:
        """What these calls leave resident, for the next job."""
        ring = self.session.ring
        return ResidentState(self.instruction, ring.to_dict(), dict(self.laid), tuple(self.held))

    def call(
        self, step: str, segments: Sequence[Any], max_tokens: int
    ) -> Generator[Event, None, OutputSpan]:
        """One reply after ``segments`` (``TextSegment`` s: document chunks with their span,
        then text of the job's own, the question)."""
        session = self.session
        ring = session.ring
        chunks, tail = _tokenized(session.engine, segments)
        wanted = {seg.source for seg, _ in chunks}
        keep = {s.id for s in ring if s.kind is SegmentKind.CHUNK and s.source in wanted}
        resident = {s.source for s in ring if s.id in keep}
        victims = [s for s in ring if not s.pinned and s.id not in keep]
        yield from _evict(session, step, victims, self.laid, self.held)
        return (yield from _call(session, step, [
            *[(t, seg) for seg, t in chunks if seg.source not in resident],
            *[(t, None) for _, t in tail], (self.frame.after, None),
        ], self.laid, self.held, max_tokens=max_tokens))  # fmt: skip


def _tokenized(
    engine: Engine, segments: Sequence[Any]
) -> tuple[list[tuple[Any, list[int]]], list[tuple[Any, list[int]]]]:
    """A window's segments as token ids: (its document chunks, the text after them without a
    span, a question), each (segment, tokens); segments of no tokens left out."""
    pieces = [(seg, chunk_tokens(engine, seg.text)) for seg in segments]
    return ([(seg, t) for seg, t in pieces if t and seg.source is not None],
            [(seg, t) for seg, t in pieces if t and seg.source is None])  # fmt: skip


def _make_room(
    session: RingCalls, step: str, need: int, laid: dict[int, tuple[int, ...]],
    held: list[int],
) -> Generator[Event, None, None]:  # fmt: skip
    """Evict until ``need`` positions are free: the oldest document text first, then the
    oldest notes."""
    ring = session.ring
    if ring.free >= need:
        return
    order = [s for s in ring if not s.pinned and s.kind is not SegmentKind.NOTES]
    order += [s for s in ring if s.kind is SegmentKind.NOTES]
    victims, free = [], ring.free
    for seg in order:
        if free >= need:
            break
        victims.append(seg)
        free += seg.tokens
    if free < need:
        raise RingError(
            f"the next part needs {need:,} positions; only {free:,} of {ring.capacity:,} can be "
            "freed without the pinned instruction"
        )
    yield from _evict(session, step, victims, laid, held)


def _evict(
    session: RingCalls, step: str, victims: Sequence[Segment],
    laid: dict[int, tuple[int, ...]], held: list[int],
) -> Generator[Event, None, None]:  # fmt: skip
    """Remove ``victims`` from the cache and the ring: each run of adjacent segments in one
    removal, the last run first (the positions of the runs before it stay valid)."""
    ring, result = session.ring, session.result
    if not victims:
        return
    runs: list[list[Segment]] = []
    for seg in sorted(victims, key=lambda s: s.pos):
        if runs and runs[-1][-1].end == seg.pos:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    shifts = 0
    for run in reversed(runs):
        start, end, used = run[0].pos, run[-1].end, ring.used
        shifts += used > end
        edit = session.engine.remove(start, end)
        result.evaluated_tokens += getattr(edit, "reevaluated", 0)
        for seg in run:
            ring.evict(seg.id)
            laid.pop(seg.id, None)
        del held[start:end]
        result.evictions += len(run)
        result.evicted_tokens += end - start
        for seg in run:
            if seg.kind is SegmentKind.CHUNK and seg.source is not None:
                yield ChunkEvicted(step, *seg.source)
        yield KVShifted(step, start, end, used - end, tuple(s.kind.value for s in run),
                        layout(ring))  # fmt: skip
    if session.audit is not None:
        session.audit.shifted(step, ring, laid, removed=len(victims), shifts=shifts)


def layout(ring: Ring) -> tuple[tuple[str, int, int, Span | None], ...]:
    """The ring as plain data: (kind, first position, tokens, document span) per segment."""
    return tuple((s.kind.value, s.pos, s.tokens, s.source) for s in ring)
