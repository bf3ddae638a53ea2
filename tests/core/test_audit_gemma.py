"""The faithfulness audit, the completion frame and rollback with KV state on the second test model,
Gemma 3 270M: a SentencePiece vocabulary of 262,144 tokens (379 of them longer than 32 bytes, a
run of sixteen '─' among them), sliding-window attention on 5 of every 6 layers, a base model
without a chat template.

``make test`` runs every strategy once, the three tasks spread over them, on one short document
of box drawing, Chinese and code (228 tokens) in one engine session at a context of 160; and a
rollback that resumes past the 512-token window. ``SLOW=1`` runs every document × strategy × task
at a context of 256, as tests/core/test_audit.py does on the default model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from app.core.documents import Document, load_document
from app.core.engine.host import EngineHost
from app.core.engine.schedule import PROMPT_SLICE
from app.core.engine.types import Finished, LoadSettings, SamplingSettings, TextDelta
from app.core.jobs.audit import Audit
from app.core.jobs.tasks import (
    JobFinished,
    JobResult,
    PlanReady,
    ask,
    extract,
    planning,
    resume,
    state_after,
    summarize,
)
from app.core.planning.frame import COMPLETION_CUES, SUMMARIZE, model_frame
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import QUESTION_STRATEGIES, STRATEGIES, Planner, plan_for
from app.core.tokens import LlamaCounter, TokenCounter, host_tokenize
from tests.conftest import DATA
from tests.core.audit_corpus import AUDITED, CORPUS
from tests.engines import Hosts
from tests.plain_llama import plain_llama

N_CTX = 160  # the box-drawing document (228 tokens) overflows: every strategy has work to do
MATRIX_N_CTX = 256  # SLOW=1, as on the default model
MAX_TOKENS = 8
BOX = "box-drawing.txt"  # a table drawn with ├───┼───┤, Chinese (道德经) and Python code
QUESTION = "What is the mean?"
INSTRUCTION = "List the numbers."
# Each strategy once, the three tasks spread over them (make test).
COMPACT = {
    "refuse": "summarize", "head": "summarize", "tail": "ask", "middle": "extract",
    "rolling": "summarize", "semantic": "extract", "entropy": "ask", "map-reduce": "ask",
    "retrieve": "ask",
}  # fmt: skip


@dataclasses.dataclass
class Run:
    result: JobResult
    audit: Audit
    ready: PlanReady


@dataclasses.dataclass
class Bench:
    """One engine on Gemma at ``n_ctx``, llama.cpp's own tokenizer as the counter (exact by
    definition and cheap on short documents; the fast SentencePiece counter costs seconds to
    build, and tests/core/test_token_families.py proves it equal to this one)."""

    host: EngineHost
    path: Path
    n_ctx: int
    runs: dict[tuple[str, str, str], Run] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counter: TokenCounter = LlamaCounter(host_tokenize(self.host), name=self.path.name)

    def planned(self, name: str) -> tuple[Document, Planner]:
        doc = load_document(DATA / name)
        return doc, Planner(doc, self.counter)

    def run(self, task: str, strategy: str, planner: Planner) -> Run:
        """One audited job; its result, its audit (not yet asked to raise), its plan."""
        audit = Audit(self.host, exact_counts=True)
        options: dict[str, Any] = {"strategy": strategy, "n_ctx": self.n_ctx, "audit": audit,
                                   "max_tokens": MAX_TOKENS, "planner": planner}  # fmt: skip
        host, text, counter = self.host, planner.text, self.counter
        if task == "ask":
            events = ask(host, text, counter, questions=[QUESTION], **options)
        elif task == "extract":
            events = extract(host, text, counter, instruction=INSTRUCTION, **options)
        else:
            events = summarize(host, text, counter, **options)
        seen = list(events)
        [ready] = [ev for ev in seen if isinstance(ev, PlanReady)]
        [done] = [ev for ev in seen if isinstance(ev, JobFinished)]
        return Run(done.result, audit, ready)

    def audited(self, doc: Document, planner: Planner, task: str, strategy: str) -> Run:
        """A job that must pass the audit, having checked real work, with the plan the window
        shows for it (``plan_for``, framed from the GGUF) equal to the one it ran."""
        key = (doc.name, task, strategy)
        if key in self.runs:
            return self.runs[key]
        run = self.run(task, strategy, planner)
        run.audit.raise_if_failed()
        result, counts = run.result, run.audit.counts
        assert result.error is None, result.error
        if strategy in QUESTION_STRATEGIES and task == "summarize":  # a summary has no question
            assert result.refused == NEEDS_QUESTION and counts.calls == 0
            return run
        instruction, reserve = planning(task, strategy, self.counter, max_tokens=MAX_TOKENS,
                                        questions=[QUESTION], instruction=INSTRUCTION)  # fmt: skip
        question = {"ask": QUESTION, "extract": INSTRUCTION}.get(task, "")  # what retrieve ranks by
        shown = plan_for(planner, strategy, self.path, instruction=instruction, n_ctx=self.n_ctx,
                         reserve=reserve, question=question)  # fmt: skip
        assert shown.budget == run.ready.budget  # the plan's frame is the job's, token for token
        assert (shown.kept_tokens, shown.total_tokens) == (
            result.plan["kept_tokens"], result.plan["total_tokens"])  # fmt: skip
        if strategy == "refuse" and run.ready.total_tokens > run.ready.budget:
            assert result.refused and counts.calls == 0  # refused with numbers
        else:  # (with SLOW=1 the box drawing and the web page fit Gemma's 256: refuse runs them)
            assert not result.refused
            assert counts.calls >= 1 and counts.chunks >= 1 and counts.document_tokens > 0
            if result.plan["kept_tokens"] < result.plan["total_tokens"]:
                assert result.truncated
        AUDITED["jobs"] += 1
        AUDITED["calls"] += counts.calls
        AUDITED["document_tokens"] += counts.document_tokens
        AUDITED["documents"].add(f"gemma:{doc.name}")
        self.runs[key] = run
        return run


@pytest.fixture(scope="module")
def gemma_bench(make_host: Hosts, gemma_path: Path) -> Bench:
    return Bench(make_host(gemma_path, n_ctx=N_CTX), gemma_path, N_CTX)


@pytest.fixture(scope="module")
def box_drawing(gemma_bench: Bench) -> tuple[Document, Planner]:
    """The box-drawn table (tests/data/box-drawing.txt), planned with Gemma's counter."""
    return gemma_bench.planned(BOX)


# ----- make test ------------------------------------------------------------------------------


def test_pieces_longer_than_32_bytes_come_back_whole(gemma_bench: Bench) -> None:
    """What the model saw in the false alarm: the right token (sixteen '─', 48 bytes), which
    llama-cpp-python's detokenizer dropped; the engine's now gives every piece whole."""
    host = gemma_bench.host
    line = "├───────┼───────────────────────────────┤"
    ids = host.tokenize(line, add_special=False)
    assert any(len(host.detokenize([t]).encode()) > 32 for t in ids)
    assert host.detokenize(ids) == line


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_runs_on_gemma_exactly_as_planned(
    gemma_bench: Bench, box_drawing: tuple[Document, Planner], strategy: str
) -> None:
    gemma_bench.audited(*box_drawing, COMPACT[strategy], strategy)


def test_a_base_model_gets_the_completion_frame(
    gemma_bench: Bench, box_drawing: tuple[Document, Planner]
) -> None:
    """No chat template: the document first, then the cue the model continues; nothing of an
    instruction frame it never learned. The plans count the same frame (``Bench.audited``)."""
    frame = model_frame(gemma_bench.path, task=SUMMARIZE)
    assert (frame.before, frame.after) == COMPLETION_CUES[SUMMARIZE]
    assert COMPLETION_CUES[SUMMARIZE] == ("Document:\n\n", "\n\nSummary:")
    doc, planner = box_drawing
    run = gemma_bench.audited(doc, planner, "summarize", "head")
    kept = "".join(doc.text[s.start : s.end] for s in planner.plan("head", run.ready.budget).kept)
    host = gemma_bench.host
    assert host.detokenize(run.result.final_prompt) == f"Document:\n\n{kept}\n\nSummary:"
    assert run.result.final_prompt[0] == host.tokenize("", add_special=True)[0]  # BOS, once


def test_a_rollback_past_the_sliding_window_resumes_the_reply_the_job_would_give(
    gemma_bench: Bench,
) -> None:
    """A job whose prompt and reply outgrow the 512-token window, its KV state kept and
    restored: every position comes back, and the resumed reply is the one the live cache gives
    for the same prompt. (A state saved as sequence 0 holds a windowed layer's cells only within
    the window of the last position: restored, the cache's first position read 64, which the
    audit reported as a ring mismatch, and the reply differed.)"""
    host, n_ctx, max_tokens = gemma_bench.host, 640, 8
    host.load(gemma_bench.path, LoadSettings(n_ctx=n_ctx))
    try:
        text = (DATA / "sample.py").read_text(encoding="utf-8")
        events = summarize(host, text, gemma_bench.counter, strategy="head", n_ctx=n_ctx,
                           max_tokens=max_tokens)  # fmt: skip
        result = next(ev.result for ev in events if isinstance(ev, JobFinished))
        prompt = result.final_prompt
        assert len(prompt) > 512 + max_tokens and result.completion_tokens <= max_tokens
        state = state_after(host, result)
        assert state is not None and state.tokens[: len(prompt)] == prompt
        live = _reply(host, prompt, max_tokens)  # the live cache, rolled back to the prompt
        host.reset()
        host.restore_state(state)
        assert host.kv_usage().pos_min == 0  # every position back, the windowed layers' too
        audit = Audit(host, exact_counts=True)
        events = resume(host, state, len(prompt), task="summarize", strategy="head",
                        max_tokens=max_tokens, sources=result.outputs[-1].source_spans,
                        audit=audit)  # fmt: skip
        resumed = next(ev.result for ev in events if isinstance(ev, JobFinished))
        audit.raise_if_failed()
        assert resumed.evaluated_tokens == 1
        assert resumed.text == host.detokenize(live).strip()
    finally:
        host.load(gemma_bench.path, LoadSettings(n_ctx=N_CTX))


def test_greedy_output_matches_llama_cpp_under_the_same_settings_and_schedule(
    gemma_bench: Bench,
) -> None:
    """As on the default model (tests/core/test_engine_host.py), on Gemma, whose repacked Q4_K
    weights are multiplied four rows at a time and the rest one by one: where each slice begins
    and ends changes its numbers on some builds, so the engine's slices are replayed as they
    are, here [128, 2] and the last token."""
    host, settings = gemma_bench.host, LoadSettings(n_ctx=512)
    host.load(gemma_bench.path, settings)
    try:
        text = (DATA / "sample.py").read_text(encoding="utf-8")
        prompt = host.tokenize(text, add_special=True)[: PROMPT_SLICE + 3]
        ours = [t for ev in host.generate(prompt, max_tokens=24,
                                          sampling=SamplingSettings(stop_on_repetition=False))
                if isinstance(ev, TextDelta) for t in ev.token_ids]  # fmt: skip
    finally:
        host.load(gemma_bench.path, LoadSettings(n_ctx=N_CTX))
    with plain_llama(gemma_bench.path, settings) as plain:
        assert plain.greedy(prompt, 24) == ours
    assert ours, "a reply"


def _reply(host: EngineHost, prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    ids: list[int] = []
    for ev in host.generate(prompt, max_tokens=max_tokens):
        if isinstance(ev, TextDelta):
            ids += ev.token_ids
        elif isinstance(ev, Finished):
            assert ev.stats.prompt_eval_tokens == 1  # the rest found in the cache
    return ids


# ----- SLOW=1: the whole matrix ----------------------------------------------------------------


@pytest.fixture(scope="module")
def matrix(
    make_host: Hosts, gemma_path: Path
) -> tuple[Bench, dict[str, tuple[Document, Planner]]]:
    wide = Bench(make_host(gemma_path, n_ctx=MATRIX_N_CTX), gemma_path, MATRIX_N_CTX)
    return wide, {kind: wide.planned(name) for kind, name in {**CORPUS, "box": BOX}.items()}


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*CORPUS, "box"])
@pytest.mark.parametrize("task", ["summarize", "ask", "extract"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_whole_matrix_runs_on_gemma_exactly_as_planned(
    matrix: tuple[Bench, dict[str, tuple[Document, Planner]]], kind: str, task: str,
    strategy: str,
) -> None:  # fmt: skip
    wide, docs = matrix
    wide.audited(*docs[kind], task, strategy)
