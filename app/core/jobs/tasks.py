"""Jobs on a long document, as generators of plain events (the CLI prints them, the GUI shows them).

A job plans with the input stage (chunks, strategies, budget), drives the engine host through the
KV stage, and keeps a :class:`~app.core.jobs.ring.Ring` in step with what llama.cpp holds, so every
piece of output is recorded with the ring version and the document spans that were resident
when it was generated. Nothing here polls: each engine reply becomes events as it arrives.

Jobs: ``summarize``, ``ask`` (several questions reuse the evaluated document; `retrieve` plans
each question apart), ``extract`` (an instruction per window, merged in document order) and
``compare`` (one job, several strategies). ``rolling``, and ``semantic``'s overlapping windows
run one at a time, stream the document through the ring (:mod:`app.core.jobs.streaming`): each
document token evaluated once. The events and the result are in :mod:`app.core.jobs.events`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.engine.chat_template import ChatTemplateError
from app.core.engine.lanes import MAX_LANES
from app.core.engine.types import (
    CancelledError,
    EngineError,
    Finished,
    GenerationStats,
    KVState,
    KVUsage,
    LaneCells,
    LaneDelta,
    LaneFinished,
    LanesFinished,
    LaneStarted,
    PromptProgress,
    SamplingSettings,
    TextDelta,
    ThreadsChanged,
)
from app.core.jobs.audit import Audit, CallRecord, LaidSegment, chunk_tokens
from app.core.jobs.events import (
    CancelToken,
    ChunkEvaluated,
    ChunkEvicted,
    ChunkQueued,
    EvalProgress,
    Event,
    JobError,
    JobFinished,
    JobResult,
    KVLive,
    KVStats,
    LanesStarted,
    OutputSpan,
    PartialResult,
    PassStarted,
    PlanReady,
    RingFallback,
    ThreadsSet,
    TokenBatch,
)
from app.core.jobs.ring import Ring, Segment, SegmentKind
from app.core.jobs.streaming import rolling_stream, shift_refusal, windows_stream
from app.core.planning.chunking import Boundary, Chunk, sliding_windows
from app.core.planning.frame import (
    ASK,
    ASK_PART,
    COMBINE,
    COMBINE_ANSWERS,
    ROLLING,
    SUMMARIZE,
    SUMMARIZE_PART,
    completion_frame,
    document_messages,
    frames_for_completion,
    prompt_frame,
    split_at_document,
)
from app.core.planning.plan import Plan
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import (
    MULTI_PASS,
    QUESTION_STRATEGIES,
    STRATEGIES,
    Planner,
    PlanOptions,
)
from app.core.tokens import TokenCounter

# The instructions (SUMMARIZE, ASK, ...) and their frames live in app.core.planning.frame.
# The map phase's replies generated together (see app/core/engine/lanes.py). On 2 CPU cores and
# 600-token windows four lanes generate 1.4x the tokens/s of one and eight no more, while each
# lane holds a context's worth of cache (tests/benchmarks/bench_batched_map.py).
DEFAULT_LANES = 4
TASKS = ("summarize", "ask", "extract")  # what a job does with the document


class Engine(Protocol):
    """What a job needs from the engine host (tests may pass another implementation)."""

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = ...,
        parse_special: bool = ...,
        continuation: bool = ...,
    ) -> list[int]: ...

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = ...
    ) -> str: ...

    def generate(self, prompt: Sequence[int], **kwargs: Any) -> Iterator[Any]: ...

    def generate_lanes(
        self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], **kwargs: Any
    ) -> Iterator[Any]: ...

    def kv_usage(self) -> KVUsage: ...


# ----- one model call over segments ----------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    text: str
    source: tuple[int, int] | None  # document span, for chunks


@dataclass(frozen=True)
class _Window:
    """One call of a map phase: its step name, what it holds, and, for a call that holds no
    document chunk (it combines earlier outputs), the document spans those were made from."""

    step: str
    segments: Sequence[_Segment]
    stands_for: tuple[tuple[int, int], ...] | None = None


class _Frame:
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


class _Session:
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
        self._frames: dict[str, _Frame] = {}
        self.started = time.perf_counter()

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def frame(self, instruction: str) -> _Frame:
        if instruction not in self._frames:
            self._frames[instruction] = _Frame(self.engine, instruction)
        return self._frames[instruction]

    def call(
        self, step: str, instruction: str, segments: Sequence[_Segment], max_tokens: int
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
        self.result.final_prompt = tuple(prompt)
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
        result.thread_changes.append({
            "step": step, "from": ev.before, "to": ev.after, "cause": ev.cause,
            "reason": ev.reason, "others": ev.others,
            "at_s": round(time.perf_counter() - self.started, 3),
        })  # fmt: skip
        return ThreadsSet(step, ev.before, ev.after, ev.cause, ev.reason, ev.others)

    def map(
        self, instruction: str, windows: Sequence[_Window], max_tokens: int
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
                out = yield from _call_made_from(self, win.step, instruction, win.segments,
                                                 max_tokens, made_from=win.stands_for)  # fmt: skip
                outs.append(out)
                yield PartialResult(out.step, out.text, out.source_spans)
            return outs
        return (yield from self._map_in_lanes(instruction, windows, max_tokens))

    def _map_in_lanes(
        self, instruction: str, windows: Sequence[_Window], max_tokens: int
    ) -> Generator[Event, None, list[OutputSpan]]:
        assert self.lanes is not None
        frame = self.frame(instruction)
        result = self.result
        suffixes: list[list[int]] = []
        layouts: list[list[tuple[_Segment, int]]] = []
        for win in windows:
            suffix: list[int] = []
            layout = []
            for seg in win.segments:
                tokens = chunk_tokens(self.engine, seg.text)
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
        t0 = time.perf_counter()
        try:
            for ev in self.engine.generate_lanes(frame.before, suffixes, lanes=self.lanes,
                                                 max_tokens=max_tokens,
                                                 sampling=self.sampling):  # fmt: skip
                if isinstance(ev, LaneStarted):
                    i, lane = ev.index, ev.lane
                    lane_of[i] = lane
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
        placed: Sequence[tuple[_Segment, Segment]],
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
    step: str, unseen: list[tuple[_Segment, Segment]], held: int, ring_version: int
) -> Iterator[ChunkEvaluated]:
    """ChunkEvaluated for each chunk of ``unseen`` that the first ``held`` KV positions now
    hold (taken off ``unseen``): the KV stage fills as llama.cpp evaluates the prompt."""
    while unseen and unseen[0][1].end <= held:
        seg, s = unseen.pop(0)
        assert seg.source is not None
        yield ChunkEvaluated(step, seg.source[0], seg.source[1], s.tokens, s.pos, s.end,
                             ring_version)  # fmt: skip


# ----- summarize ----------------------------------------------------------------------------


def _planned(
    session: _Session,
    planner: Planner,
    strategy: str,
    instruction: str,
    *,
    reserve: int,
    later: Sequence[str] = (),
    question: str = "",
) -> Generator[Event, None, Plan | None]:
    """The plan for the document next to ``instruction`` with ``reserve`` tokens kept free;
    None (and the refusal recorded) when nothing can be done. ``later``: the instructions of
    the job's later calls (combining partial results), which need a token of room too.
    ``question``: what `retrieve` ranks the document against; a job that plans once per
    question calls this once per question, each plan with its own :class:`PlanReady`."""
    result = session.result
    frame = session.frame(instruction)
    budget = result.n_ctx - frame.tokens - reserve
    widest = max((session.frame(i) for i in (instruction, *later)), key=lambda f: f.tokens)
    if result.n_ctx - widest.tokens - reserve < 1:
        result.finish_reason = "error"
        result.refused = (
            f"prompt needs {widest.tokens + 1:,} tokens, context is {result.n_ctx:,} "
            f"(reply reserve {reserve:,})"
        )
        return None
    plan = planner.plan(strategy, budget, PlanOptions(question=question))
    result.plan = {k: v for k, v in plan.as_dict().items() if k not in ("kept", "dropped")}
    result.truncated = result.truncated or bool(plan.dropped)  # any question's plan
    result.document_tokens = result.document_tokens or plan.total_tokens
    passes = max(1, len(plan.windows))
    yield PlanReady(strategy, budget, plan.kept_tokens, plan.total_tokens, passes,
                    plan.boundary_integrity, len(plan.dropped), plan.question)  # fmt: skip
    if plan.refused == NEEDS_QUESTION:  # not a matter of room: said as it is
        result.finish_reason = "error"
        result.refused = plan.refused
        return None
    if plan.refused:
        result.finish_reason = "error"
        result.refused = (
            f"prompt needs {frame.tokens + plan.total_tokens:,} tokens, context is "
            f"{result.n_ctx:,} (reply reserve {reserve:,}): {plan.refused}"
        )
        return None
    if session.audit is not None:
        session.audit.planned(plan.kept_chunks(), _passes(plan), dropped=bool(plan.dropped),
                              streamed=strategy == "rolling")  # fmt: skip
    return plan


def planning(
    task: str,
    strategy: str,
    counter: TokenCounter,
    *,
    max_tokens: int,
    questions: Sequence[str] = (),
    instruction: str = "",
) -> tuple[str, int]:
    """(instruction, reserve): what the document is planned next to in ``task``'s first call.

    A caller that plans ahead for a job (the window, in another process) asks for the same
    budget with these, so the plans it hands to :func:`compare` are the ones the job uses.
    """
    multi = strategy in MULTI_PASS
    if task == "ask":
        return (ASK_PART if multi else ASK), max_tokens + _question_room(counter, questions)
    if task == "extract":
        return instruction, max_tokens
    if strategy == "rolling":  # room for the running summary next to each window
        return ROLLING, 2 * max_tokens + 16
    return (SUMMARIZE_PART if multi else SUMMARIZE), max_tokens


def _question_room(counter: TokenCounter, questions: Sequence[str]) -> int:
    return max((counter.count(_question(q)) for q in questions), default=0) + 2


def _job(
    task: str,
    strategy: str,
    n_ctx: int,
    engine: Engine,
    cancel: CancelToken | None,
    *,
    audit: Audit | None = None,
    text: str = "",
    resumed: bool = False,
    max_tokens: int = 1,
    lanes: int | None = None,
    sampling: SamplingSettings | None = None,
) -> tuple[JobResult, _Session]:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (choose one of {', '.join(STRATEGIES)})")
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if lanes is not None and not 1 <= lanes <= MAX_LANES:
        raise ValueError(f"lanes must be between 1 and {MAX_LANES} (or none: one call at a time)")
    if sampling is not None:
        sampling.validate()
    result = JobResult(task, strategy, "stop", n_ctx)
    if audit is not None:
        audit.job_started(task, strategy, text, resumed=resumed)
    return result, _Session(engine, n_ctx, result, cancel or CancelToken(), audit=audit,
                           lanes=lanes, sampling=sampling)  # fmt: skip


def _failed(result: JobResult, session: _Session, exc: EngineError) -> JobError:
    """Record an engine failure; what was generated before it stays in the result."""
    if isinstance(exc, CancelledError):
        session.cancel.set()
    else:
        result.finish_reason = "error"
        result.error = str(exc)
    return JobError(str(exc))


def _finish(result: JobResult, session: _Session, t0: float) -> JobFinished:
    if result.outputs and result.refused is None and result.error is None:
        result.finish_reason = result.outputs[-1].finish_reason
    if session.cancel.is_set():
        result.finish_reason = "cancelled"
    result.seconds = time.perf_counter() - t0
    if session.audit is not None:
        session.audit.job_finished(result)
    return JobFinished(result)


def summarize(
    engine: Engine,
    text: str,
    counter: TokenCounter,
    *,
    strategy: str,
    n_ctx: int,
    max_tokens: int = 256,
    cancel: CancelToken | None = None,
    planner: Planner | None = None,
    audit: Audit | None = None,
    lanes: int | None = None,
    sampling: SamplingSettings | None = None,
) -> Iterator[Event]:
    """Summarize ``text`` under ``strategy``; the last event is :class:`JobFinished`.

    Single-pass strategies summarize what their plan keeps. ``map-reduce`` and ``semantic``
    summarize each window of their plan, then combine the partial summaries (in groups, again,
    while they do not fit). ``rolling`` carries a running summary through the document, window
    by window. ``lanes``: the map phase's replies generated that many at a time as parallel
    sequences (:meth:`_Session.map`); None, one call at a time.
    """
    t0 = time.perf_counter()
    result, session = _job("summarize", strategy, n_ctx, engine, cancel, audit=audit, text=text,
                           max_tokens=max_tokens, lanes=lanes, sampling=sampling)  # fmt: skip
    planner = planner or Planner(text, counter)
    try:
        instruction, reserve = planning("summarize", strategy, counter, max_tokens=max_tokens)
        later = (COMBINE,) if strategy in MULTI_PASS and strategy != "rolling" else ()
        plan = yield from _planned(session, planner, strategy, instruction, reserve=reserve,
                                   later=later)  # fmt: skip
        if plan is None:
            return
        if strategy == "rolling":
            yield from _rolling(session, text, plan, max_tokens)
        elif plan.multi_pass:
            yield from _map_reduce(session, text, plan, counter, n_ctx=n_ctx, max_tokens=max_tokens)
        else:
            kept = _chunk_segments(text, plan.kept_chunks())
            yield from session.call("summary", SUMMARIZE, kept, max_tokens)
    except EngineError as exc:
        yield _failed(result, session, exc)
    finally:
        yield _finish(result, session, t0)


def ask(
    engine: Engine,
    text: str,
    counter: TokenCounter,
    *,
    questions: Sequence[str],
    strategy: str,
    n_ctx: int,
    max_tokens: int = 256,
    cancel: CancelToken | None = None,
    planner: Planner | None = None,
    audit: Audit | None = None,
    lanes: int | None = None,
    sampling: SamplingSettings | None = None,
) -> Iterator[Event]:
    """Answer ``questions`` about ``text``, one output per question.

    With a single-pass strategy the document comes first and the question after it, so every
    question after the first reuses the evaluated document from the KV cache (only the question
    is evaluated). Multi-pass strategies ask each window and then combine the answers.
    `retrieve` plans once per question (each its own :class:`PlanReady`, its own kept chunks in
    the same budget): a later question reuses the prompt's start as far as the two plans keep
    the same chunks, and evaluates the rest.
    """
    t0 = time.perf_counter()
    result, session = _job("ask", strategy, n_ctx, engine, cancel, audit=audit, text=text,
                           max_tokens=max_tokens, lanes=lanes, sampling=sampling)  # fmt: skip
    planner = planner or Planner(text, counter)
    try:
        if not questions or not all(q.strip() for q in questions):
            raise ValueError("ask needs at least one question, and no empty ones")
        instruction, reserve = planning("ask", strategy, counter, max_tokens=max_tokens,
                                        questions=questions)  # fmt: skip
        room = reserve - max_tokens  # the longest question, after the document
        later = (COMBINE_ANSWERS,) if strategy in MULTI_PASS else ()
        per_question = strategy in QUESTION_STRATEGIES
        plan = None
        if not per_question:  # one plan, whatever is asked
            plan = yield from _planned(session, planner, strategy, instruction, reserve=reserve,
                                       later=later)  # fmt: skip
            if plan is None:
                return
        for i, q in enumerate(questions):
            if session.cancel.is_set():
                return
            step = f"answer {i + 1}"
            if per_question:  # each question its own plan, in the same budget; the engine
                # keeps what the prompts share at their start (the frame, the leading chunks)
                plan = yield from _planned(session, planner, strategy, instruction,
                                           reserve=reserve, later=later,
                                           question=q)  # fmt: skip
                if plan is None:
                    return
            assert plan is not None
            if not plan.multi_pass:
                doc = _chunk_segments(text, plan.kept_chunks())
                yield from session.call(step, ASK, [*doc, _Segment(_question(q), None)], max_tokens)
                continue
            windows = [
                _Window(f"{step} part {w + 1}", [*_chunk_segments(text, chunks),
                                                 _Segment(_question(q), None)])
                for w, chunks in enumerate(_passes(plan))
            ]  # fmt: skip
            outs = yield from session.map(ASK_PART, windows, max_tokens)
            if session.cancel.is_set():
                return
            partials = [_Segment(out.text, None) for out in outs]
            fits = _fit(partials, counter, n_ctx - session.frame(COMBINE_ANSWERS).tokens
                        - max_tokens - room)  # fmt: skip
            if len(fits) < len(partials):  # answers left out of the combining call
                session.result.truncated = True
            made_from = [s for out in outs[: len(fits)] for s in out.source_spans]
            yield from _call_made_from(session, step, COMBINE_ANSWERS,
                                       [*fits, _Segment(_question(q), None)], max_tokens,
                                       made_from=made_from)  # fmt: skip
    except EngineError as exc:
        yield _failed(result, session, exc)
    finally:
        yield _finish(result, session, t0)


def extract(
    engine: Engine,
    text: str,
    counter: TokenCounter,
    *,
    instruction: str,
    strategy: str,
    n_ctx: int,
    max_tokens: int = 256,
    cancel: CancelToken | None = None,
    planner: Planner | None = None,
    audit: Audit | None = None,
    lanes: int | None = None,
    sampling: SamplingSettings | None = None,
) -> Iterator[Event]:
    """Apply ``instruction`` to each window of the plan; the results merged in document order.
    ``lanes``: the windows' replies generated that many at a time (see :func:`summarize`)."""
    t0 = time.perf_counter()
    result, session = _job("extract", strategy, n_ctx, engine, cancel, audit=audit, text=text,
                           max_tokens=max_tokens, lanes=lanes, sampling=sampling)  # fmt: skip
    planner = planner or Planner(text, counter)
    try:
        if not instruction.strip():
            raise ValueError("extract needs an instruction")
        task_instruction, reserve = planning(
            "extract", strategy, counter, max_tokens=max_tokens, instruction=instruction
        )
        # `retrieve` ranks the document against the instruction
        plan = yield from _planned(session, planner, strategy, task_instruction, reserve=reserve,
                                   question=instruction)  # fmt: skip
        if plan is None:
            return
        windows = [_Window(f"part {w + 1}", _chunk_segments(text, chunks))
                   for w, chunks in enumerate(_passes(plan))]  # fmt: skip
        pieces = yield from session.map(instruction, windows, max_tokens)
        if session.cancel.is_set():
            return
        if len(pieces) > 1:
            merged = "\n".join(p.text for p in pieces if p.text)
            sources = _union([s for p in pieces for s in p.source_spans])
            last = pieces[-1]
            result.outputs.append(OutputSpan("merged", merged, sources, last.ring_version,
                                             last.finish_reason))  # fmt: skip
    except EngineError as exc:
        yield _failed(result, session, exc)
    finally:
        yield _finish(result, session, t0)


@dataclass(frozen=True)
class StrategyStarted:
    strategy: str


@dataclass(frozen=True)
class StrategiesFinished:
    results: tuple[JobResult, ...]


def run_strategies(
    engine: Engine,
    text: str,
    counter: TokenCounter,
    *,
    task: str,
    strategies: Sequence[str],
    planner: Planner | None = None,
    **options: Any,
) -> Iterator[Event | StrategyStarted | StrategiesFinished]:
    """The task under each strategy in turn, on one engine (one strategy: a single run).

    ``planner`` (for ``text`` and ``counter``) plans the document as its caller shows it, with
    its structure and with any plans already made elsewhere; by default the bare text is planned.
    """
    jobs = {"summarize": summarize, "ask": ask, "extract": extract}
    if task not in jobs:
        raise ValueError(f"unknown task {task!r} (choose one of {', '.join(TASKS)})")
    if planner is None:
        planner = Planner(text, counter)  # chunkings are shared between the strategies
    elif planner.text is not text and planner.text != text:
        raise ValueError("the planner was made for another text than the job's")
    results: list[JobResult] = []
    for strategy in strategies:
        yield StrategyStarted(strategy)
        for ev in jobs[task](engine, text, counter, strategy=strategy, planner=planner, **options):
            if isinstance(ev, JobFinished):
                results.append(ev.result)
            yield ev
        if results and results[-1].finish_reason == "cancelled":
            break
    yield StrategiesFinished(tuple(results))


class ResumableEngine(Engine, Protocol):
    def save_state(self) -> KVState: ...

    def restore_state(self, state: KVState) -> int: ...


def state_after(engine: ResumableEngine, result: JobResult) -> KVState | None:
    """The KV state right after a job, holding its last prompt (what a rollback resumes), or
    None when the job did not end with that prompt in the cache (refused, failed, cancelled,
    shifted)."""
    prompt = result.final_prompt
    if not prompt or result.finish_reason not in ("stop", "length", "repetition"):
        return None
    state = engine.save_state()
    return state if state.tokens[: len(prompt)] == prompt else None


def resume(
    engine: ResumableEngine,
    state: KVState,
    prompt_tokens: int,
    *,
    task: str,
    strategy: str,
    max_tokens: int = 256,
    sources: Sequence[tuple[int, int]] = (),
    cancel: CancelToken | None = None,
    audit: Audit | None = None,
    sampling: SamplingSettings | None = None,
) -> Iterator[Event]:
    """Generate again after a saved prompt without evaluating it: the KV state of a finished job
    is put back and its last call's prompt (the first ``prompt_tokens`` of the state) is sent
    once more, so llama.cpp finds it cached and evaluates one token. ``sources`` are the
    document spans that prompt held, for the output's provenance."""
    t0 = time.perf_counter()
    result, session = _job(task, strategy, state.n_ctx, engine, cancel, audit=audit, resumed=True,
                           sampling=sampling)  # fmt: skip
    try:
        if not 0 < prompt_tokens <= len(state.tokens):
            raise ValueError("the saved KV state does not say which of its tokens are the prompt")
        prompt = state.tokens[:prompt_tokens]
        engine.restore_state(state)
        system = session.ring.append(SegmentKind.SYSTEM, prompt_tokens, pinned=True)
        result.final_prompt = tuple(prompt)
        laid = [LaidSegment(system, tuple(prompt))]
        yield from session.stream("resumed", prompt, (), tuple(sources), max_tokens,
                                  laid=laid)  # fmt: skip
    except EngineError as exc:
        yield _failed(result, session, exc)
    finally:
        yield _finish(result, session, t0)


def _question(q: str) -> str:
    return f"\n\nQuestion: {q.strip()}"


def _fit(segments: Sequence[_Segment], counter: TokenCounter, budget: int) -> list[_Segment]:
    out, used = [], 0
    for seg in segments:
        n = counter.count(seg.text)
        if used + n > budget:
            break
        out.append(seg)
        used += n
    return out


def _passes(plan: Plan) -> list[Sequence[Chunk]]:
    """The chunks each pass over the document evaluates: the kept ones in one pass, or one
    window of the plan per pass."""
    if not plan.multi_pass:
        return [plan.kept_chunks()]
    return [plan.chunks[first : last + 1] for first, last in _window_ranges(plan)]


def _window_ranges(plan: Plan) -> list[tuple[int, int]]:
    if plan.strategy == "rolling":
        return _disjoint_windows(plan)
    return [(w.first, w.last) for w in plan.windows]


def _map_reduce(
    session: _Session, text: str, plan: Plan, counter: TokenCounter, *, n_ctx: int, max_tokens: int
) -> Generator[Event, None, None]:
    # each part's reply must fit the room the plan kept free (``max_tokens``): a quarter of the
    # window, at least 32 tokens, never more than that room
    part_tokens = min(max_tokens, max(32, plan.budget // 4))
    windows = [
        _Window(f"part {i + 1}", _chunk_segments(text, plan.chunks[w.first : w.last + 1]))
        for i, w in enumerate(plan.windows)
    ]  # fmt: skip
    outs = yield from session.map(SUMMARIZE_PART, windows, part_tokens)
    if session.cancel.is_set():
        return
    # each partial result with the document spans it stands for (a part: the chunks it held)
    partials = [(out.text, out.source_spans) for out in outs]
    level = 1
    frame = session.frame(COMBINE)
    budget = max(1, n_ctx - frame.tokens - max_tokens)
    while True:
        if session.cancel.is_set():
            return
        sizes = [max(1, counter.count(p)) for p, _ in partials]
        if sum(sizes) <= budget or len(partials) == 1:
            break
        # Too many partial summaries for one call: combine them in groups, then again.
        pseudo = [Chunk(i, 0, 0, n, Boundary.END) for i, n in enumerate(sizes)]
        groups = [partials[w.first : w.last + 1] for w in sliding_windows(pseudo, budget, 0.0)]
        combines = [
            _Window(f"combine {level}.{g + 1}", [_Segment(p, None) for p, _ in group],
                    _union([s for _, spans in group for s in spans]))
            for g, group in enumerate(groups)
        ]  # fmt: skip
        outs = yield from session.map(COMBINE, combines, part_tokens)
        if session.cancel.is_set():
            return
        merged = [(out.text, out.source_spans) for out in outs]
        if len(merged) >= len(partials):
            break  # no progress: the final call keeps what fits
        partials, level = merged, level + 1
    fits = _fit([_Segment(p, None) for p, _ in partials], counter, budget)
    if len(fits) < len(partials):
        session.result.truncated = True
    made_from = [s for _, spans in partials[: len(fits)] for s in spans]  # what the call holds
    yield from _call_made_from(session, "summary", COMBINE, fits, max_tokens, made_from=made_from)


def _overlap(windows: Sequence[_Window]) -> bool:
    """Whether consecutive windows share a document chunk (a sliding window with overlap)."""
    spans = [{seg.source for seg in w.segments if seg.source is not None} for w in windows]
    return any(a & b for a, b in itertools.pairwise(spans))


def _chunk_segments(text: str, chunks: Sequence[Chunk]) -> list[_Segment]:
    return [_Segment(text[c.start : c.end], (c.start, c.end)) for c in chunks]


def _with_sources(span: OutputSpan, sources: Sequence[tuple[int, int]]) -> OutputSpan:
    return OutputSpan(span.step, span.text, tuple(sources), span.ring_version, span.finish_reason)


def _union(spans: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The document spans of several outputs as one output's sources: sorted, each once."""
    return tuple(sorted({(a, b) for a, b in spans}))


def _made_from(span: OutputSpan, made_from: Sequence[tuple[int, int]] | None) -> OutputSpan:
    """``span`` naming the sources of what it was made from (``made_from``: the spans of the
    earlier outputs its call combined) when its call held no document chunk. An output of a
    call that held chunks keeps naming exactly those (the audit checks it), as do its
    :class:`TokenBatch` events, which name what was resident while they were generated."""
    if span.source_spans or made_from is None:
        return span
    return _with_sources(span, _union(made_from))


def _call_made_from(
    session: _Session,
    step: str,
    instruction: str,
    segments: Sequence[_Segment],
    max_tokens: int,
    *,
    made_from: Sequence[tuple[int, int]] | None,
) -> Generator[Event, None, OutputSpan]:
    """:meth:`_Session.call`, its recorded output naming ``made_from`` (see :func:`_made_from`);
    also the text kept when the engine fails mid-reply."""
    try:
        out = yield from session.call(step, instruction, segments, max_tokens)
    finally:  # the output the call recorded (none when it failed before any text)
        outputs = session.result.outputs
        if outputs and outputs[-1].step == step:
            outputs[-1] = _made_from(outputs[-1], made_from)
    return _made_from(out, made_from)


def _rolling(
    session: _Session, text: str, plan: Plan, max_tokens: int
) -> Generator[Event, None, None]:
    """The document in order, window by window, through the KV ring in one pass
    (:mod:`app.core.jobs.streaming`); where the cache cannot shift, each window re-prompted
    with the summary so far, and the reason said."""
    windows = _disjoint_windows(plan)
    reason = shift_refusal(session.engine)
    if reason is None:
        yield from rolling_stream(session, text, plan, windows, max_tokens)
        return
    session.result.fallback = reason
    yield RingFallback("rolling", reason)
    summary = ""
    seen: list[tuple[int, int]] = []
    for i, (first, last) in enumerate(windows):
        if session.cancel.is_set():
            return
        chunks = plan.chunks[first : last + 1]
        segs = [_Segment(f"Summary so far:\n{summary}\n\nNext part:\n", None)] if summary else []
        segs += _chunk_segments(text, chunks)
        instruction = ROLLING if summary else SUMMARIZE_PART
        yield PassStarted(f"window {i + 1}", i + 1, len(windows))
        out = yield from session.call(f"window {i + 1}", instruction, segs, max_tokens)
        if out.text:
            summary = out.text
        for c in plan.chunks[first : last + 1]:
            yield ChunkEvicted(f"window {i + 1}", c.start, c.end)
        seen.append((chunks[0].start, chunks[-1].end))
        yield PartialResult(out.step, summary, (seen[-1],))
    if session.result.outputs:
        last = session.result.outputs[-1]
        final = OutputSpan("summary", summary, tuple(seen), last.ring_version, last.finish_reason)
        session.result.outputs.append(final)


def _disjoint_windows(plan: Plan) -> list[tuple[int, int]]:
    """Consecutive runs of chunks that fill the plan's budget, without overlap; a chunk that
    alone exceeds the budget (the plan dropped it) is in none."""
    windows = sliding_windows(plan.chunks, plan.budget, 0.0)
    return [(w.first, w.last) for w in windows if w.tokens <= plan.budget]
