"""Context edges on the real engine: prompts of n_ctx−1, n_ctx, n_ctx+1 and 10×n_ctx tokens,
reply reserves of 0 and of the whole context, n_ctx above the model's training context and too
large for memory, a document of one 5 MB line, a budget smaller than one sentence.

Every case either works within the limit — each model call's prompt plus reply fits n_ctx, the
KV peak is at most n_ctx, and ``truncated`` is set whenever part of the document never reached
the model — or is refused, before any model call, with a sentence whose numbers are right; the
engine child survives every case. Documents are real text from tests/data, repeated and cut to
the token with the model's exact counter (tests/edge_docs.py), and the boundaries come from the
job's own prompt frame and reply reserve (``planning``).

`make test` runs the quick cases; ``SLOW=1 .venv/bin/pytest tests/core/test_context_edges.py``
runs the whole matrix (every strategy × every size × summarize and ask, the three 5 MB lines
under every strategy). On a 5 MB line the multi-pass strategies (rolling, semantic, map-reduce)
are only planned: running them would take thousands of model calls on a CPU.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.core.engine.gguf import inspect_model
from app.core.engine.host import EngineHost
from app.core.engine.types import (
    Finished,
    GenerationStats,
    InsufficientMemoryError,
    LoadSettings,
)
from app.core.jobs.tasks import (
    ChunkEvaluated,
    JobError,
    JobFinished,
    JobResult,
    KVStats,
    PlanReady,
    ask,
    planning,
    summarize,
)
from app.core.planning.frame import model_frame
from app.core.planning.plan import Plan
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import (
    MULTI_PASS,
    QUESTION_STRATEGIES,
    STRATEGIES,
    Planner,
    PlanOptions,
    plan_for,
)
from app.core.telemetry import memory_preflight
from app.core.tokens import TokenCounter, exact_counter, host_tokenize
from tests.edge_cases import Edges
from tests.edge_docs import LONG_SENTENCE, ONE_LINE_KINDS, one_line, prose, text_of_tokens
from tests.engines import Counters, Hosts

N_CTX = 256  # the smallest context llama.cpp makes (it rounds up to a multiple of 256)
QUESTION = "Who tells this story?"
SENTENCE_QUESTION = "When does the drizzly November make him go to sea?"  # LONG_SENTENCE's words
SINGLE_PASS = tuple(s for s in STRATEGIES if s not in MULTI_PASS)
TRAIN_CTX = 8192  # SmolLM2-135M's training context


@dataclass
class Bench:
    """The engine loaded at n_ctx 256, its exact counter, and the 5 MB lines' planners."""

    host: EngineHost
    counter: TokenCounter
    model_path: Path
    planners: dict[str, Planner] = field(default_factory=dict)

    def frame(self, instruction: str) -> int:
        return model_frame(self.model_path, task=instruction).tokens(self.counter)

    def boundary(self, task: str, strategy: str, max_tokens: int) -> tuple[int, int]:
        """(frame tokens, document budget) of the job's first call, from its own instruction
        and reply reserve."""
        questions = [QUESTION] if task == "ask" else []
        instruction, reserve = planning(task, strategy, self.counter, max_tokens=max_tokens,
                                        questions=questions)  # fmt: skip
        frame = self.frame(instruction)
        return frame, N_CTX - frame - reserve

    def doc(self, tokens: int) -> str:
        return text_of_tokens(self.counter, tokens)

    def line_planner(self, kind: str) -> Planner:
        if kind not in self.planners:
            self.planners[kind] = Planner(one_line(kind), self.counter)
        return self.planners[kind]

    def run(self, text: str, strategy: str, **options: Any) -> Run:
        return run_job(self.host, self.counter, text, strategy, **options)


@pytest.fixture(scope="module")
def edge_bench(make_host: Hosts, make_counter: Counters, model_path: Path) -> Bench:
    # One thread: on a shared two-core machine two threads wait on each other (2-4x slower).
    host = make_host(n_ctx=N_CTX, n_threads=1)
    assert host.model is not None and host.model.n_ctx == N_CTX
    return Bench(host, make_counter(host), model_path)


# ----- helpers --------------------------------------------------------------------------------


@dataclass
class Call:
    prompt: int
    max_tokens: int
    stats: GenerationStats | None = None


class Recorder:
    """The real engine host, with every model call recorded (prompt length, reply allowance and
    llama.cpp's figures); everything else goes straight to the host."""

    def __init__(self, host: EngineHost) -> None:
        self._host = host
        self.calls: list[Call] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def generate(self, prompt: Sequence[int], **kwargs: Any) -> Iterator[Any]:
        call = Call(len(prompt), kwargs.get("max_tokens", 256))
        self.calls.append(call)
        for ev in self._host.generate(prompt, **kwargs):
            if isinstance(ev, Finished):
                call.stats = ev.stats
            yield ev


@dataclass
class Run:
    events: list[Any]
    result: JobResult
    calls: list[Call]
    plan: PlanReady | None = None
    covered: list[tuple[int, int]] = field(default_factory=list)


def run_job(
    host: EngineHost,
    counter: TokenCounter,
    text: str,
    strategy: str,
    *,
    task: str = "summarize",
    max_tokens: int = 1,
    n_ctx: int = N_CTX,
    planner: Planner | None = None,
) -> Run:
    rec = Recorder(host)
    options: dict[str, Any] = {"strategy": strategy, "n_ctx": n_ctx, "max_tokens": max_tokens,
                               "planner": planner}  # fmt: skip
    if task == "ask":
        events = list(ask(rec, text, counter, questions=[QUESTION], **options))  # type: ignore[arg-type]
    else:
        events = list(summarize(rec, text, counter, **options))  # type: ignore[arg-type]
    assert isinstance(events[-1], JobFinished), "a job always ends with JobFinished"
    plans = [ev for ev in events if isinstance(ev, PlanReady)]
    spans = sorted((ev.start, ev.end) for ev in events if isinstance(ev, ChunkEvaluated))
    covered: list[tuple[int, int]] = []
    for a, b in spans:
        if covered and a <= covered[-1][1]:
            covered[-1] = (covered[-1][0], max(covered[-1][1], b))
        else:
            covered.append((a, b))
    return Run(events, events[-1].result, rec.calls, plans[0] if plans else None, covered)


_PREFLIGHT = re.compile(
    r"prompt needs ([\d,]+) tokens, context is ([\d,]+) \(reply reserve ([\d,]+)\)"
)
_REFUSE = re.compile(r"the document's chunks need ([\d,]+) tokens; the budget is ([\d,]+)")


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def check_refusal(run: Run, n_ctx: int) -> None:
    """Refused before anything reached the model, in one sentence whose numbers are right."""
    result = run.result
    message = result.refused or ""
    assert result.finish_reason == "error" and result.error is None
    assert not run.calls, "a refusal comes before any model call"
    assert "\n" not in message
    if m := _PREFLIGHT.search(message):
        needed, ctx, reserve = (_num(g) for g in m.groups())
        assert ctx == n_ctx, message
        assert needed + reserve > n_ctx, f"refused what fits: {message}"
    elif m := _REFUSE.search(message):
        needed, budget = (_num(g) for g in m.groups())
        assert run.plan is not None and budget == run.plan.budget, message
        assert needed == run.plan.total_tokens and needed > budget, message
    else:
        raise AssertionError(f"a refusal without the numbers: {message!r}")


def check_within(run: Run, text: str, n_ctx: int) -> None:
    """Worked: every call inside the context, the KV peak too, and no silent cut."""
    result = run.result
    assert result.error is None, f"the job failed: {result.error}"
    assert not [ev for ev in run.events if isinstance(ev, JobError)]
    # a reply may loop (the loop stop ends it): which words it has is this machine's greedy text
    assert result.finish_reason in ("stop", "length", "repetition"), result.finish_reason
    assert run.calls and result.outputs
    for call in run.calls:
        assert call.prompt + call.max_tokens <= n_ctx, f"a call asked for {call} in {n_ctx}"
        assert call.stats is not None
        assert call.stats.prompt_tokens + call.stats.completion_tokens <= n_ctx
        assert call.stats.n_past <= n_ctx
    assert result.kv_peak_cells <= n_ctx
    assert all(ev.cells_used <= n_ctx for ev in run.events if isinstance(ev, KVStats))
    if run.covered != [(0, len(text))]:
        assert result.truncated, "part of the document never reached the model, unflagged"


def check_either(run: Run, text: str, n_ctx: int) -> str:
    if run.result.refused:
        check_refusal(run, n_ctx)
        return "refused"
    check_within(run, text, n_ctx)
    return "worked"


def check_engine_survives(host: EngineHost) -> None:
    assert host.alive and host.model is not None
    _reply, finished = host.generate_text(host.tokenize("Hello"), max_tokens=1)
    assert finished.stats.finish_reason in ("stop", "length")
    assert finished.stats.completion_tokens <= 1


def check_plan(plan: Plan, text: str) -> None:
    """Chunks partition the text; kept and dropped spans too; the budget bounds the context."""
    chunks = plan.chunks
    assert chunks and chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    over = {c.index for c in chunks if c.tokens > plan.budget}
    assert not over or all(len(text[chunks[i].start : chunks[i].end]) == 1 for i in over), (
        "only a single character may be over the budget"
    )
    spans = sorted([*plan.kept, *plan.dropped], key=lambda s: s.start)
    assert spans[0].start == 0 and spans[-1].end == len(text)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    assert plan.peak_tokens <= plan.budget
    assert plan.total_tokens == sum(c.tokens for c in chunks)
    if plan.strategy in MULTI_PASS:
        seen = {i for w in plan.windows for i in range(w.first, w.last + 1)}
        assert seen | over == set(range(len(chunks))), "every chunk is in a pass"
    elif plan.refused is None:
        assert plan.kept_tokens <= plan.budget


# ----- prompts at the edge of the context ------------------------------------------------------


@pytest.mark.parametrize("task", ["summarize", "ask"])
def test_refuse_works_at_the_exact_budget_and_refuses_one_token_past_it(
    edge_bench: Bench, task: str, edges: Edges
) -> None:
    """With a reply of one token, a document of exactly the budget makes prompt + reply fill
    the context to its last cell; one token more is refused with the numbers."""
    frame, budget = edge_bench.boundary(task, "refuse", 1)
    fits = edge_bench.doc(budget)
    run = edge_bench.run(fits, "refuse", task=task)
    check_within(run, fits, N_CTX)
    assert run.plan is not None and run.plan.budget == budget and run.plan.total_tokens == budget
    assert not run.result.truncated and run.covered == [(0, len(fits))]
    (call,) = run.calls
    if task == "summarize":  # (ask keeps two tokens of slack after its question)
        assert call.prompt == frame + budget == N_CTX - 1
        assert call.prompt + call.max_tokens == N_CTX, "the whole context, to the last cell"
    edges.add("prompt at the context's edge", "worked")

    over = edge_bench.doc(budget + 1)
    run = edge_bench.run(over, "refuse", task=task)
    check_refusal(run, N_CTX)
    assert f"{budget + 1:,} tokens" in (run.result.refused or "")
    edges.add("prompt at the context's edge", "refused")
    check_engine_survives(edge_bench.host)


def test_a_refused_job_names_the_whole_prompt_and_the_context(
    edge_bench: Bench, edges: Edges
) -> None:
    """The refuse strategy's refusal says what the preflight says, the whole prompt against
    n_ctx and the reply reserve, as well as the document against the budget. Today a job's
    refusal reads only "the document's chunks need N tokens; the budget is B": no context size."""
    frame, budget = edge_bench.boundary("summarize", "refuse", 1)
    run = edge_bench.run(edge_bench.doc(budget + 1), "refuse")
    check_refusal(run, N_CTX)
    assert (
        f"prompt needs {frame + budget + 1:,} tokens, context is {N_CTX:,} (reply reserve 1)"
        in (run.result.refused or "")
    )
    edges.add("prompt at the context's edge", "refused")


@pytest.mark.parametrize("strategy", ["head", "tail", "middle", "entropy"])
def test_single_pass_strategies_cut_a_prompt_of_ten_contexts_to_fit(
    edge_bench: Bench, strategy: str, edges: Edges
) -> None:
    frame, budget = edge_bench.boundary("summarize", strategy, 1)
    text = edge_bench.doc(10 * N_CTX - frame)  # frame + document = 10 × n_ctx
    run = edge_bench.run(text, strategy)
    check_within(run, text, N_CTX)
    assert run.plan is not None and run.plan.total_tokens == 10 * N_CTX - frame
    assert run.result.truncated and 0 < run.plan.kept_tokens <= budget
    (call,) = run.calls
    assert call.prompt == frame + run.plan.kept_tokens, "the prompt is exactly what was planned"
    edges.add("prompt at the context's edge", "worked")
    check_engine_survives(edge_bench.host)


@pytest.mark.parametrize("strategy", ["map-reduce", "rolling"])
def test_multi_pass_strategies_take_a_prompt_one_token_past_the_context(
    edge_bench: Bench, strategy: str, edges: Edges
) -> None:
    frame, _budget = edge_bench.boundary("summarize", strategy, 1)
    text = edge_bench.doc(N_CTX + 1 - frame)  # frame + document = n_ctx + 1
    run = edge_bench.run(text, strategy)
    check_within(run, text, N_CTX)
    assert run.plan is not None and run.plan.passes >= 2
    assert run.covered == [(0, len(text))], "every part reached the model"
    edges.add("prompt at the context's edge", "worked")
    check_engine_survives(edge_bench.host)


# ----- the whole matrix (SLOW=1) ---------------------------------------------------------------

SIZES = (
    "prompt n_ctx-1", "prompt n_ctx", "prompt n_ctx+1", "prompt 10×n_ctx",
    "document n_ctx-1", "document n_ctx", "document n_ctx+1", "document 10×n_ctx",
    "budget-1", "budget", "budget+1",
)  # fmt: skip


def _doc_tokens(size: str, frame: int, budget: int) -> int:
    """The document's tokens for a size: the whole prompt (frame + document), the document
    alone, or the document against the job's budget."""
    if size.startswith("budget"):
        return budget + {"budget-1": -1, "budget": 0, "budget+1": 1}[size]
    what, amount = size.split(" ")
    base = {"n_ctx-1": N_CTX - 1, "n_ctx": N_CTX, "n_ctx+1": N_CTX + 1, "10×n_ctx": 10 * N_CTX}
    return base[amount] - (frame if what == "prompt" else 0)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("task", ["summarize", "ask"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_at_every_edge_size(
    edge_bench: Bench, strategy: str, size: str, task: str, edges: Edges
) -> None:
    max_tokens = 2
    frame, budget = edge_bench.boundary(task, strategy, max_tokens)
    tokens = _doc_tokens(size, frame, budget)
    text = edge_bench.doc(tokens)
    run = edge_bench.run(text, strategy, task=task, max_tokens=max_tokens)
    if strategy in QUESTION_STRATEGIES and task == "summarize":  # a summary has no question
        assert run.result.refused == NEEDS_QUESTION and not run.calls
        edges.add("prompt at the context's edge", "refused")
        return
    outcome = check_either(run, text, N_CTX)
    assert run.plan is not None and run.plan.budget == budget
    assert run.plan.total_tokens == tokens, "the plan counts the document as the counter does"
    if strategy == "refuse":
        assert outcome == ("worked" if tokens <= budget else "refused")
    else:
        assert outcome == "worked", "only refuse may refuse a document when the budget is positive"
    if strategy in SINGLE_PASS and outcome == "worked":
        assert run.result.truncated == (tokens > budget)
        (call,) = run.calls
        if task == "summarize":
            assert call.prompt == frame + run.plan.kept_tokens
    if strategy in MULTI_PASS:
        assert run.covered == [(0, len(text))], "every part reached the model"
    edges.add("prompt at the context's edge", outcome)
    check_engine_survives(edge_bench.host)


# ----- reply reserves ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["summarize", "ask"])
def test_a_reply_reserve_of_the_whole_context_is_refused_with_the_numbers(
    edge_bench: Bench, task: str, edges: Edges
) -> None:
    """max_tokens = n_ctx leaves no room for a prompt; so does max_tokens = n_ctx − frame (a
    budget of zero). Every strategy refuses before planning or calling the model."""
    text = edge_bench.doc(40)
    for strategy in STRATEGIES:
        frame, _ = edge_bench.boundary(task, strategy, 1)
        for max_tokens in (N_CTX, N_CTX - frame):
            run = edge_bench.run(text, strategy, task=task, max_tokens=max_tokens)
            check_refusal(run, N_CTX)
            assert run.plan is None, "refused before planning"
            assert f"context is {N_CTX:,}" in (run.result.refused or "")
            edges.add("reply reserve", "refused")
    check_engine_survives(edge_bench.host)


def test_plans_for_a_reply_reserve_of_the_whole_context_are_refused_with_the_numbers(
    edge_bench: Bench, edges: Edges
) -> None:
    """What the window shows before a run (``plan_for``) agrees with the job: no budget, no
    plan, and the preflight's sentence, under every strategy."""
    planner = Planner(edge_bench.doc(40), edge_bench.counter)
    for strategy in STRATEGIES:
        instruction, _ = planning("summarize", strategy, edge_bench.counter, max_tokens=1)
        frame = edge_bench.frame(instruction)
        for reserve in (N_CTX, N_CTX - frame):
            plan = plan_for(planner, strategy, edge_bench.model_path, instruction=instruction,
                            n_ctx=N_CTX, reserve=reserve, question=QUESTION)  # fmt: skip
            assert plan.refused == (
                f"prompt needs {frame + 1:,} tokens, context is {N_CTX:,} (reply reserve "
                f"{reserve:,})"
            )
            assert plan.kept == () and plan.windows == () and plan.peak_tokens == 0
            spans = [(s.start, s.end, s.reason) for s in plan.dropped]
            assert spans == [(0, len(planner.text), plan.refused)]
            edges.add("reply reserve", "refused")
        plan = plan_for(planner, strategy, edge_bench.model_path, instruction=instruction,
                        n_ctx=N_CTX, reserve=N_CTX - frame - 1, question=QUESTION)  # fmt: skip
        assert plan.budget == 1 and (plan.refused is None) == (strategy != "refuse")
        edges.add("reply reserve", "planned")


def test_a_reply_reserve_of_zero_is_rejected_before_anything_runs(
    edge_bench: Bench, edges: Edges
) -> None:
    """max_tokens = 0 can never produce a reply: the job says so before planning or calling the
    model (a ValueError, as for any bad argument), or refuses in one sentence. Today the job
    plans, emits PlanReady and a JobFinished that reads "stop", and only then raises the
    engine's ValueError from the first model call."""
    text = edge_bench.doc(40)
    for strategy in ("head", "map-reduce", "rolling"):
        rec = Recorder(edge_bench.host)
        events: list[Any] = []
        try:
            events.extend(summarize(rec, text, edge_bench.counter, strategy=strategy,  # type: ignore[arg-type]
                                    n_ctx=N_CTX, max_tokens=0))  # fmt: skip
        except ValueError as exc:
            assert "at least 1" in str(exc)
            assert not events, f"{strategy}: events before the ValueError: {events[:2]}"
            edges.add("reply reserve", "rejected")
        else:
            result = events[-1].result
            assert result.refused and "reply" in result.refused and not rec.calls
            edges.add("reply reserve", "refused")
    check_engine_survives(edge_bench.host)


@pytest.mark.parametrize("strategy", ["map-reduce", "semantic"])
def test_a_combine_call_that_cannot_fit_is_refused_up_front(
    edge_bench: Bench, strategy: str, edges: Edges
) -> None:
    """A reply reserve that leaves the parts one token of budget leaves the combine call (a
    longer instruction) none: the job must refuse with the numbers before the first part, or
    keep every call inside the context. Today it runs the parts, then sends a combine prompt
    that cannot fit, and the engine's refusal ends the job as an error."""
    frame, _ = edge_bench.boundary("summarize", strategy, 1)
    text = "Call"
    assert edge_bench.counter.count(text) == 1
    run = edge_bench.run(text, strategy, max_tokens=N_CTX - frame - 1)  # the parts' budget: 1
    edges.add("reply reserve", check_either(run, text, N_CTX))
    check_engine_survives(edge_bench.host)


# ----- a budget smaller than one sentence --------------------------------------------------------


@pytest.mark.parametrize("budget", [1, 2, 5, 12])
def test_a_budget_smaller_than_one_sentence_cuts_inside_it_and_says_so(
    edge_bench: Bench, budget: int, edges: Edges
) -> None:
    text = LONG_SENTENCE
    assert edge_bench.counter.count(text) > 4 * 12
    planner = Planner(text, edge_bench.counter)
    for strategy in STRATEGIES:
        plan = planner.plan(strategy, budget, PlanOptions(question=SENTENCE_QUESTION))
        check_plan(plan, text)
        if strategy == "refuse":
            assert plan.refused == (
                f"the document's chunks need {plan.total_tokens:,} tokens; the budget is {budget:,}"
            )
            edges.add("budget under a sentence", "refused")
            continue
        assert plan.refused is None
        if strategy in MULTI_PASS:
            assert len(plan.windows) >= 2 and plan.boundary_integrity < 1
        elif plan.kept:
            assert plan.dropped and plan.boundary_integrity < 1, (
                f"{strategy} cut inside the sentence and must say so"
            )
        edges.add("budget under a sentence", "planned")


def test_a_budget_smaller_than_one_sentence_in_a_job(edge_bench: Bench, edges: Edges) -> None:
    """head with a reply reserve that leaves five tokens of the sentence: the part that fits is
    summarized, flagged as truncated, inside the context."""
    frame, _ = edge_bench.boundary("summarize", "head", 1)
    text = LONG_SENTENCE
    run = edge_bench.run(text, "head", max_tokens=N_CTX - frame - 5)
    check_within(run, text, N_CTX)
    assert run.plan is not None and run.plan.budget == 5 and 0 < run.plan.kept_tokens <= 5
    assert run.result.truncated and run.plan.boundary_integrity < 1
    edges.add("budget under a sentence", "worked")
    check_engine_survives(edge_bench.host)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("budget", [1, 3])
def test_a_budget_of_a_few_tokens_under_every_strategy(
    edge_bench: Bench, strategy: str, budget: int, edges: Edges
) -> None:
    """The reply reserve takes all but ``budget`` tokens of the context, and the document is one
    sentence far longer than that: it is cut inside the sentence, and says so."""
    text = "Call me Ishmael, a sailor of the sea."
    frame, _ = edge_bench.boundary("summarize", strategy, 1)
    if strategy == "rolling":  # rolling keeps 2 × max_tokens + 16 free: the same budget, or +1
        max_tokens = (N_CTX - frame - budget - 16) // 2
    else:
        max_tokens = N_CTX - frame - budget
    run = edge_bench.run(text, strategy, max_tokens=max_tokens)
    if strategy in QUESTION_STRATEGIES:  # a summary has no question: refused, whatever fits
        assert run.result.refused == NEEDS_QUESTION and not run.calls
        edges.add("budget under a sentence", "refused")
        return
    outcome = check_either(run, text, N_CTX)
    if strategy == "refuse":
        assert outcome == "refused"
    elif outcome == "refused":  # the combine call's longer instruction leaves it no room
        assert strategy in ("map-reduce", "semantic")
        assert (run.result.refused or "").startswith("prompt needs")
    else:
        assert run.plan is not None and run.plan.budget in (budget, budget + 1)
        if strategy in SINGLE_PASS:
            assert run.result.truncated and run.plan.boundary_integrity < 1
    edges.add("budget under a sentence", outcome)
    check_engine_survives(edge_bench.host)


# ----- the context size itself -------------------------------------------------------------------


def test_a_context_above_the_training_context_loads_with_a_warning_and_runs(
    model_path: Path, edges: Edges
) -> None:
    n_ctx = 2 * TRAIN_CTX
    with EngineHost() as h:
        loaded = h.load(model_path, LoadSettings(n_ctx=n_ctx, n_threads=1))
        assert loaded.n_ctx == n_ctx and loaded.n_ctx_train == TRAIN_CTX
        (warning,) = [w for w in loaded.warnings if "trained" in w]
        assert f"{n_ctx:,}" in warning and f"{TRAIN_CTX:,}" in warning
        counter = exact_counter(model_path, host_tokenize(h))
        text = text_of_tokens(counter, 300)
        run = run_job(h, counter, text, "head", n_ctx=n_ctx, max_tokens=2)
        check_within(run, text, n_ctx)
        assert not run.result.truncated and run.covered == [(0, len(text))]
        check_engine_survives(h)
    edges.add("n_ctx over the training context", "worked")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_prompt_past_the_training_context_runs_in_a_larger_context(
    model_path: Path, edges: Edges
) -> None:
    """A prompt of 9,000 tokens (past the 8,192 the model was trained on) in a context of
    16,384: evaluated whole, with the warning."""
    n_ctx = 2 * TRAIN_CTX
    with EngineHost() as h:
        loaded = h.load(model_path, LoadSettings(n_ctx=n_ctx, n_threads=1))
        assert any(f"{TRAIN_CTX:,}" in w for w in loaded.warnings)
        counter = exact_counter(model_path, host_tokenize(h))
        text = text_of_tokens(counter, 9000)
        run = run_job(h, counter, text, "head", n_ctx=n_ctx, max_tokens=4)
        check_within(run, text, n_ctx)
        assert not run.result.truncated and run.calls[0].prompt > TRAIN_CTX
        check_engine_survives(h)
    edges.add("n_ctx over the training context", "worked")


@pytest.mark.parametrize("n_ctx", [10_000_000, 2**30])
def test_a_context_too_large_for_memory_is_refused_before_llama_cpp_allocates(
    edge_bench: Bench, n_ctx: int, edges: Edges
) -> None:
    host = edge_bench.host
    before, pid = host.model, host.pid
    with pytest.raises(InsufficientMemoryError) as err:
        host.load(edge_bench.model_path, LoadSettings(n_ctx=n_ctx))
    message = str(err.value)
    assert f"a context of {n_ctx:,} tokens needs about" in message
    assert "KV cache" in message and "of memory is free" in message and "GiB" in message
    assert "\n" not in message
    assert host.pid == pid and host.model is before, "the loaded model is untouched"
    check_engine_survives(host)
    edges.add("n_ctx over memory", "refused")


@pytest.mark.unit
def test_the_memory_preflight_counts_the_kv_cache_when_layers_cannot_be_offloaded(
    model_path: Path, edges: Edges
) -> None:
    """Asking for GPU layers from a build that cannot offload keeps the KV cache in RAM."""
    info = inspect_model(model_path)
    settings = LoadSettings(n_ctx=10_000_000, n_gpu_layers=-1, flash_attn=True)
    memory_preflight(info, settings, available=2**34)  # taken at its word: all on the GPU
    with pytest.raises(InsufficientMemoryError, match="KV cache"):
        memory_preflight(info, settings, gpu_offload=False, available=2**34)
    memory_preflight(info, settings, gpu_offload=True, available=2**34)
    edges.add("n_ctx over memory", "refused")


def _overcommit() -> str:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    except OSError:
        return "?"


@pytest.mark.skipif(_overcommit() == "1", reason="the kernel would hand llama.cpp the memory")
def test_gpu_layers_on_a_cpu_only_build_do_not_skip_the_memory_preflight(
    model_path: Path, edges: Edges
) -> None:
    """The worker runs every layer on the CPU when the build cannot offload, so the preflight
    must count the KV cache in RAM. Today EngineHost.load passes no offload figure, and a KV
    cache of 10 million tokens (215 GiB) reaches llama.cpp's allocator (which fails here only
    because the kernel refuses so large a request; a smaller excess would be allocated)."""
    settings = LoadSettings(n_ctx=10_000_000, n_gpu_layers=-1, flash_attn=True)
    with EngineHost() as h:
        if h.start().gpu_offload_supported:
            pytest.skip("this llama.cpp build offloads to a GPU: the KV cache goes there")
        with pytest.raises(InsufficientMemoryError) as err:
            h.load(model_path, settings)
        assert "a context of 10,000,000 tokens" in str(err.value)
        assert h.alive
    edges.add("n_ctx over memory", "refused")


# ----- a document of one 5 MB line ---------------------------------------------------------------


@pytest.mark.timeout(600)
def test_a_5_mb_line_is_planned_and_summarized_by_head(edge_bench: Bench, edges: Edges) -> None:
    text = one_line("words")
    assert "\n" not in text and len(text.encode("utf-8")) == 5_000_000
    planner = edge_bench.line_planner("words")
    _, budget = edge_bench.boundary("summarize", "head", 1)
    plan = planner.plan("head", budget)
    check_plan(plan, text)
    assert plan.kept and plan.kept[0].start == 0 and plan.total_tokens > 100 * N_CTX
    edges.add("5 MB line", "planned")
    run = edge_bench.run(text, "head", planner=planner)
    check_within(run, text, N_CTX)
    assert run.result.truncated and run.covered[0][0] == 0
    edges.add("5 MB line", "worked")
    check_engine_survives(edge_bench.host)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ONE_LINE_KINDS)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_plans_a_5_mb_line(
    edge_bench: Bench, kind: str, strategy: str, edges: Edges
) -> None:
    """Plans only: on a 5 MB line the multi-pass strategies would make thousands of calls."""
    text = one_line(kind)
    _, budget = edge_bench.boundary("summarize", strategy, 2)
    plan = edge_bench.line_planner(kind).plan(strategy, budget, PlanOptions(question=QUESTION))
    check_plan(plan, text)
    if strategy == "refuse":
        assert plan.refused and f"{plan.total_tokens:,} tokens" in plan.refused
    edges.add("5 MB line", "planned")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ONE_LINE_KINDS)
@pytest.mark.parametrize("strategy", SINGLE_PASS)
def test_single_pass_jobs_on_a_5_mb_line(
    edge_bench: Bench, kind: str, strategy: str, edges: Edges
) -> None:
    text = one_line(kind)
    task = "ask" if strategy in QUESTION_STRATEGIES else "summarize"  # retrieve needs a question
    planner = edge_bench.line_planner(kind)
    run = edge_bench.run(text, strategy, task=task, max_tokens=2, planner=planner)
    outcome = check_either(run, text, N_CTX)
    assert outcome == ("refused" if strategy == "refuse" else "worked")
    if outcome == "worked":
        assert run.result.truncated
    edges.add("5 MB line", outcome)
    check_engine_survives(edge_bench.host)


def test_the_documents_are_real_text_cut_to_the_token(edge_bench: Bench) -> None:
    assert "Call me Ishmael" in prose() and "Four score and seven years ago" in prose()
    for n in (1, 37, N_CTX + 1):
        assert edge_bench.counter.count(edge_bench.doc(n)) == n
