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

The stages' parts have modules of their own: the chunk queue's model (chunk_queue.py), the KV
cache's stage (kv_stage.py, drawn by kv_bar.py) and the output's text and links (reply_view.py);
this module puts them together and follows the run's events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHeaderView,
    QSplitter,
    QTableView,
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
from app.ui.kv_bar import BarSegment, KVBar, KVLayout
from app.ui.kv_stage import KVStage
from app.ui.reply_view import ReplyView
from app.ui.thread_view import ThreadView
from app.ui.widgets import ElidedLabel, plain_label

Span = tuple[int, int]

# Names callers import from here, with this module's own.
__all__ = ["BarSegment", "BufferPanel", "ChunkQueueModel", "ChunkState", "KVBar", "KVLayout"]

NARROW = 640  # px: a panel narrower than this puts the thread under the reply


class BufferPanel(FollowsLanguage, QWidget):
    """The input queue, the KV cache and the output of a run, updated from its events."""

    # [(start, end), ...]: document characters to highlight: an output's sources when it is
    # clicked, the source of an answer's or a summary's sentence when it is hovered or clicked
    source_clicked = Signal(list)
    # the questions asked before on this line of work (it hides QObject.thread(), as it did)
    thread: ThreadView  # type: ignore[assignment]

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

        self.kv_stage = KVStage(n_ctx)
        # each lane's call: (step, its chunks, its text so far, its sources)
        self._lane_calls: dict[int, tuple[str, list[Span], list[str], tuple[Span, ...]]] = {}
        self.output = ReplyView()
        self.output.source_clicked.connect(self.source_clicked)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("splitter-stages")  # the window saves where the person put it
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
        self._stages = (self._stage(self.table), self._stage(self.kv_stage),
                        self._stage(replies))  # fmt: skip
        for stage in self._stages:
            splitter.addWidget(stage)
        splitter.setStretchFactor(0, 1)  # the reply is what a person reads: most of the room
        splitter.setStretchFactor(2, 4)
        layout = QVBoxLayout(self)
        layout.addWidget(self.plan_label)
        layout.addWidget(splitter, 1)

        self._reset_run_state()
        self.retranslate()

    # the KV stage's parts, as callers reach them
    @property
    def kv(self) -> KVLayout:
        return self.kv_stage.kv

    @property
    def bar(self) -> KVBar:
        return self.kv_stage.bar

    @property
    def lane_bars(self) -> list[KVBar]:
        return self.kv_stage.lane_bars

    @property
    def lanes_box(self) -> QWidget:
        return self.kv_stage.lanes_box

    @property
    def kv_label(self) -> ElidedLabel:
        return self.kv_stage.kv_label

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
        self.kv_stage.retranslate()
        self.output.retranslate()

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
        self.output.clear_outputs()
        self._caption = None
        self._show_caption()
        self._reset_run_state()
        self.kv_stage.show_kv()

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
        self.output.clear_outputs()
        self._reset_run_state()
        self.set_caption(caption)
        for step, text, sources, *aligned in outputs:
            self.output.add_output(step, sources, text, aligned[0] if aligned else ())

    def show_restored(self, layout: Sequence[tuple[str, int, int, Span | None]]) -> None:
        """A rollback resumes from a saved KV state: the cache as the job left its prompt
        (``layout``: its segments, kept with the state), its chunks resident in the queue;
        the reply then grows after it. Without segments (a state kept before they were) the
        call's measure draws the prompt as one block."""
        if layout:
            self._show_cache(layout, restored=True)

    def set_sliding_window(self, window: int, windowed_layers: int, layers: int) -> None:
        """The loaded model's attention: ``windowed_layers`` of ``layers`` see the last
        ``window`` positions only (0: full attention). The cache bar hatches what lies behind
        the window as it fills, and says on how many layers."""
        self.kv_stage.set_sliding_window(window, windowed_layers, layers)

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
        return self.output.output_text(step)

    def spans(self) -> list[tuple[str, tuple[Span, ...]]]:
        """(step, source spans) of each output span shown, in order; index = anchor number."""
        return self.output.spans()

    def alignment(self, step: str) -> tuple[SentenceSource, ...]:
        """The sentences of the last output span named ``step`` shown tied to their sources
        (offsets into its text as the job recorded it, stripped); () when none are."""
        return self.output.sentence_sources(step)

    def set_questions(self, questions: Sequence[str]) -> None:
        """The questions of the run shown (or of the version opened): each answer is headed
        by its question, not by its step's name ("answer 1" over every answer of a thread)."""
        self.output.set_questions(questions)

    def lane_layout(self, lane: int) -> KVLayout:
        return self.kv_stage.lane_layout(lane)

    # ----- events -----

    def _reset_run_state(self) -> None:
        self._in_call = False  # between a call's first event and its KVStats
        self._evaluated = False  # the current call's ChunkEvaluated have started
        self._call_chunks: list[Span] = []
        self._open: int | None = None  # the output span the current call streams into
        self._job_first_span = self.output.span_count

    def _start_call(self) -> None:
        self._in_call, self._evaluated, self._call_chunks, self._open = True, False, [], None
        if self.lane_bars:
            self._end_lanes()

    # ----- lanes: several calls at once -----

    def _on_lanes(self, ev: LanesStarted) -> None:
        self._end_lanes()
        self.kv_stage.start_lanes(ev.lanes, ev.n_ctx)
        self._in_call = False
        self.kv_stage.show_kv()

    def _end_lanes(self) -> None:
        self.kv_stage.end_lanes()
        self._lane_calls = {}

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
            self.output.add_output(call[0], call[3], "".join(call[2]))
            self._lane_calls.pop(lane)
        self.lane_bars[lane].update()
        self.kv_stage.show_kv()

    # ----- one call at a time -----

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
            kept, total = ev.of_document()  # of the total the document's header says
            text = text.format(strategy_label(ev.strategy), kept, total, ev.budget, ev.passes,
                               ev.dropped_spans, ev.boundary_integrity)  # fmt: skip
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
        self.kv_stage.show_kv()

    def _on_evicted(self, ev: ChunkEvicted) -> None:
        self.queue.set_state((ev.start, ev.end), ChunkState.EVICTED)
        if self.kv.evict((ev.start, ev.end)):
            self.kv_stage.show_kv()

    def _on_shifted(self, ev: KVShifted) -> None:
        """Room made in the ring: the cache as it now is."""
        self._show_cache(ev.layout)

    def _show_cache(self, layout: Sequence[tuple[str, int, int, Span | None]], *,
                    restored: bool = False) -> None:  # fmt: skip
        """The bar shows the cache as ``layout`` says, and the next call's text is placed after
        what stays (not over an emptied bar). Chunks an earlier job left resident (a follow-up
        reusing the cache, a restored state) are never queued: they join the queue here, in KV,
        so it shows every chunk of the plan being run."""
        if not self._in_call:
            self._start_call()
        self._evaluated = True
        if restored:
            self.kv.restore(layout)
        else:
            self.kv.lay_out(layout)
        queued = {(start, end) for start, end, _state in self.queue.states()}
        for kind, _pos, tokens, source in layout:
            span = (source[0], source[1]) if source else None
            if kind == SegmentKind.CHUNK.value and span is not None and span not in queued:
                self.queue.queue(*span, tokens)
                self.queue.set_state(span, ChunkState.IN_KV)
                self._call_chunks.append(span)
        self.kv_stage.show_kv()

    def _on_tokens(self, ev: TokenBatch) -> None:
        if not self._in_call:  # a call with no document chunks (combining partial results)
            self._start_call()
        if not self._evaluated:
            self._evaluated = True
            self.kv.clear()
        if self._open is None:
            self._open = self.output.add_output(ev.step, ev.sources)
        if ev.text:
            self.output.show_text(self.output.span_count - 1, ev.text)
        if ev.tokens > 0:
            self.kv.grow_output(ev.tokens)
            self.kv_stage.show_kv()

    def _on_kv_stats(self, ev: KVStats) -> None:
        if ev.n_ctx > 0:
            self.kv.n_ctx = ev.n_ctx
        self.kv.measured(ev.cells_used)
        self.queue.finish(self._call_chunks)
        self._in_call, self._open = False, None
        self.kv_stage.show_kv()

    def _on_error(self, ev: JobError) -> None:
        self.output.line(self.tr("Engine error: {0}").format(ev.message), bold=True)
        self._in_call, self._open = False, None

    def _on_strategy(self, ev: StrategyStarted) -> None:
        """``compare`` runs one job per strategy: each starts with an empty queue and cache."""
        self.queue.clear()
        self.kv.clear()
        self._reset_run_state()
        self.output.heading(self.tr("Strategy: {0}").format(ev.strategy), size=1.2)
        self.kv_stage.show_kv()

    def _on_finished(self, ev: JobFinished) -> None:
        result = ev.result
        self.queue.finish_all()
        self.queue.flush()
        self.output.finish(result.outputs, self._job_first_span)
        if result.refused:
            self.output.line(self.tr("Refused: {0}").format(result.refused), bold=True)
        elif result.error:
            self.output.line(self.tr("Error: {0}").format(result.error), bold=True)
        summary = self.tr(
            "Finished: {0} · {1:,} prompt tokens ({2:,} evaluated) · {3:,} generated · "
            "KV peak {4:,} of {5:,} · {6:.1f} s"
        )
        summary = summary.format(finish_label(result.finish_reason), result.prompt_tokens,
                                 result.evaluated_tokens, result.completion_tokens,
                                 result.kv_peak_cells, result.n_ctx, result.seconds)  # fmt: skip
        self.output.line(summary)
        self._reset_run_state()

    def _on_row_clicked(self, index: QModelIndex) -> None:
        span = self.queue.span_at(index.row())
        if span is not None:
            self.source_clicked.emit([span])
