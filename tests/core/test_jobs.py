"""Jobs on the real engine: events in order, the ring in step, KV never past n_ctx."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.types import EngineCrashedError
from app.core.jobs.tasks import (
    ASK,
    ASK_PART,
    ROLLING,
    SUMMARIZE,
    SUMMARIZE_PART,
    ChunkEvaluated,
    JobError,
    JobFinished,
    JobResult,
    KVStats,
    PartialResult,
    PlanReady,
    StrategiesFinished,
    StrategyStarted,
    TokenBatch,
    ask,
    extract,
    planning,
    run_strategies,
    summarize,
)
from app.core.paths import sample_document
from app.core.planning.strategies import STRATEGIES, Planner
from tests.engines import Counters, Hosts

N_CTX = 512


def _text(chars: int) -> str:
    return sample_document().read_text(encoding="utf-8")[:chars]


def _run(host: EngineHost, counter: object, text: str, strategy: str, max_tokens: int):
    events = list(summarize(host, text, counter, strategy=strategy, n_ctx=N_CTX,  # type: ignore[arg-type]
                            max_tokens=max_tokens))  # fmt: skip
    assert isinstance(events[-1], JobFinished)
    return events, events[-1].result


def _check(events: list[object], result: JobResult, text: str) -> None:
    assert isinstance(events[0], PlanReady)
    assert result.kv_peak_cells <= N_CTX
    assert all(ev.cells_used <= N_CTX for ev in events if isinstance(ev, KVStats))
    versions = [ev.ring_version for ev in events if isinstance(ev, TokenBatch)]
    assert versions == sorted(versions)
    for out in result.outputs:
        for start, end in out.source_spans:
            assert 0 <= start < end <= len(text)
    # a normal end: the 135M model's greedy reply may also loop and be stopped (repetition)
    assert result.finish_reason in ("stop", "length", "repetition")
    assert result.text, "a summary was produced"


def test_head_summary_records_sources_and_kv(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    text = _text(9000)
    events, result = _run(host, counter, text, "head", 48)
    _check(events, result, text)
    plan = events[0]
    assert isinstance(plan, PlanReady) and plan.kept_tokens <= plan.budget < plan.total_tokens
    assert result.truncated  # head drops the rest, and says so
    evaluated = [ev for ev in events if isinstance(ev, ChunkEvaluated)]
    assert evaluated and evaluated[0].start == 0 and evaluated[0].kv_start > 0
    assert result.outputs[-1].source_spans[0][0] == 0


def test_map_reduce_reaches_every_part(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    text = _text(3500)
    events, result = _run(host, counter, text, "map-reduce", 16)
    _check(events, result, text)
    partials = [ev for ev in events if isinstance(ev, PartialResult)]
    assert len(partials) >= 2 and not result.truncated
    covered = sorted(s for ev in partials for s in ev.sources)
    assert covered[0][0] == 0 and covered[-1][1] == len(text)


def test_map_reduce_parts_stay_within_a_small_reply_reserve(
    make_host: Hosts, make_counter: Counters
) -> None:
    """Windows are planned with the reply's room kept free, so no part may answer at length
    (a part of 32 tokens after a window planned for 8 overflowed the context)."""
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    text = _text(3500)
    events, result = _run(host, counter, text, "map-reduce", 8)
    _check(events, result, text)
    parts = [o for o in result.outputs if o.step.startswith("part")]
    assert len(parts) >= 2
    assert all(counter.count(o.text) <= 8 + 1 for o in parts)  # type: ignore[attr-defined]


def test_rolling_carries_a_summary_through(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    text = _text(3500)
    events, result = _run(host, counter, text, "rolling", 16)
    _check(events, result, text)
    assert result.outputs[-1].step == "summary" and len(result.outputs) >= 3


def test_refuse_refuses_with_the_numbers(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    _, result = _run(host, counter, _text(9000), "refuse", 48)
    assert result.refused and "budget is" in result.refused and result.finish_reason == "error"
    assert result.completion_tokens == 0


@pytest.mark.slow
@pytest.mark.timeout(900)  # the multi-pass strategies make dozens of model calls
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_through_the_cli_on_a_document_ten_times_the_context(
    tmp_path: Path, make_host: Hosts, make_counter: Counters, strategy: str
) -> None:
    counter = make_counter(make_host(n_ctx=N_CTX))
    text = _text(24_000)
    assert counter.count(text) >= 10 * N_CTX  # type: ignore[attr-defined]
    doc = tmp_path / "long.txt"
    doc.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", str(doc), "--task", "summarize",
         "--strategy", strategy, "--n-ctx", str(N_CTX), "--max-tokens", "96", "--json"],
        capture_output=True, text=True, timeout=880, check=False,
    )  # fmt: skip
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["type"] == "done" and done["n_ctx"] == N_CTX
    assert done["kv_peak_cells"] <= N_CTX
    if strategy == "refuse":
        assert proc.returncode == 4 and "budget is" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert done["finish_reason"] in ("stop", "length", "repetition")
    assert done["outputs"][-1]["text"]
    assert done["truncated"] == (strategy not in ("rolling", "semantic", "map-reduce"))


def test_second_question_reuses_the_evaluated_document(
    make_host: Hosts, make_counter: Counters
) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    text = _text(6000)
    questions = ["Who edited the Jargon File?", "What is a hacker?"]
    events = list(ask(host, text, counter, questions=questions, strategy="head",  # type: ignore[arg-type]
                      n_ctx=N_CTX, max_tokens=24))  # fmt: skip
    result = events[-1].result  # type: ignore[attr-defined]
    assert [o.step for o in result.outputs] == ["answer 1", "answer 2"]
    first, second = result.ttft_s
    assert second < first / 3, "the second question evaluated only itself"
    assert result.kv_peak_cells <= N_CTX


def test_extract_merges_parts_in_document_order(make_host: Hosts, make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    text = _text(3500)
    events = list(extract(host, text, counter, instruction="List the names in this text.",  # type: ignore[arg-type]
                          strategy="map-reduce", n_ctx=N_CTX, max_tokens=12))  # fmt: skip
    result = events[-1].result  # type: ignore[attr-defined]
    parts = [o for o in result.outputs if o.step.startswith("part")]
    assert len(parts) >= 2 and result.outputs[-1].step == "merged"
    starts = [p.source_spans[0][0] for p in parts]
    assert starts == sorted(starts) and starts[0] == 0


def test_run_strategies_runs_each_strategy_on_one_engine(
    make_host: Hosts, make_counter: Counters
) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    events = list(run_strategies(host, _text(3000), counter, task="summarize",  # type: ignore[arg-type]
                                 strategies=["head", "tail"], n_ctx=N_CTX,
                                 max_tokens=16))  # fmt: skip
    assert [e.strategy for e in events if isinstance(e, StrategyStarted)] == ["head", "tail"]
    done = events[-1]
    assert isinstance(done, StrategiesFinished)
    assert [r.strategy for r in done.results] == ["head", "tail"]
    assert all(r.kv_peak_cells <= N_CTX and r.outputs for r in done.results)


def test_run_strategies_refuses_a_planner_for_another_text(make_host: Hosts,
                                                           make_counter: Counters) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    planner = Planner(_text(3000), counter)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="another text"):
        next(run_strategies(host, _text(4000), counter, task="summarize", strategies=["head"],  # type: ignore[arg-type]
                            planner=planner, n_ctx=N_CTX))  # fmt: skip


def test_planning_names_the_instruction_and_reserve_of_each_job(
    make_host: Hosts, make_counter: Counters
) -> None:
    counter = make_counter(make_host(n_ctx=N_CTX))

    def ask(strategy: str) -> tuple[str, int]:
        return planning("ask", strategy, counter, max_tokens=64, questions=["Why?", "And who?"])  # type: ignore[arg-type]

    assert planning("summarize", "head", counter, max_tokens=64) == (SUMMARIZE, 64)  # type: ignore[arg-type]
    assert planning("summarize", "map-reduce", counter, max_tokens=64) == (SUMMARIZE_PART, 64)  # type: ignore[arg-type]
    assert planning("summarize", "rolling", counter, max_tokens=64) == (ROLLING, 144)  # type: ignore[arg-type]
    room = counter.count("\n\nQuestion: And who?") + 2  # type: ignore[attr-defined]
    assert ask("entropy") == (ASK, 64 + room) and ask("semantic") == (ASK_PART, 64 + room)
    assert planning("extract", "tail", counter, max_tokens=64, instruction="List names.") == (  # type: ignore[arg-type]
        "List names.", 64)  # fmt: skip


def test_an_engine_failure_mid_job_keeps_the_outputs_so_far(
    make_host: Hosts, make_counter: Counters
) -> None:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)

    class Failing:
        """The real engine until its second generation, which fails as a crash would."""

        def __init__(self) -> None:
            self.calls = 0

        def __getattr__(self, name: str) -> object:
            return getattr(host, name)

        def generate(self, prompt, **kwargs):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 2:
                raise EngineCrashedError("the engine process died while generating: SIGKILL")
            return host.generate(prompt, **kwargs)

    events = list(summarize(Failing(), _text(6000), counter, strategy="map-reduce",  # type: ignore[arg-type]
                            n_ctx=N_CTX, max_tokens=16))  # fmt: skip
    errors = [e for e in events if isinstance(e, JobError)]
    result = events[-1].result  # type: ignore[attr-defined]
    assert errors and "SIGKILL" in errors[0].message
    assert result.finish_reason == "error" and "SIGKILL" in (result.error or "")
    assert len(result.outputs) == 1  # the first part's summary is kept
