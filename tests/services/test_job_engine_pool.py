"""One job over a pool of two real llama-servers (JobEngine.connect_pool): the job runs on the
first server up, and when that server is killed (SIGKILL) while it generates, the job runs again
from its start on the second: a ServerLost event says so, and the one result is whole (finish
reason stop or length), never the reply the dead server cut. Later jobs go to the server left;
compare's strategies keep their results (a strategy cut runs again on the other server, the ones
before it stand); unloading closes the pool; with every server lost the error goes out."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.engine.types import SamplingSettings
from app.core.jobs.events import (
    JobError,
    JobFinished,
    ServerLost,
    StrategiesFinished,
    StrategyStarted,
    TokenBatch,
)
from app.core.paths import sample_document
from app.services.errors import BadRequest
from app.services.job_engine import JobEngine, ServerSpec
from app.services.jobs import JobSpec
from tests.llama_servers import NO_LLAMA_SERVER, LlamaServer, have_llama_server, llama_servers

pytestmark = [
    pytest.mark.serial,  # two servers at once: every core
    pytest.mark.skipif(not have_llama_server(), reason=NO_LLAMA_SERVER),
]

MAX_TOKENS = 200  # a reply long enough to be cut in the middle
WHOLE = ("stop", "length")
# a reply that runs to its end or its length, never one the app cut for looping
LONG = JobSpec("summarize", ("head",), max_tokens=MAX_TOKENS,
               sampling=SamplingSettings(stop_on_repetition=False))  # fmt: skip


@pytest.fixture(scope="module")
def text() -> str:
    return sample_document().read_text(encoding="utf-8")[:2500]


@pytest.fixture
def servers(model_path: Path, tmp_path: Path) -> Iterator[list[LlamaServer]]:
    with llama_servers(model_path, 2, tmp_path / "logs", parallel=1, ctx_per_slot=1024) as started:
        yield started


def _connected(servers: list[LlamaServer]) -> JobEngine:
    session = JobEngine()
    session.connect_pool([ServerSpec(s.url, timeout_s=60, retries=1) for s in servers])
    return session


def test_a_server_killed_mid_reply_costs_the_job_nothing(
    servers: list[LlamaServer], text: str
) -> None:
    a, b = servers
    with _connected(servers) as session:
        pool = session.pool
        assert pool is not None and [m.url for m in pool.up()] == [a.url, b.url]
        assert session.server is not None and session.server.url == a.url
        assert session.loaded is not None and session.n_ctx == pool.n_ctx == 1024
        assert session.facts().engine == a.url and session.counter is not None

        run = session.run(text, LONG)
        events: list[object] = []
        for ev in run:
            if isinstance(ev, TokenBatch) and not any(isinstance(e, TokenBatch) for e in events):
                a.kill()  # the first tokens are out: the reply is cut in the middle
            events.append(ev)

        lost = [ev for ev in events if isinstance(ev, ServerLost)]
        assert [(ev.url, ev.moved_to) for ev in lost] == [(a.url, b.url)]
        assert lost[0].reason
        # the lost server's error is no event, its cut reply no result
        assert not [ev for ev in events if isinstance(ev, JobError)]
        finished = [ev.result for ev in events if isinstance(ev, JobFinished)]
        assert len(finished) == 1 and finished[0].error is None
        assert finished[0].finish_reason in WHOLE and finished[0].text.strip()
        assert finished[0].completion_tokens > 0
        # the new run's events follow the loss: its strategy starts again, then its tokens
        after = events[events.index(lost[0]) + 1 :]
        assert isinstance(after[0], StrategyStarted) and any(
            isinstance(e, TokenBatch) for e in after
        )
        assert isinstance(events[-1], StrategiesFinished) and events[-1].results == (finished[0],)
        assert run.outcome.results == finished
        assert run.outcome.engine is not None and run.outcome.engine.engine == b.url

        # the pool's state: A lost (probed in the background), the job moved to B
        first, second = pool.members
        assert first.state == "lost" and first.lost == 1 and first.moved == 1
        assert second.state == "up" and second.moved == 0
        assert session.server is not None and session.server.url == b.url
        assert session.facts().engine == b.url

        # the next job goes to the server left, with no loss said
        again = list(session.run(text, JobSpec("summarize", ("tail",), max_tokens=16)))
        assert not [ev for ev in again if isinstance(ev, ServerLost)]
        results = [ev.result for ev in again if isinstance(ev, JobFinished)]
        assert len(results) == 1 and results[0].error is None

        session.unload()
        assert session.pool is None and session.server is None and session.counter is None


def test_compare_over_a_pool_keeps_every_strategys_result(
    servers: list[LlamaServer], text: str
) -> None:
    with _connected(servers) as session:
        spec = JobSpec("summarize", ("head", "tail"), max_tokens=24)
        run = session.run(text, spec)
        events: list[object] = list(run)
        assert not [ev for ev in events if isinstance(ev, ServerLost)]
        started = [ev.strategy for ev in events if isinstance(ev, StrategyStarted)]
        assert started == ["head", "tail"]
        last = events[-1]
        assert isinstance(last, StrategiesFinished)
        assert [r.strategy for r in last.results] == ["head", "tail"]
        assert all(r.error is None and r.finish_reason in (*WHOLE, "repetition")
                   for r in last.results)  # fmt: skip
        assert [r.strategy for r in run.outcome.results] == ["head", "tail"]

        # the server lost in the second strategy: the first's result stands, the second runs
        # again from its start on the other server, and the end holds both, whole
        a, b = servers
        events.clear()
        for ev in session.run(text, replace(LONG, strategies=("head", "tail"), max_tokens=120)):
            if (
                isinstance(ev, TokenBatch)
                and StrategyStarted("tail") in events
                and not any(isinstance(e, ServerLost) for e in events)
            ):
                a.kill()
            events.append(ev)
        started = [ev.strategy for ev in events if isinstance(ev, StrategyStarted)]
        assert started == ["head", "tail", "tail"]
        lost = [ev for ev in events if isinstance(ev, ServerLost)]
        assert [(ev.url, ev.moved_to) for ev in lost] == [(a.url, b.url)]
        finished = [ev.result for ev in events if isinstance(ev, JobFinished)]
        assert [r.strategy for r in finished] == ["head", "tail"]
        assert all(r.error is None and r.finish_reason in WHOLE for r in finished)
        last = events[-1]
        assert isinstance(last, StrategiesFinished) and list(last.results) == finished


def test_what_needs_the_local_engine_is_refused_on_a_pool(
    servers: list[LlamaServer], text: str
) -> None:
    with _connected(servers) as session:
        with pytest.raises(BadRequest, match="audit"):
            session.run(text, JobSpec("summarize", ("head",), audit=True))
        kept = session.run(text, JobSpec("summarize", ("head",), max_tokens=8, keep_kv=True))
        assert kept.outcome.spec.keep_kv is False  # a server keeps no KV state
        assert next(ev for ev in kept if isinstance(ev, JobFinished)).result.error is None
        assert session.model_info is None and session.engine_pid is None


def test_with_every_server_lost_the_error_goes_out_as_it_came(
    servers: list[LlamaServer], text: str
) -> None:
    a, b = servers
    with _connected(servers) as session:
        b.kill()  # gone before the job: the pool learns it only when the job moves there
        events: list[object] = []
        for ev in session.run(text, LONG):
            if isinstance(ev, TokenBatch) and not any(isinstance(e, TokenBatch) for e in events):
                a.kill()
            events.append(ev)
        assert [(ev.url, ev.moved_to) for ev in events if isinstance(ev, ServerLost)] == [
            (a.url, b.url)
        ]
        finished = [ev.result for ev in events if isinstance(ev, JobFinished)]
        assert len(finished) == 1 and finished[0].error and finished[0].finish_reason == "error"
        assert len([ev for ev in events if isinstance(ev, JobError)]) == 1
        assert session.pool is not None and session.pool.up() == []
        assert session.counter is None and session.server is None
