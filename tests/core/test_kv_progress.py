"""Live figures while a model call runs: the engine reports its KV cache and how far the prompt
is between llama_decode slices, and a job turns those reports into events the faces show."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from app.core.engine.decoding import ReportGate
from app.core.engine.host import EngineHost
from app.core.engine.types import LoadSettings
from app.core.jobs.tasks import (
    ChunkEvaluated,
    EvalProgress,
    JobFinished,
    KVLive,
    KVStats,
    PassStarted,
    TokenBatch,
    summarize,
)
from app.core.paths import sample_document
from app.core.tokens import exact_counter, host_tokenize
from tests.core.fake_engine import N_CTX, FakeCounter, ReportingEngine

# ----- the pacing of reports -----


@pytest.mark.unit
def test_reports_are_at_most_one_per_gap_but_the_last_always_goes() -> None:
    gate = ReportGate(0.05)
    times = [0.0, 0.01, 0.049, 0.06, 0.07, 0.2]
    assert [gate.ready(t) for t in times] == [True, False, False, True, False, True]
    assert gate.ready(0.201, last=True)


# ----- a job turns the engine's reports into events -----


@pytest.mark.unit
def test_a_call_streams_live_kv_and_prompt_progress_before_its_reply() -> None:
    text = "Lorem ipsum dolor sit amet. " * 400
    engine = ReportingEngine()
    counter = FakeCounter(engine)
    events = list(summarize(engine, text, counter, strategy="head", n_ctx=N_CTX,  # type: ignore[arg-type]
                            max_tokens=4))  # fmt: skip
    first_token = next(i for i, ev in enumerate(events) if isinstance(ev, TokenBatch))
    before = events[:first_token]
    live = [ev.cells_used for ev in before if isinstance(ev, KVLive)]
    progress = [ev for ev in before if isinstance(ev, EvalProgress)]
    result = events[-1].result
    assert len(live) == 5 and live == sorted(live) and live[-1] == result.prompt_tokens
    assert [p.evaluated for p in progress] == [0, *(live[1:])]
    assert progress[-1].evaluated == progress[-1].total
    # chunks are in the KV stage as soon as llama.cpp holds them, not only at the first token
    evaluated_at = [i for i, ev in enumerate(before) if isinstance(ev, ChunkEvaluated)]
    last_report = max(i for i, ev in enumerate(before) if isinstance(ev, EvalProgress))
    assert evaluated_at and evaluated_at[0] < last_report
    after = events[first_token:]
    assert any(isinstance(ev, KVLive) for ev in after)  # and while it generates
    assert any(isinstance(ev, KVStats) for ev in after)  # the call's own figures close it


# ----- the real engine -----

# A ~2k-token prompt on one thread (the smallest slices: some 60 of 32 tokens) takes about 11 s
# on the project's two-core machine; the issue's ~10k tokens (a context of 10,240 holds them)
# take 68 s there on two threads (100 s on one), the slowest test of the suite, a quarter of the
# default per-test timeout; it has a longer one of its own, because a timeout ends the whole run
# and this one test ran past 300 s on a machine busy with another suite. Its two threads need
# two cores: it runs alone, after the parallel part of `make test` (`serial`, tests/tiers.py).
CASES = [
    pytest.param(2_048, 12_000, 1_900, 1, id="2k"),
    pytest.param(10_240, 60_000, 9_000, 2, id="10k",
                 marks=[pytest.mark.timeout(900), pytest.mark.serial]),
]


@pytest.mark.parametrize(("n_ctx", "chars", "at_least", "threads"), CASES)
def test_a_long_prompt_reports_the_cache_filling_as_llama_cpp_holds_it(
    model_path: Path, n_ctx: int, chars: int, at_least: int, threads: int
) -> None:
    with EngineHost() as host:
        host.load(model_path, LoadSettings(n_ctx=n_ctx, n_threads=threads))
        counter = exact_counter(model_path, host_tokenize(host))
        text = sample_document().read_text(encoding="utf-8")[:chars]  # more than the context
        events = list(summarize(host, text, counter, strategy="head", n_ctx=n_ctx,
                                max_tokens=2))  # fmt: skip
        held_after = host.kv_usage().cells_used
    done = events[-1]
    assert isinstance(done, JobFinished)
    result = done.result
    assert result.prompt_tokens >= at_least
    first_token = next(i for i, ev in enumerate(events) if isinstance(ev, TokenBatch))
    before = events[:first_token]
    cells = [ev.cells_used for ev in before if isinstance(ev, KVLive)]
    changes = sum(a != b for a, b in itertools.pairwise(cells))
    assert changes >= 4, cells
    assert cells == sorted(cells)
    assert cells[-1] == result.prompt_tokens  # the whole prompt, by llama.cpp's positions
    live = [ev for ev in events if isinstance(ev, KVLive)]
    assert all(ev.n_ctx == n_ctx and 0 <= ev.cells_used <= n_ctx for ev in live)
    progress = [ev for ev in before if isinstance(ev, EvalProgress)]
    assert [p.evaluated for p in progress] == sorted(p.evaluated for p in progress)
    assert progress[-1].evaluated == progress[-1].total == result.evaluated_tokens
    assert progress[-1].tokens_per_s > 0
    # the gauges redraw from these: at least 4 a second while the prompt is evaluated (by the
    # engine's own clock), most of them from inside a slice, counted from llama.cpp's nodes
    assert len(progress) - 1 >= 4 * progress[-1].seconds, [p.seconds for p in progress]
    assert not any(isinstance(ev, PassStarted) for ev in events)  # one pass: no windows
    # after the reply, llama.cpp holds the prompt and the reply but its last token
    stats = [ev for ev in events if isinstance(ev, KVStats)]
    assert stats[-1].cells_used == result.prompt_tokens + result.completion_tokens - 1
    assert held_after == stats[-1].cells_used


@pytest.mark.parametrize("strategy", ["rolling", "map-reduce"])
def test_a_multi_pass_job_says_which_window_of_how_many_runs(strategy: str) -> None:
    engine = ReportingEngine()
    text = "".join(f"Paragraph {i} says something of its own. " * 12 + "\n\n" for i in range(40))
    events = list(summarize(engine, text, FakeCounter(engine), strategy=strategy, n_ctx=512,  # type: ignore[arg-type]
                            max_tokens=16))  # fmt: skip
    passes = [ev for ev in events if isinstance(ev, PassStarted)]
    windows = [p for p in passes if not p.step.startswith("combine")]
    assert len(windows) >= 3
    assert [p.index for p in windows] == list(range(1, len(windows) + 1))
    assert {p.count for p in windows} == {len(windows)}
    first_window = events.index(windows[0])
    assert any(isinstance(ev, EvalProgress) for ev in events[first_window:])
