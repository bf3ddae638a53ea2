"""The three-stage buffer, live: the chunk queue, the KV cache as a bar of segments, the output.

A run's events (:mod:`app.core.jobs.tasks`) arrive on the GUI thread; this panel only observes them.
The KV bar is rebuilt from what the events say. A model call's ``ChunkEvaluated`` events give
the exact KV positions of its document chunks (everything in front of the first one is the
pinned prefix), ``TokenBatch`` counts grow the output, ``ChunkEvicted`` removes a chunk and
shifts what follows down (as the ring does), and the call's ``KVStats`` — llama.cpp's own cell
count — fixes where the question ends and the output begins. The events do not carry the
question's length, so until that ``KVStats`` arrives the question is drawn with the length
measured at the previous call: the bar may be a few cells off while one call streams and is
exact after it.

Updates stay cheap: the queue model gathers changes into one row insertion and one
``dataChanged`` range per 50 ms, the bar paints proportional rectangles (never a widget per
cell), and streamed text is appended at the end of the output, never laid out again.

A batched map phase (``LanesStarted``) runs several model calls at once as parallel sequences:
the KV stage then shows one bar per lane (events carry their ``lane``), and since the lanes'
replies stream interleaved, each reply goes to the output whole when its lane's ``KVStats``
says it is done.

The stages' parts have modules of their own: the chunk queue's model (chunk_queue.py) and the
KV cache's picture and bar (kv_bar.py); this module puts them together with the output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import QModelIndex, Qt, QUrl, Signal
from PySide6.QtGui import QFont, QPalette, QPixmap, QResizeEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QGroupBox,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableView,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.jobs.alignment import SentenceSource
from app.core.jobs.events import (
    ChunkEvaluated,
    ChunkEvicted,
    ChunkQueued,
    JobError,
    JobFinished,
    KVShifted,
    KVStats,
    LanesStarted,
    PlanReady,
    StrategyStarted,
    TokenBatch,
)
from app.core.jobs.ring import SegmentKind
from app.ui.chunk_queue import ChunkQueueModel, ChunkState
from app.ui.i18n import FollowsLanguage, finish_label, strategy_label
from app.ui.kv_bar import KIND_COLOURS, LOOSE_TEXT, BarSegment, KVBar, KVLayout
from app.ui.thread_view import ThreadView
from app.ui.widgets import ElidedLabel, plain_label

Span = tuple[int, int]

# Names callers import from here, with this module's own.
__all__ = ["BarSegment", "BufferPanel", "ChunkQueueModel", "ChunkState", "KVBar", "KVLayout"]


class _Legend(FollowsLanguage, QWidget):
    """A swatch and a name per segment kind; the names use the palette's own text colour."""

    COLUMNS = 3  # short rows: a narrow dock keeps the whole legend

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(4)
        colours = (KIND_COLOURS[SegmentKind.SYSTEM], KIND_COLOURS[SegmentKind.CHUNK], LOOSE_TEXT,
                   KIND_COLOURS[SegmentKind.QUESTION], KIND_COLOURS[SegmentKind.OUTPUT],
                   KIND_COLOURS[SegmentKind.NOTES], None)  # fmt: skip
        self._names: list[QLabel] = []  # in the order of ``colours``
        for i, colour in enumerate(colours):
            swatch = QLabel()
            pixmap = QPixmap(12, 12)
            pixmap.fill(colour or self.palette().color(QPalette.ColorRole.Base))
            swatch.setPixmap(pixmap)
            row, column = divmod(i, self.COLUMNS)
            grid.addWidget(swatch, row, 2 * column)
            self._names.append(QLabel())
            grid.addWidget(self._names[-1], row, 2 * column + 1)
        grid.setColumnStretch(2 * self.COLUMNS - 1, 1)
        self.retranslate()

    def retranslate(self) -> None:
        names = (self.tr("pinned prefix"), self.tr("document chunks"), self.tr("other context"),
                 self.tr("question"), self.tr("output"), self.tr("notes"),
                 self.tr("free"))  # fmt: skip
        for label, name in zip(self._names, names, strict=True):
            label.setText(name)


# ----- stage 3: the output ----------------------------------------------------------------------


@dataclass
class _OutputSpanView:
    step: str
    sources: tuple[Span, ...]
    parts: list[str] = field(default_factory=list)
    at: int = -1  # the output document's position of its first character (-1: none shown yet)
    # each sentence and the kept sentence that supports it (the job's, once it has finished)
    alignment: tuple[SentenceSource, ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.parts)


NARROW = 640  # px: a panel narrower than this puts the thread under the reply
_ANSWER_STEP = re.compile(r"answer (\d+)")  # the job's step of the answer to question N
_LINK = re.compile(r"(\d+)(?::(\d+))?")  # an output's link: span:<output>[:<sentence>]


class BufferPanel(FollowsLanguage, QWidget):
    """The input queue, the KV cache and the output of a run, updated from its events."""

    # [(start, end), ...]: document characters to highlight: an output's sources when it is
    # clicked, the source of an answer's or a summary's sentence when it is hovered or clicked
    source_clicked = Signal(list)

    def __init__(self, n_ctx: int = 4096, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plan_label = plain_label()
        self.plan_label.setWordWrap(True)
        # what the line above the stages describes: nothing yet (None), the run's plan, or a
        # caption the window gave (already in words)
        self._caption: PlanReady | Callable[[], str] | str | None = None

        self.queue = ChunkQueueModel(self)
        self.table = QTableView()
        self.table.setModel(self.queue)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.clicked.connect(self._on_row_clicked)

        self.kv = KVLayout(n_ctx)
        self.bar = KVBar(self.kv)
        self.kv_label = ElidedLabel()  # its figures change with every event: never wider

        self.output = QTextBrowser()
        self.output.setOpenLinks(False)
        self.output.setOpenExternalLinks(False)
        self.output.anchorClicked.connect(self._on_anchor)
        self.output.highlighted.connect(self._on_hover)  # the mouse over a link, or off it
        self._hovered: Span | None = None  # the source of the sentence under the mouse

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("splitter-stages")  # the window saves where the person put it
        kv_box = QWidget()
        kv_layout = QVBoxLayout(kv_box)
        kv_layout.setContentsMargins(0, 0, 0, 0)
        kv_layout.addWidget(self.bar)
        self.lanes_box = QWidget()  # one bar per lane of a batched map phase
        self._lanes_layout = QVBoxLayout(self.lanes_box)
        self._lanes_layout.setContentsMargins(0, 0, 0, 0)
        self._lanes_layout.setSpacing(2)
        self.lanes_box.hide()
        self.lane_bars: list[KVBar] = []
        # each lane's call: (step, its chunks, its text so far, its sources)
        self._lane_calls: dict[int, tuple[str, list[Span], list[str], tuple[Span, ...]]] = {}
        kv_layout.addWidget(self.lanes_box)
        kv_layout.addWidget(_Legend())
        kv_layout.addWidget(self.kv_label)
        # the reply being written, and beside it the questions asked before on this line of work
        self.thread = ThreadView()
        self.thread.hide()
        replies = self._replies = QSplitter(Qt.Orientation.Horizontal)
        replies.setObjectName("splitter-output")  # the window saves where the person put it
        replies.addWidget(self.output)
        replies.addWidget(self.thread)
        replies.setStretchFactor(0, 3)
        replies.setStretchFactor(1, 2)
        # titled in retranslate
        self._stages = (self._stage(self.table), self._stage(kv_box), self._stage(replies))
        for stage in self._stages:
            splitter.addWidget(stage)
        splitter.setStretchFactor(0, 1)  # the reply is what a person reads: most of the room
        splitter.setStretchFactor(2, 4)
        layout = QVBoxLayout(self)
        layout.addWidget(self.plan_label)
        layout.addWidget(splitter, 1)

        self._spans: list[_OutputSpanView] = []
        self._questions: list[str] = []  # the run's questions, for the answers' headings
        self._reset_run_state()
        self.retranslate()

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Narrower than NARROW (the dock at 1366x768), the thread goes under the reply, not
        beside it: side by side each was a column of a few words."""
        super().resizeEvent(event)
        want = Qt.Orientation.Vertical if self.width() < NARROW else Qt.Orientation.Horizontal
        if self._replies.orientation() != want:
            self._replies.setOrientation(want)

    def retranslate(self) -> None:
        """Titles, the caption, the cache's figures, the queue's words, the lanes' and the
        output links' tooltips, in the language now installed."""
        titles = (self.tr("1 · Input: chunks"), self.tr("2 · KV cache"), self.tr("3 · Output"))
        for box, title in zip(self._stages, titles, strict=True):
            box.setTitle(title)
        self.queue.retranslate()
        self._show_caption()
        self._name_lanes()
        self._show_kv()
        self._retranslate_links()

    @staticmethod
    def _stage(body: QWidget) -> QGroupBox:
        box = QGroupBox()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(body)
        return box

    # ----- public API -----

    def reset(self, n_ctx: int) -> None:
        """Empty every stage for a new run on a context of ``n_ctx`` tokens."""
        self.queue.clear()
        self.kv.n_ctx = max(1, n_ctx)
        self.kv.clear()
        self.kv.question_hint = 0
        self._end_lanes()
        self._spans = []
        self.output.clear()
        self._caption = None
        self._show_caption()
        self._reset_run_state()
        self._show_kv()

    def clear(self) -> None:
        """Empty every stage, keeping the context size (another document was opened)."""
        self.reset(self.kv.n_ctx)

    def set_caption(self, text: str | Callable[[], str]) -> None:
        """The line above the stages (a resumed rollback has no plan event to fill it); a
        function that makes it is called again when the language changes."""
        self._caption = text
        self._show_caption()

    def show_outputs(self, caption: str | Callable[[], str],
                     outputs: Sequence[tuple[str, str, tuple[Span, ...]]
                                       | tuple[str, str, tuple[Span, ...],
                                               tuple[SentenceSource, ...]]]) -> None:  # fmt: skip
        """An old version's recorded reply: ``caption`` above, each (step, text, sources[,
        alignment]) output as a run shows it, its sources clickable (and its sentences, each
        tied to its own source); the queue is emptied. The KV map stays:
        opening a version leaves llama.cpp's cache as it was, and the map shows that cache, as
        the gauge does (a map emptied beside a gauge of 3,700 cells said two things at once)."""
        self.queue.clear()
        self._end_lanes()
        self._spans = []
        self.output.clear()
        self._reset_run_state()
        self.set_caption(caption)
        for step, text, sources, *aligned in outputs:
            self._spans.append(_OutputSpanView(step, tuple(sources)))
            self._heading(self._step_title(step))
            self._show_text(len(self._spans) - 1, text)
            self._link_sentences(len(self._spans) - 1, text, aligned[0] if aligned else ())

    def set_sliding_window(self, window: int, windowed_layers: int, layers: int) -> None:
        """The loaded model's attention: ``windowed_layers`` of ``layers`` see the last
        ``window`` positions only (0: full attention). The cache bar hatches what lies behind
        the window as it fills, and says on how many layers."""
        for kv in (self.kv, *(bar.kv for bar in self.lane_bars)):
            kv.window, kv.windowed_layers, kv.layers = window, windowed_layers, layers
        self._show_kv()

    def on_event(self, ev: object) -> None:
        """Observe one job event; other objects are ignored."""
        match ev:
            case TokenBatch(lane=int()) | ChunkEvaluated(lane=int()) | KVStats(lane=int()):
                self._on_lane_event(ev)
            case TokenBatch():
                self._on_tokens(ev)
            case ChunkQueued():
                self._on_queued(ev)
            case ChunkEvaluated():
                self._on_evaluated(ev)
            case ChunkEvicted():
                self._on_evicted(ev)
            case KVShifted():
                self._on_shifted(ev)
            case KVStats():
                self._on_kv_stats(ev)
            case LanesStarted():
                self._on_lanes(ev)
            case PlanReady():
                self._on_plan(ev)
            case JobError():
                self._on_error(ev)
            case JobFinished():
                self._on_finished(ev)
            case StrategyStarted():
                self._on_strategy(ev)

    def output_text(self, step: str | None = None) -> str:
        """The text of the last output span named ``step`` (streamed, or composed by the job and
        shown when it finished); without a step, every output span in order, separated by blank
        lines (headings and status lines left out)."""
        if step is not None:
            return next((s.text for s in reversed(self._spans) if s.step == step), "")
        return "\n\n".join(s.text for s in self._spans)

    def spans(self) -> list[tuple[str, tuple[Span, ...]]]:
        """(step, source spans) of each output span shown, in order; index = anchor number."""
        return [(s.step, s.sources) for s in self._spans]

    def alignment(self, step: str) -> tuple[SentenceSource, ...]:
        """The sentences of the last output span named ``step`` shown tied to their sources
        (offsets into its text as the job recorded it, stripped); () when none are."""
        return next((s.alignment for s in reversed(self._spans) if s.step == step), ())

    # ----- events -----

    def _reset_run_state(self) -> None:
        self._in_call = False  # between a call's first event and its KVStats
        self._evaluated = False  # the current call's ChunkEvaluated have started
        self._call_chunks: list[Span] = []
        self._open: _OutputSpanView | None = None
        self._job_first_span = len(self._spans)

    def _start_call(self) -> None:
        self._in_call, self._evaluated, self._call_chunks, self._open = True, False, [], None
        if self.lane_bars:
            self._end_lanes()

    # ----- lanes: several calls at once -----

    def _on_lanes(self, ev: LanesStarted) -> None:
        self._end_lanes()
        for _ in range(ev.lanes):
            kv = self.kv
            bar = KVBar(KVLayout(max(1, ev.n_ctx), window=kv.window,
                                 windowed_layers=kv.windowed_layers, layers=kv.layers))  # fmt: skip
            bar.setMinimumHeight(12)
            self.lane_bars.append(bar)
            self._lanes_layout.addWidget(bar)
        self._name_lanes()
        self.bar.hide()
        self.lanes_box.show()
        self._in_call = False
        self._show_kv()

    def _name_lanes(self) -> None:
        for lane, bar in enumerate(self.lane_bars):
            bar.setToolTip(self.tr("Lane {0}").format(lane + 1))

    def _end_lanes(self) -> None:
        for bar in self.lane_bars:
            bar.deleteLater()
        self.lane_bars = []
        self._lane_calls = {}
        self.lanes_box.hide()
        self.bar.show()

    def lane_layout(self, lane: int) -> KVLayout:
        return self.lane_bars[lane].kv

    def _on_lane_event(self, ev: TokenBatch | ChunkEvaluated | KVStats) -> None:
        lane = ev.lane
        if lane is None or not 0 <= lane < len(self.lane_bars):
            return  # lanes the panel was not told of (events from before a reset)
        kv = self.lane_layout(lane)
        call = self._lane_calls.get(lane)
        if isinstance(ev, ChunkEvaluated):
            if call is None or call[0] != ev.step:  # the lane's next call replaces its picture
                kv.clear()
                call = self._lane_calls[lane] = (ev.step, [], [], ())
            span = (ev.start, ev.end)
            call[1].append(span)
            self.queue.set_state(span, ChunkState.IN_KV)
            kv.place_chunk(ev.kv_start, ev.kv_end, span)
        elif isinstance(ev, TokenBatch):
            if call is None or call[0] != ev.step:
                kv.clear()
                call = (ev.step, [], [], ())
            self._lane_calls[lane] = (call[0], call[1], [*call[2], ev.text], tuple(ev.sources))
            if ev.tokens > 0:
                kv.grow_output(ev.tokens)
        elif call is not None:  # KVStats: the lane's reply is done; it goes out whole
            if ev.n_ctx > 0:
                kv.n_ctx = ev.n_ctx
            kv.measured(ev.cells_used)
            self.queue.finish(call[1])
            view = _OutputSpanView(call[0], call[3])
            self._spans.append(view)
            self._heading(self._step_title(call[0]))
            self._show_text(len(self._spans) - 1, "".join(call[2]))
            self._lane_calls.pop(lane)
        self.lane_bars[lane].update()
        self._show_kv()

    def _on_plan(self, ev: PlanReady) -> None:
        self._caption = ev
        self._show_caption()

    def _show_caption(self) -> None:
        """The line above the stages, from what it describes (see ``_caption``)."""
        ev = self._caption
        if ev is None:
            text = self.tr("No run yet")
        elif isinstance(ev, PlanReady):
            text = self.tr(
                "{0}: {1:,} of {2:,} tokens kept, budget {3:,}, {4} pass(es), {5} span(s) "
                "dropped, boundaries {6:.0%}"
            )
            text = text.format(strategy_label(ev.strategy), ev.kept_tokens, ev.total_tokens,
                               ev.budget, ev.passes, ev.dropped_spans,
                               ev.boundary_integrity)  # fmt: skip
        else:
            text = ev if isinstance(ev, str) else ev()
        self.plan_label.setText(text)

    def _on_queued(self, ev: ChunkQueued) -> None:
        if not self._in_call:
            self._start_call()
        self.queue.queue(ev.start, ev.end, ev.tokens)

    def _on_evaluated(self, ev: ChunkEvaluated) -> None:
        if not self._in_call:
            self._start_call()
        if not self._evaluated:  # the new prompt replaces the previous call's picture
            self._evaluated = True
            self.kv.clear()
        span = (ev.start, ev.end)
        self._call_chunks.append(span)
        self.queue.set_state(span, ChunkState.IN_KV)
        self.kv.place_chunk(ev.kv_start, ev.kv_end, span)
        self._show_kv()

    def _on_evicted(self, ev: ChunkEvicted) -> None:
        self.queue.set_state((ev.start, ev.end), ChunkState.EVICTED)
        if self.kv.evict((ev.start, ev.end)):
            self._show_kv()

    def _on_shifted(self, ev: KVShifted) -> None:
        """Room made in the ring: the bar shows the cache as it now is, and the next call's
        text is placed after what stays (not over an emptied bar)."""
        if not self._in_call:
            self._start_call()
        self._evaluated = True
        self.kv.lay_out(ev.layout)
        self._show_kv()

    def _on_tokens(self, ev: TokenBatch) -> None:
        if not self._in_call:  # a call with no document chunks (combining partial results)
            self._start_call()
        if not self._evaluated:
            self._evaluated = True
            self.kv.clear()
        if self._open is None:
            self._open = _OutputSpanView(ev.step, tuple(ev.sources))
            self._spans.append(self._open)
            self._heading(self._step_title(ev.step))
        if ev.text:
            self._show_text(len(self._spans) - 1, ev.text)
        if ev.tokens > 0:
            self.kv.grow_output(ev.tokens)
            self._show_kv()

    def _on_kv_stats(self, ev: KVStats) -> None:
        if ev.n_ctx > 0:
            self.kv.n_ctx = ev.n_ctx
        self.kv.measured(ev.cells_used)
        self.queue.finish(self._call_chunks)
        self._in_call, self._open = False, None
        self._show_kv()

    def _on_error(self, ev: JobError) -> None:
        self._line(self.tr("Engine error: {0}").format(ev.message), bold=True)
        self._in_call, self._open = False, None

    def _on_strategy(self, ev: StrategyStarted) -> None:
        """``compare`` runs one job per strategy: each starts with an empty queue and cache."""
        self.queue.clear()
        self.kv.clear()
        self._reset_run_state()
        self._heading(self.tr("Strategy: {0}").format(ev.strategy), size=1.2)
        self._show_kv()

    def _on_finished(self, ev: JobFinished) -> None:
        result = ev.result
        self.queue.finish_all()
        self.queue.flush()
        # The job's outputs are the provenance of record: streamed spans take their sources
        # (map-reduce's summary points at the windows it combined), and outputs the job composed
        # without streaming (rolling's final summary, extract's merge) are shown here.
        # Each sentence of an answer or a summary is then linked to its own source.
        streamed = self._spans[self._job_first_span :]
        for out in result.outputs:
            match = next((s for s in streamed if s.step == out.step), None)
            if match is not None:
                streamed.remove(match)
                match.sources = tuple(out.source_spans)
                self._link_sentences(self._spans.index(match), out.text, out.alignment)
            elif out.text:
                view = _OutputSpanView(out.step, tuple(out.source_spans))
                self._spans.append(view)
                self._heading(self._step_title(out.step))
                self._show_text(len(self._spans) - 1, out.text)
                self._link_sentences(len(self._spans) - 1, out.text, out.alignment)
        if result.refused:
            self._line(self.tr("Refused: {0}").format(result.refused), bold=True)
        elif result.error:
            self._line(self.tr("Error: {0}").format(result.error), bold=True)
        summary = self.tr(
            "Finished: {0} · {1:,} prompt tokens ({2:,} evaluated) · {3:,} generated · "
            "KV peak {4:,} of {5:,} · {6:.1f} s"
        )
        summary = summary.format(finish_label(result.finish_reason), result.prompt_tokens,
                                 result.evaluated_tokens, result.completion_tokens,
                                 result.kv_peak_cells, result.n_ctx, result.seconds)  # fmt: skip
        self._line(summary)
        self._reset_run_state()

    # ----- output text -----

    def _cursor_at_end(self) -> QTextCursor:
        cursor = QTextCursor(self.output.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _append(self, text: str, fmt: QTextCharFormat) -> None:
        bar = self.output.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4
        self._cursor_at_end().insertText(text, fmt)
        if follow:
            bar.setValue(bar.maximum())

    def _show_text(self, index: int, text: str) -> None:
        """More text of output span ``index``, at the end (where its text goes on)."""
        view = self._spans[index]
        if view.at < 0:
            view.at = self._cursor_at_end().position()
        view.parts.append(text)
        self._append(text, self._span_format(index))

    def _link_sentences(self, index: int, text: str,
                        alignment: Sequence[SentenceSource]) -> None:  # fmt: skip
        """Each sentence of output span ``index`` (``text`` as the job recorded it: what was
        shown, stripped) linked on its own: hovered or clicked, it shows its source; its
        tooltip gives the score, or says the kept text does not support it."""
        view = self._spans[index]
        shown = view.text
        lead = len(shown) - len(shown.lstrip())
        if not alignment or view.at < 0 or shown[lead : lead + len(text)] != text:
            return  # not shown as recorded (never: the job's text is what streamed)
        view.alignment = tuple(alignment)
        cursor = QTextCursor(self.output.document())
        for k, sentence in enumerate(view.alignment):
            a = lead + min(sentence.start, len(text))
            b = lead + min(max(sentence.end, sentence.start), len(text))
            start = view.at + _utf16(shown[:a])  # Qt counts UTF-16 units: an emoji is two
            cursor.setPosition(start)
            cursor.setPosition(start + _utf16(shown[a:b]), QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(self._sentence_format(index, k))

    def _sentence_format(self, index: int, k: int) -> QTextCharFormat:
        sentence = self._spans[index].alignment[k]
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"span:{index}:{k}")
        fmt.setToolTip(self._sentence_tip(sentence))
        if sentence.source is None:  # a dotted line under what the kept text does not say
            fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
        return fmt

    def _sentence_tip(self, sentence: SentenceSource) -> str:
        if sentence.source is None:
            return self.tr("No support in the kept text (best match: score {0:.2f})").format(
                sentence.score)  # fmt: skip
        a, b = sentence.source
        return self.tr("Source: document characters {0:,}–{1:,}, score {2:.2f} (highlighted "
                       "in the document)").format(a, b, sentence.score)  # fmt: skip

    def _new_block(self) -> None:
        if not self.output.document().isEmpty():
            self._cursor_at_end().insertBlock()

    def set_questions(self, questions: Sequence[str]) -> None:
        """The questions of the run shown (or of the version opened): each answer is headed
        by its question, not by its step's name ("answer 1" over every answer of a thread)."""
        self._questions = [q.strip() for q in questions if q.strip()]

    def _step_title(self, step: str) -> str:
        found = _ANSWER_STEP.fullmatch(step)
        if found is None or not 0 < int(found.group(1)) <= len(self._questions):
            return step
        return self.tr("Answer to “{0}”").format(self._questions[int(found.group(1)) - 1])

    def _heading(self, text: str, size: float = 1.0) -> None:
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        if size != 1.0:
            fmt.setFontPointSize(self.font().pointSizeF() * size)
        self._new_block()
        self._append(text, fmt)
        self._cursor_at_end().insertBlock()

    def _line(self, text: str, *, bold: bool = False) -> None:
        fmt = QTextCharFormat()
        fmt.setFontItalic(not bold)
        if bold:
            fmt.setFontWeight(QFont.Weight.Bold)
        self._new_block()
        self._append(text, fmt)

    def _span_format(self, index: int) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"span:{index}")
        fmt.setToolTip(self.tr("Click to highlight the document text this output came from"))
        return fmt

    def _retranslate_links(self) -> None:
        """The tooltip of every output link shown, in the language now installed."""
        doc = self.output.document()
        links: list[tuple[int, int, str]] = []  # (position, length, link) of each fragment
        block = doc.begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                href = fragment.charFormat().anchorHref()
                if href.startswith("span:"):
                    links.append((fragment.position(), fragment.length(), href))
                it += 1
            block = block.next()
        if not links:
            return
        generic = self._span_format(0).toolTip()
        cursor = QTextCursor(doc)
        for position, length, href in links:
            tip = QTextCharFormat()
            found = self._linked(href.removeprefix("span:"))
            sentence = found[1] if found is not None else None
            tip.setToolTip(generic if sentence is None else self._sentence_tip(sentence))
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(tip)

    def _linked(self, link: str) -> tuple[_OutputSpanView, SentenceSource | None] | None:
        """The output span (and the sentence of it) a link names: ``<output>[:<sentence>]``."""
        found = _LINK.fullmatch(link)
        if found is None or int(found.group(1)) >= len(self._spans):
            return None
        view = self._spans[int(found.group(1))]
        if found.group(2) is None:
            return view, None
        k = int(found.group(2))
        return view, view.alignment[k] if k < len(view.alignment) else None

    def _on_anchor(self, url: QUrl) -> None:
        """A click on an output shows its sources; on a sentence tied to a source, that one."""
        found = self._linked(url.path()) if url.scheme() == "span" else None
        if found is None:
            return
        view, sentence = found
        if sentence is not None and sentence.source is not None:
            self.source_clicked.emit([sentence.source])
            return
        self.source_clicked.emit([tuple(s) for s in view.sources])

    def _on_hover(self, url: QUrl) -> None:
        """The mouse over a sentence tied to a source shows that source (once per sentence:
        moving within it does not scroll the document again)."""
        found = self._linked(url.path()) if url.scheme() == "span" else None
        source = found[1].source if found is not None and found[1] is not None else None
        if source is not None and source != self._hovered:
            self.source_clicked.emit([source])
        self._hovered = source

    def _on_row_clicked(self, index: QModelIndex) -> None:
        span = self.queue.span_at(index.row())
        if span is not None:
            self.source_clicked.emit([span])

    def _show_kv(self) -> None:
        if self.lane_bars:
            used = [bar.kv.used for bar in self.lane_bars]
            text = self.tr("{0} lanes: {1} of {2:,} positions each")
            self.kv_label.setText(text.format(len(used), " · ".join(f"{u:,}" for u in used),
                                              self.lane_bars[0].kv.n_ctx))  # fmt: skip
            return
        text = self.tr("{0:,} of {1:,} positions in use").format(self.kv.used, self.kv.n_ctx)
        kv = self.kv
        if kv.window and kv.windowed_layers:
            text += " · " + self.tr("sliding window of {0:,} on {1} of {2} layers").format(
                kv.window, kv.windowed_layers, kv.layers
            )
            if kv.outside_window:
                text += " " + self.tr("(hatched: {0:,} positions only the other {1} see)").format(
                    kv.outside_window, kv.layers - kv.windowed_layers
                )
        self.kv_label.setText(text)
        self.bar.update()


def _utf16(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (Qt's text positions)."""
    return len(text.encode("utf-16-le")) // 2
