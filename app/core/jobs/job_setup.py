"""What every job does before and after its calls: check its options, plan the document next to
its first instruction (:func:`planning` says with what budget), and end with its result.

A face that plans ahead for a job (the window, in a planning child) asks :func:`planning` for the
same instruction and reply reserve, so the plans it shows are the plans the job runs.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import replace

from app.core.engine.api import Engine
from app.core.engine.lanes import MAX_LANES
from app.core.engine.types import CancelledError, EngineError, SamplingSettings
from app.core.jobs.alignment import Aligner
from app.core.jobs.audit import Audit
from app.core.jobs.call_runner import CallRunner
from app.core.jobs.events import Event, JobError, JobFinished, JobResult, PlanReady
from app.core.jobs.options import CancelToken
from app.core.planning.chunking import Chunk, sliding_windows
from app.core.planning.frame import ASK, ASK_PART, ROLLING, SUMMARIZE, SUMMARIZE_PART
from app.core.planning.plan import Plan
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import MULTI_PASS, STRATEGIES, Planner, PlanOptions
from app.core.tokens import TokenCounter


def planned(
    runner: CallRunner,
    planner: Planner,
    strategy: str,
    instruction: str,
    *,
    reserve: int,
    later: Sequence[str] = (),
    question: str = "",
    resident: bool = False,
) -> Generator[Event, None, Plan | None]:
    """The plan for the document next to ``instruction`` with ``reserve`` tokens kept free;
    None (and the refusal recorded) when nothing can be done. ``later``: the instructions of
    the job's later calls (combining partial results), which need a token of room too.
    ``question``: what `retrieve` ranks the document against; a job that plans once per
    question calls this once per question, each plan with its own :class:`PlanReady`.
    ``resident``: its call keeps the chunks already in the cache (ring order)."""
    result = runner.result
    frame = runner.frame(instruction)
    budget = result.n_ctx - frame.tokens - reserve
    widest = max((runner.frame(i) for i in (instruction, *later)), key=lambda f: f.tokens)
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
    result.document_tokens = result.document_tokens or plan.of_document()[1]
    passes = max(1, len(plan.windows))
    yield PlanReady(strategy, budget, plan.kept_tokens, plan.total_tokens, passes,
                    plan.boundary_integrity, len(plan.dropped), plan.question,
                    plan.document_tokens)  # fmt: skip
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
    if runner.audit is not None:
        runner.audit.planned(plan.kept_chunks(), pass_chunks(plan), dropped=bool(plan.dropped),
                             streamed=strategy == "rolling", resident=resident)  # fmt: skip
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
    return max((counter.count(question_text(q)) for q in questions), default=0) + 2


def start_job(
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
) -> tuple[JobResult, CallRunner]:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (choose one of {', '.join(STRATEGIES)})")
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if lanes is not None and not 1 <= lanes <= MAX_LANES:
        raise ValueError(f"lanes must be between 1 and {MAX_LANES} (or none: one call at a time)")
    if sampling is not None:
        sampling.validate()
    result = JobResult(task, strategy, "stop", n_ctx, document_text=text)
    if audit is not None:
        audit.job_started(task, strategy, text, resumed=resumed)
    return result, CallRunner(engine, n_ctx, result, cancel or CancelToken(), audit=audit,
                              lanes=lanes, sampling=sampling)  # fmt: skip


def failed(result: JobResult, runner: CallRunner, exc: EngineError) -> JobError:
    """Record an engine failure; what was generated before it stays in the result."""
    if isinstance(exc, CancelledError):
        runner.cancel.set()
    else:
        result.finish_reason = "error"
        result.error = str(exc)
    return JobError(str(exc))


def finish(result: JobResult, runner: CallRunner, t0: float) -> JobFinished:
    if result.outputs and result.refused is None and result.error is None:
        result.finish_reason = result.outputs[-1].finish_reason
    if runner.cancel.is_set():
        result.finish_reason = "cancelled"
    aligned(result)
    result.seconds = time.perf_counter() - t0
    if runner.audit is not None:
        runner.audit.job_finished(result)
    return JobFinished(result)


# The tasks whose outputs say what the document says, sentence by sentence: an extract's output
# is the instruction's (a list of names, a table), not sentences to check against the text.
ALIGNED_TASKS = ("ask", "summarize")


def aligned(result: JobResult) -> None:
    """Tie each sentence of the job's answers and summaries to the kept sentence that supports it
    best (:mod:`app.core.jobs.alignment`; a few milliseconds), then let the document go."""
    text, result.document_text = result.document_text, ""
    if result.task not in ALIGNED_TASKS or not text:
        return
    aligner = Aligner(text)  # the outputs' kept spans overlap: each is read once
    result.outputs[:] = [replace(o, alignment=aligner.align(o.text, o.source_spans))
                      if o.text and o.source_spans else o
                      for o in result.outputs]  # fmt: skip


def question_text(q: str) -> str:
    return f"\n\nQuestion: {q.strip()}"



def pass_chunks(plan: Plan) -> list[Sequence[Chunk]]:
    """The chunks each pass over the document evaluates: the kept ones in one pass, or one
    window of the plan per pass."""
    if not plan.multi_pass:
        return [plan.kept_chunks()]
    return [plan.chunks[first : last + 1] for first, last in _window_ranges(plan)]


def _window_ranges(plan: Plan) -> list[tuple[int, int]]:
    if plan.strategy == "rolling":
        return disjoint_windows(plan)
    return [(w.first, w.last) for w in plan.windows]



def disjoint_windows(plan: Plan) -> list[tuple[int, int]]:
    """Consecutive runs of chunks that fill the plan's budget, without overlap; a chunk that
    alone exceeds the budget (the plan dropped it) is in none."""
    windows = sliding_windows(plan.chunks, plan.budget, 0.0)
    return [(w.first, w.last) for w in windows if w.tokens <= plan.budget]
