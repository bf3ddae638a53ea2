"""The three tasks a job can do with a document, and a job of several strategies.

``summarize``, ``ask`` (several questions reuse the evaluated document; `retrieve` plans each
question apart) and ``extract`` (an instruction per window, merged in document order), each a
generator of events (:mod:`app.core.jobs.events`) ending with :class:`JobFinished`;
:func:`run_strategies` runs one of them under each strategy in turn (``compare``). Each plans
(:mod:`app.core.jobs.job_setup`), then calls the model through a
:class:`~app.core.jobs.call_runner.CallRunner`, directly or through :mod:`map_reduce` and
:mod:`rolling`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from app.core.engine.api import Engine
from app.core.engine.types import EngineError, SamplingSettings
from app.core.jobs.audit import Audit
from app.core.jobs.call_runner import (
    CallWindow,
    TextSegment,
    call_made_from,
    chunk_segments,
    fit,
    union,
)
from app.core.jobs.events import (
    Event,
    JobFinished,
    JobResult,
    OutputSpan,
    StrategiesFinished,
    StrategyStarted,
)
from app.core.jobs.job_setup import (
    failed,
    finish,
    pass_chunks,
    planned,
    planning,
    question_text,
    start_job,
)
from app.core.jobs.map_reduce import map_reduce
from app.core.jobs.options import TASKS, CancelToken
from app.core.jobs.rolling import rolling
from app.core.jobs.streaming import ResidentCalls, ResidentState, shift_refusal
from app.core.planning.frame import ASK, ASK_PART, COMBINE, COMBINE_ANSWERS, SUMMARIZE
from app.core.planning.strategies import MULTI_PASS, QUESTION_STRATEGIES, Planner
from app.core.tokens import TokenCounter


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
    sequences (:meth:`CallRunner.map`); None, one call at a time.
    """
    t0 = time.perf_counter()
    result, runner = start_job("summarize", strategy, n_ctx, engine, cancel, audit=audit,
                               text=text, max_tokens=max_tokens, lanes=lanes,
                               sampling=sampling)  # fmt: skip
    planner = planner or Planner(text, counter)
    try:
        instruction, reserve = planning("summarize", strategy, counter, max_tokens=max_tokens)
        later = (COMBINE,) if strategy in MULTI_PASS and strategy != "rolling" else ()
        plan = yield from planned(runner, planner, strategy, instruction, reserve=reserve,
                                  later=later)  # fmt: skip
        if plan is None:
            return
        if strategy == "rolling":
            yield from rolling(runner, text, plan, max_tokens)
        elif plan.multi_pass:
            yield from map_reduce(runner, text, plan, counter, n_ctx=n_ctx, max_tokens=max_tokens)
        else:
            kept = chunk_segments(text, plan.kept_chunks())
            yield from runner.call("summary", SUMMARIZE, kept, max_tokens)
    except EngineError as exc:
        yield failed(result, runner, exc)
    finally:
        yield finish(result, runner, t0)


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
    resident_after: ResidentState | None = None,
) -> Iterator[Event]:
    """Answer ``questions`` about ``text``, one output per question.

    With a single-pass strategy the document comes first and the question after it, so every
    question after the first reuses the evaluated document from the KV cache (only the question
    is evaluated). Multi-pass strategies ask each window and then combine the answers.
    `retrieve` plans once per question (each its own :class:`PlanReady`, its own kept chunks in
    the same budget): the chunks a later question's plan shares with what the cache holds stay
    resident and only its other chunks and the question are evaluated
    (:class:`~app.core.jobs.streaming.ResidentCalls`), or, on a cache that cannot shift, the
    prompt's start is reused as far as the two plans keep the same chunks.
    ``resident_after``: what an earlier job's questions left resident (:attr:`JobResult.resident`
    of the last job on this engine): a follow-up job keeps the chunks its plans share with it.
    """
    t0 = time.perf_counter()
    result, runner = start_job("ask", strategy, n_ctx, engine, cancel, audit=audit,
                               text=text, max_tokens=max_tokens, lanes=lanes,
                               sampling=sampling)  # fmt: skip
    planner = planner or Planner(text, counter)
    resident: ResidentCalls | None = None  # the calls keep shared chunks in the cache
    try:
        if not questions or not all(q.strip() for q in questions):
            raise ValueError("ask needs at least one question, and no empty ones")
        instruction, reserve = planning("ask", strategy, counter, max_tokens=max_tokens,
                                        questions=questions)  # fmt: skip
        room = reserve - max_tokens  # the longest question, after the document
        later = (COMBINE_ANSWERS,) if strategy in MULTI_PASS else ()
        per_question = strategy in QUESTION_STRATEGIES
        if per_question and shift_refusal(engine) is None:
            resident = ResidentCalls(runner, instruction, resident_after)
        plan = None
        if not per_question:  # one plan, whatever is asked
            plan = yield from planned(runner, planner, strategy, instruction, reserve=reserve,
                                      later=later)  # fmt: skip
            if plan is None:
                return
        for i, q in enumerate(questions):
            if runner.cancel.is_set():
                return
            step = f"answer {i + 1}"
            if per_question:  # each question its own plan, in the same budget; the chunks
                # it shares with the cache stay resident (or, without shifts, the prompt's start)
                plan = yield from planned(runner, planner, strategy, instruction,
                                          reserve=reserve, later=later, question=q,
                                          resident=resident is not None)  # fmt: skip
                if plan is None:
                    return
            assert plan is not None
            if not plan.multi_pass:
                doc = chunk_segments(text, plan.kept_chunks())
                asked = TextSegment(question_text(q), None)
                if resident is not None:
                    yield from resident.call(step, [*doc, asked], max_tokens)
                else:
                    yield from runner.call(step, ASK, [*doc, asked], max_tokens)
                continue
            windows = [
                CallWindow(f"{step} part {w + 1}", [*chunk_segments(text, chunks),
                                                    TextSegment(question_text(q), None)])
                for w, chunks in enumerate(pass_chunks(plan))
            ]  # fmt: skip
            outs = yield from runner.map(ASK_PART, windows, max_tokens)
            if runner.cancel.is_set():
                return
            partials = [TextSegment(out.text, None) for out in outs]
            fits = fit(partials, counter, n_ctx - runner.frame(COMBINE_ANSWERS).tokens
                       - max_tokens - room)  # fmt: skip
            if len(fits) < len(partials):  # answers left out of the combining call
                runner.result.truncated = True
            made_from = [s for out in outs[: len(fits)] for s in out.source_spans]
            yield from call_made_from(runner, step, COMBINE_ANSWERS,
                                      [*fits, TextSegment(question_text(q), None)], max_tokens,
                                      made_from=made_from)  # fmt: skip
    except EngineError as exc:
        yield failed(result, runner, exc)
    finally:
        if resident is not None and result.error is None and not runner.cancel.is_set():
            result.resident = resident.state()
        yield finish(result, runner, t0)


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
    result, runner = start_job("extract", strategy, n_ctx, engine, cancel, audit=audit,
                               text=text, max_tokens=max_tokens, lanes=lanes,
                               sampling=sampling)  # fmt: skip
    planner = planner or Planner(text, counter)
    try:
        if not instruction.strip():
            raise ValueError("extract needs an instruction")
        task_instruction, reserve = planning(
            "extract", strategy, counter, max_tokens=max_tokens, instruction=instruction
        )
        # `retrieve` ranks the document against the instruction
        plan = yield from planned(runner, planner, strategy, task_instruction, reserve=reserve,
                                  question=instruction)  # fmt: skip
        if plan is None:
            return
        windows = [CallWindow(f"part {w + 1}", chunk_segments(text, chunks))
                   for w, chunks in enumerate(pass_chunks(plan))]  # fmt: skip
        pieces = yield from runner.map(instruction, windows, max_tokens)
        if runner.cancel.is_set():
            return
        if len(pieces) > 1:
            merged = "\n".join(p.text for p in pieces if p.text)
            sources = union([s for p in pieces for s in p.source_spans])
            last = pieces[-1]
            result.outputs.append(OutputSpan("merged", merged, sources, last.ring_version,
                                             last.finish_reason))  # fmt: skip
    except EngineError as exc:
        yield failed(result, runner, exc)
    finally:
        yield finish(result, runner, t0)



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
    # each takes its own keywords (in ``options``) after the engine, the text and the counter
    jobs: dict[str, Callable[..., Iterator[Event]]] = {
        "summarize": summarize,
        "ask": ask,
        "extract": extract,
    }
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
