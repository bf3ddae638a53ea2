"""Batched generation in lanes, on the real engine: the same replies as one call at a time (with
one lane, identical), every lane's cells read back from llama.cpp, cancel, bad requests, and the
jobs' map phase in lanes with its events."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.types import (
    ContextOverflowError,
    LaneDelta,
    LaneFinished,
    LanesFinished,
    LaneStarted,
    LoadSettings,
)
from app.core.jobs.tasks import (
    ChunkEvaluated,
    JobError,
    JobFinished,
    JobResult,
    KVStats,
    LanesStarted,
    PartialResult,
    TokenBatch,
    extract,
    summarize,
)
from app.core.paths import sample_document
from app.core.planning.frame import document_messages, split_at_document
from tests.engines import Counters, Hosts

N_CTX = 512


@pytest.fixture(scope="module")
def prompts(make_host: Hosts) -> tuple[list[int], list[list[int]]]:
    """A chat-template prefix and five document windows with the template's closing."""
    host = make_host(n_ctx=N_CTX, n_threads=1)
    rendered = host.apply_chat_template(document_messages("Summarize this part."))
    before, after = split_at_document(rendered)
    prefix = host.tokenize(before, add_special=True, parse_special=True)
    closing = host.tokenize(after, add_special=False, parse_special=True)
    text = sample_document().read_text(encoding="utf-8")
    parts = [text[i : i + 400] for i in range(0, 2000, 400)]
    return prefix, [host.tokenize(p, add_special=False) + closing for p in parts]


def _replies(events: list[object]) -> dict[int, str]:
    out: dict[int, str] = {}
    for ev in events:
        if isinstance(ev, LaneDelta):
            out[ev.index] = out.get(ev.index, "") + ev.text
    return out


def _one_at_a_time(host: EngineHost, prefix: list[int], suffixes: list[list[int]],
                   max_tokens: int) -> list[str]:  # fmt: skip
    host.reset()
    return [host.generate_text(prefix + s, max_tokens=max_tokens)[0] for s in suffixes]


def test_one_lane_gives_identical_replies(make_host: Hosts, prompts: tuple) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    prefix, suffixes = prompts
    expected = _one_at_a_time(host, prefix, suffixes, 12)
    events = list(host.generate_lanes(prefix, suffixes, lanes=1, max_tokens=12))
    replies = _replies(events)
    assert [replies[i] for i in range(len(suffixes))] == expected
    assert all(expected), "every prompt got a reply"
    started = [ev for ev in events if isinstance(ev, LaneStarted)]
    # the shared prefix is evaluated once: with the first prompt, never again
    assert started[0].prompt_eval_tokens == len(prefix) + len(suffixes[0])
    assert [ev.prompt_eval_tokens for ev in started[1:]] == [len(s) for s in suffixes[1:]]


def test_lanes_run_together_and_hold_their_own_cells(make_host: Hosts, prompts: tuple) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    prefix, suffixes = prompts
    events = list(host.generate_lanes(prefix, suffixes, lanes=3, max_tokens=16))
    last = events[-1]
    assert isinstance(last, LanesFinished) and last.lanes == 3 and last.finish_reason == "stop"
    started = [ev for ev in events if isinstance(ev, LaneStarted)]
    finished = [ev for ev in events if isinstance(ev, LaneFinished)]
    assert sorted(ev.index for ev in started) == list(range(len(suffixes)))
    assert sorted(ev.index for ev in finished) == list(range(len(suffixes)))
    assert {ev.lane for ev in started} == {0, 1, 2}
    # three prompts were in the cache before the first reply ended: they ran together
    first_end = next(i for i, ev in enumerate(events) if isinstance(ev, LaneFinished))
    assert sum(isinstance(ev, LaneStarted) for ev in events[:first_end]) == 3
    for ev in finished:
        stats = ev.stats
        assert 1 <= stats.completion_tokens <= 16
        assert stats.finish_reason in ("stop", "length")
        # llama.cpp's own count for the finished lane, before its cells were let go: the prompt
        # and the reply but for its last sampled token when cut by length
        assert ev.cells[ev.lane] == stats.n_past
        assert stats.n_past == stats.prompt_tokens + stats.completion_tokens - (
            stats.finish_reason == "length"
        )
    # lanes that were not finished still held at least the shared prefix
    assert all(c >= len(prefix) or c == 0 for ev in finished for c in ev.cells)
    replies = _replies(events)
    assert all(replies[i].strip() for i in range(len(suffixes)))


def test_lanes_leave_the_loaded_context_alone(make_host: Hosts, prompts: tuple) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    prefix, suffixes = prompts
    host.reset()
    host.evaluate(prefix)
    before = host.kv_tokens()
    list(host.generate_lanes(prefix, suffixes[:2], lanes=2, max_tokens=4))
    assert host.kv_tokens() == before


def test_bad_requests_get_one_sentence(make_host: Hosts, prompts: tuple) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    prefix, suffixes = prompts
    with pytest.raises(ValueError, match="prefix"):
        list(host.generate_lanes([], suffixes, lanes=2, max_tokens=4))
    with pytest.raises(ValueError, match="non-empty suffix"):
        list(host.generate_lanes(prefix, [suffixes[0], []], lanes=2, max_tokens=4))
    with pytest.raises(ValueError, match="lanes must be"):
        list(host.generate_lanes(prefix, suffixes, lanes=0, max_tokens=4))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        list(host.generate_lanes(prefix, [[10**9]], lanes=1, max_tokens=4))
    with pytest.raises(ContextOverflowError):
        list(host.generate_lanes(prefix, [suffixes[0] * 20], lanes=1, max_tokens=4))
    # the engine is fine afterwards
    assert _replies(list(host.generate_lanes(prefix, suffixes[:1], lanes=1, max_tokens=2)))


def test_cancel_ends_every_lane(make_host: Hosts, prompts: tuple) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    prefix, suffixes = prompts
    events: list[object] = []
    for ev in host.generate_lanes(prefix, suffixes * 4, lanes=2, max_tokens=64):
        events.append(ev)
        if isinstance(ev, LaneDelta) and len(events) > 4:
            threading.Thread(target=host.cancel).start()
    last = events[-1]
    assert isinstance(last, LanesFinished) and last.finish_reason == "cancelled"
    finished = [ev for ev in events if isinstance(ev, LaneFinished)]
    assert len(finished) < len(suffixes) * 4
    assert any(ev.stats.finish_reason == "cancelled" for ev in finished)
    assert _replies(list(host.generate_lanes(prefix, suffixes[:1], lanes=1, max_tokens=2)))


# ----- the jobs' map phase -----


def _job(host: EngineHost, counter: object, lanes: int | None, *, task: str = "summarize"):
    text = sample_document().read_text(encoding="utf-8")[:3200]  # two or three windows
    options = {"strategy": "map-reduce", "n_ctx": N_CTX, "lanes": lanes}
    if task == "extract":
        job = extract(host, text, counter, instruction="List the names.", max_tokens=12, **options)  # type: ignore[arg-type]
    else:
        job = summarize(host, text, counter, max_tokens=16, **options)  # type: ignore[arg-type]
    events = list(job)
    assert isinstance(events[-1], JobFinished)
    return events, events[-1].result


def test_map_reduce_in_one_lane_is_one_call_at_a_time(
    make_host: Hosts, make_counter: Counters
) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    counter = make_counter(host)
    _, sequential = _job(host, counter, None)
    events, batched = _job(host, counter, 1)
    assert any(isinstance(ev, LanesStarted) for ev in events)
    assert [o.text for o in batched.outputs] == [o.text for o in sequential.outputs]
    assert [o.step for o in batched.outputs] == [o.step for o in sequential.outputs]
    assert [o.source_spans for o in batched.outputs] == [o.source_spans for o in sequential.outputs]
    assert batched.completion_tokens == sequential.completion_tokens
    assert batched.prompt_tokens == sequential.prompt_tokens


def test_map_reduce_in_lanes_reports_each_lane(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    counter = make_counter(host)
    events, result = _job(host, counter, 3)
    _check_lane_events(events, result)
    partials = [ev for ev in events if isinstance(ev, PartialResult)]
    parts = [o for o in result.outputs if o.step.startswith("part ")]
    assert len(partials) >= len(parts) > 1
    assert [o.step for o in parts] == [f"part {i + 1}" for i in range(len(parts))]  # in order
    assert result.outputs[-1].step == "summary" and result.text


def test_extract_in_lanes(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    counter = make_counter(host)
    events, result = _job(host, counter, 2, task="extract")
    _check_lane_events(events, result)
    assert result.outputs[-1].step == "merged"


def _check_lane_events(events: list[object], result: JobResult) -> None:
    started = next(ev for ev in events if isinstance(ev, LanesStarted))
    lanes = {ev.lane for ev in events if isinstance(ev, ChunkEvaluated) and ev.lane is not None}
    assert lanes == set(range(started.lanes)) and started.lanes > 1
    lane_kv = [ev for ev in events if isinstance(ev, KVStats) and ev.lane is not None]
    assert len(lane_kv) == started.windows
    assert all(0 < ev.cells_used <= ev.n_ctx == N_CTX for ev in lane_kv)
    batches = [ev for ev in events if isinstance(ev, TokenBatch) and ev.lane is not None]
    assert {ev.lane for ev in batches} == lanes
    for lane in lanes:  # each lane's ring only moves forward
        versions = [ev.ring_version for ev in batches if ev.lane == lane]
        assert versions == sorted(versions)
    assert result.kv_peak_cells <= N_CTX
    assert result.finish_reason in ("stop", "length")


def test_lanes_out_of_range_is_refused(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX, n_threads=1)
    counter = make_counter(host)
    with pytest.raises(ValueError, match="lanes must be between 1 and"):
        list(summarize(host, "text", counter, strategy="map-reduce", n_ctx=N_CTX, lanes=0))  # type: ignore[arg-type]


def test_an_engine_crash_mid_lanes_keeps_the_text_so_far(
    model_path: Path, make_host: Hosts, make_counter: Counters
) -> None:
    counter = make_counter(make_host(n_ctx=N_CTX, n_threads=1))
    text = sample_document().read_text(encoding="utf-8")[:5000]
    crashing = EngineHost()
    try:
        crashing.load(model_path, LoadSettings(n_ctx=N_CTX, n_threads=1))
        events: list[object] = []
        job = summarize(crashing, text, counter, strategy="map-reduce", n_ctx=N_CTX,  # type: ignore[arg-type]
                        max_tokens=64, lanes=2)  # fmt: skip
        for ev in job:
            events.append(ev)
            batches = [e for e in events if isinstance(e, TokenBatch) and e.text.strip()]
            if len(batches) == 6 and crashing.pid is not None:
                os.kill(crashing.pid, signal.SIGKILL)
    finally:
        crashing.close()
    assert any(isinstance(ev, JobError) for ev in events)
    result = events[-1].result
    assert result.finish_reason == "error" and "engine" in (result.error or "")
    cut_short = [o for o in result.outputs if o.finish_reason == "error"]
    assert cut_short and all(o.text for o in cut_short)  # what each lane had said is kept
    for out in cut_short:
        said = "".join(e.text for e in events if isinstance(e, TokenBatch) and e.step == out.step)
        assert out.text == said.strip()
