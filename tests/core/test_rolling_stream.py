"""`rolling` streams the document through the KV ring on the real engine, and falls back to
re-prompting each window, with the reason said, where the cache cannot shift.

The stand-in for a model that cannot shift is the real engine with one figure changed: its
``kv_usage().can_shift`` reads False, as llama.cpp's ``llama_memory_can_shift`` does for some
sliding-window and recurrent models (the engine child reports that flag as it is).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import replace
from typing import Any

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.types import KVUsage
from app.core.jobs.audit import Audit
from app.core.jobs.events import ChunkEvicted, JobFinished, JobResult, KVShifted, RingFallback
from app.core.jobs.streaming import shift_refusal
from app.core.jobs.tasks import summarize
from app.core.paths import sample_document
from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner, PlanOptions
from app.core.tokens import TokenCounter
from tests.engines import Counters, Hosts

N_CTX = 512
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def three_windows() -> str:
    """About 1,200 tokens of the Jargon File: three windows at this context."""
    whole = sample_document().read_text(encoding="utf-8")
    start = whole.index("\n\n", 40_000) + 2
    return whole[start : whole.index("\n\n", start + 5_200)]


class CannotShift:
    """The real engine, reporting the capability flag of a cache that cannot move positions."""

    def __init__(self, engine: EngineHost) -> None:
        self._engine = engine

    def kv_usage(self) -> KVUsage:
        return dataclasses.replace(self._engine.kv_usage(), can_shift=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def _run(
    engine: Any, text: str, counter: TokenCounter, audit: Audit
) -> tuple[list[Any], JobResult]:
    events = list(summarize(engine, text, counter, strategy="rolling", n_ctx=N_CTX,
                            max_tokens=MAX_TOKENS, audit=audit))  # fmt: skip
    finished = events[-1]
    assert isinstance(finished, JobFinished)
    return events, finished.result


@pytest.fixture(scope="module")
def streamed(
    make_host: Hosts, make_counter: Counters, three_windows: str
) -> tuple[list[Any], JobResult, Audit]:
    """One streamed pass, audited: the two tests below read it."""
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    audit = Audit(host, exact_counts=True)
    events, result = _run(host, three_windows, counter, audit)
    return events, result, audit


def test_streamed_pass_evaluates_each_document_token_once(
    streamed: tuple[list[Any], JobResult, Audit],
) -> None:
    events, result, audit = streamed
    audit.raise_if_failed()
    assert result.finish_reason in ("stop", "length", "repetition") and result.fallback is None
    windows = [o for o in result.outputs if o.step.startswith("window")]
    assert len(windows) >= 3 and result.outputs[-1].step == "summary"
    shifts = [e for e in events if isinstance(e, KVShifted)]
    assert result.evictions > 0 and audit.counts.evictions == result.evictions
    assert audit.counts.shifts > 0 and any(e.moved > 0 for e in shifts)
    for ev in shifts:  # the ring after each removal: the pinned prefix first, no gaps
        assert ev.layout[0][:2] == ("system", 0)
        assert all(a[1] + a[2] == b[1] for a, b in zip(ev.layout, ev.layout[1:], strict=False))
    assert any(kind == "notes" for e in shifts for kind, *_ in e.layout)
    evicted = {(e.start, e.end) for e in events if isinstance(e, ChunkEvicted)}
    assert evicted and evicted <= set(audit.evaluated)
    prefix = shifts[0].layout[0][2]
    assert result.evaluated_tokens <= 1.1 * result.document_tokens + prefix
    # each later window evaluates its own text, not the instruction or the notes again
    assert result.evaluated_tokens < result.prompt_tokens


def test_cache_that_cannot_shift_falls_back_with_its_reason(
    make_host: Hosts, make_counter: Counters, three_windows: str,
    streamed: tuple[list[Any], JobResult, Audit],
) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    audit = Audit(host, exact_counts=True)
    events, result = _run(CannotShift(host), three_windows, counter, audit)
    audit.raise_if_failed()
    fallback = [e for e in events if isinstance(e, RingFallback)]
    assert len(fallback) == 1 and "llama_memory_can_shift" in fallback[0].reason
    assert result.fallback == fallback[0].reason
    assert not any(isinstance(e, KVShifted) for e in events) and result.evictions == 0
    assert result.outputs[-1].step == "summary" and result.outputs[-1].text
    # re-prompting evaluates the summary so far again for every window
    assert result.evaluated_tokens > streamed[1].evaluated_tokens


@pytest.mark.unit
def test_shift_refusal_names_each_engine_that_cannot_stream() -> None:
    usage = KVUsage(N_CTX, 0, -1, -1, 0, True)

    class Local:
        def remove(self, start: int, end: int) -> None: ...

        def kv_usage(self) -> KVUsage:
            return usage

    class Server(Local):
        def kv_usage(self) -> KVUsage:
            return dataclasses.replace(usage, can_shift=False, reported_by="/slots")

    class NoRemove:
        def kv_usage(self) -> KVUsage:
            return usage

    assert shift_refusal(Local()) is None
    assert "server" in (shift_refusal(Server()) or "")
    assert "cannot remove" in (shift_refusal(NoRemove()) or "")


def test_semantic_windows_keep_the_chunks_they_share_in_the_cache(
    make_host: Hosts, make_counter: Counters
) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    whole = sample_document().read_text(encoding="utf-8")
    start = whole.index("\n\n", 60_000) + 2
    text = whole[start : whole.index("\n\n", start + 5_500)]

    class WideOverlap(Planner):
        """Windows that share half their tokens: at this context the default 15% is less than
        one of the Jargon File's chunks, so the windows would share none."""

        def plan(self, strategy: str, budget: int, opts: PlanOptions | None = None) -> Plan:
            return super().plan(strategy, budget, replace(opts or PlanOptions(), overlap=0.5))

    audit = Audit(host, exact_counts=True)
    events = list(summarize(host, text, counter, strategy="semantic", n_ctx=N_CTX,
                            max_tokens=MAX_TOKENS, audit=audit,
                            planner=WideOverlap(text, counter)))  # fmt: skip
    audit.raise_if_failed()
    result = events[-1].result
    assert result.finish_reason in ("stop", "length", "repetition")
    parts = [o for o in result.outputs if o.step.startswith("part")]
    spans = [set(o.source_spans) for o in parts]
    assert len(parts) >= 3 and all(a & b for a, b in itertools.pairwise(spans))
    shared = [e for e in events if isinstance(e, KVShifted) and e.moved > 0]
    assert len(shared) == len(parts) - 1, "each overlap moves down to the front of the cache"
    # the overlap is evaluated once: fewer document tokens evaluated than the windows hold
    held = sum(counter.count(text[a:b]) for o in parts for a, b in o.source_spans)
    once = sum(counter.count(text[a:b]) for a, b in set().union(*spans))
    assert result.evaluated_tokens - len(parts) * 40 < held and once < held
