"""Jobs on a long document, as generators of plain events (the CLI prints them, the GUI shows
them): the one import for core and services callers, gathered from the modules that hold them.

A job plans with the input stage (chunks, strategies, budget), drives the engine through the KV
stage, and keeps a :class:`~app.core.jobs.ring.Ring` in step with what llama.cpp holds, so every
piece of output is recorded with the ring version and the document spans that were resident
when it was generated. Nothing here polls: each engine reply becomes events as it arrives.

- :mod:`app.core.jobs.run_tasks`: ``summarize``, ``ask``, ``extract`` and ``run_strategies``
  (one task under several strategies: ``compare``);
- :mod:`app.core.jobs.job_setup`: a job's checks, its plan (:func:`planning` says with what
  budget) and its end;
- :mod:`app.core.jobs.call_runner`: one model call over segments (the frame, the ring, the
  events; the map phase one call after another or in lanes);
- :mod:`app.core.jobs.map_reduce` and :mod:`app.core.jobs.rolling`: the multi-pass summaries
  (rolling and ``semantic``'s overlapping windows stream through the ring,
  :mod:`app.core.jobs.streaming`);
- :mod:`app.core.jobs.resume`: a job's KV state kept and a reply generated again from it.

The engine they drive is :class:`app.core.engine.api.Engine`; the events and the result are in
:mod:`app.core.jobs.events`; what a face may name (tasks, lanes, a cancel token) in
:mod:`app.core.jobs.options`. The faces import none of the modules above (import-linter).
"""

from __future__ import annotations

from app.core.engine.api import Engine, ResumableEngine
from app.core.jobs.events import (
    ChunkEvaluated,
    ChunkEvicted,
    ChunkQueued,
    EvalProgress,
    Event,
    JobError,
    JobFinished,
    JobResult,
    KVLive,
    KVShifted,
    KVStats,
    LanesStarted,
    OutputSpan,
    PartialResult,
    PassStarted,
    PlanReady,
    RingFallback,
    StrategiesFinished,
    StrategyStarted,
    ThreadsSet,
    TokenBatch,
)
from app.core.jobs.job_setup import planning
from app.core.jobs.options import DEFAULT_LANES, TASKS, CancelToken
from app.core.jobs.resume import resume, state_after
from app.core.jobs.run_tasks import ask, extract, run_strategies, summarize

# The instructions (SUMMARIZE, ASK, ...) and their frames live in app.core.planning.frame.
from app.core.planning.frame import (
    ASK,
    ASK_PART,
    COMBINE,
    COMBINE_ANSWERS,
    ROLLING,
    SUMMARIZE,
    SUMMARIZE_PART,
)

__all__ = [
    "ASK",
    "ASK_PART",
    "COMBINE",
    "COMBINE_ANSWERS",
    "DEFAULT_LANES",
    "ROLLING",
    "SUMMARIZE",
    "SUMMARIZE_PART",
    "TASKS",
    "CancelToken",
    "ChunkEvaluated",
    "ChunkEvicted",
    "ChunkQueued",
    "Engine",
    "EvalProgress",
    "Event",
    "JobError",
    "JobFinished",
    "JobResult",
    "KVLive",
    "KVShifted",
    "KVStats",
    "LanesStarted",
    "OutputSpan",
    "PartialResult",
    "PassStarted",
    "PlanReady",
    "ResumableEngine",
    "RingFallback",
    "StrategiesFinished",
    "StrategyStarted",
    "ThreadsSet",
    "TokenBatch",
    "ask",
    "extract",
    "planning",
    "resume",
    "run_strategies",
    "state_after",
    "summarize",
]
