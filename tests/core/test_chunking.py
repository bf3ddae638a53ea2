"""Chunking: exact counts under the budget, cuts on the strongest boundary, sliding windows."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.documents import document_from_text, load_document
from app.core.planning.chunking import (
    Boundary,
    Chunk,
    chunk_document,
    overlapping_chunks,
    sliding_windows,
)
from app.core.tokens import TiktokenCounter
from tests.core.doc_strategies import markdown_documents

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parent.parent / "data"
_FIXTURES_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _check_partition(text: str, chunks: list[Chunk], counter: TiktokenCounter, budget: int) -> None:
    if not text:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for a, b in itertools.pairwise(chunks):
        assert a.end == b.start and a.start < a.end
    for c in chunks:
        assert c.tokens == counter.count(text[c.start : c.end])
        # Over the budget only when one character alone needs more tokens.
        assert c.tokens <= budget or c.end - c.start == 1


@settings(max_examples=120, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(markdown_documents(), st.integers(1, 400))
def test_chunks_partition_the_text_within_budget(
    gguf_counter: TiktokenCounter, text: str, budget: int
) -> None:
    doc = document_from_text(text, format="markdown")
    _check_partition(doc.text, chunk_document(doc, gguf_counter, budget), gguf_counter, budget)


@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(markdown_documents(), st.integers(4, 300), st.floats(0.05, 0.6))
def test_overlapping_chunks_cover_the_text(
    gguf_counter: TiktokenCounter, text: str, budget: int, overlap: float
) -> None:
    doc = document_from_text(text, format="markdown")
    chunks = overlapping_chunks(doc, gguf_counter, budget, overlap)
    if not doc.text:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(doc.text)
    for a, b in itertools.pairwise(chunks):
        assert a.start < b.start <= a.end  # advances, overlaps or touches, never leaves a gap
    for c in chunks:
        assert c.tokens == gguf_counter.count(doc.text[c.start : c.end])
        assert c.tokens <= budget or c.end - c.start == 1 or c.tokens <= budget // 4 + 4


def test_cuts_prefer_headings_then_paragraphs(gguf_counter: TiktokenCounter) -> None:
    para = "This sentence is about the context window. " * 6
    text = f"# One\n\n{para}\n\n{para}\n\n# Two\n\n{para}\n\n{para}"
    doc = document_from_text(text, format="markdown")
    chunks = chunk_document(doc, gguf_counter, gguf_counter.count(text) // 2 + 20)
    assert len(chunks) == 2
    assert doc.text[chunks[1].start :].lstrip().startswith("# Two")
    assert chunks[0].boundary == Boundary.HEADING


def test_chinese_sentence_ends_are_boundaries(gguf_counter: TiktokenCounter) -> None:
    text = "上下文窗口是模型一次能看到的文本。" * 30 + "它有多大？" * 30 + "很大！" * 30
    chunks = chunk_document(text, gguf_counter, 40)
    assert len(chunks) > 5
    for c in chunks[:-1]:
        assert text[c.end - 1] in "。？！；" and c.boundary == Boundary.SENTENCE


def test_code_lines_are_never_split_when_lines_fit(gguf_counter: TiktokenCounter) -> None:
    doc = load_document(DATA / "sample.py")
    chunks = chunk_document(doc, gguf_counter, 60)
    assert len(chunks) > 5
    for c in chunks[:-1]:
        after = doc.text[c.end : c.end + 1]
        assert after in ("\n", ""), (
            f"chunk {c.index} ends inside a line: {doc.text[c.end - 20 : c.end + 5]!r}"
        )


def test_text_without_sentence_ends_is_cut_at_line_ends(gguf_counter: TiktokenCounter) -> None:
    table = "\n".join(f"{i}\t{i * i}\tvalue {i}, more, and more" for i in range(400))
    chunks = chunk_document(table, gguf_counter, 50)
    assert len(chunks) > 10
    for c in chunks[:-1]:
        assert table[c.end] == "\n" and c.boundary == Boundary.LINE


def test_budget_smaller_than_a_sentence_cuts_at_words_then_chars(
    gguf_counter: TiktokenCounter
) -> None:
    text = "An extraordinarily long sentence without any punctuation " * 5 + "x" * 300
    chunks = chunk_document(text, gguf_counter, 5)
    _check_partition(text, chunks, gguf_counter, 5)
    strengths = {c.boundary for c in chunks}
    assert Boundary.WORD in strengths and Boundary.CHAR in strengths


def test_no_cut_inside_a_grapheme_cluster_when_avoidable(gguf_counter: TiktokenCounter) -> None:
    family = "👨‍👩‍👧‍👦"
    text = family * 20
    chunks = chunk_document(text, gguf_counter, gguf_counter.count(family) * 3)
    for c in chunks[:-1]:
        assert text[c.end] != "\u200d" and text[c.end - 1] != "\u200d"


def test_real_samples_chunk_cleanly(gguf_counter: TiktokenCounter) -> None:
    for name in ("sample.html", "sample.docx", "sample.pdf", "sample.md", "chinese-gbk.txt"):
        doc = load_document(DATA / name)
        chunks = chunk_document(doc, gguf_counter, 128)
        _check_partition(doc.text, chunks, gguf_counter, 128)
        clean = sum(c.boundary >= Boundary.SENTENCE for c in chunks) / len(chunks)
        assert clean >= 0.8, f"{name}: only {clean:.0%} of cuts on sentence or stronger boundaries"


def test_sliding_windows_respect_budget_and_overlap() -> None:
    chunks = [Chunk(i, i * 10, i * 10 + 10, 10, Boundary.SENTENCE) for i in range(50)]
    windows = sliding_windows(chunks, 100, 0.2)
    assert windows[0].first == 0 and windows[-1].last == 49
    for a, b in itertools.pairwise(windows):
        assert a.first < b.first <= a.last + 1
        shared = sum(c.tokens for c in chunks[b.first : a.last + 1])
        assert shared <= 0.2 * a.tokens
    assert all(w.tokens <= 100 for w in windows)
    assert sliding_windows(chunks, 100, 0.0)[1].first == 10
    with pytest.raises(ValueError, match="overlap"):
        sliding_windows(chunks, 100, 1.0)


def test_chunk_budget_must_be_positive(gguf_counter: TiktokenCounter) -> None:
    with pytest.raises(ValueError, match="at least one token"):
        chunk_document("text", gguf_counter, 0)
