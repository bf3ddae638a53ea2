"""Live gauges for a run: KV fill, memory, VRAM, tokens per second, and how full prompts were.

Events only store numbers; a 10 Hz QTimer redraws from the latest values (the idea of
pyqtgraph's SignalProxy: a steady refresh rate, never a redraw per token). While no job runs the
gauges redraw once a second, for memory. Each figure and where it comes from:

- KV fill: ``KVLive`` a few times a second while a model call evaluates its prompt and
  generates, and ``KVStats`` at its end — llama.cpp's cells used of n_ctx and the size of the
  sequence's state in bytes. Before a run, 0 of the loaded context (:meth:`set_n_ctx`).
  In a batched map phase (``LanesStarted``) one small bar per lane: each lane's prompt (its
  ``ChunkEvaluated`` positions) and reply (``TokenBatch`` counts) as they arrive, set to
  llama.cpp's count by the lane's ``KVStats``.
- RAM: resident memory of this process and of the engine child (``telemetry.process_rss``,
  psutil), four times a second while a job runs and once a second otherwise, against the
  machine's total memory.
- VRAM: ``telemetry.gpu_state()`` (NVML), as often, on a pool thread, since initialising
  NVML can take a moment; "no GPU" when it has no figures.
- Prompt progress: ``EvalProgress`` — the engine's tokens evaluated of the call's total, the
  rate so far and the time left at that rate; multi-pass jobs: ``PassStarted`` — window i of n.
- Generation tokens/s: ``TokenBatch`` token counts over the last second of their arrival times,
  sampled at every redraw while a job runs.
- Prompt tokens/s, live: per model call, the engine's own figure from its ``EvalProgress``
  events. Where none come (a server), the document tokens of its ``ChunkEvaluated`` events
  over the time from the call's last ``ChunkQueued`` (the prompt goes to the engine) to its
  first ``ChunkEvaluated`` (the prompt is in the KV cache). Template tokens are not in those
  events, so this reads slightly low; it needs events delivered as they happen (a gap under
  20 ms is taken for batched delivery and not plotted). When the job ends, ``JobFinished``
  gives the job's own figure: evaluated tokens over the sum of its times to first token.
- CPU threads: llama.cpp's thread count of :meth:`set_threads` (the loaded model's most), each
  ``ThreadsSet`` (the engine gave a thread up while another program used a core, or took it
  back) with its reason, and ``JobResult.threads`` at the end of a job.
- Prompt lengths: ``JobResult.prompt_lengths`` against ``JobResult.n_ctx`` in tenths
  (``telemetry.PromptHistogram``), kept across runs; a refused job counts as "over".
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import psutil
import pyqtgraph as pg
from PySide6.QtCore import QT_TRANSLATE_NOOP, QEvent, QTimer
from PySide6.QtGui import QCloseEvent, QColor, QHideEvent, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.core import telemetry
from app.core.jobs.events import (
    ChunkEvaluated,
    ChunkQueued,
    EvalProgress,
    JobFinished,
    JobResult,
    KVLive,
    KVStats,
    LanesStarted,
    PassStarted,
    StrategiesFinished,
    ThreadsSet,
    TokenBatch,
)
from app.core.telemetry import GPUState, PromptHistogram
from app.ui.background import run_in_background
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import still_plot

REDRAW_MS = 100  # about 10 redraws a second
SAMPLE_S = 1.0  # memory and VRAM once a second
SAMPLE_RUNNING_S = 0.25  # and four times a second while a job runs: they follow the cache
RATE_WINDOW_S = 1.0  # generation tokens/s over the last second
HISTORY_S = 60.0  # the rate plot scrolls over the last minute
# The rate plot's y axis ends at one of these (tokens/s); see GaugesPanel._fit_y.
Y_STEPS = (10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
AXIS_WIDTH = 48  # pixels for the y axis' labels, up to "100000"
MIN_PROMPT_S = 0.02  # a shorter gap between queued and evaluated is delivery, not prefill
GEN_COLOUR = QColor(74, 144, 217)
PROMPT_COLOUR = QColor(230, 162, 60)
LEGEND_ROOM = 1.4  # the rates' axis reaches this far above the highest point: the legend's row
BAR_COLOUR = QColor(142, 124, 195)


def _size(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


def _set_text(label: QLabel, text: str, tooltip: str | None = None) -> None:
    if label.text() != text:
        label.setText(text)
    if tooltip is not None and label.toolTip() != tooltip:
        label.setToolTip(tooltip)


def duration(seconds: float) -> str:
    """A short time left: "45 s", "3 min 20 s" (digits and units only: no words to translate)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def _set_bar(bar: QProgressBar, maximum: int, value: int) -> None:
    if bar.maximum() != maximum:
        bar.setRange(0, maximum)
    if bar.value() != value:
        bar.setValue(value)


# Why there are no VRAM figures, as telemetry.gpu_state words it; listed so the window can show
# them translated (any other reason, an unexpected error's, is shown as it is).
GPU_REASONS = (
    QT_TRANSLATE_NOOP("GaugesPanel", "no GPU figures: nvidia-ml-py is not installed"),
    QT_TRANSLATE_NOOP("GaugesPanel", "no GPU: the NVIDIA driver is not available"),
    QT_TRANSLATE_NOOP("GaugesPanel", "no GPU found"),
)


class GaugesPanel(FollowsLanguage, QWidget):
    """KV, RAM and VRAM bars, a scrolling tokens/s plot and a prompt-length histogram."""

    def __init__(self, n_ctx: int = 0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.redraw_count = 0  # how often the gauges were drawn (tests check the rate)
        self._engine_pid: int | None = None
        self._total_ram = int(psutil.virtual_memory().total)
        self._histogram = PromptHistogram()
        self._hist_drawn: list[int] = []
        self._active = False  # start() was called and stop() was not
        self._gpu_pending = False
        self._gpu: GPUState | None = None
        self._app_rss = self._engine_rss = 0
        self._last_sample = -1e9  # monotonic time of the last memory sample
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._tick)

        self.kv_bar, self.kv_text = QProgressBar(), QLabel()
        self.ram_bar, self.ram_text = QProgressBar(), QLabel()
        self.vram_bar, self.vram_text = QProgressBar(), QLabel()
        self.threads_bar, self.threads_text = QProgressBar(), QLabel()
        grid = QGridLayout()
        self._names: list[QLabel] = []  # each row's name, in retranslate()'s order
        for row, (bar, text) in enumerate(
            ((self.kv_bar, self.kv_text), (self.ram_bar, self.ram_text),
             (self.vram_bar, self.vram_text), (self.threads_bar, self.threads_text))
        ):  # fmt: skip
            bar.setTextVisible(False)
            bar.setMaximumHeight(14)
            self._names.append(QLabel())
            grid.addWidget(self._names[-1], row, 0)
            grid.addWidget(bar, row, 1)
            grid.addWidget(text, row, 2)
        grid.setColumnStretch(1, 1)
        self.lanes_row = QWidget()  # one bar per lane of a batched map phase, under the KV bar
        self._lanes_layout = QHBoxLayout(self.lanes_row)
        self._lanes_layout.setContentsMargins(0, 0, 0, 0)
        self.lane_bars: list[QProgressBar] = []
        self.lanes_row.hide()
        self._lanes_label = QLabel()  # shown with the row
        self._lanes_label.hide()
        grid.addWidget(self._lanes_label, 4, 0)
        grid.addWidget(self.lanes_row, 4, 1)
        # prompt processing and the passes of a multi-pass job, shown while they run
        self.prompt_bar, self.prompt_text = QProgressBar(), QLabel()
        self.pass_bar, self.pass_text = QProgressBar(), QLabel()
        self._progress_rows: list[tuple[QLabel, QProgressBar, QLabel]] = []
        for row, (bar, text) in enumerate(
            ((self.prompt_bar, self.prompt_text), (self.pass_bar, self.pass_text)), start=5
        ):
            bar.setTextVisible(False)
            bar.setMaximumHeight(14)
            label = QLabel()
            grid.addWidget(label, row, 0)
            grid.addWidget(bar, row, 1)
            grid.addWidget(text, row, 2)
            self._progress_rows.append((label, bar, text))

        self.rates = still_plot(120)
        # A redraw must cost the GUI thread a few milliseconds, not a relayout: the x axis is
        # fixed (now is 0), the y axis moves only in whole steps, and neither axis changes its
        # width or SI prefix, so pyqtgraph repaints the curves and keeps the axes' pictures.
        self.rates.disableAutoRange()
        self.rates.setXRange(-HISTORY_S, 0, padding=0)
        self.rates.setYRange(0, Y_STEPS[0], padding=0)
        self._y_top = Y_STEPS[0]
        for side in ("left", "bottom"):
            self.rates.getAxis(side).enableAutoSIPrefix(False)
        self.rates.getAxis("left").setWidth(AXIS_WIDTH)
        self._legend = self.rates.addLegend(offset=(-8, 4), colCount=2)  # one row, top right
        self.gen_curve = self.rates.plot([], [], name="generation",
                                         pen=pg.mkPen(GEN_COLOUR, width=2))  # fmt: skip
        self.prompt_curve = self.rates.plot([], [], name="prompt",
                                            pen=pg.mkPen(PROMPT_COLOUR, width=1), symbol="o",
                                            symbolSize=6, symbolBrush=PROMPT_COLOUR)  # fmt: skip
        # (count, last, first) of the points each curve shows: its data is set only on change
        self._curves_drawn: dict[str, tuple[object, ...]] = {}

        self.hist = still_plot(120)
        self._hist_bars = pg.BarGraphItem(x=list(range(11)), height=[0] * 11, width=0.8,
                                          brush=BAR_COLOUR)  # fmt: skip
        self.hist.addItem(self._hist_bars)
        self.hist.setXRange(-0.6, 10.6, padding=0)

        self.job_text = QLabel()
        self.job_text.setWordWrap(True)
        plots = QHBoxLayout()  # side by side: the gauges live in a wide, short dock
        plots.addWidget(self.rates, 3)
        plots.addWidget(self.hist, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addLayout(plots, 1)
        layout.addWidget(self.job_text)
        self._last_job: JobResult | None = None  # what the "Last job" line describes
        self._threads_max = self._threads = 0  # llama.cpp's most threads, and now (0: unknown)
        self._threads_change: ThreadsSet | None = None  # the last change, shown with its reason
        self.retranslate()
        self._apply_palette()
        self.reset(n_ctx)

    def retranslate(self) -> None:
        """The rows' names, the plots' titles, axes and legend; the figures are drawn again in
        the words of the language now installed."""
        names = (self.tr("KV cache"), self.tr("RAM"), self.tr("VRAM"), self.tr("CPU"))
        for label, name in zip(self._names, names, strict=True):
            label.setText(name)
        self._lanes_label.setText(self.tr("Lanes"))
        for row, name in zip(self._progress_rows, (self.tr("Prompt"), self.tr("Passes")),
                             strict=True):  # fmt: skip
            row[0].setText(name)
        self.rates.setTitle(self.tr("Tokens per second"))
        self.rates.setLabel("bottom", self.tr("seconds ago"))
        for curve, name in ((self.gen_curve, self.tr("generation")),
                            (self.prompt_curve, self.tr("prompt"))):  # fmt: skip
            curve.opts["name"] = name
            legend_label = self._legend.getLabel(curve)
            if legend_label is not None:
                legend_label.setText(name)
        labels = [f"{i * 10}" for i in range(10)] + [self.tr("over")]
        self.hist.getAxis("bottom").setTicks([list(enumerate(labels))])
        if self._gpu is None:
            self.vram_text.setText(self.tr("–"))
        self._describe_last_job()
        if hasattr(self, "_t0"):  # built: every figure again, the histogram's title too
            self._hist_drawn = []
            self._redraw(time.monotonic())

    # ----- public API -----

    def reset(self, n_ctx: int) -> None:
        """Clear the live figures for a new run (the prompt-length histogram is kept)."""
        self._n_ctx = max(1, n_ctx)
        self._no_model = n_ctx <= 0  # nothing loaded: no context to show
        self._cells = self._kv_bytes = 0
        self._kv_source = "llama.cpp"  # who reports the KV figures (a server may not)
        self._t0 = time.monotonic()
        self._arrivals: deque[tuple[float, int]] = deque()  # (time, tokens) of TokenBatch
        self._call_first_token: float | None = None
        self._gen: deque[tuple[float, float]] = deque()  # (seconds since reset, tokens/s)
        self._prompt: deque[tuple[float, float]] = deque()
        self._queued_at: float | None = None  # the current call's last ChunkQueued
        self._prompt_tokens = 0  # the current call's evaluated chunk tokens
        self._evaluated_at: float | None = None
        self._running = False  # a job's events are arriving
        self._lane_cells: list[int] = []
        self._lanes_drawn: list[int] | None = None
        self._eval: EvalProgress | None = None  # the current call's prompt, as the engine said
        self._eval_x: float | None = None  # where the current call's live prompt rate is drawn
        self._engine_rate = False  # the current call's prompt rate comes from the engine
        self._pass: PassStarted | None = None
        self.job_text.setText("")
        self._last_job = None
        for row in self._progress_rows:
            for widget in row:
                widget.hide()
        self._dirty = True

    def set_n_ctx(self, n_ctx: int) -> None:
        """The context just loaded (0: none): the KV gauge shows 0 of it until a run reports."""
        if not self._running:
            self._no_model = n_ctx <= 0
            self._n_ctx = max(1, n_ctx)
            self._cells = self._kv_bytes = 0
            self._kv_source = "llama.cpp"
            self._dirty = True

    def set_threads(self, n_threads: int) -> None:
        """The loaded model's most threads (0: none loaded, or a server's, which does not
        say); the engine starts each model at that count."""
        self._threads_max = self._threads = max(0, n_threads)
        self._threads_change = None
        self._dirty = True

    def threads_text_shown(self) -> str:
        return self.threads_text.text()

    def clear_progress(self) -> None:
        """Hide the prompt and passes rows: a run that evaluates no prompt of its own (a
        rollback resumed from its KV state) must not show the last run's figures as its own."""
        self._eval, self._pass = None, None
        for row in self._progress_rows:
            for widget in row:
                widget.hide()

    def on_event(self, ev: object) -> None:
        """Store the numbers an event carries; drawing waits for the timer."""
        now = time.monotonic()
        match ev:
            case LanesStarted():
                self._lane_cells = [0] * ev.lanes
                self._n_ctx, self._no_model = max(1, ev.n_ctx), False
            case TokenBatch(lane=int(lane)) if lane < len(self._lane_cells):
                self._running = True
                self._lane_cells[lane] += ev.tokens
                self._arrivals.append((now, ev.tokens))
            case ChunkEvaluated(lane=int(lane)) if lane < len(self._lane_cells):
                self._running = True
                self._lane_cells[lane] = ev.kv_end  # the lane's new prompt, so far
            case KVStats(lane=int(lane)) | KVLive(lane=int(lane)) if lane < len(self._lane_cells):
                self._lane_cells[lane] = ev.cells_used
            case KVLive(lane=None):
                self._running = True
                self._cells, self._kv_bytes = ev.cells_used, ev.state_bytes
                self._kv_source = "llama.cpp"
                self._n_ctx, self._no_model = max(1, ev.n_ctx), False
            case EvalProgress():
                self._running = True
                self._on_eval(ev, now)
            case PassStarted():
                self._running = True
                self._pass = ev
            case TokenBatch():
                self._running = True
                if self._call_first_token is None:
                    self._call_first_token = now
                self._arrivals.append((now, ev.tokens))
            case ChunkQueued():
                self._running = True
                if self._evaluated_at is not None:  # a new call begins
                    self._evaluated_at, self._prompt_tokens = None, 0
                self._queued_at = now
            case ChunkEvaluated():
                self._running = True
                if self._evaluated_at is None:
                    self._evaluated_at = now
                self._prompt_tokens += ev.tokens
                if not self._engine_rate:  # no figure from the engine (a server): timed here
                    self._record_prompt_rate()
            case KVStats():
                self._lane_cells = []  # a call in the loaded context: the lanes are over
                self._cells, self._kv_bytes = ev.cells_used, ev.state_bytes
                self._kv_source = ev.reported_by
                self._n_ctx, self._no_model = max(1, ev.n_ctx), False
                self._call_first_token = None
                self._queued_at = self._evaluated_at = None
                self._prompt_tokens = 0
                self._eval_x, self._engine_rate = None, False
            case ThreadsSet():
                self._threads, self._threads_change = ev.after, ev
                self._threads_max = max(self._threads_max, ev.before, ev.after)
            case JobFinished():
                if ev.result.threads:
                    self._threads = ev.result.threads
                self._finished(ev)
            case StrategiesFinished():
                self._running = False
            case _:
                return
        self._dirty = True

    def set_engine_pid(self, pid: int | None) -> None:
        """The engine child whose memory counts with the app's (None: no engine)."""
        self._engine_pid = pid
        self._last_sample = -1e9  # sample at the next tick

    def start(self) -> None:
        """Redraw at ~10 Hz while shown (hiding pauses the timer, showing resumes it)."""
        self._active = True
        if self.isVisible():
            self._tick()
            self._timer.start()

    def stop(self) -> None:
        self._active = False
        self._timer.stop()

    def is_running(self) -> bool:
        return self._timer.isActive()

    def histogram(self) -> PromptHistogram:
        return self._histogram

    def vram_text_shown(self) -> str:
        return self.vram_text.text()

    # ----- Qt -----

    def showEvent(self, ev: QShowEvent) -> None:
        super().showEvent(ev)
        if self._active and not self._timer.isActive():
            self._tick()
            self._timer.start()

    def hideEvent(self, ev: QHideEvent) -> None:
        self._timer.stop()
        super().hideEvent(ev)

    def closeEvent(self, ev: QCloseEvent) -> None:
        self.stop()
        super().closeEvent(ev)

    def changeEvent(self, ev: QEvent) -> None:
        if ev.type() == QEvent.Type.PaletteChange:
            self._apply_palette()
        super().changeEvent(ev)

    # ----- numbers -----

    def _on_eval(self, ev: EvalProgress, now: float) -> None:
        """The engine's prompt figures; its rate is the call's point on the prompt curve."""
        if self._eval is None or ev.step != self._eval.step or ev.evaluated < self._eval.evaluated:
            self._eval_x = None  # another call
        self._eval, self._engine_rate = ev, True
        if ev.seconds < MIN_PROMPT_S or ev.evaluated <= 0:
            return
        point = (self._eval_x if self._eval_x is not None else now - self._t0, ev.tokens_per_s)
        if self._eval_x is not None and self._prompt and self._prompt[-1][0] == self._eval_x:
            self._prompt[-1] = point
        else:
            self._prompt.append(point)
        self._eval_x = point[0]

    def _record_prompt_rate(self) -> None:
        if self._queued_at is None or self._evaluated_at is None:
            return
        seconds = self._evaluated_at - self._queued_at
        if seconds < MIN_PROMPT_S:  # the events came in one batch: no prefill time to measure
            return
        point = (self._evaluated_at - self._t0, self._prompt_tokens / seconds)
        if self._prompt and self._prompt[-1][0] == point[0]:
            self._prompt[-1] = point  # the same call: its later chunks raise the count
        else:
            self._prompt.append(point)

    def _finished(self, ev: JobFinished) -> None:
        result = ev.result
        self._running = False
        for n in result.prompt_lengths:
            self._histogram.add(n, result.n_ctx)
        if result.refused:
            self._histogram.over += 1
        self._last_job = result
        self._describe_last_job()

    def _describe_last_job(self) -> None:
        result = self._last_job
        if result is None:
            return
        ttft = sum(result.ttft_s)
        if ttft > 0 and result.evaluated_tokens:
            text = self.tr(
                "Last job: {0:,} prompt tokens evaluated in {1:.2f} s to first token "
                "({2:,.0f} tokens/s); {3:,} tokens generated; {4:.1f} s in all"
            )
            rate = result.evaluated_tokens / ttft
            text = text.format(result.evaluated_tokens, ttft, rate, result.completion_tokens,
                               result.seconds)  # fmt: skip
            self.job_text.setText(text)

    def _gen_rate(self, now: float) -> float:
        while self._arrivals and self._arrivals[0][0] < now - RATE_WINDOW_S:
            self._arrivals.popleft()
        if not self._arrivals:
            return 0.0
        started = self._call_first_token or self._arrivals[0][0]
        window = min(RATE_WINDOW_S, max(now - started, REDRAW_MS / 1000))
        return sum(n for _, n in self._arrivals) / window

    def _sample_memory(self) -> None:
        """RSS now (fast); VRAM on a pool thread, one request at a time."""
        self._app_rss = telemetry.process_rss()
        self._engine_rss = telemetry.process_rss(self._engine_pid) if self._engine_pid else 0
        if self._gpu_pending:
            return
        self._gpu_pending = True
        run_in_background(telemetry.gpu_state, self._on_gpu, self._on_gpu_error)

    def _on_gpu(self, state: GPUState) -> None:
        if isValid(self):
            self._gpu_pending, self._gpu, self._dirty = False, state, True

    def _on_gpu_error(self, message: str) -> None:
        if isValid(self):
            self._gpu_pending, self._gpu, self._dirty = False, GPUState(reason=message), True

    # ----- drawing -----

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_sample >= (SAMPLE_RUNNING_S if self._running else SAMPLE_S):
            self._last_sample = now
            self._sample_memory()
            self._dirty = True
        if self._running or self._dirty:
            self._redraw(now)

    def _redraw(self, now: float) -> None:
        """Draw from the stored numbers; widgets whose figure did not change are left alone."""
        self.redraw_count += 1
        self._dirty = False
        t = now - self._t0
        if self._running or (self._gen and self._gen[-1][1] > 0):  # until the rate is back at 0
            self._gen.append((t, self._gen_rate(now)))
        for points in (self._gen, self._prompt):
            while points and points[0][0] < t - HISTORY_S:
                points.popleft()
        curves = (("gen", self.gen_curve, self._gen), ("prompt", self.prompt_curve, self._prompt))
        for name, curve, points in curves:
            drawn = (len(points), points[-1] if points else None, points[0] if points else None)
            if self._curves_drawn.get(name) != drawn:  # the prompt curve: once a call
                self._curves_drawn[name] = drawn
                xs = np.fromiter((p[0] for p in points), float, len(points))
                curve.setData(xs, np.fromiter((p[1] for p in points), float, len(points)))
            curve.setPos(-t, 0)  # x is seconds since reset(); shifted so that now is 0
        self._fit_y(max((p[1] for p in (*self._gen, *self._prompt)), default=0.0))

        if self._lane_cells:
            self._draw_lanes()
        else:
            if self._lanes_drawn is not None:
                self._lanes_drawn = None
                self.lanes_row.hide()
                self._lanes_label.hide()
            cells = min(self._cells, self._n_ctx)  # never more than the context (a server's guess)
            _set_bar(self.kv_bar, self._n_ctx, cells)
            if self._no_model:
                _set_text(self.kv_text, self.tr("no model loaded"))
            elif self._kv_source == "llama.cpp":
                kv = self.tr("{0:,} of {1:,} cells · {2}")
                _set_text(self.kv_text, kv.format(cells, self._n_ctx, _size(self._kv_bytes)))
            elif self._kv_source:  # a server's own figure
                kv = self.tr("{0:,} of {1:,} cells (the server's {2})")
                _set_text(self.kv_text, kv.format(cells, self._n_ctx, self._kv_source))
            else:
                kv = self.tr("{0:,} of {1:,} positions by the last request; KV not reported by "
                             "this server")  # fmt: skip
                _set_text(
                    self.kv_text,
                    kv.format(cells, self._n_ctx),
                    self.tr(
                        "The server does not report its KV cache; the bar shows the "
                        "prompt and reply of the last request, by its token counts"
                    ),
                )
        self._draw_progress()
        total_rss = self._app_rss + self._engine_rss
        _set_bar(self.ram_bar, 1000, min(1000, total_rss * 1000 // max(1, self._total_ram)))
        engine = _size(self._engine_rss) if self._engine_pid else self.tr("none")
        ram = self.tr("app {0} + engine {1} of {2}")
        _set_text(self.ram_text, ram.format(_size(self._app_rss), engine, _size(self._total_ram)))
        self._draw_vram()
        self._draw_threads()
        bins = [*self._histogram.bins, self._histogram.over]
        if bins != self._hist_drawn:
            self._hist_drawn = bins
            self._hist_bars.setOpts(height=bins)
            self.hist.setYRange(0, max(1, *bins), padding=0.05)
            n = sum(bins)
            count = self.tr("1 prompt") if n == 1 else self.tr("{0:,} prompts").format(n)
            self.hist.setTitle(self.tr("Prompt length, % of n_ctx ({0})").format(count))

    def _draw_threads(self) -> None:
        """How many threads llama.cpp computes with, of its most, and why the count last
        changed ("2 → 1 threads: another program is using a core")."""
        _set_bar(self.threads_bar, max(1, self._threads_max), self._threads)
        if not self._threads_max:
            _set_text(self.threads_text, self.tr("–"))
            return
        text = self.tr("{0} of {1} threads").format(self._threads, self._threads_max)
        ch = self._threads_change
        if ch is not None:
            why = {"busy": self.tr("another program is using a core"),
                   "quiet": self.tr("the machine is quiet again"),
                   "slow": self.tr("decoding became much slower than before")}  # fmt: skip
            text = self.tr("{0} → {1} threads: {2}").format(ch.before, ch.after,
                                                            why.get(ch.cause, ch.reason))
        _set_text(self.threads_text, text, self.tr(
            "llama.cpp computes on fewer threads while other programs keep cores busy: its "
            "threads wait for each other at every step, and one that has to share a core "
            "holds up the rest"))  # fmt: skip

    def _draw_progress(self) -> None:
        """The prompt being evaluated (of its total, at the engine's rate, time left) and the
        pass of a multi-pass job (window i of n); each row shows once it has a figure."""
        ev = self._eval
        if ev is not None:
            rate = ev.tokens_per_s
            if ev.evaluated >= ev.total:
                text = self.tr("{0:,} tokens evaluated in {1:.1f} s ({2:,.0f} tokens/s)")
                text = text.format(ev.total, ev.seconds, rate)
            elif rate > 0:
                text = self.tr("{0:,} of {1:,} tokens · {2:,.0f} tokens/s · {3} left")
                text = text.format(ev.evaluated, ev.total, rate,
                                   duration((ev.total - ev.evaluated) / rate))  # fmt: skip
            else:
                text = self.tr("{0:,} of {1:,} tokens").format(ev.evaluated, ev.total)
            self._show_row(0, max(1, ev.total), ev.evaluated, text)
        p = self._pass
        if p is not None:
            text = self.tr("Window {0} of {1} · {2}").format(p.index, p.count, p.step)
            self._show_row(1, max(1, p.count), p.index, text)

    def _show_row(self, row: int, maximum: int, value: int, text: str) -> None:
        label, bar, shown = self._progress_rows[row]
        _set_bar(bar, maximum, min(value, maximum))
        _set_text(shown, text)
        if bar.isHidden():
            for widget in (label, bar, shown):
                widget.show()

    def _fit_y(self, top: float) -> None:
        """The y axis ends at the first step above the highest point (with room to spare), so it
        changes a few times a run instead of at every redraw. The room keeps the curves below
        the legend's row at the top."""
        room = top * LEGEND_ROOM
        wanted = next((step for step in Y_STEPS if room <= step), Y_STEPS[-1])
        while wanted < room:  # beyond the table: keep doubling
            wanted *= 2
        if wanted != self._y_top:
            self._y_top = wanted
            self.rates.setYRange(0, wanted, padding=0)

    def _draw_lanes(self) -> None:
        """One bar per lane; the KV bar shows them all together against the lanes' cells."""
        cells = self._lane_cells
        if cells == self._lanes_drawn:
            return
        if len(self.lane_bars) != len(cells):
            for bar in self.lane_bars:
                bar.deleteLater()
            self.lane_bars = []
            for lane in range(len(cells)):
                bar = QProgressBar()
                bar.setTextVisible(False)
                bar.setMaximumHeight(8)
                bar.setToolTip(self.tr("Lane {0}").format(lane + 1))
                self._lanes_layout.addWidget(bar)
                self.lane_bars.append(bar)
        for bar, used in zip(self.lane_bars, cells, strict=True):
            _set_bar(bar, self._n_ctx, min(used, self._n_ctx))
        self.lanes_row.show()
        self._lanes_label.show()
        self._lanes_drawn = list(cells)
        total = len(cells) * self._n_ctx
        _set_bar(self.kv_bar, total, min(sum(cells), total))
        kv = self.tr("{0} lanes: {1:,} of {2} × {3:,} cells")
        _set_text(self.kv_text, kv.format(len(cells), sum(cells), len(cells), self._n_ctx))

    def _draw_vram(self) -> None:
        gpu = self._gpu
        if gpu is None:
            return
        if not gpu.available:
            _set_bar(self.vram_bar, 1000, 0)
            if self.vram_bar.isEnabled():
                self.vram_bar.setEnabled(False)
            reason = self.tr(gpu.reason) if gpu.reason in GPU_REASONS else gpu.reason
            _set_text(self.vram_text, self.tr("no GPU"), reason)
            return
        used = sum(g.used for g in gpu.gpus)
        total = sum(g.total for g in gpu.gpus)
        if not self.vram_bar.isEnabled():
            self.vram_bar.setEnabled(True)
        _set_bar(self.vram_bar, 1000, min(1000, used * 1000 // max(1, total)))
        vram = self.tr("{0} of {1}").format(_size(used), _size(total))
        _set_text(self.vram_text, vram, ", ".join(g.name for g in gpu.gpus))

    def _apply_palette(self) -> None:
        """Plot backgrounds and axis text from the palette, so light and dark themes both read."""
        pal = self.palette()
        background = pal.color(QPalette.ColorRole.Base)
        text = pal.color(QPalette.ColorRole.Text)
        for plot in (self.rates, self.hist):
            plot.setBackground(background)
            for side in ("left", "bottom"):
                axis = plot.getAxis(side)
                axis.setPen(pg.mkPen(text))
                axis.setTextPen(pg.mkPen(text))
            title = plot.getPlotItem().titleLabel
            title.setAttr("color", text)
            if title.text:
                title.setText(title.text)  # LabelItem applies its colour only when it renders
        self._legend.setLabelTextColor(text)
        for _sample, label in self._legend.items:
            label.setText(label.text)
