"""The events a job yields and the result it ends with: plain data, no engine, no Qt.

The CLI prints them as JSON lines, the window turns them into signals on its thread, the store
records a :class:`JobResult`. Each names its step (the model call: "part 2", "window 3") so a
face can tell the calls of one job apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.core.engine.threads import change_figure, describe_change
from app.core.planning.plan import kept_of_document

if TYPE_CHECKING:  # the events stay plain data: alignment.py brings the word analyzer
    from app.core.jobs.alignment import SentenceSource


@dataclass(frozen=True)
class PlanReady:
    strategy: str
    budget: int
    kept_tokens: int
    total_tokens: int
    passes: int
    boundary_integrity: float
    dropped_spans: int
    # the question this plan was made for (`retrieve` plans once per question), else ""
    question: str = ""
    # the whole text counted as one, the document's one total (planning/plan.py); 0: not known
    document_tokens: int = 0

    def of_document(self) -> tuple[int, int]:
        """``(kept, total)`` said of the document (planning.plan.kept_of_document)."""
        return kept_of_document(self.kept_tokens, self.total_tokens, self.document_tokens,
                                dropped=self.dropped_spans > 0)  # fmt: skip


@dataclass(frozen=True)
class ChunkQueued:
    step: str
    start: int
    end: int
    tokens: int


@dataclass(frozen=True)
class ChunkEvaluated:
    step: str
    start: int
    end: int
    tokens: int
    kv_start: int  # KV positions the chunk occupies
    kv_end: int
    ring_version: int
    lane: int | None = None  # the sequence of a batched map phase; None: the one sequence


@dataclass(frozen=True)
class ChunkEvicted:
    step: str
    start: int
    end: int


@dataclass(frozen=True)
class KVShifted:
    """KV positions ``[start, end)`` left llama.cpp's cache and the ``moved`` positions after
    them moved down by ``end - start`` (``llama_memory_seq_rm`` + ``llama_memory_seq_add``):
    room made for the next part of a document streamed through the ring. ``layout`` is the
    ring afterwards, one (kind, first position, tokens, document span or None) per segment."""

    step: str
    start: int
    end: int
    moved: int
    kinds: tuple[str, ...]  # the kinds of the segments that left, in KV order
    layout: tuple[tuple[str, int, int, tuple[int, int] | None], ...]


@dataclass(frozen=True)
class RingFallback:
    """A streamed pass cannot run on this engine: the job re-prompts each window instead."""

    strategy: str
    reason: str


@dataclass(frozen=True)
class TokenBatch:
    step: str
    text: str
    tokens: int
    ring_version: int
    sources: tuple[tuple[int, int], ...]  # document spans resident while this was generated
    lane: int | None = None


@dataclass(frozen=True)
class KVStats:
    cells_used: int
    n_ctx: int
    state_bytes: int
    lane: int | None = None  # a lane's own figures (its sequence in the lanes' shared cache)
    reported_by: str = "llama.cpp"  # a server's endpoint, or "": the server does not report KV


@dataclass(frozen=True)
class KVLive:
    """llama.cpp's KV figures in the middle of a model call, a few times a second while its
    prompt is evaluated and its reply generated (:class:`KVStats` closes the call)."""

    step: str
    cells_used: int
    n_ctx: int
    state_bytes: int
    lane: int | None = None  # a lane's own figures (the one sequence: None)


@dataclass(frozen=True)
class EvalProgress:
    """A model call's prompt in llama.cpp so far: ``evaluated`` of the ``total`` tokens it
    evaluates (a prefix the cache held already is in neither), after ``seconds``."""

    step: str
    evaluated: int
    total: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class ThreadsSet:
    """llama.cpp computes with ``after`` threads from now on, not ``before``: other programs
    took a core ("busy"), gave it back ("quiet"), or a decode ran far slower than the ones
    before it ("slow"); ``reason`` says it in English, ``others`` is their CPU use in cores."""

    step: str
    before: int
    after: int
    cause: str
    reason: str
    others: float
    took_s: float = 0.0  # "slow": the decode's seconds, and the same work's at the recent pace
    expected_s: float = 0.0

    def describe(self) -> str:
        """The change and the figure behind it, in words (the CLI's note)."""
        figure = change_figure(self.cause, self.others, self.took_s, self.expected_s)
        return f"{describe_change(self.before, self.after, self.reason)} ({figure})"


@dataclass(frozen=True)
class PassStarted:
    """Pass ``index`` (from 1) of ``count`` over the document begins: a window of a rolling
    summary, a part or a combining round of a map phase."""

    step: str
    index: int
    count: int


@dataclass(frozen=True)
class LanesStarted:
    """A batched map phase begins: ``windows`` replies, ``lanes`` generated together as parallel
    sequences of one llama.cpp context; each lane holds at most ``n_ctx`` positions."""

    lanes: int
    windows: int
    n_ctx: int


@dataclass(frozen=True)
class PartialResult:
    step: str
    text: str
    sources: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class OutputSpan:
    step: str
    text: str
    source_spans: tuple[tuple[int, int], ...]
    ring_version: int
    finish_reason: str
    # each sentence of ``text`` and the kept sentence that supports it best (alignment.py),
    # found when the job ends (an answer's and a summary's; () for the others)
    alignment: tuple[SentenceSource, ...] = ()


@dataclass
class JobResult:
    task: str
    strategy: str
    finish_reason: str  # stop, length, repetition (a loop was cut), cancelled, error
    n_ctx: int
    prompt_tokens: int = 0
    evaluated_tokens: int = 0  # prompt tokens llama.cpp actually evaluated (not found cached)
    document_tokens: int = 0  # the document's tokens as planned (the first plan's total)
    # A pass streamed through the KV ring: segments evicted and the tokens they held; or why
    # the job re-prompted each window instead (None: it did not have to)
    evictions: int = 0
    evicted_tokens: int = 0
    fallback: str | None = None
    completion_tokens: int = 0
    kv_peak_cells: int = 0
    ttft_s: list[float] = field(default_factory=list)
    seconds: float = 0.0
    outputs: list[OutputSpan] = field(default_factory=list)
    truncated: bool = False  # some of the document never reached the model
    refused: str | None = None
    error: str | None = None
    prompt_lengths: list[int] = field(default_factory=list)  # per model call, for the histogram
    plan: dict[str, Any] = field(default_factory=dict)
    lanes: int | None = None  # the map phase's replies ran this many at a time (None: one by one)
    threads: int = 0  # llama.cpp's thread count at the end (0: not known, a server)
    # each change of the thread count while the job ran (engine/threads.py): step, from, to,
    # cause, reason, others (other programs' CPU in cores) and at_s (seconds into the job)
    thread_changes: list[dict[str, Any]] = field(default_factory=list)
    # The token ids of the last model call's prompt: with the KV state saved right after the job,
    # a rollback can resume that call without evaluating it again. Not part of as_dict().
    final_prompt: tuple[int, ...] = field(default=(), repr=False)
    # That prompt's segments in the ring, (kind, first position, tokens, document span or None)
    # each: kept with the state, so a resumed rollback shows the cache as the job left it.
    final_layout: tuple[tuple[str, int, int, tuple[int, int] | None], ...] = field(
        default=(), repr=False
    )
    # What the job's calls left resident in the KV cache, for a follow-up job on the same engine
    # (app.core.jobs.streaming.ResidentState); None where nothing can be taken up. Not in as_dict.
    resident: Any = field(default=None, repr=False)
    # The document the job was given, until it ends (job_setup.finish aligns the outputs to it
    # and lets it go). Not part of as_dict().
    document_text: str = field(default="", repr=False, compare=False)

    @property
    def text(self) -> str:
        return self.outputs[-1].text if self.outputs else ""

    @property
    def evaluated_per_document_token(self) -> float | None:
        """Prompt tokens evaluated per document token: the job's overhead at a glance (1.0: each
        document token once and nothing else; None before a plan counted the document)."""
        if not self.document_tokens:
            return None
        return round(self.evaluated_tokens / self.document_tokens, 4)

    def as_dict(self) -> dict[str, Any]:
        # what only this process needs (token ids, the cache's layout, the document) is not
        # copied, nor recorded
        d = asdict(replace(self, final_prompt=(), final_layout=(), resident=None,
                           document_text=""))  # fmt: skip
        del d["final_prompt"], d["final_layout"], d["resident"], d["document_text"]
        d["prompt_tokens_evaluated"] = self.evaluated_tokens
        d["evaluated_per_document_token"] = self.evaluated_per_document_token
        d["outputs"] = [
            {"step": o.step, "text": o.text, "source_spans": [list(s) for s in o.source_spans],
             "finish_reason": o.finish_reason, "ring_version": o.ring_version,
             "alignment": [a.as_dict() for a in o.alignment]}
            for o in self.outputs
        ]  # fmt: skip
        return d


@dataclass(frozen=True)
class JobError:
    """The engine failed mid-job; the outputs so far are kept in the result that follows."""

    message: str


@dataclass(frozen=True)
class JobFinished:
    result: JobResult


Event = (
    PlanReady | ChunkQueued | ChunkEvaluated | ChunkEvicted | KVShifted | RingFallback
    | TokenBatch | KVStats | KVLive | EvalProgress | ThreadsSet | PassStarted | LanesStarted
    | PartialResult | JobError | JobFinished
)  # fmt: skip


@dataclass(frozen=True)
class StrategyStarted:
    """A job of several strategies (compare) starts the next one."""

    strategy: str


@dataclass(frozen=True)
class ServerLost:
    """The server ``url`` of a pool stopped answering in the middle of the job (``reason``): what
    it generated is dropped and the job runs again from its start on ``moved_to``, whose events
    follow. A face clears the reply it was streaming; the result that ends the job is whole."""

    url: str
    reason: str
    moved_to: str


@dataclass(frozen=True)
class StrategiesFinished:
    """Every strategy of the job has finished: their results, in order."""

    results: tuple[JobResult, ...]
