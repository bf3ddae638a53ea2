"""The faithfulness audit: proof, checked against llama.cpp, that a job ran the plan it showed.

A job (``app.core.jobs.tasks``) calls an :class:`Audit` at each step it takes: the plan, every
prompt it lays out in the context, every batch of output, the end of every model call, the end of
the job. After each call the audit reads back what llama.cpp holds (the token at every KV
position, the cells used, ``llama_memory_seq_pos_min/max``) and checks:

* the prompt in the KV cache is exactly the prompt sent, every segment at the positions the ring
  gives it, and the chat template's tokens counted apart from the document's;
* each document chunk's token ids are exactly its own text tokenized by the model (compared by id:
  a check by text alone misses a chunk that spells the right text in other tokens, a special
  token among them), their pieces spell exactly its text, and they number what the plan counted;
* the chunks of each call are the kept chunks of the plan (or one of its windows), and together
  the calls evaluated everything the plan kept (with a plan per question, `retrieve`: each
  call holds its own question's plan, and every question's kept chunks were evaluated);
* the ring agrees with llama.cpp, and the reply's tokens are the ones resident after the prompt;
* each output names as its sources the chunks resident when it was generated;
* a job that left any of the document out says so (``truncated``), and the store says the same.

A mismatch is a :class:`Finding`; :meth:`Audit.raise_if_failed` turns findings into one loud
:class:`AuditFailed`. The audit only reads: a job runs the same with it as without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.engine.api import Engine
from app.core.engine.types import GenerationStats, KVUsage
from app.core.jobs.ring import Ring, Segment, SegmentKind

Span = tuple[int, int]
MAX_FINDINGS = 200  # a broken job repeats one mistake thousands of times: keep the first ones


def chunk_tokens(engine: Engine, text: str) -> list[int]:
    """A document chunk's tokens as the jobs lay it in a prompt: on its own, no special token
    parsed, and as a continuation (without the space a Llama 2 / Mistral style vocabulary puts
    before a text's start). The jobs tokenize chunks with it; the audit checks them against it."""
    return list(engine.tokenize(text, add_special=False, parse_special=False, continuation=True))


def chunks_tokens(engine: Engine, texts: Sequence[str]) -> list[list[int]]:
    """:func:`chunk_tokens` of each text, in one call where the engine tokenizes many at once
    (a local engine: one round trip to its process, on all its cores, instead of one a chunk;
    a map phase's 241 windows spent about 2 s before their first prompt)."""
    many = getattr(engine, "tokenize_many", None)
    if many is None or len(texts) < 2:
        return [chunk_tokens(engine, text) for text in texts]
    return [list(ids) for ids in many(list(texts), parse_special=False, continuation=True)]


class AuditFailed(AssertionError):
    """The audit found what the app showed and what the model saw disagree."""


@dataclass(frozen=True)
class Finding:
    job: str  # "summarize/head"
    step: str  # the model call ("part 2"), or "job"
    check: str  # which promise broke: prompt, positions, tokens, detokenize, count, plan, ...
    message: str

    def __str__(self) -> str:
        return f"{self.job} {self.step}: {self.check}: {self.message}"


@dataclass(frozen=True)
class LaidSegment:
    """One segment of a prompt as the job laid it out: its ring segment and its token ids."""

    segment: Segment
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class CallRecord:
    """One model call as the job made it, with what came back."""

    step: str
    ring: Ring  # after the call: the prompt's segments and the reply's
    laid: Sequence[LaidSegment]  # the prompt's segments as laid out
    prompt: Sequence[int]
    generated: Sequence[int]  # the reply's token ids, in order
    stats: GenerationStats
    sources: Sequence[Span]  # what the call's output names as its sources


@dataclass
class AuditCounts:
    """What was checked, for the report (a clean audit that checked nothing proves nothing)."""

    jobs: int = 0
    calls: int = 0
    segments: int = 0
    chunks: int = 0
    document_tokens: int = 0  # chunk tokens compared position by position with llama.cpp
    template_tokens: int = 0  # chat template and question tokens, compared the same way
    output_tokens: int = 0
    batches: int = 0  # output batches whose sources were checked
    evictions: int = 0  # segments a streamed pass removed, the cache read back after each
    shifts: int = 0  # removals after which later positions moved down

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Job:
    name: str
    text: str
    exact_counts: bool
    passes: list[tuple[Span, ...]] = field(default_factory=list)  # chunk groups a call may hold
    kept: tuple[Span, ...] = ()  # every chunk the plans (one per question, or one) keep
    chunk_tokens: dict[Span, int] = field(default_factory=dict)  # what the plan counted
    dropped: bool = False
    evaluated: set[Span] = field(default_factory=set)  # chunks found in the KV cache
    call_sources: dict[str, tuple[Span, ...]] = field(default_factory=dict)
    failed_calls: set[str] = field(default_factory=set)
    resumed: bool = False
    # the calls stream through the ring: each holds a run of consecutive kept chunks (what is
    # still resident of one window, and the next), not one of ``passes`` as a whole
    streamed: bool = False
    # the call keeps chunks of earlier calls resident: it holds the plan's kept chunks in the
    # ring's order (those resident first, where they were), each once
    resident: bool = False


class Audit:
    """Checks jobs as they run, on the real engine; collect :attr:`findings`, or raise."""

    def __init__(self, engine: Engine, *, exact_counts: bool = False) -> None:
        """``exact_counts``: the jobs plan with this model's own tokenizer, so every chunk's
        planned token count must equal what the model evaluated."""
        self.engine = engine
        self.exact_counts = exact_counts
        self.findings: list[Finding] = []
        self.counts = AuditCounts()
        self._job: _Job | None = None

    # ----- reporting -----

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        c = self.counts
        head = (
            f"{c.jobs} job(s), {c.calls} model call(s), {c.chunks} chunk(s): "
            f"{c.document_tokens:,} document, {c.template_tokens:,} template and "
            f"{c.output_tokens:,} output tokens checked against llama.cpp"
        )
        if c.evictions:
            head += f", after {c.evictions:,} evicted segment(s) and {c.shifts:,} shift(s)"
        if self.ok:
            return f"audit passed: {head}"
        return f"audit FAILED with {len(self.findings)} mismatch(es) after {head}"

    @property
    def evaluated(self) -> list[Span]:
        """The document spans the last job's calls were found to hold, in document order."""
        return sorted(self._job.evaluated) if self._job else []

    def raise_if_failed(self) -> None:
        if self.findings:
            lines = "\n".join(f"  - {f}" for f in self.findings[:20])
            more = len(self.findings) - 20
            tail = f"\n  ... and {more} more" if more > 0 else ""
            raise AuditFailed(f"{self.summary()}:\n{lines}{tail}")

    def fail(self, step: str, check: str, message: str, *, job: str = "") -> None:
        """Record a mismatch (the audit's own checks, or a caller's: a run the store lost)."""
        if len(self.findings) < MAX_FINDINGS:
            name = job or (self._job.name if self._job else "-")
            self.findings.append(Finding(name, step, check, message))

    # ----- what a job reports -----

    def job_started(self, task: str, strategy: str, text: str, *, resumed: bool = False) -> None:
        """``resumed``: the job generates after a restored KV state, whose segments are not saved
        with it; its outputs' sources are the stored run's (audited when that run ran)."""
        self._job = _Job(f"{task}/{strategy}", text, self.exact_counts, resumed=resumed)
        self.counts.jobs += 1

    def planned(
        self, kept: Sequence[Any], passes: Sequence[Sequence[Any]], dropped: bool, *,
        streamed: bool = False, resident: bool = False,
    ) -> None:  # fmt: skip
        """A plan shown: the kept chunks, the chunk groups its calls evaluate, whether it
        dropped anything (chunks are ``app.core.planning.chunking.Chunk``).

        A job that plans once per question (`retrieve`) reports each plan before its calls:
        the calls that follow must hold one of that plan's groups, and by the job's end every
        plan's kept chunks must have reached the model. ``streamed``: the calls hold runs of
        consecutive kept chunks as the ring evicts and appends them. ``resident``: the call
        holds exactly this plan's kept chunks, in ring order (the chunks an earlier call left
        resident stay where they are, the others follow).
        """
        job = self._need_job()
        job.kept = tuple(dict.fromkeys((*job.kept, *((c.start, c.end) for c in kept))))
        job.chunk_tokens.update({(c.start, c.end): c.tokens for group in passes for c in group})
        job.chunk_tokens.update({(c.start, c.end): c.tokens for c in kept})
        job.passes = [tuple((c.start, c.end) for c in group) for group in passes]
        job.dropped = job.dropped or dropped
        job.streamed = streamed
        job.resident = resident

    def shifted(
        self, step: str, ring: Ring, laid: Mapping[int, Sequence[int]], *, removed: int,
        shifts: int,
    ) -> None:  # fmt: skip
        """A streamed pass removed ``removed`` segments, ``shifts`` times moving what followed
        down: the ring must agree with llama.cpp, and every segment still hold its own tokens
        (``laid``, by segment id)."""
        self.counts.evictions += removed
        self.counts.shifts += shifts
        kv = list(self.engine.kv_tokens())
        for mismatch in ring_mismatches(ring, kv, self.engine.kv_usage(), laid):
            self.fail(step, "shift", mismatch)

    def batch(self, step: str, ring: Ring, sources: Sequence[Span], ring_version: int) -> None:
        """A batch of output was recorded with ``sources``: they must be what is resident."""
        self.counts.batches += 1
        resident = tuple(ring.resident_sources())
        if tuple(sources) != resident and not self._need_job().resumed:
            self.fail(step, "sources", f"output recorded sources {_spans(sources)}, the "
                      f"context held {_spans(resident)}")  # fmt: skip
        if ring_version != ring.version:
            self.fail(step, "sources", f"output recorded ring version {ring_version}, the ring "
                      f"is at {ring.version}")  # fmt: skip

    def call_failed(self, step: str, sources: Sequence[Span]) -> None:
        """The call ended in an engine error: the engine cannot be read back."""
        job = self._need_job()
        job.failed_calls.add(step)
        job.call_sources[step] = tuple(sources)

    def call_finished(self, call: CallRecord) -> None:
        """A model call ended: compare the ring and its segments with llama.cpp's KV cache."""
        job = self._need_job()
        self.counts.calls += 1
        job.call_sources[call.step] = tuple(call.sources)
        kv = list(self.engine.kv_tokens())
        self._check_cache(call, kv, self.engine.kv_usage())
        self._check_segments(call, kv)
        self._check_call_plan(call.step, call.laid)

    def job_finished(self, result: Any) -> None:
        """The job's result (``jobs.tasks.JobResult``): sources, truncation, completeness."""
        job = self._need_job()
        done = result.refused is None and result.error is None
        finished = result.finish_reason in ("stop", "length", "repetition")
        complete = done and finished and not job.failed_calls
        if complete and job.kept and not set(job.kept) <= job.evaluated:
            missing = sorted(set(job.kept) - job.evaluated)
            self.fail("job", "plan", f"{len(missing)} kept chunk(s) never reached the model, "
                      f"first {_spans(missing[:3])}")  # fmt: skip
        if job.dropped and not result.truncated:
            self.fail("job", "truncation", "the plan dropped text; the result does not say so")
        if complete and not result.truncated:
            gap = _first_gap(job.text, job.evaluated)
            if gap is not None:
                self.fail("job", "truncation", f"characters {gap[0]:,}..{gap[1]:,} never reached "
                          "the model, and the result does not say it was truncated")  # fmt: skip
        starts = {a for a, _ in job.evaluated}
        ends = {b for _, b in job.evaluated}
        for out in result.outputs:
            recorded = tuple(tuple(s) for s in out.source_spans)
            if job.call_sources.get(out.step):  # the output of a call that held the document
                if out.step not in job.failed_calls and recorded != job.call_sources[out.step]:
                    self.fail(out.step, "sources", f"output names {_spans(recorded)}, the call "
                              f"held {_spans(job.call_sources[out.step])}")  # fmt: skip
                continue
            for a, b in recorded:  # made from earlier outputs: it names runs of whole chunks
                if a not in starts or b not in ends:
                    self.fail(out.step, "sources", f"output names {a}..{b}, which is not made "
                              "of chunks that reached the model")  # fmt: skip

    def check_stored(self, result: Any, run: Mapping[str, Any]) -> None:
        """The store's record of a run (``Repository.runs``) says what the result says."""
        name = f"{result.task}/{result.strategy}"
        for key in ("finish_reason", "truncated", "strategy"):
            if run.get(key) != getattr(result, key):
                self.fail("store", "store", f"the store says {key}={run.get(key)!r}, the job "
                          f"said {getattr(result, key)!r}", job=name)  # fmt: skip
        stored = [(o["step"], o["text"]) for o in run.get("outputs") or ()]
        if stored != [(o.step, o.text) for o in result.outputs]:
            self.fail("store", "store", "the stored outputs differ from the job's", job=name)

    # ----- the checks -----

    def _need_job(self) -> _Job:
        if self._job is None:
            raise RuntimeError("the audit was not told that a job started")
        return self._job

    def _check_cache(self, call: CallRecord, kv: list[int], usage: KVUsage) -> None:
        step, prompt, stats = call.step, call.prompt, call.stats
        for mismatch in ring_mismatches(call.ring, kv, usage, {}):  # segments: _check_segments
            self.fail(step, "ring", mismatch)
        if stats.n_past != len(kv):
            self.fail(step, "kv", f"the call reported {stats.n_past} positions in use, the cache "
                      f"holds {len(kv)}")  # fmt: skip
        held = min(len(prompt), len(kv))
        if list(prompt[:held]) != kv[:held] or (
            stats.finish_reason != "cancelled" and len(kv) < len(prompt)
        ):
            at = next((i for i in range(held) if prompt[i] != kv[i]), held)
            self.fail(step, "prompt", f"the KV cache differs from the prompt sent at position "
                      f"{at} of {len(prompt)}")  # fmt: skip

    def _check_segments(self, call: CallRecord, kv: list[int]) -> None:
        step, ring, stats = call.step, call.ring, call.stats
        job = self._need_job()
        resident = {s.id: s for s in ring}
        for item in call.laid:
            seg = resident.get(item.segment.id)
            if seg is None:
                if stats.finish_reason != "cancelled":  # a cancelled prompt may end early
                    self.fail(step, "positions", f"{item.segment.kind} segment "
                              f"{item.segment.id} is not in the ring")  # fmt: skip
                continue
            self.counts.segments += 1
            want = _resident(seg, item.tokens)
            if not _holds(kv, seg, item.tokens):
                self.fail(step, "positions", _misplaced(seg))
                continue
            if seg.kind is not SegmentKind.CHUNK or seg.source is None:
                self.counts.template_tokens += seg.tokens
                continue
            self.counts.chunks += 1
            self.counts.document_tokens += seg.tokens
            if seg.tokens != len(item.tokens):
                continue  # a cancelled prompt holds part of this chunk: nothing more to compare
            job.evaluated.add(seg.source)
            a, b = seg.source
            shown = job.text[a:b]
            own = chunk_tokens(self.engine, shown)
            if own != want:
                self.fail(step, "tokens", _other_ids(a, b, want, own))
            seen = self.engine.detokenize(want)  # every piece whole (see Engine.detokenize)
            if seen != shown:
                self.fail(step, "detokenize", f"chunk {a}..{b} reached the model as "
                          f"{_clip(seen)!r}; the document has {_clip(shown)!r}")  # fmt: skip
            planned = job.chunk_tokens.get(seg.source)
            if job.exact_counts and planned is not None and planned != len(want):
                self.fail(step, "count", f"chunk {a}..{b}: the plan counted {planned} tokens, "
                          f"the model evaluated {len(want)}")  # fmt: skip
        outputs = [s for s in ring if s.kind is SegmentKind.OUTPUT]
        for seg in outputs:
            self.counts.output_tokens += seg.tokens
            if kv[seg.pos : seg.end] != list(call.generated[: seg.tokens]):
                self.fail(step, "output", f"KV positions {seg.pos}..{seg.end - 1} do not hold "
                          "the reply's tokens")  # fmt: skip
        if stats.finish_reason != "cancelled" and len(kv) > ring.used:
            self.fail(step, "ring", f"{len(kv) - ring.used} KV positions hold tokens the ring "
                      "does not know")  # fmt: skip

    def _check_call_plan(self, step: str, laid: Sequence[LaidSegment]) -> None:
        job = self._need_job()
        chunks = tuple(
            item.segment.source for item in laid
            if item.segment.kind is SegmentKind.CHUNK and item.segment.source is not None
        )  # fmt: skip
        if chunks and job.resident:
            group = job.passes[0] if job.passes else ()
            if len(set(chunks)) != len(chunks) or set(chunks) != set(group):
                self.fail(step, "plan", f"the call held chunks {_spans(chunks)}, which are not "
                          "the kept chunks of the plan shown, each once")  # fmt: skip
        elif chunks and job.streamed:
            at = {span: i for i, span in enumerate(job.kept)}
            places = [at.get(span, -1) for span in chunks]
            if -1 in places or places != list(range(places[0], places[0] + len(places))):
                self.fail(step, "plan", f"the call held chunks {_spans(chunks)}, which are not "
                          "consecutive kept chunks of the plan shown")  # fmt: skip
        elif chunks and chunks not in job.passes:
            self.fail(step, "plan", f"the call evaluated chunks {_spans(chunks)}, which are not "
                      "the kept chunks of the plan shown nor one of its windows")  # fmt: skip


def ring_mismatches(
    ring: Ring, kv: Sequence[int], usage: KVUsage, laid: Mapping[int, Sequence[int]]
) -> list[str]:
    """Where the ring and llama.cpp disagree, in words (empty when they agree): the cells and
    positions in use, and the tokens at each segment's positions. ``laid`` holds each segment's
    token ids as they were put in, by segment id (a shift may since have trimmed its front)."""
    out = []
    try:
        ring.check()
    except AssertionError as exc:
        out.append(f"the ring breaks its own invariant: {exc}")
    mismatch = ring.agrees_with(usage.cells_used, usage.pos_min, usage.pos_max)
    if mismatch:
        out.append(mismatch)
    if len(kv) != usage.cells_used:
        out.append(f"the engine lists {len(kv)} tokens, llama.cpp holds {usage.cells_used} cells")
    for seg in ring:
        tokens = laid.get(seg.id)
        if tokens is not None and not _holds(kv, seg, tokens):
            out.append(_misplaced(seg))
    return out


def _resident(seg: Segment, tokens: Sequence[int]) -> list[int]:
    """The tokens laid in ``seg`` that are still in the cache (a shift may trim its front)."""
    return list(tokens[seg.trimmed : seg.trimmed + seg.tokens])


def _holds(kv: Sequence[int], seg: Segment, tokens: Sequence[int]) -> bool:
    """Whether the cache holds ``seg``'s tokens at ``seg``'s positions."""
    return list(kv[seg.pos : seg.end]) == _resident(seg, tokens)


def _other_ids(a: int, b: int, seen: Sequence[int], own: Sequence[int]) -> str:
    """Where the ids a chunk reached the model as part from its own text's, in words."""
    at = next((i for i, (x, y) in enumerate(zip(seen, own, strict=False)) if x != y),
              min(len(seen), len(own)))  # fmt: skip
    return (f"chunk {a}..{b} reached the model as {len(seen)} token(s), its text tokenizes to "
            f"{len(own)}; they part at token {at}: {list(seen[at : at + 4])} where its text has "
            f"{list(own[at : at + 4])}")  # fmt: skip


def _misplaced(seg: Segment) -> str:
    return f"KV positions {seg.pos}..{seg.end - 1} do not hold the {seg.kind} segment laid there"


def _first_gap(text: str, covered: set[Span]) -> Span | None:
    """The first stretch of ``text`` outside ``covered`` holding more than whitespace."""
    pos = 0
    for a, b in [*sorted(covered), (len(text), len(text))]:
        if a > pos and text[pos:a].strip():
            return pos, a
        pos = max(pos, b)
    return None


def _spans(spans: Sequence[Sequence[int]]) -> str:
    shown = ", ".join(f"{a}..{b}" for a, b in list(spans)[:4])
    return f"[{shown}{', ...' if len(spans) > 4 else ''}]"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
