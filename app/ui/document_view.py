"""The document view: the text as a plan sends it to the model, up to 100 MB.

The text is shown read-only with the current plan painted over it: kept spans tinted (the
windows of a multi-pass plan alternate two tints, text in more than one window is tinted
stronger), dropped spans dimmed, a mark at the first character of every chunk, and the reason
and token count of any span on hover (or, from the keyboard, under the caret). Above it a line
of counts and the document-to-context ratio; below it a histogram of the plan's chunk token
lengths with the budget.

Why it is built the way it is, with figures from a 2-core machine:

- A ``QTextDocument`` of the whole text is what makes large documents slow: filling one with
  50 MB takes 10 s of Qt calls (each holding the GIL, so the GUI thread waits), installing it
  walks every line on the GUI thread (0.35 s), and its layouts take hundreds of MB. So the
  text pane only ever holds a *window* of the text: all of it up to ``FULL_CHARS``, else
  ``WINDOW_CHARS`` around what is on screen (25 ms to build). A scroll bar of its own spans the
  whole text in characters; when the screen comes within ``EDGE_CHARS`` of the window's edge,
  the window moves (keeping the line at the top, the caret and the selection where they were).
  Opening 100 MB is therefore as fast as opening 250 KB.
- Colours come from a ``QSyntaxHighlighter`` that formats one block from the stretches that
  intersect it (a bisection over sorted starts, in Python offsets of the whole text). A full
  ``rehighlight()`` calls Python once per line, so it never runs: the highlighter is attached
  while the window's document is empty, and a new plan re-highlights only the blocks on screen;
  the others are re-highlighted when they scroll into view.
- A plan's lookups (spans by start, the coloured stretches, the chunk-length histogram) come
  as a :class:`~app.ui.plan_index.PlanIndex` made on the planning thread: for a 50 MB document
  it walks ~90k chunks in Python, ~100 ms that the GUI thread no longer spends.
- Plans count Python ``str`` offsets; Qt counts UTF-16 units and makes one separator of
  ``\\r\\n``. The pane shows each ``\\r\\n`` as `` \\n`` and maps the offsets of characters beyond
  the BMP, so every position maps exactly.

The pane, its window of the text and its highlighter are in text_pane.py; this module is the
view around it (counts, the plan map, the histogram) and keeps the pane's window where the
person reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QHBoxLayout,
    QScrollBar,
    QSplitter,
    QStackedLayout,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.core.planning.plan import Plan, Span
from app.ui.i18n import FollowsLanguage
from app.ui.plan_index import (
    DROPPED,
    KEPT_A,
    KEPT_A_SHARED,
    KEPT_B,
    KEPT_B_SHARED,
    SOURCE,
    PlanIndex,
    index_plan,
)
from app.ui.plan_map import NOTHING, PlanMap
from app.ui.plan_reasons import reason_label
from app.ui.plot_ticks import count_axis
from app.ui.start_page import StartPage
from app.ui.text_pane import (
    EDGE_CHARS,
    FULL_CHARS,
    LINE_SLACK,
    WINDOW_CHARS,
    Layers,
    Offsets,
    TextPane,
    TextWindow,
    build_document,
    window_bounds,
)
from app.ui.widgets import mix, plain_label, still_plot

# Names callers import from here, with this module's own.
__all__ = [
    "BUDGET_ON_SCALE",
    "DROPPED",
    "EDGE_CHARS",
    "FULL_CHARS",
    "KEPT_A",
    "KEPT_A_SHARED",
    "KEPT_B",
    "KEPT_B_SHARED",
    "LINE_SLACK",
    "SOURCE",
    "WINDOW_CHARS",
    "DocumentView",
    "Offsets",
    "window_bounds",
]

BUDGET_ON_SCALE = 4  # the budget line is drawn when it is at most this many longest chunks


def _turn(colour: QColor, degrees: int) -> QColor:
    """The same colour with its hue turned, for a second tint that stays in the palette's tone."""
    h, s, v, a = colour.hsvHue(), colour.hsvSaturation(), colour.value(), colour.alpha()
    return QColor.fromHsv((max(h, 0) + degrees) % 360, max(s, 90), v, a)


class DocumentView(FollowsLanguage, QWidget):
    """The document with the current plan, counts and a histogram of chunk lengths.

    Call :meth:`set_document` with the text, then :meth:`show_plan`, :meth:`set_counts` and
    :meth:`highlight_sources` in any order.
    """

    document_ready = Signal()  # the text is shown
    span_hovered = Signal(object)  # the Span under the mouse, or None

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = plain_label()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.plan_info = plain_label()
        self.plan_info.setWordWrap(True)
        self.text = TextPane()
        self.text.describe = self._describe_qt
        self.text.hovered.connect(self._on_hovered)
        self.text.cursorPositionChanged.connect(self._on_caret)
        self.text.verticalScrollBar().valueChanged.connect(self._on_pane_scrolled)
        self.text.edge_wanted.connect(self._go_to_edge)
        # the whole text's scroll bar, in characters, when the pane holds only a window of it
        self.bar = QScrollBar(Qt.Orientation.Vertical)
        self.bar.valueChanged.connect(self._on_bar_moved)
        self.bar.hide()
        self.map = PlanMap()
        self.map.jump_requested.connect(self._on_map_jump)
        self.caret_info = plain_label()
        self.caret_info.setWordWrap(True)

        self.histogram = still_plot(90)
        self.kept_bars = pg.BarGraphItem(x=[], height=[], width=1.0)
        self.dropped_bars = pg.BarGraphItem(x=[], height=[], width=1.0)
        self.budget_line = pg.InfiniteLine(
            pos=0, angle=90, movable=False, label="",
            labelOpts={"position": 0.85, "anchors": [(1, 0), (1, 0)]},
        )  # fmt: skip
        for item in (self.kept_bars, self.dropped_bars, self.budget_line):
            self.histogram.addItem(item)
        self.budget_line.setVisible(False)

        page = QWidget()
        row = QHBoxLayout(page)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.text, 1)
        row.addWidget(self.bar)
        row.addWidget(self.map)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("splitter-document")  # the window saves where the person put it
        splitter.addWidget(page)
        splitter.addWidget(self.histogram)
        splitter.setStretchFactor(0, 4)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([4000, 1000])
        splitter.setCollapsible(0, False)
        self._document_page = QWidget()
        layout = QVBoxLayout(self._document_page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(self.plan_info)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.caret_info)
        # before any document: what to do first (the window wires its buttons)
        self.start = StartPage()
        self._pages = QStackedLayout(self)
        self._pages.addWidget(self.start)
        self._pages.addWidget(self._document_page)

        self._text_str = ""
        self._window = TextWindow(0, 0, Offsets(""))
        self._doc: QTextDocument | None = None
        self._moving = False  # the pane is being scrolled from here, not by the person
        # a child timer, which goes with the view (see TextPane's refresh)
        self._recentre_timer = QTimer(self)
        self._recentre_timer.setSingleShot(True)
        self._recentre_timer.setInterval(0)
        self._recentre_timer.timeout.connect(self._recentre)
        self._plan: Plan | None = None
        self._sources: list[tuple[int, int]] = []
        self._layers = Layers()
        self._index = PlanIndex()  # the plan, for lookups in Python offsets
        # what the summary line counts: nothing (no document), the characters only (a text just
        # set), or set_counts's arguments
        self._counts: tuple[int, int | None, int | None, int | None] | int | None = None
        self._apply_palette()
        self._set_window(0, 0)
        self.retranslate()

    def retranslate(self) -> None:
        """Names, the counts, the plan's line, the caret's span and the histogram's labels in
        the language now installed."""
        self.text.setAccessibleName(self.tr("Document text"))
        self.bar.setAccessibleName(self.tr("Position in the document"))
        self.caret_info.setAccessibleName(self.tr("Span under the caret"))
        self.histogram.setLabel("left", self.tr("chunks"))
        self.budget_line.label.setFormat(self.tr("budget {value:,.0f}"))
        self._show_counts()
        self._update_plan_info()
        self._label_histogram()
        self._on_caret()

    # -- public API -------------------------------------------------------------------------

    def set_document(self, text: str) -> None:
        """Show ``text`` (read-only) from its start; the plan and sources are cleared."""
        self._pages.setCurrentWidget(self._document_page)
        self._text_str = text
        self._plan = None
        self._sources = []
        self._index = PlanIndex()
        self._counts = len(text)
        self._show_counts()
        self.text.text_length = len(text)
        self._set_window(*window_bounds(text, 0))
        windowed = len(text) > FULL_CHARS
        self.bar.setVisible(windowed)  # the whole text's bar stands in for the pane's own
        self.text.setVerticalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAlwaysOff
            if windowed
            else Qt.ScrollBarPolicy.ScrollBarAsNeeded
        )
        self._scroll_to_top(0)
        self._repaint_layers()
        self.document_ready.emit()

    def show_plan(self, plan: Plan | None, index: PlanIndex | None = None) -> None:
        """Paint ``plan`` over the text and draw its chunk histogram; None clears both.

        ``index`` is ``index_plan(plan)`` when the caller made it off the GUI thread (a plan of
        a long document takes ~100 ms to index); without it the index is made here.
        """
        self._plan = plan
        self._index = index if index is not None else index_plan(plan)
        self._update_histogram()
        self._update_plan_info()
        self._repaint_layers()

    def set_counts(
        self, chars: int, exact_tokens: int | None, cl100k_tokens: int | None, n_ctx: int | None
    ) -> None:
        """The summary line. ``exact_tokens`` None reads "no model" without ``n_ctx`` (no model
        is loaded) and "counting…" with it; the ratio uses the cl100k estimate until then."""
        self._counts = (chars, exact_tokens, cl100k_tokens, n_ctx)
        self._show_counts()

    def _show_counts(self) -> None:
        """The summary line, from what it counts (see ``_counts``)."""
        if self._counts is None:
            self.summary.setText(self.tr("No document"))
            return
        if isinstance(self._counts, int):
            self.summary.setText(self.tr("{0:,} characters").format(self._counts))
            return
        chars, exact_tokens, cl100k_tokens, n_ctx = self._counts
        parts = [self.tr("{0:,} characters").format(chars)]
        if exact_tokens is not None:
            parts.append(self.tr("{0:,} tokens (model)").format(exact_tokens))
        elif n_ctx is None:
            parts.append(self.tr("tokens (model): no model"))
        else:
            parts.append(self.tr("tokens (model): counting…"))
        if cl100k_tokens is not None:
            parts.append(self.tr("{0:,} tokens (cl100k)").format(cl100k_tokens))
        else:
            parts.append(self.tr("tokens (cl100k): counting…"))
        tokens = exact_tokens if exact_tokens is not None else cl100k_tokens
        if n_ctx is not None and tokens is not None:
            estimate = "" if exact_tokens is not None else self.tr("about ")
            if tokens > n_ctx:
                parts.append(
                    self.tr("{0}{1:,.1f}× the {2:,}-token context").format(
                        estimate, tokens / max(1, n_ctx), n_ctx
                    )
                )
            else:
                parts.append(self.tr("fits the {0:,}-token context").format(n_ctx))
        self.summary.setText(" · ".join(parts))

    def highlight_sources(self, spans: Sequence[tuple[int, int]]) -> None:
        """Highlight these character ranges strongly and scroll to the first; [] clears."""
        self._sources = [(a, b) for a, b in spans if b > a]
        self._repaint_layers()
        if self._sources:
            self.reveal(min(self._sources)[0])

    def reveal(self, offset: int) -> None:
        """Put the caret at text offset ``offset`` and centre it on screen."""
        offset = min(max(0, offset), len(self._text_str))
        self._hold(offset)
        self._moving = True
        try:
            cursor = QTextCursor(self.text.document())
            cursor.setPosition(self._window.to_pane(offset))
            self.text.setTextCursor(cursor)
            self.text.centerCursor()
        finally:
            self._moving = False
        self._sync_bar()
        self.text.refresh_visible()

    def pane_position(self, offset: int) -> int:
        """The text pane's position of text offset ``offset``, or -1 outside its window."""
        return self._window.to_pane(offset) if self._window.holds(offset) else -1

    def offset_at(self, position: int) -> int:
        """The text offset of the text pane's position ``position``."""
        return self._window.to_py(position)

    # -- lookups ------------------------------------------------------------------------------

    def span_at(self, offset: int) -> tuple[Span, bool] | None:
        """The plan's span holding character ``offset`` and whether it is kept, or None."""
        return self._index.span_at(offset)

    def describe(self, offset: int) -> str:
        """What the tooltip says about character ``offset``: kept or dropped, why, its tokens,
        its passes and chunk."""
        found = self.span_at(offset)
        if found is None:
            return ""
        span, kept = found
        head = self.tr("Kept: {0}") if kept else self.tr("Dropped: {0}")
        lines = [
            head.format(reason_label(span.reason)),
            self.tr("{0:,} tokens, characters {1:,}–{2:,}").format(
                span.tokens, span.start, span.end
            ),
        ]
        index = self._index
        first = bisect.bisect_right(index.window_ends, offset)  # the first window ending after it
        last = bisect.bisect_right(index.window_starts, offset) - 1
        n = len(index.window_starts)
        if n and first <= last:
            if first == last:
                lines.append(self.tr("In pass {0:,} of {1:,}").format(first + 1, n))
            else:
                lines.append(
                    self.tr("In passes {0:,}–{1:,} of {2:,}").format(first + 1, last + 1, n)
                )
        k = bisect.bisect_right(index.chunk_starts, offset) - 1
        if self._plan is not None and k >= 0:
            chunk = self._plan.chunks[k]
            lines.append(
                self.tr("Chunk {0:,} of {1:,}: {2:,} tokens").format(
                    k + 1, len(index.chunk_starts), chunk.tokens
                )
            )
        return "\n".join(lines)

    # -- internals ---------------------------------------------------------------------------

    def _set_window(self, start: int, end: int) -> None:
        """Put ``text[start:end]`` in the pane; the caret and selection stay where they were
        when the new window holds them."""
        old_window, old_doc = self._window, self._doc
        cursor = self.text.textCursor()
        anchor, caret = old_window.to_py(cursor.anchor()), old_window.to_py(cursor.position())
        piece = self._text_str[start:end]
        window = TextWindow(start, end, Offsets(piece))
        doc, highlighter = build_document(piece, self.text.font(), window)
        highlighter.formats, highlighter.layers = self._formats, self._layers
        self._window, self._doc = window, doc
        self.text.text_window, self.text.highlighter = window, highlighter
        self.text.fresh.clear()
        self._moving = True
        try:
            self.text.setDocument(doc)
            if old_doc is not None and window.holds(anchor) and window.holds(caret):
                cursor = QTextCursor(doc)
                cursor.setPosition(window.to_pane(anchor))
                cursor.setPosition(window.to_pane(caret), QTextCursor.MoveMode.KeepAnchor)
                self.text.setTextCursor(cursor)
        finally:
            self._moving = False
        if old_doc is not None and isValid(old_doc):
            old_doc.deleteLater()
        self._update_steps()

    def _holds_comfortably(self, offset: int) -> bool:
        """Whether ``offset`` is in the window and not near an edge that is not the text's."""
        w, n = self._window, len(self._text_str)
        lo = w.start + EDGE_CHARS if w.start > 0 else 0
        hi = w.end - EDGE_CHARS if w.end < n else n
        return lo <= offset <= hi

    def _hold(self, offset: int) -> None:
        """Move the window, if need be, so that it holds ``offset`` comfortably."""
        if not self._holds_comfortably(offset):
            self._set_window(*window_bounds(self._text_str, offset))

    def _screen(self) -> tuple[int, int]:
        """The text offsets at the top left and the bottom right of the screen."""
        window = self._window
        return (
            window.to_py(self.text.firstVisibleBlock().position()),
            window.to_py(self.text.last_visible_position()),
        )

    def _scroll_to_top(self, offset: int) -> None:
        """Show the line holding text offset ``offset`` at the top of the screen."""
        self._hold(offset)
        block = self.text.document().findBlock(self._window.to_pane(offset))
        self._moving = True
        try:
            self.text.verticalScrollBar().setValue(block.firstLineNumber())
        finally:
            self._moving = False
        self._sync_bar()
        self.text.refresh_visible()

    def _on_pane_scrolled(self, _value: int) -> None:
        """The person scrolled the pane: follow with the bar, move the window near its edge."""
        if self._moving:
            return
        top, bottom = self._screen()
        self._sync_bar(top)
        comfortable = self._holds_comfortably(top) and self._holds_comfortably(bottom)
        if not comfortable and not self._recentre_timer.isActive():  # once Qt has scrolled
            self._recentre_timer.start()

    def _recentre(self) -> None:
        top, bottom = self._screen()
        if not (self._holds_comfortably(top) and self._holds_comfortably(bottom)):
            self._set_window(*window_bounds(self._text_str, top))
            self._scroll_to_top(top)

    def _on_bar_moved(self, value: int) -> None:
        if not self._moving:
            self._scroll_to_top(value)

    def _on_map_jump(self, offset: int) -> None:
        """A click on the plan map: that place in the middle of the screen."""
        top, bottom = self._screen()
        self._scroll_to_top(max(0, offset - (bottom - top) // 2))

    def _go_to_edge(self, at_end: bool) -> None:
        """Ctrl+Home / Ctrl+End: the start or the end of the whole text, not of the window."""
        self.reveal(len(self._text_str) if at_end else 0)

    def _sync_bar(self, top: int | None = None) -> None:
        """The bar at the text offset on top of the screen (``top`` when the caller knows it)."""
        screen = self._screen()
        self.map.set_screen(screen[0] if top is None else top, screen[1])
        if not self.bar.isVisible() or self.bar.isSliderDown():
            return  # a bar being dragged is the person's
        self.bar.blockSignals(True)
        self.bar.setValue(screen[0] if top is None else top)
        self.bar.blockSignals(False)

    def _update_steps(self) -> None:
        """The bar's range and steps in characters, from the window's mean line length."""
        lines = max(1, self._doc.blockCount()) if self._doc is not None else 1
        per_line = max(1, (self._window.end - self._window.start) // lines)
        spacing = max(1, self.text.fontMetrics().lineSpacing())
        per_screen = max(1, self.text.viewport().height() // spacing)
        page = per_line * per_screen
        self.bar.blockSignals(True)
        self.bar.setRange(0, max(0, len(self._text_str) - page))
        self.bar.setPageStep(page)
        self.bar.setSingleStep(per_line * 3)
        self.bar.blockSignals(False)

    def _repaint_layers(self) -> None:
        """New layers for the highlighter; only the blocks on screen are re-highlighted now."""
        starts, ends, kinds = self._index.stretches
        sources = sorted(self._sources)
        self._layers = Layers(
            starts, ends, kinds, [a for a, _ in sources], [b for _, b in sources]
        )  # fmt: skip
        if self.text.highlighter is not None:
            self.text.highlighter.layers = self._layers
        self.text.mark_starts = self._index.chunk_starts[1:]
        self.map.set_plan(len(self._text_str), self._index.stretches)
        self.text.invalidate()
        self.text.viewport().update()
        self._on_caret()

    def _update_histogram(self) -> None:
        plan, hist = self._plan, self._index.histogram
        if plan is None or hist is None:
            self.kept_bars.setOpts(x=[], height=[], width=1.0)
            self.dropped_bars.setOpts(x=[], height=[], y0=[], width=1.0)
            self.budget_line.setVisible(False)
            self._label_histogram()
            return
        self.kept_bars.setOpts(x=hist.centres, height=hist.kept, width=hist.width)
        self.dropped_bars.setOpts(x=hist.centres, height=hist.dropped, y0=hist.kept,
                                  width=hist.width)  # fmt: skip
        # The axis spans the chunks: a budget far beyond the longest chunk would squeeze every
        # bar into one at 0, so it is then named under the axis instead of drawn.
        on_scale = self._budget_on_scale()
        self.budget_line.setVisible(on_scale)  # first: a hidden line does not update its label
        self.budget_line.setValue(plan.budget)
        self._label_histogram()
        top_x = max(hist.top, plan.budget) if on_scale else hist.top
        self.histogram.setXRange(0, max(1, top_x) * 1.05, padding=0)
        top_y = int((hist.kept + hist.dropped).max())
        self.histogram.setYRange(0, top_y * 1.1 + 1, padding=0)
        count_axis(self.histogram.getAxis("left"), top_y)

    def _label_histogram(self) -> None:
        """The chunk axis's name, saying the budget when its line is off the scale."""
        label = self.tr("tokens per chunk")
        if self._plan is not None and not self._budget_on_scale():
            label = self.tr("tokens per chunk (budget {0:,}, off the scale)").format(
                self._plan.budget
            )
        self.histogram.setLabel("bottom", label)

    def _budget_on_scale(self) -> bool:
        """Whether the plan's budget line fits the chunk axis (no plan: nothing is off it)."""
        plan, hist = self._plan, self._index.histogram
        return plan is None or hist is None or plan.budget <= BUDGET_ON_SCALE * max(1, hist.top)

    def _update_plan_info(self) -> None:
        plan = self._plan
        if plan is None:
            self.plan_info.setText("")
            return
        if plan.refused:
            self.plan_info.setText(
                self.tr("{0}: refused — {1}").format(plan.strategy, plan.refused)
            )
            return
        kept, total = plan.of_document()  # the total the summary line above says too
        text = self.tr(
            "{0}: {1:,} of {2:,} tokens reach the model · spans kept/dropped: {3:,}/{4:,} · "
            "{5:,} chunks · cuts on sentence boundaries or better: {6:.0%}"
        ).format(
            plan.strategy, kept, total, len(plan.kept),
            len(plan.dropped), len(plan.chunks), plan.boundary_integrity,
        )  # fmt: skip
        if plan.windows:
            text += self.tr(" · {0:,} passes, the largest {1:,} tokens (budget {2:,})").format(
                len(plan.windows), plan.peak_tokens, plan.budget
            )
        self.plan_info.setText(text)

    def _describe_qt(self, position: int) -> str:
        return self.describe(self._window.to_py(position))

    def _on_hovered(self, position: int) -> None:
        found = self.span_at(self._window.to_py(position)) if position >= 0 else None
        self.span_hovered.emit(found[0] if found else None)

    def _on_caret(self) -> None:
        if self._plan is None:
            self.caret_info.setText("")
            return
        offset = self._window.to_py(self.text.textCursor().position())
        self.caret_info.setText(self.describe(offset).replace("\n", " · "))

    def _apply_palette(self) -> None:
        """Formats and plot colours from the palette, so light and dark themes both read."""
        pal = self.palette()
        base = pal.color(QPalette.ColorRole.Base)
        text = pal.color(QPalette.ColorRole.Text)
        accent = pal.color(QPalette.ColorRole.Highlight)
        second = _turn(accent, 150)
        formats = [QTextCharFormat() for _ in range(6)]
        formats[KEPT_A].setBackground(mix(base, accent, 0.18))
        formats[KEPT_B].setBackground(mix(base, second, 0.18))
        formats[KEPT_A_SHARED].setBackground(mix(base, accent, 0.36))
        formats[KEPT_B_SHARED].setBackground(mix(base, second, 0.36))
        formats[DROPPED].setForeground(mix(text, base, 0.55))
        formats[DROPPED].setBackground(mix(base, text, 0.06))
        formats[SOURCE].setBackground(accent)
        formats[SOURCE].setForeground(pal.color(QPalette.ColorRole.HighlightedText))
        self._formats = formats
        if self.text.highlighter is not None and isValid(self.text.highlighter):
            self.text.highlighter.formats = formats
        self.text.mark_colour = mix(accent, text, 0.3)
        self.map.set_colours(
            {
                KEPT_A: mix(base, accent, 0.55),
                KEPT_B: mix(base, second, 0.55),
                KEPT_A_SHARED: mix(base, accent, 0.8),
                KEPT_B_SHARED: mix(base, second, 0.8),
                DROPPED: mix(base, text, 0.18),
                NOTHING: base,
            },
            text,
        )

        self.histogram.setBackground(base)
        for side in ("left", "bottom"):
            axis = self.histogram.getAxis(side)
            axis.setPen(pg.mkPen(text))
            axis.setTextPen(pg.mkPen(text))
        self.kept_bars.setOpts(brush=mix(base, accent, 0.7), pen=pg.mkPen(accent))
        dim = mix(text, base, 0.55)
        self.dropped_bars.setOpts(brush=mix(base, text, 0.25), pen=pg.mkPen(dim))
        self.budget_line.setPen(pg.mkPen(text, width=2, style=Qt.PenStyle.DashLine))
        self.budget_line.label.setColor(text)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._apply_palette()
            self.text.invalidate()
