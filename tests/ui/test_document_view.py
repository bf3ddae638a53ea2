"""The document view on real plans (cl100k, no model needed), offscreen.

Plans come from a real Planner over the sample text; the large-document test tiles the sample's
real head plan over 100 MB, since planning 100 MB itself takes minutes here.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QColor, QHelpEvent, QPalette, QTextCursor, QTextFormat
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from app.core.planning.chunking import Chunk
from app.core.planning.plan import Plan, Span
from app.core.planning.strategies import Planner, PlanOptions
from app.core.tokens import cl100k
from app.ui.document_view import (
    BUDGET_ON_SCALE,
    DROPPED,
    KEPT_A,
    KEPT_A_SHARED,
    KEPT_B,
    KEPT_B_SHARED,
    LINE_SLACK,
    SOURCE,
    WINDOW_CHARS,
    DocumentView,
)
from app.ui.plot_ticks import count_step
from tests.ui.text_probes import is_visible, kinds_in_block, make_view

DATA = Path(__file__).parents[1] / "data"
BUDGET = 4096


@pytest.fixture(scope="module")
def head(sample_planner: Planner) -> Plan:
    return sample_planner.plan("head", BUDGET)


@pytest.fixture(scope="module")
def tail(sample_planner: Planner) -> Plan:
    return sample_planner.plan("tail", BUDGET)


def show_offset(view: DocumentView, offset: int) -> None:
    """Scroll as a person would (the caret moves, the view follows)."""
    view.reveal(offset)


def test_head_then_tail_swaps_kept_and_dropped_on_screen(qtbot, sample_text, head, tail) -> None:
    view = make_view(qtbot, sample_text)
    start, end = 200, len(sample_text) - 300
    assert head.kept[0].start <= start < head.kept[0].end
    assert tail.kept[-1].start <= end < tail.kept[-1].end

    view.show_plan(head)
    assert is_visible(view, start)
    assert kinds_in_block(view, start) == {KEPT_A}
    assert kinds_in_block(view, end) == set()  # off screen: not highlighted yet (lazy)
    show_offset(view, end)
    assert is_visible(view, end)
    assert kinds_in_block(view, end) == {DROPPED}

    view.show_plan(tail)  # re-highlights what is on screen at once
    assert kinds_in_block(view, end) == {KEPT_A}
    show_offset(view, start)
    assert kinds_in_block(view, start) == {DROPPED}

    view.show_plan(None)
    assert kinds_in_block(view, start) == set()


def test_dropped_text_is_dimmed_and_kept_tinted_in_light_and_dark_palettes(qtbot) -> None:
    view = make_view(qtbot)

    def contrast(a: QColor, b: QColor) -> float:
        return abs(a.lightnessF() - b.lightnessF())

    for base, text in ((QColor("white"), QColor("black")), (QColor("#1e1e1e"), QColor("#e0e0e0"))):
        palette = QPalette(view.palette())
        palette.setColor(QPalette.ColorRole.Base, base)
        palette.setColor(QPalette.ColorRole.Text, text)
        view.setPalette(palette)
        formats = view._formats
        dropped = formats[DROPPED]
        assert contrast(dropped.foreground().color(), base) < contrast(text, base) * 0.6
        assert contrast(dropped.background().color(), base) < 0.1  # a faint background
        for kind in (KEPT_A, KEPT_B):
            tint = formats[kind].background().color()
            assert not formats[kind].hasProperty(QTextFormat.Property.ForegroundBrush)
            assert contrast(tint, base) < 0.25 and contrast(text, tint) > 0.5  # text stays legible
        assert formats[KEPT_A].background() != formats[KEPT_B].background()


def test_tooltip_gives_the_reason_and_tokens_of_the_span(qtbot, sample_text, head) -> None:
    view = make_view(qtbot, sample_text)
    view.show_plan(head)
    dropped = head.dropped[0]
    text = view.describe(dropped.start + 500)
    assert text.startswith("Dropped: after the first 4,096 tokens (head)")
    assert f"{dropped.tokens:,} tokens" in text
    assert "Chunk " in text
    assert view.describe(10).startswith("Kept: the start of the document")

    # a real tooltip event over a character of the dropped span
    offset = sample_text.index("\n\n", dropped.start + 2000) + 2
    offset = sample_text.index(" ", offset) - 1  # the middle of a word
    show_offset(view, offset)
    cursor = QTextCursor(view.text.document())
    cursor.setPosition(view.pane_position(offset))
    rect = view.text.cursorRect(cursor)
    point = QPoint(rect.left() + 3, rect.center().y())
    assert view.offset_at(view.text.position_at(point)) == offset
    with qtbot.waitSignal(view.span_hovered) as hovered:
        event = QHelpEvent(
            QEvent.Type.ToolTip, point, view.text.viewport().mapToGlobal(point)
        )  # fmt: skip
        QApplication.sendEvent(view.text.viewport(), event)
    assert hovered.args[0] == dropped
    assert "after the first 4,096 tokens (head)" in QToolTip.text()
    QToolTip.hideText()

    # and a mouse that rests there: Qt itself asks for the tooltip
    QTest.mouseMove(view.text.viewport(), point)
    QTest.mouseMove(view.text.viewport(), point + QPoint(1, 0))
    try:
        qtbot.waitUntil(lambda: "(head)" in QToolTip.text(), timeout=3000)
    except AssertionError:
        pytest.skip("no hover tooltips from mouse moves on this platform plugin")


def test_caret_tells_the_span_for_keyboard_users(qtbot, sample_text, head) -> None:
    view = make_view(qtbot, sample_text)
    view.show_plan(head)
    assert view.text.focusPolicy() & view.text.focusPolicy().TabFocus
    show_offset(view, head.dropped[0].start + 10)
    assert view.caret_info.text().startswith("Dropped: after the first 4,096 tokens")
    show_offset(view, 5)
    assert view.caret_info.text().startswith("Kept: the start of the document")


def test_histogram_counts_every_chunk_and_marks_the_budget(qtbot, sample_text, head) -> None:
    view = make_view(qtbot, sample_text)
    view.show_plan(head)
    kept = view.kept_bars.opts["height"]
    dropped = view.dropped_bars.opts["height"]
    assert sum(kept) + sum(dropped) == len(head.chunks)
    assert sum(kept) == len(head.kept_chunks())
    top = max(c.tokens for c in head.chunks)
    (_, x_end), (_, y_end) = view.histogram.getViewBox().viewRange()
    if head.budget <= BUDGET_ON_SCALE * top:  # the budget line sits among the bars
        assert view.budget_line.value() == head.budget and view.budget_line.isVisible()
    else:  # far beyond them: named under the axis, which spans the chunks so bars stay apart
        assert not view.budget_line.isVisible() and x_end < head.budget
        label = view.histogram.getAxis("bottom").labelText
        assert f"budget {head.budget:,}, off the scale" in label
    assert top <= x_end and max(kept) <= y_end
    assert f" · {len(head.chunks):,} chunks · " in view.plan_info.text()
    view.show_plan(None)
    assert len(view.kept_bars.opts["height"]) == 0 and not view.budget_line.isVisible()


def test_windows_of_multi_pass_plans_alternate_and_overlaps_stand_out(qtbot) -> None:
    text = (DATA / "sample.md").read_text(encoding="utf-8")
    planner = Planner(text, cl100k())
    view = make_view(qtbot, text)
    semantic = planner.plan("semantic", 96)
    assert len(semantic.windows) >= 3
    view.show_plan(semantic)
    assert {KEPT_A, KEPT_B} <= set(view._layers.kinds)
    second = semantic.windows[1]
    assert f"In pass 2 of {len(semantic.windows)}" in view.describe(second.start + 1)
    assert kinds_in_block(view, semantic.windows[0].start) & {KEPT_A, KEPT_A_SHARED}

    wide = planner.plan("semantic", 96, PlanOptions(overlap=0.6))  # windows sharing chunks
    view.show_plan(wide)
    assert {KEPT_A_SHARED, KEPT_B_SHARED} & set(view._layers.kinds)
    assert "In passes " in view.describe(wide.windows[1].start + 1)

    rolling = planner.plan("rolling", 96)  # windows in turn, each chunk in one: none shared
    view.show_plan(rolling)
    assert not {KEPT_A_SHARED, KEPT_B_SHARED} & set(view._layers.kinds)
    assert f"In pass 2 of {len(rolling.windows)}" in view.describe(rolling.windows[1].start + 1)


def test_highlight_sources_scrolls_to_the_first_and_clears(qtbot, sample_text, head) -> None:
    view = make_view(qtbot, sample_text)
    view.show_plan(head)
    first, second = (1_000_000, 1_000_040), (1_200_000, 1_200_010)
    assert not is_visible(view, first[0])
    view.highlight_sources([second, first])
    assert is_visible(view, first[0])
    assert SOURCE in kinds_in_block(view, first[0])
    view.highlight_sources([])
    assert SOURCE not in kinds_in_block(view, first[0])
    assert DROPPED in kinds_in_block(view, first[0])


def test_counts_say_fits_exceeds_or_unknown(qtbot) -> None:
    view = make_view(qtbot)
    view.set_counts(12_000, 3_000, 2_900, 4096)
    assert view.summary.text() == (
        "12,000 characters · 3,000 tokens (model) · 2,900 tokens (cl100k) · "
        "fits the 4,096-token context"
    )
    view.set_counts(1_618_757, 410_004, 398_000, 4096)
    assert "410,004 tokens (model)" in view.summary.text()
    assert view.summary.text().endswith("100.1× the 4,096-token context")
    view.set_counts(1_618_757, None, 398_000, 4096)
    assert "tokens (model): counting…" in view.summary.text()
    assert view.summary.text().endswith("about 97.2× the 4,096-token context")
    view.set_counts(1_618_757, None, None, None)
    assert view.summary.text() == (
        "1,618,757 characters · tokens (model): no model · tokens (cl100k): counting…"
    )


def test_offsets_map_exactly_past_crlf_and_characters_beyond_the_bmp(qtbot) -> None:
    rng = random.Random(7)
    pieces = ["word", " ", "\r\n", "\n", "\t", "é", "中文", "😀", "𝔘", "\r", "\u2028"]
    text = "".join(rng.choice(pieces) for _ in range(3000))
    view = make_view(qtbot, text)
    doc = view.text.document()
    astral = sum(ord(c) > 0xFFFF for c in text)
    assert doc.characterCount() - 1 == len(text) + astral
    cursor = QTextCursor(doc)
    for offset in rng.sample(range(len(text)), 400):
        q = view.pane_position(offset)
        width = 2 if ord(text[offset]) > 0xFFFF else 1
        cursor.setPosition(q)
        cursor.setPosition(q + width, QTextCursor.MoveMode.KeepAnchor)
        shown = cursor.selectedText()
        expected = {"\r": [" ", "\u2029"], "\n": ["\u2029"], "\u2028": ["\u2028"]}.get(
            text[offset], [text[offset]]
        )
        assert shown in expected, (offset, text[offset], shown)
        assert view.offset_at(q) == offset

    plan = Planner(text, cl100k()).plan("head", 200)
    view.show_plan(plan)
    tip = view.describe(plan.dropped[0].start)
    assert tip.startswith("Dropped: after the first 200 tokens (head)")


def screen_top(view: DocumentView) -> int:
    return view.offset_at(view.text.firstVisibleBlock().position())


def shows_the_text(view: DocumentView, text: str) -> bool:
    """Every line on screen is the text at the offset the view says it is."""
    blocks = view.text.visible_blocks()
    return bool(blocks) and all(
        b.text() == text[view.offset_at(b.position()) :][: len(b.text())] for b in blocks
    )


def test_a_large_text_is_shown_through_a_window_that_follows_the_screen(qtbot, sample_text) -> None:
    text = sample_text * 3
    view = make_view(qtbot, text)
    assert view.text.document().characterCount() - 1 <= WINDOW_CHARS + LINE_SLACK
    assert view.bar.isVisible() and view.bar.maximum() > len(text) // 2

    # paging down with the keyboard crosses window edges without a jump or a wrong line
    view.text.setFocus()
    first_window = view.offset_at(0)
    tops, carets = [], []
    while view.offset_at(0) < first_window + WINDOW_CHARS and len(tops) < 600:
        QTest.keyClick(view.text, Qt.Key.Key_PageDown)
        QApplication.processEvents()
        tops.append(screen_top(view))
        carets.append(view.offset_at(view.text.textCursor().position()))
        assert shows_the_text(view, text)
    assert view.offset_at(0) >= first_window + WINDOW_CHARS, "the window never moved"
    assert tops == sorted(tops) and carets == sorted(carets) and len(set(tops)) == len(tops)
    assert abs(view.bar.value() - tops[-1]) <= view.bar.pageStep()

    # a selection stays selected while the pane scrolls and the window moves under it
    view.reveal(tops[-1] + 100)
    for _ in range(3):
        QTest.keyClick(view.text, Qt.Key.Key_Down, Qt.KeyboardModifier.ShiftModifier)
    selected = view.text.textCursor().selectedText()
    assert len(selected) > 20
    start = view.offset_at(0)
    while view.offset_at(0) == start:
        pane_bar = view.text.verticalScrollBar()
        pane_bar.setValue(pane_bar.value() + 5)
        QApplication.processEvents()
    assert view.text.textCursor().selectedText() == selected

    # the whole text's ends, from the keyboard and from the bar
    QTest.keyClick(view.text, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    assert view.offset_at(view.text.textCursor().position()) == len(text)
    QTest.keyClick(view.text, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    assert view.offset_at(view.text.textCursor().position()) == 0 and screen_top(view) == 0
    view.bar.setValue(len(text) // 2)
    QApplication.processEvents()
    top = screen_top(view)
    assert top <= len(text) // 2 < top + 2_000 and shows_the_text(view, text)


def tile_plan(plan: Plan, unit: str, size: int) -> Plan:
    """The sample's real head plan repeated over ``unit`` tiled to ``size`` characters."""
    chunks: list[Chunk] = []
    for rep in range(size // len(unit) + 1):
        shift = rep * len(unit)
        for c in plan.chunks:
            if c.start + shift >= size:
                break
            chunks.append(
                Chunk(len(chunks), c.start + shift, min(size, c.end + shift), c.tokens, c.boundary)
            )
    kept = plan.kept[0]
    dropped = Span(kept.end, size, sum(c.tokens for c in chunks) - kept.tokens,
                   plan.dropped[0].reason)  # fmt: skip
    total = sum(c.tokens for c in chunks)
    return Plan("head", plan.budget, total, plan.kept, (dropped,), chunks=tuple(chunks))


def test_a_100_mb_document_opens_at_once_and_scrolls(qtbot, sample_text, head) -> None:
    size = 100_000_000
    big = (sample_text * (size // len(sample_text) + 1))[:size]
    plan = tile_plan(head, sample_text, size)
    view = make_view(qtbot)

    t = time.perf_counter()
    with qtbot.waitSignal(view.document_ready, timeout=1000):
        view.set_document(big)
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    view.show_plan(plan)
    t_plan = time.perf_counter() - t
    assert view.text.document().characterCount() - 1 <= WINDOW_CHARS + LINE_SLACK
    assert view.text.firstVisibleBlock().text().strip()
    assert kinds_in_block(view, 100) == {KEPT_A}

    t = time.perf_counter()
    view.bar.setValue(size * 3 // 4)
    QApplication.processEvents()
    t_scroll = time.perf_counter() - t
    middle = next(b for b in view.text.visible_blocks() if b.text().strip())
    offset = view.offset_at(middle.position())
    assert size * 3 // 4 - 2_000 < offset < size * 3 // 4 + 10_000
    assert middle.text() == big[offset : offset + len(middle.text())]
    assert kinds_in_block(view, offset) == {DROPPED}
    t = time.perf_counter()
    view.highlight_sources([(size - 1000, size - 990)])
    t_jump = time.perf_counter() - t
    assert is_visible(view, size - 1000) and SOURCE in kinds_in_block(view, size - 1000)
    print(
        f"\n100 MB: set_document {t_open * 1000:.0f} ms, show_plan ({len(plan.chunks):,} chunks) "
        f"{t_plan * 1000:.0f} ms, scroll to 3/4 {t_scroll * 1000:.0f} ms, jump to a source "
        f"{t_jump * 1000:.0f} ms; the pane holds {view.text.document().blockCount():,} lines"
    )


def test_count_axes_are_marked_at_whole_numbers() -> None:
    """A histogram of 2 chunks is marked 0, 1, 2, never 0.5 or 1.5."""
    tops = (2, 4, 8, 13, 40, 2206, 12_000)
    assert [count_step(top) for top in tops] == [1, 1, 2, 5, 10, 1000, 5000]
