"""One model call over segments, as a job makes it: the frame around them, the ring kept in step.

A job (:mod:`app.core.jobs.tasks`) lays each call's prompt out of :class:`TextSegment` s (a
document chunk with its span, or words of the job's own) between the two halves of a
:class:`Frame` (the chat template around the document, for one instruction). The
:class:`CallRunner` sends it, mirrors what llama.cpp holds in a :class:`~app.core.jobs.ring.Ring`,
turns each engine reply into events as it arrives, and gathers the job's figures; its
:meth:`CallRunner.map` makes one call per :class:`CallWindow` (one after another, in lanes, or
streamed through the ring where windows overlap).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

from app.core.engine.api import Engine
from app.core.engine.chat_template import ChatTemplateError
from app.core.engine.threads import change_figure
from app.core.engine.types import (
    EngineError,
    Finished,
    GenerationStats,
    KVUsage,
    LaneCells,
    LaneDelta,
    LaneFinished,
    LanePrompt,
    LanesFinished,
    LaneStarted,
    PromptProgress,
    SamplingSettings,
    TextDelta,
    ThreadsChanged,
)
from app.core.jobs.audit import Audit, CallRecord, LaidSegment, chunk_tokens, chunks_tokens
from app.core.jobs.events import (
    ChunkEvaluated,
    ChunkQueued,
    EvalProgress,
    Event,
    JobResult,
    KVLive,
    KVStats,
    LanesStarted,
    OutputSpan,
    PartialResult,
    PassStarted,
    ThreadsSet,
    TokenBatch,
)
from app.core.jobs.options import CancelToken
from app.core.jobs.ring import Ring, Segment, SegmentKind
from app.core.jobs.streaming import layout as ring_layout
from app.core.jobs.streaming import shift_refusal, windows_stream
from app.core.planning.chunking import Chunk
from app.core.planning.frame import (
    completion_frame,
    document_messages,
    frames_for_completion,
    prompt_frame,
    split_at_document,
)
from app.core.tokens import TokenCounter


@dataclass(frozen=True)
class TextSegment:
    text: str
    source: tuple[int, int] | None  # document span, for chunks


@dataclass(frozen=True)
class CallWindow:
    """One call of a map phase: its step name, what it holds, and, for a call that holds no
    document chunk (it combines earlier outputs), the document spans those were made from."""

    step: str
    segments: Sequence[TextSegment]
    stands_for: tuple[tuple[int, int], ...] | None = None


class Frame:
    """The chat template around the segments, for one instruction, as token lists; for a base
    model the completion frame (the document, then a cue), as its plans are framed."""

    def __init__(self, engine: Engine, instruction: str) -> None:
        if frames_for_completion(getattr(engine, "model_info", None)):
            frame = completion_frame(instruction)
            before, after = frame.before, frame.after
        else:
            try:
                rendered = engine.apply_chat_template(document_messages(instruction))
                before, after = split_at_document(rendered)
            except (ChatTemplateError, ValueError):  # no usable template: a plain prompt
                plain = prompt_frame(None, task=instruction)
                before, after = plain.before, plain.after
        self.before = engine.tokenize(before, add_special=True, parse_special=True)
        # The words after the document and each document chunk continue the prompt: tokenized
        # without the space a Llama 2 / Mistral style vocabulary puts before a text's start.
        self.after = engine.tokenize(after, add_special=False, parse_special=True,
                                     continuation=True)  # fmt: skip

    @property
    def tokens(self) -> int:
        return len(self.before) + len(self.after)


class CallRunner:
    """Calls the model over segments, mirrors the KV layout in a ring, gathers the figures."""

    def __init__(
        self,
        engine: Engine,
        n_ctx: int,
        result: JobResult,
        cancel: CancelToken,
        *,
        audit: Audit | None = None,
        lanes: int | None = None,
        sampling: SamplingSettings | None = None,
    ) -> None:
        self.engine = engine
        self.sampling = sampling or SamplingSettings()
        self.ring = Ring(n_ctx)
        self.result = result
        self.cancel = cancel
        self.audit = audit
        self.lanes = lanes
        self.last_reply: list[int] = []  # the token ids of the last call's reply
        self._frames: dict[str, Frame] = {}
        self.started = time.perf_counter()

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def frame(self, instruction: str) -> Frame:
        if instruction not in self._frames:
            self._frames[instruction] = Frame(self.engine, instruction)
        return self._frames[instruction]

    def call(
        self, step: str, instruction: str, segments: Sequence[TextSegment], max_tokens: int
    ) -> Generator[Event, None, OutputSpan]:
        frame = self.frame(instruction)
        ring = self.ring
        ring.clear()
        system = ring.append(SegmentKind.SYSTEM, len(frame.before), pinned=True)
        laid = [LaidSegment(system, tuple(frame.before))]
        prompt = list(frame.before)
        placed = []
        for seg in segments:
            tokens = chunk_tokens(self.engine, seg.text)
            if not tokens:
                continue
            s = ring.append(SegmentKind.CHUNK, len(tokens), source=seg.source)
            placed.append((seg, s))
            laid.append(LaidSegment(s, tuple(tokens)))
            prompt += tokens
            if seg.source is not None:
                yield ChunkQueued(step, seg.source[0], seg.source[1], len(tokens))
        question = ring.append(SegmentKind.QUESTION, len(frame.after), pinned=True)
        laid.append(LaidSegment(question, tuple(frame.after)))
        prompt += frame.after
        sources = tuple(ring.resident_sources())
        self.result.final_prompt, self.result.final_layout = tuple(prompt), ring_layout(ring)
        return (yield from self.stream(step, prompt, placed, sources, max_tokens, laid=laid))

    def _count(self, stats: GenerationStats, cells: int) -> None:
        """Add one model call's figures to the job's (``cells``: what its cache held)."""
        result = self.result
        result.prompt_tokens += stats.prompt_tokens
        result.evaluated_tokens += stats.prompt_eval_tokens
        result.prompt_lengths.append(stats.prompt_tokens)
        result.completion_tokens += stats.completion_tokens
        result.kv_peak_cells = max(result.kv_peak_cells, cells)
        result.threads = stats.threads or result.threads

    def threads_set(self, step: str, ev: ThreadsChanged) -> ThreadsSet:
        """The engine's change of thread count as the job's event, recorded in its result."""
        result = self.result
        result.threads = ev.after
        change = {"step": step, "from": ev.before, "to": ev.after, "cause": ev.cause,
                  "reason": ev.reason, "others": ev.others,
                  "figure": change_figure(ev.cause, ev.others, ev.took_s, ev.expected_s),
                  "at_s": round(time.perf_counter() - self.started, 3)}  # fmt: skip
        if ev.cause == "slow":
            change |= {"took_s": ev.took_s, "expected_s": ev.expected_s}
        result.thread_changes.append(change)
        return ThreadsSet(step, ev.before, ev.after, ev.cause, ev.reason, ev.others, ev.took_s,
                          ev.expected_s)  # fmt: skip

    def map(
        self, instruction: str, windows: Sequence[CallWindow], max_tokens: int
    ) -> Generator[Event, None, list[OutputSpan]]:
        """One reply to ``instruction`` per window, each followed by its :class:`PartialResult`.

        With ``lanes`` the windows are parallel sequences of one batch (the instruction prefix
        evaluated once); otherwise, or when the job is audited (the audit reads the cache of
        the loaded context after each call) or there is one window, one call after another.
        Stops early when cancelled; the outputs come in window order. A window that holds no
        document chunk (it combines earlier outputs) names its ``stands_for`` as its sources.
        """
        if self.lanes is None or self.audit is not None or len(windows) < 2:
            if _overlap(windows) and shift_refusal(self.engine) is None:
                # semantic's sliding windows: the chunks two windows share stay in the cache
                return (yield from windows_stream(self, instruction, windows, max_tokens))
            outs: list[OutputSpan] = []
            for i, win in enumerate(windows):
                if self.cancel.is_set():
                    break
                yield PassStarted(win.step, i + 1, len(windows))
                out = yield from call_made_from(self, win.step, instruction, win.segments,
                                                max_tokens, made_from=win.stands_for)  # fmt: skip
                outs.append(out)
                yield PartialResult(out.step, out.text, out.source_spans)
            return outs
        return (yield from self._map_in_lanes(instruction, windows, max_tokens))

    def _map_in_lanes(
        self, instruction: str, windows: Sequence[CallWindow], max_tokens: int
    ) -> Generator[Event, None, list[OutputSpan]]:
        assert self.lanes is not None
        frame = self.frame(instruction)
        result = self.result
        suffixes: list[list[int]] = []
        layouts: list[list[tuple[TextSegment, int]]] = []
        every = chunks_tokens(self.engine, [seg.text for win in windows for seg in win.segments])
        tokenized = iter(every)
        for win in windows:
            suffix: list[int] = []
            layout = []
            for seg in win.segments:
                tokens = next(tokenized)
                if not tokens:
                    continue
                layout.append((seg, len(tokens)))
                suffix += tokens
                if seg.source is not None:
                    yield ChunkQueued(win.step, seg.source[0], seg.source[1], len(tokens))
            suffixes.append(suffix + frame.after)
            layouts.append(layout)
        result.lanes = min(self.lanes, len(windows))
        yield LanesStarted(result.lanes, len(windows), result.n_ctx)
        rings: dict[int, Ring] = {}
        replies: dict[int, Segment] = {}  # each lane's reply segment
        sources: dict[int, tuple[tuple[int, int], ...]] = {}
        parts: dict[int, list[str]] = {}
        done: dict[int, OutputSpan] = {}
        lane_free_at: dict[int, float] = {}
        lane_of: dict[int, int] = {}  # window -> the lane it ran in
        passes: set[int] = set()  # the windows whose PassStarted went out (as their prompt began)
        t0 = time.perf_counter()
        try:
            for ev in self.engine.generate_lanes(frame.before, suffixes, lanes=self.lanes,
                                                 max_tokens=max_tokens,
                                                 sampling=self.sampling):  # fmt: skip
                if isinstance(ev, LanePrompt):  # a window's prompt so far: progress from its start
                    if ev.index not in passes:
                        passes.add(ev.index)
                        yield PassStarted(windows[ev.index].step, ev.index + 1, len(windows))
                    yield EvalProgress(windows[ev.index].step, ev.evaluated, ev.total, ev.seconds)
                elif isinstance(ev, LaneStarted):
                    i, lane = ev.index, ev.lane
                    lane_of[i] = lane
                    if i not in passes:  # a prompt too short to report (or a server's)
                        passes.add(i)
                        yield PassStarted(windows[i].step, i + 1, len(windows))
                    result.ttft_s.append(time.perf_counter() - lane_free_at.get(lane, t0))
                    ring = rings.setdefault(lane, Ring(result.n_ctx))
                    ring.clear()
                    replies.pop(lane, None)
                    ring.append(SegmentKind.SYSTEM, len(frame.before), pinned=True)
                    for seg, n in layouts[i]:
                        at = ring.append(SegmentKind.CHUNK, n, source=seg.source)
                        if seg.source is not None:
                            start, end = seg.source
                            yield ChunkEvaluated(windows[i].step, start, end, n, at.pos, at.end,
                                                 ring.version, lane)  # fmt: skip
                    ring.append(SegmentKind.QUESTION, len(frame.after), pinned=True)
                    sources[i], parts[i] = tuple(ring.resident_sources()), []
                elif isinstance(ev, LaneDelta):
                    i, lane, ring = ev.index, ev.lane, rings[ev.lane]
                    parts[i].append(ev.text)
                    grow = min(len(ev.token_ids), ring.free)
                    if grow:
                        replies[lane] = (
                            ring.grow(replies[lane].id, grow)
                            if lane in replies
                            else ring.append(SegmentKind.OUTPUT, grow)
                        )
                    yield TokenBatch(windows[i].step, ev.text, len(ev.token_ids), ring.version,
                                     sources[i], lane)  # fmt: skip
                elif isinstance(ev, LaneFinished):
                    i, lane, stats, ring = ev.index, ev.lane, ev.stats, rings[ev.lane]
                    lane_free_at[lane] = time.perf_counter()
                    ring.cut(min(stats.n_past, ring.used))
                    self._count(stats, stats.n_past)
                    yield KVStats(ev.cells[lane], result.n_ctx, 0, lane)
                    done[i] = _made_from(OutputSpan(windows[i].step, "".join(parts[i]).strip(),
                                                    sources[i], ring.version, stats.finish_reason),
                                         windows[i].stands_for)  # fmt: skip
                    yield PartialResult(done[i].step, done[i].text, done[i].source_spans)
                elif isinstance(ev, LaneCells):
                    for i, lane in lane_of.items():  # the lanes whose reply is under way
                        if i not in done and lane < len(ev.cells):
                            yield KVLive(windows[i].step, ev.cells[lane], result.n_ctx, 0, lane)
                elif isinstance(ev, ThreadsChanged):
                    yield self.threads_set("map", ev)
                elif isinstance(ev, LanesFinished) and ev.finish_reason == "cancelled":
                    self.cancel.set()
        except EngineError:
            for i, texts in parts.items():  # the text so far of replies the failure cut short
                if i not in done and (partial := "".join(texts).strip()):
                    done[i] = _made_from(OutputSpan(windows[i].step, partial, sources[i],
                                                    rings[lane_of[i]].version, "error"),
                                         windows[i].stands_for)  # fmt: skip
            result.outputs.extend(done[i] for i in sorted(done))
            raise
        outs = [done[i] for i in sorted(done)]
        result.outputs.extend(outs)
        return outs

    def stream(
        self,
        step: str,
        prompt: Sequence[int],
        placed: Sequence[tuple[TextSegment, Segment]],
        sources: tuple[tuple[int, int], ...],
        max_tokens: int,
        *,
        laid: Sequence[LaidSegment] = (),
    ) -> Generator[Event, None, OutputSpan]:
        """Generate after ``prompt`` (its segments already in the ring) and record the output.

        When the engine fails mid-reply, the text so far is kept as an output with finish reason
        ``error`` before the failure goes on to the job.
        """
        ring = self.ring
        audit = self.audit
        t0 = time.perf_counter()
        parts: list[str] = []
        generated: list[int] = []
        self.last_reply = generated
        finished: Finished | None = None
        output = None
        first = True
        unseen = [(seg, s) for seg, s in placed if seg.source is not None]  # no ChunkEvaluated yet
        try:
            for ev in self.engine.generate(prompt, max_tokens=max_tokens, sampling=self.sampling):
                if isinstance(ev, PromptProgress):  # part of the prompt is in the cache
                    yield EvalProgress(step, ev.evaluated, ev.total, ev.seconds)
                    yield from _evaluated(step, unseen, ev.kv.pos_max + 1, ring.version)
                    yield KVLive(step, ev.kv.cells_used, ev.kv.n_ctx, ev.kv.state_bytes)
                    continue
                if isinstance(ev, KVUsage):
                    yield KVLive(step, ev.cells_used, ev.n_ctx, ev.state_bytes)
                    continue
                if isinstance(ev, ThreadsChanged):
                    yield self.threads_set(step, ev)
                    continue
                if first and isinstance(ev, TextDelta | Finished):  # the prompt is in the cache
                    first = False
                    self.result.ttft_s.append(time.perf_counter() - t0)
                    yield from _evaluated(step, unseen, len(prompt), ring.version)
                if isinstance(ev, TextDelta):
                    parts.append(ev.text)
                    generated += ev.token_ids
                    grow = min(len(ev.token_ids), ring.free)
                    if grow:
                        output = (
                            ring.append(SegmentKind.OUTPUT, grow)
                            if output is None
                            else ring.grow(output.id, grow)
                        )
                    if audit is not None:
                        audit.batch(step, ring, sources, ring.version)
                    yield TokenBatch(step, ev.text, len(ev.token_ids), ring.version, sources)
                elif isinstance(ev, Finished):
                    finished = ev
        except EngineError:
            partial = "".join(parts).strip()
            if partial:
                self.result.outputs.append(OutputSpan(step, partial, sources, ring.version,
                                                      "error"))  # fmt: skip
            if audit is not None:
                audit.call_failed(step, sources)
            raise
        assert finished is not None
        stats = finished.stats
        # llama.cpp holds the prompt (all of it unless cancelled) and the reply but for its last
        # sampled token, which is never evaluated: the ring lets go of what the cache does not hold
        ring.cut(min(stats.n_past, ring.used))
        if audit is not None:
            audit.call_finished(CallRecord(step, ring, laid, prompt, generated, stats, sources))
        usage = self.engine.kv_usage()
        self._count(stats, max(usage.cells_used, stats.n_past))
        yield KVStats(
            usage.cells_used, usage.n_ctx, usage.state_bytes, reported_by=usage.reported_by
        )
        span = OutputSpan(step, "".join(parts).strip(), sources, ring.version,
                          stats.finish_reason)  # fmt: skip
        self.result.outputs.append(span)
        if stats.finish_reason == "cancelled":
            self.cancel.set()
        return span


def _evaluated(
    step: str, unseen: list[tuple[TextSegment, Segment]], held: int, ring_version: int
) -> Iterator[ChunkEvaluated]:
    """ChunkEvaluated for each chunk of ``unseen`` that the first ``held`` KV positions now
    hold (taken off ``unseen``): the KV stage fills as llama.cpp evaluates the prompt."""
    while unseen and unseen[0][1].end <= held:
        seg, s = unseen.pop(0)
        assert seg.source is not None
        yield ChunkEvaluated(step, seg.source[0], seg.source[1], s.tokens, s.pos, s.end,
                             ring_version)  # fmt: skip


def fit(segments: Sequence[TextSegment], counter: TokenCounter, budget: int) -> list[TextSegment]:
    out, used = [], 0
    for seg in segments:
        n = counter.count(seg.text)
        if used + n > budget:
            break
        out.append(seg)
        used += n
    return out


def _overlap(windows: Sequence[CallWindow]) -> bool:
    """Whether consecutive windows share a document chunk (a sliding window with overlap)."""
    spans = [{seg.source for seg in w.segments if seg.source is not None} for w in windows]
    return any(a & b for a, b in itertools.pairwise(spans))


def chunk_segments(text: str, chunks: Sequence[Chunk]) -> list[TextSegment]:
    return [TextSegment(text[c.start : c.end], (c.start, c.end)) for c in chunks]


def _with_sources(span: OutputSpan, sources: Sequence[tuple[int, int]]) -> OutputSpan:
    return OutputSpan(span.step, span.text, tuple(sources), span.ring_version, span.finish_reason)


def union(spans: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The document spans of several outputs as one output's sources: sorted, each once."""
    return tuple(sorted({(a, b) for a, b in spans}))


def _made_from(span: OutputSpan, made_from: Sequence[tuple[int, int]] | None) -> OutputSpan:
    """``span`` naming the sources of what it was made from (``made_from``: the spans of the
    earlier outputs its call combined) when its call held no document chunk. An output of a
    call that held chunks keeps naming exactly those (the audit checks it), as do its
    :class:`TokenBatch` events, which name what was resident while they were generated."""
    if span.source_spans or made_from is None:
        return span
    return _with_sources(span, union(made_from))


def call_made_from(
    runner: CallRunner,
    step: str,
    instruction: str,
    segments: Sequence[TextSegment],
    max_tokens: int,
    *,
    made_from: Sequence[tuple[int, int]] | None,
) -> Generator[Event, None, OutputSpan]:
    """:meth:`CallRunner.call`, its recorded output naming ``made_from`` (see :func:`_made_from`);
    also the text kept when the engine fails mid-reply."""
    try:
        out = yield from runner.call(step, instruction, segments, max_tokens)
    finally:  # the output the call recorded (none when it failed before any text)
        outputs = runner.result.outputs
        if outputs and outputs[-1].step == step:
            outputs[-1] = _made_from(outputs[-1], made_from)
    return _made_from(out, made_from)
