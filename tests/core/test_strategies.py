"""Overflow strategies: plans never exceed the budget, say why, and keep what they promise."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.documents import document_from_text, load_document
from app.core.engine.types import ContextOverflowError
from app.core.paths import sample_document
from app.core.planning import strategies as strategies_module
from app.core.planning.frame import compute_budget, model_frame, preflight, prompt_frame
from app.core.planning.strategies import (
    MULTI_PASS,
    REMEMBERED_PLANS,
    STRATEGIES,
    Plan,
    Planner,
    PlanOptions,
    plan,
    unit_tokens,
)
from app.core.tokens import TiktokenCounter
from tests.core.doc_strategies import markdown_documents

DATA = Path(__file__).resolve().parent.parent / "data"
_FIXTURES_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _check_plan(p: Plan, text: str, counter: TiktokenCounter) -> None:
    budget = p.budget
    assert p.peak_tokens <= budget, f"{p.strategy} holds {p.peak_tokens} tokens, budget {budget}"
    spans = sorted([*p.kept, *p.dropped], key=lambda s: s.start)
    if text:
        assert spans[0].start == 0 and spans[-1].end == len(text)
    for a, b in itertools.pairwise(spans):
        assert a.end == b.start, "kept and dropped spans must partition the document"
    for s in spans:
        assert s.reason, "every span says why"
        assert s.tokens >= 0
    # Span tokens are the exact counts of the chunks (segments) inside them.
    for s in p.kept:
        inside = [c for c in p.chunks if s.start <= c.start and c.end <= s.end]
        assert s.tokens == sum(counter.count(text[c.start : c.end]) for c in inside)
    if p.strategy in MULTI_PASS:
        assert all(w.tokens <= budget for w in p.windows)
        covered = {i for w in p.windows for i in range(w.first, w.last + 1)}
        dropped_chunks = {c.index for c in p.chunks if c.tokens > budget}
        assert covered | dropped_chunks == set(range(len(p.chunks))), "every chunk is processed"
    else:
        assert p.kept_tokens <= budget
    assert 0.0 <= p.boundary_integrity <= 1.0


@pytest.mark.unit
@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(markdown_documents(), st.integers(1, 600), st.sampled_from(sorted(STRATEGIES)))
def test_every_plan_stays_within_budget(
    gguf_counter: TiktokenCounter, text: str, budget: int, strategy: str
) -> None:
    doc = document_from_text(text, format="markdown")
    _check_plan(plan(doc, gguf_counter, budget, strategy), doc.text, gguf_counter)


@pytest.mark.unit
@settings(max_examples=40, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(markdown_documents(max_blocks=4), st.integers(1, 12))
def test_budgets_smaller_than_a_sentence(
    gguf_counter: TiktokenCounter, text: str, budget: int
) -> None:
    doc = document_from_text(text, format="markdown")
    planner = Planner(doc, gguf_counter)
    for name in STRATEGIES:
        _check_plan(planner.plan(name, budget), doc.text, gguf_counter)


@pytest.mark.unit
def test_zero_budget_keeps_nothing(gguf_counter: TiktokenCounter) -> None:
    p = plan("Some text.", gguf_counter, 0, "head")
    assert p.kept == () and p.refused and "budget is 0" in p.refused


@pytest.fixture(scope="module")
def jargon_planner(gguf_counter: TiktokenCounter) -> Planner:
    text = sample_document().read_text(encoding="utf-8")[:200_000]
    return Planner(document_from_text(text), gguf_counter)


@pytest.mark.unit
def test_refuse_explains_with_numbers(
    jargon_planner: Planner, gguf_counter: TiktokenCounter
) -> None:
    p = jargon_planner.plan("refuse", 1000)
    assert p.kept == () and p.refused
    assert f"{p.total_tokens:,} tokens" in p.refused and "1,000" in p.refused
    small = plan("A short note.", gguf_counter, 1000, "refuse")
    assert small.refused is None and small.kept_tokens == small.total_tokens


@pytest.mark.unit
def test_head_tail_middle_keep_their_ends(jargon_planner: Planner) -> None:
    n = len(jargon_planner.text)
    head, tail, middle = (jargon_planner.plan(s, 2000) for s in ("head", "tail", "middle"))
    assert head.kept[0].start == 0 and head.kept[-1].end < n
    assert tail.kept[-1].end == n and tail.kept[0].start > 0
    assert middle.kept[0].start == 0 and middle.kept[-1].end == n and len(middle.kept) == 2
    for p in (head, tail, middle):
        assert 0.9 * 2000 <= p.kept_tokens <= 2000, f"{p.strategy} fills {p.kept_tokens}"


@pytest.mark.unit
def test_multi_pass_strategies_reach_every_chunk(jargon_planner: Planner) -> None:
    for name in ("rolling", "semantic", "map-reduce"):
        p = jargon_planner.plan(name, 1500)
        assert p.kept_tokens == p.total_tokens and not p.dropped
        assert len(p.windows) > 10 and p.peak_tokens <= 1500
        assert p.needle_retention([(100, 140), (150_000, 150_040)]) == 1.0
    semantic = jargon_planner.plan("semantic", 1500, PlanOptions(overlap=0.3))
    assert any(
        b.first <= a.last for a, b in zip(semantic.windows, semantic.windows[1:], strict=False)
    )


@pytest.mark.unit
def test_entropy_drops_repetition_boilerplate_and_whitespace_first(
    gguf_counter: TiktokenCounter,
) -> None:
    elements = ["copper", "zinc", "argon", "cobalt", "iodine", "xenon", "radon", "boron"]
    facts = [f"Fact {i}: the {w} reactor runs at {i * 37} kelvin near {w}ville."
             for i, w in enumerate(elements)]  # fmt: skip
    boiler = [f"Page {i} of 40 — Confidential — Example Corp" for i in range(1, 9)]
    repeated = "All hands must read the safety manual before entering the hall."
    parts: list[str] = []
    for i, f in enumerate(facts):
        parts += [f, boiler[i], repeated, " " * 40]
    text = "\n\n".join(parts)
    doc = document_from_text(text)
    budget = sum(gguf_counter.count(f) for f in facts) + gguf_counter.count(repeated) + 40
    p = plan(doc, gguf_counter, budget, "entropy", PlanOptions(chunk_tokens=30))
    kept_text = "".join(text[s.start : s.end] for s in p.kept)
    needles = [(text.index(f), text.index(f) + len(f)) for f in facts]
    assert p.needle_retention(needles) == 1.0, kept_text
    reasons = " ".join(s.reason for s in p.dropped)
    assert "repeats the text" in reasons and "boilerplate" in reasons
    assert kept_text.count(repeated) == 1


@pytest.mark.unit
def test_needle_retention_differs_by_strategy(jargon_planner: Planner) -> None:
    text = jargon_planner.text
    needles = [(i, i + 30) for i in range(1000, len(text) - 100, len(text) // 10)]
    head = jargon_planner.plan("head", 3000).needle_retention(needles)
    mapred = jargon_planner.plan("map-reduce", 3000).needle_retention(needles)
    assert head <= 0.2 and mapred >= 0.8


@pytest.mark.unit
def test_unknown_strategy_is_refused(gguf_counter: TiktokenCounter) -> None:
    with pytest.raises(ValueError, match="unknown strategy 'best'"):
        plan("text", gguf_counter, 100, "best")


@pytest.mark.unit
def test_plans_on_real_documents(gguf_counter: TiktokenCounter) -> None:
    for name in ("sample.pdf", "sample.docx", "sample.html", "chinese-gbk.txt", "sample.py"):
        doc = load_document(DATA / name)
        planner = Planner(doc, gguf_counter)
        for strategy in STRATEGIES:
            _check_plan(planner.plan(strategy, 150), doc.text, gguf_counter)


@pytest.mark.unit
def test_a_remembered_plan_is_returned_without_chunking_again(
    jargon_planner: Planner, gguf_counter: TiktokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = {name: jargon_planner.plan(name, 1200) for name in ("head", "entropy")}
    other_budget = jargon_planner.plan("head", 1100)
    chunked: list[int] = []
    real = strategies_module.chunk_document
    monkeypatch.setattr(strategies_module, "chunk_document",
                        lambda *a, **k: chunked.append(a[2]) or real(*a, **k))  # fmt: skip
    fresh = Planner(jargon_planner.doc, gguf_counter)
    for p in made.values():
        fresh.remember(p)
    assert fresh.plan("head", 1200) is made["head"]
    assert fresh.plan("entropy", 1200) is made["entropy"]
    assert fresh.plan("tail", 1200).chunks == made["head"].chunks  # the same unit: shared chunks
    assert chunked == []
    assert fresh.plan("head", 1100) == other_budget  # another budget: planned here
    assert chunked == [unit_tokens("head", 1100, PlanOptions())]
    other = PlanOptions(overlap=0.3)
    assert fresh.plan("head", 1200, other) is not made["head"]  # other options: planned anew


@pytest.mark.unit
def test_plans_are_equal_however_long_they_took(jargon_planner: Planner) -> None:
    a = jargon_planner.plan("middle", 900)
    b = dataclasses.replace(a, seconds=a.seconds + 1)
    assert a == b and dataclasses.replace(a, budget=901) != a


@pytest.mark.unit
def test_remembered_plans_are_bounded(
    jargon_planner: Planner, gguf_counter: TiktokenCounter
) -> None:
    fresh = Planner(jargon_planner.doc, gguf_counter)
    plans = [jargon_planner.plan("head", 600 + 10 * i) for i in range(REMEMBERED_PLANS + 1)]
    for p in plans:
        fresh.remember(p)
    assert fresh.plan("head", 610) is plans[1]  # the newest are kept
    assert fresh.plan("head", 600) is not plans[0]  # the oldest was forgotten (planned anew)


# -- budget and preflight ------------------------------------------------------------------


def test_budget_uses_the_models_own_template(
    model_path: Path, gguf_counter: TiktokenCounter, engine: object
) -> None:
    frame = model_frame(model_path, task="Summarize the document.")
    assert "<|im_start|>user" in frame.before and frame.after.endswith("<|im_start|>assistant\n")
    budget = compute_budget(4096, 512, frame, gguf_counter)
    # The same count as llama.cpp gives for the rendered prompt around an empty document.
    rendered = engine.apply_chat_template(  # type: ignore[attr-defined]
        [{"role": "user", "content": "Summarize the document.\n\n"}]
    )
    ref = engine.tokenize(rendered, add_special=True, parse_special=True)  # type: ignore[attr-defined]
    assert budget.template_tokens == len(ref)
    assert budget.available == 4096 - len(ref) - 512


@pytest.mark.unit
def test_budget_without_template_is_the_task_and_blank_lines(gguf_counter: TiktokenCounter) -> None:
    frame = prompt_frame(None, task="Summarize.")
    assert frame.before == "Summarize.\n\n" and frame.after == "\n\n"
    assert compute_budget(100, 10, frame, gguf_counter).template_tokens == gguf_counter.count(
        "Summarize.\n\n"
    ) + gguf_counter.count("\n\n")


@pytest.mark.unit
def test_preflight_refuses_with_the_numbers() -> None:
    preflight(3584, 4096, 512)  # exactly fits
    with pytest.raises(ContextOverflowError) as err:
        preflight(12_526, 4096, 512)
    assert str(err.value) == "prompt needs 12,526 tokens, context is 4,096 (reply reserve 512)"


def test_model_frame_is_read_once_per_file_version(model_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model.gguf"
    shutil.copyfile(model_path, copy)
    first = model_frame(copy, task="Summarize.")
    assert model_frame(copy, task="Summarize.") is first  # cached
    assert model_frame(copy, task="Answer.") is not first  # another task, another frame
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # replaced on disk
    again = model_frame(copy, task="Summarize.")
    assert again is not first and again == first


@pytest.mark.unit
def test_budget_rejects_nonsense(gguf_counter: TiktokenCounter) -> None:
    frame = prompt_frame(None)
    with pytest.raises(ValueError, match="context size"):
        compute_budget(0, 0, frame, gguf_counter)
    with pytest.raises(ValueError, match="reserve"):
        compute_budget(100, -1, frame, gguf_counter)
    assert compute_budget(10, 100, frame, gguf_counter).available == 0
