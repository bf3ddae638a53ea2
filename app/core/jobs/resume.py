"""A finished job's KV state kept (:func:`state_after`), and a reply generated again from it
without evaluating the prompt (:func:`resume`): what a rollback in the history does."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from app.core.engine.api import ResumableEngine
from app.core.engine.types import EngineError, KVState, SamplingSettings
from app.core.jobs.audit import Audit, LaidSegment
from app.core.jobs.events import Event, JobResult
from app.core.jobs.job_setup import failed, finish, start_job
from app.core.jobs.options import CancelToken
from app.core.jobs.ring import SegmentKind

RESUMED_STEP = "resumed"  # the step of the reply generated again


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
    result, runner = start_job(task, strategy, state.n_ctx, engine, cancel, audit=audit,
                               resumed=True, sampling=sampling)  # fmt: skip
    try:
        if not 0 < prompt_tokens <= len(state.tokens):
            raise ValueError("the saved KV state does not say which of its tokens are the prompt")
        prompt = state.tokens[:prompt_tokens]
        engine.restore_state(state)
        system = runner.ring.append(SegmentKind.SYSTEM, prompt_tokens, pinned=True)
        result.final_prompt = tuple(prompt)
        laid = [LaidSegment(system, tuple(prompt))]
        yield from runner.stream(RESUMED_STEP, prompt, (), tuple(sources), max_tokens,
                                  laid=laid)  # fmt: skip
    except EngineError as exc:
        yield failed(result, runner, exc)
    finally:
        yield finish(result, runner, t0)
