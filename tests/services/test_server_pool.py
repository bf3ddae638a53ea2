"""ServerPool against real llama.cpp servers (tests/llama_servers.py, the default model): every
member connected at once, a member lost is probed with a backoff and taken back when it answers
(``on_change`` both times), a hung one does not answer a probe, a dead one at connect starts lost
and comes back when started again, and what cannot be a pool is refused in one sentence."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.engine.types import EngineError
from app.services.errors import BadRequest
from app.services.job_engine import JobEngine, ServerSpec
from app.services.server_pool import PoolMember, ServerPool
from tests.llama_servers import NO_LLAMA_SERVER, LlamaServer, have_llama_server, llama_servers
from tests.remote_server import free_port

pytestmark = pytest.mark.skipif(not have_llama_server(), reason=NO_LLAMA_SERVER)

CTX = 512
GEMMA = Path(__file__).resolve().parents[2] / "models" / "gemma-3-270m-q4_k_m.gguf"
FAST = (0.2, 1.0)  # the probes' backoff: quick, for a test


def pool_of(specs: list[ServerSpec], **options: Any) -> ServerPool:
    """A pool whose members are JobEngine sessions, as the faces make them."""
    return ServerPool(specs, new_session=JobEngine, **options)


@pytest.fixture(scope="module")
def servers(model_path: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[list[LlamaServer]]:  # fmt: skip
    with llama_servers(model_path, 2, tmp_path_factory.mktemp("logs"), parallel=2,
                       ctx_per_slot=CTX) as started:  # fmt: skip
        yield started


def _wait_until(check: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("the pool did not change in time")


def test_every_member_is_connected_with_its_slots(servers: list[LlamaServer]) -> None:
    pool = pool_of([ServerSpec(s.url) for s in servers])
    try:
        assert pool.connect() == []
        assert [m.state for m in pool.members] == ["up", "up"]
        assert [m.slots for m in pool.members] == [2, 2] and pool.n_ctx == CTX
        assert [m.url for m in pool.up()] == [s.url for s in servers]
        facts = pool.facts(pool.members[1])
        assert facts.engine == servers[1].url and facts.model_label.startswith(servers[1].url)
        sessions = [m.session for m in pool.members]
        assert sessions[0] is not sessions[1]  # each its own connection and counter
        assert all(s is not None and s.count("one two three") > 0 for s in sessions)
    finally:
        pool.close()


def test_a_lost_member_is_probed_and_taken_back(servers: list[LlamaServer]) -> None:
    seen: list[tuple[str, str]] = []
    pool = pool_of([ServerSpec(s.url) for s in servers], probe_backoff_s=FAST,
                      on_change=lambda m: seen.append((m.url, m.state)))  # fmt: skip
    try:
        pool.connect()
        member = pool.members[0]
        old = member.session
        pool.lost(member, "it broke off a reply")
        assert member.state == "lost" and member.reason == "it broke off a reply"
        assert member.session is None and member.lost == 1
        assert [m.url for m in pool.up()] == [servers[1].url]
        pool.lost(member, "again")  # lost once, whoever says it
        assert member.lost == 1 and member.reason == "it broke off a reply"
        _wait_until(lambda: member.state == "up")
        assert seen == [(member.url, "lost"), (member.url, "up")]
        assert member.reason == "" and member.session is not None and member.session is not old
        assert member.session.count("one two three") > 0
    finally:
        pool.close()


def test_a_hung_server_does_not_answer_a_probe(servers: list[LlamaServer]) -> None:
    pool = pool_of([ServerSpec(s.url, timeout_s=2) for s in servers])
    try:
        pool.connect()
        member = pool.members[1]
        servers[1].stop()
        try:
            assert not pool.answers(member)
        finally:
            servers[1].cont()
        assert pool.answers(member)
    finally:
        pool.close()


def test_a_dead_member_starts_lost_and_comes_back_when_started(model_path: Path,
                                                               tmp_path: Path) -> None:  # fmt: skip
    with llama_servers(model_path, 2, tmp_path, parallel=1, ctx_per_slot=CTX) as two:
        two[1].kill()
        changed: list[PoolMember] = []
        pool = pool_of([ServerSpec(s.url, retries=0) for s in two], probe_backoff_s=FAST,
                          on_change=changed.append)  # fmt: skip
        try:
            [warning] = pool.connect()
            assert warning.startswith(f"{two[1].url} does not answer (")
            assert [m.state for m in pool.members] == ["up", "lost"]
            assert pool.members[1].lost == 1
            two[1].start_again()  # waits for /health: the probe may find it back meanwhile
            _wait_until(lambda: pool.members[1].state == "up")
            assert changed == [pool.members[1]] and pool.members[1].slots == 1
        finally:
            pool.close()


def test_what_cannot_be_a_pool_is_refused_in_one_sentence(servers: list[LlamaServer]) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match="cannot reach the server"):
        pool_of([ServerSpec(nobody, retries=0)]).connect()
    with pytest.raises(BadRequest, match="is named twice in the pool"):
        pool_of([ServerSpec(servers[0].url), ServerSpec(servers[0].url + "/")])
    with pytest.raises(BadRequest, match="does not serve a model named 'other'"):
        pool_of([ServerSpec(s.url, model="other") for s in servers]).connect()


def test_two_models_under_one_name_are_told_apart_by_their_tokens(
    model_path: Path, tmp_path: Path
) -> None:
    """Servers may list the same model id for different models (an alias): the probe text's
    tokens tell them apart."""
    with (
        llama_servers(model_path, 1, tmp_path / "a", parallel=1, ctx_per_slot=CTX,
                      alias="same") as one,
        llama_servers(GEMMA, 1, tmp_path / "b", parallel=1, ctx_per_slot=CTX,
                      alias="same") as other,
    ):  # fmt: skip
        pool = pool_of([ServerSpec(one[0].url), ServerSpec(other[0].url)])
        with pytest.raises(BadRequest, match="the servers' tokenizers disagree") as refused:
            pool.connect()
    assert one[0].url in str(refused.value) and other[0].url in str(refused.value)
    assert all(m.session is None for m in pool.members)  # closed again
