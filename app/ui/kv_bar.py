"""The buffer panel's second stage: the KV cache as one bar of segments.

:class:`KVLayout` is the panel's picture of the cache (segments contiguous from position 0, moved
as the run's events say: chunks placed, evicted and shifted, the output grown, the question fixed
by llama.cpp's own cell count); :class:`KVBar` paints it as proportional rectangles, never a
widget per cell, and says what a segment holds on hover. The panel (:mod:`app.ui.buffer_panel`)
keeps one per run, and one per lane of a batched map phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, QRect, Qt
from PySide6.QtGui import QBrush, QColor, QHelpEvent, QPainter, QPalette
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from app.core.jobs.ring import SegmentKind

Span = tuple[int, int]

# Fill colours of the KV bar: mid-tone hues that read on light and dark palettes alike (the
# bar carries no text; its free cells, border and separators come from the palette).
KIND_COLOURS: dict[SegmentKind, QColor] = {
    SegmentKind.SYSTEM: QColor(142, 124, 195),
    SegmentKind.CHUNK: QColor(74, 144, 217),
    SegmentKind.QUESTION: QColor(230, 162, 60),
    SegmentKind.OUTPUT: QColor(82, 179, 107),
    SegmentKind.NOTES: QColor(46, 139, 120),
}
LOOSE_TEXT = QColor(150, 170, 190)  # context text without a document span (a carried summary)


@dataclass(frozen=True, slots=True)
class BarSegment:
    kind: SegmentKind
    pos: int  # first KV position
    tokens: int
    source: Span | None = None  # document characters, for chunks

    @property
    def end(self) -> int:
        return self.pos + self.tokens


@dataclass
class KVLayout:
    """The panel's picture of the KV cache: segments contiguous from 0, at most ``n_ctx``."""

    n_ctx: int
    segments: list[BarSegment] = field(default_factory=list)
    question_hint: int = 0  # the question's length as measured at the end of the last call
    # Sliding-window attention (Gemma 2/3, Mistral with SWA): ``windowed_layers`` of ``layers``
    # attend to the last ``window`` positions only; 0 for full attention.
    window: int = 0
    windowed_layers: int = 0
    layers: int = 0

    @property
    def used(self) -> int:
        return self.segments[-1].end if self.segments else 0

    @property
    def outside_window(self) -> int:
        """Positions ``[0, outside_window)`` lie behind the sliding window of the newest one:
        the windowed layers no longer attend to them, the other layers still do."""
        if not self.window or not self.windowed_layers:
            return 0
        return max(0, self.used - self.window)

    @property
    def free(self) -> int:
        return max(0, self.n_ctx - self.used)

    def clear(self) -> None:
        self.segments.clear()

    def place_chunk(self, pos: int, end: int, source: Span | None) -> None:
        """A chunk evaluated at KV positions ``[pos, end)``; text in front of it fills the gap."""
        pos, end = max(0, pos), min(end, self.n_ctx)
        if end <= pos:
            return
        self._cut(pos)
        if self.used < pos:  # the prefix, or context text without a document span
            kind = SegmentKind.CHUNK if self.segments else SegmentKind.SYSTEM
            self.segments.append(BarSegment(kind, self.used, pos - self.used))
        self.segments.append(BarSegment(SegmentKind.CHUNK, pos, end - pos, source))

    def grow_output(self, tokens: int) -> None:
        """Generated tokens (never past n_ctx, as the ring caps them)."""
        last = self.segments[-1] if self.segments else None
        if last is None or last.kind is not SegmentKind.OUTPUT:
            question = min(self.question_hint, self.free) if self.segments else 0
            if question:  # provisional until the call's KVStats
                self.segments.append(BarSegment(SegmentKind.QUESTION, self.used, question))
            tokens = min(tokens, self.free)
            if tokens > 0:
                self.segments.append(BarSegment(SegmentKind.OUTPUT, self.used, tokens))
            return
        tokens = min(tokens, self.free)
        if tokens > 0:
            self.segments[-1] = BarSegment(SegmentKind.OUTPUT, last.pos, last.tokens + tokens)

    def measured(self, cells_used: int) -> None:
        """llama.cpp's cell count at the end of a call: the question and output placed exactly."""
        cells = max(0, min(cells_used, self.n_ctx))
        last = self.segments[-1] if self.segments else None
        output = last.tokens if last is not None and last.kind is SegmentKind.OUTPUT else 0
        known = list(self.segments)  # all but the call's own question and output at the end
        while known and known[-1].kind in (SegmentKind.QUESTION, SegmentKind.OUTPUT):
            known.pop()
        self.segments = known
        prompt_end = max(self.used, cells - output)
        if self.used < prompt_end:
            if known:
                self.question_hint = prompt_end - self.used
                self.segments.append(
                    BarSegment(SegmentKind.QUESTION, self.used, self.question_hint)
                )
            else:  # a call without document chunks: its whole prompt is one prefix
                self.segments.append(BarSegment(SegmentKind.SYSTEM, 0, prompt_end))
        if cells > self.used:
            self.segments.append(BarSegment(SegmentKind.OUTPUT, self.used, cells - self.used))

    def lay_out(self, layout: Sequence[tuple[str, int, int, Span | None]]) -> None:
        """The cache exactly as the job's ring holds it (after a streamed pass made room)."""
        self.segments = [BarSegment(SegmentKind(kind), pos, tokens,
                                    tuple(source) if source else None)  # type: ignore[arg-type]
                         for kind, pos, tokens, source in layout]  # fmt: skip

    def restore(self, layout: Sequence[tuple[str, int, int, Span | None]]) -> None:
        """A saved state's prompt as its job laid it, drawn as a run draws its call: what follows
        the last document chunk (the question's text and the reply's turn markers) is one
        question, as :meth:`measured` places it."""
        self.lay_out(layout)
        chunks = [i for i, s in enumerate(self.segments)
                  if s.kind is SegmentKind.CHUNK and s.source is not None]  # fmt: skip
        last = chunks[-1] if chunks else -1
        if 0 <= last < len(self.segments) - 1:
            start = self.segments[last].end
            self.segments[last + 1 :] = [BarSegment(SegmentKind.QUESTION, start, self.used - start)]

    def evict(self, source: Span) -> bool:
        """Remove the chunk holding ``source``; everything after it moves down (a KV shift)."""
        for i, s in enumerate(self.segments):
            if s.kind is SegmentKind.CHUNK and s.source == source:
                del self.segments[i]
                self.segments[i:] = [
                    BarSegment(t.kind, t.pos - s.tokens, t.tokens, t.source)
                    for t in self.segments[i:]
                ]
                return True
        return False

    def segment_at(self, position: int) -> BarSegment | None:
        return next((s for s in self.segments if s.pos <= position < s.end), None)

    def check(self) -> None:
        """AssertionError when the picture breaks an invariant (tests call it after events)."""
        pos = 0
        for s in self.segments:
            assert s.pos == pos and s.tokens >= 1, f"{s} does not follow position {pos}"
            pos = s.end
        assert pos <= self.n_ctx, f"{pos} positions used of {self.n_ctx}"

    def _cut(self, pos: int) -> None:
        """Forget everything at or after KV position ``pos``."""
        kept = []
        for s in self.segments:
            if s.end <= pos:
                kept.append(s)
            elif s.pos < pos:
                kept.append(BarSegment(s.kind, s.pos, pos - s.pos, s.source))
        self.segments = kept


class KVBar(QWidget):
    """n_ctx cells as one strip: a rectangle per segment, coloured by kind; hover for details."""

    def __init__(self, layout: KVLayout, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kv = layout
        self.setMinimumHeight(22)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def segment_at_x(self, x: float) -> BarSegment | None:
        inner = self._inner()
        if inner.width() <= 0 or not inner.left() <= x <= inner.right():
            return None
        position = int((x - inner.left()) * self.kv.n_ctx / inner.width())
        return self.kv.segment_at(min(position, self.kv.n_ctx - 1))

    def describe(self, seg: BarSegment | None) -> str:
        """The tooltip for a segment (None: the free cells)."""
        if seg is None:
            return self.tr("Free: {0:,} of {1:,} positions").format(self.kv.free, self.kv.n_ctx)
        if seg.kind is SegmentKind.CHUNK and seg.source is not None:
            what = self.tr("Document chunk, characters {0:,}–{1:,}").format(*seg.source)
        else:
            what = {
                SegmentKind.SYSTEM: self.tr(
                    "Pinned prefix: chat template, task and any text carried in front of the "
                    "document"
                ),
                SegmentKind.CHUNK: self.tr("Context text without a document span"),
                SegmentKind.QUESTION: self.tr("Question and the reply's turn markers"),
                SegmentKind.OUTPUT: self.tr("Generated output"),
                SegmentKind.NOTES: self.tr(
                    "Notes the model wrote on earlier parts, kept in the cache (evicted last)"
                ),
            }[seg.kind]
        where = self.tr("KV positions {0:,}–{1:,} ({2:,} tokens)").format(
            seg.pos, seg.end - 1, seg.tokens
        )
        behind = self.kv.outside_window
        if seg.pos >= behind:
            return f"{what}\n{where}"
        full = self.kv.layers - self.kv.windowed_layers
        note = self.tr(
            "Behind the sliding window: {0} of {1} layers attend to the last {2:,} positions "
            "only, so {3} layer(s) still see this text"
        ).format(self.kv.windowed_layers, self.kv.layers, self.kv.window, full)
        if seg.end > behind:
            note = self.tr("Partly behind the sliding window (positions before {0:,}): {1}").format(
                behind, note
            )
        return f"{what}\n{where}\n{note}"

    def event(self, ev: QEvent) -> bool:
        if ev.type() == QEvent.Type.ToolTip and isinstance(ev, QHelpEvent):
            QToolTip.showText(ev.globalPos(), self.describe(self.segment_at_x(ev.pos().x())), self)
            return True
        return super().event(ev)

    def paintEvent(self, _ev: object) -> None:
        painter = QPainter(self)
        pal = self.palette()
        inner = self._inner()
        painter.fillRect(inner, pal.color(QPalette.ColorRole.Base))
        scale = inner.width() / max(1, self.kv.n_ctx)
        separator = pal.color(QPalette.ColorRole.Base)
        chunk_index = 0
        for seg in self.kv.segments:
            x0 = inner.left() + round(seg.pos * scale)
            x1 = inner.left() + round(seg.end * scale)
            rect = QRect(x0, inner.top(), max(1, x1 - x0), inner.height())
            colour = KIND_COLOURS[seg.kind]
            if seg.kind is SegmentKind.CHUNK:
                if seg.source is None:
                    colour = LOOSE_TEXT
                else:  # neighbouring chunks alternate in shade so their boundary shows
                    colour = colour.lighter(125) if chunk_index % 2 else colour
                    chunk_index += 1
            painter.fillRect(rect, colour)
            if rect.width() > 4:
                painter.fillRect(QRect(x0, inner.top(), 1, inner.height()), separator)
        behind = self.kv.outside_window
        if behind:  # hatched: what the windowed layers no longer see; a line where it ends
            x1 = inner.left() + round(behind * scale)
            shade = QColor(pal.color(QPalette.ColorRole.Text))
            shade.setAlpha(110)
            painter.fillRect(QRect(inner.left(), inner.top(), x1 - inner.left(), inner.height()),
                             QBrush(shade, Qt.BrushStyle.BDiagPattern))  # fmt: skip
            painter.fillRect(QRect(x1, inner.top(), 2, inner.height()), shade)
        painter.setPen(pal.color(QPalette.ColorRole.Mid))
        painter.drawRect(inner.adjusted(0, 0, -1, -1))
        painter.end()

    def _inner(self) -> QRect:
        return self.rect().adjusted(1, 1, -1, -1)
