"""Live gauges for a run: KV fill, memory, VRAM, tokens per second, and how full prompts were.

Events only store numbers (app/ui/gauge_figures.py, which says where each figure comes from); a
10 Hz QTimer redraws from the latest values (the idea of pyqtgraph's SignalProxy: a steady
refresh rate, never a redraw per token). While no job runs the gauges redraw once a second, for
memory. This module draws the rows of bars and samples what no event carries; the two plots
(tokens per second, prompt lengths) are app/ui/gauge_plots.py, and a pool's servers, one row
each, app/ui/server_gauges.py.

- RAM: resident memory of this process and of the engine child (``telemetry.process_rss``,
  psutil), four times a second while a job runs and once a second otherwise, against the
  machine's total memory.
- VRAM: ``telemetry.gpu_state()`` (NVML), as often, on a pool thread, since initialising
  NVML can take a moment; "no GPU" when it has no figures.
"""

from __future__ import annotations

import time

import psutil
from PySide6.QtCore import QT_TRANSLATE_NOOP, QEvent, QTimer
from PySide6.QtGui import QCloseEvent, QHideEvent, QShowEvent
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
from app.core.jobs.events import JobFinished
from app.core.telemetry import GPUState, PromptHistogram
from app.ui.background import run_in_background
from app.ui.gauge_figures import HISTORY_S, LLAMA_CPP, REDRAW_MS, GaugeFigures
from app.ui.gauge_plots import LEGEND_ROOM, Y_STEPS, GaugePlots
from app.ui.i18n import FollowsLanguage
from app.ui.server_gauges import ServerRows

# Names callers import from here, with this module's own.
__all__ = ["GPU_REASONS", "HISTORY_S", "LEGEND_ROOM", "REDRAW_MS", "Y_STEPS", "GaugesPanel",
           "duration"]  # fmt: skip

SAMPLE_S = 1.0  # memory and VRAM once a second
SAMPLE_RUNNING_S = 0.25  # and four times a second while a job runs: they follow the cache


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
        self._built = False  # the constructor has finished: a retranslate draws again
        self.redraw_count = 0  # how often the gauges were drawn (tests check the rate)
        self.figures = GaugeFigures(n_ctx, time.monotonic())
        self._engine_pid: int | None = None
        self._total_ram = int(psutil.virtual_memory().total)
        self._active = False  # start() was called and stop() was not
        self._gpu_pending = False
        self._gpu: GPUState | None = None
        self._app_rss = self._engine_rss = 0
        self._last_sample = -1e9  # monotonic time of the last memory sample
        self._lanes_drawn: list[int] | None = None
        self._dirty = True
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

        self.servers = ServerRows()  # a pool's servers, one row each (hidden without a pool)

        self.plots = GaugePlots(self)
        self.rates, self.hist = self.plots.rates, self.plots.hist
        self.gen_curve, self.prompt_curve = self.plots.gen_curve, self.plots.prompt_curve
        self.job_text = QLabel()
        self.job_text.setWordWrap(True)
        plots = QHBoxLayout()  # side by side: the gauges live in a wide, short dock
        plots.addWidget(self.rates, 3)
        plots.addWidget(self.hist, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addWidget(self.servers)
        layout.addLayout(plots, 1)
        layout.addWidget(self.job_text)
        self.retranslate()
        self.plots.apply_palette(self.palette())
        self.reset(n_ctx)
        self._built = True

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
        self.plots.retranslate()
        if self._gpu is None:
            self.vram_text.setText(self.tr("–"))
        self._describe_last_job()
        if self._built:  # every figure again, the histogram's title too
            self._redraw(time.monotonic())

    # ----- public API -----

    def reset(self, n_ctx: int) -> None:
        """Clear the live figures for a new run (the prompt-length histogram is kept)."""
        self.figures.reset(n_ctx, time.monotonic())
        self._lanes_drawn = None
        self.job_text.setText("")
        self._hide_progress()
        self._dirty = True

    def set_n_ctx(self, n_ctx: int) -> None:
        """The context just loaded (0: none): the KV gauge shows 0 of it until a run reports."""
        if self.figures.set_n_ctx(n_ctx):
            self._dirty = True

    def set_threads(self, n_threads: int) -> None:
        """The loaded model's most threads (0: none loaded, or a server's, which does not
        say); the engine starts each model at that count."""
        self.figures.set_threads(n_threads)
        self._dirty = True

    def threads_text_shown(self) -> str:
        return self.threads_text.text()

    def clear_progress(self) -> None:
        """Hide the prompt and passes rows: a run that evaluates no prompt of its own (a
        rollback resumed from its KV state) must not show the last run's figures as its own."""
        self.figures.clear_progress()
        self._hide_progress()

    def on_event(self, ev: object) -> None:
        """Store the numbers an event carries; drawing waits for the timer."""
        self.servers.on_event(ev)  # a pool's server lost mid-job
        if not self.figures.on_event(ev, time.monotonic()):
            return
        if isinstance(ev, JobFinished):
            self._describe_last_job()
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
        return self.figures.histogram

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
            self.plots.apply_palette(self.palette())
        super().changeEvent(ev)

    # ----- memory -----

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
        running = self.figures.running
        if now - self._last_sample >= (SAMPLE_RUNNING_S if running else SAMPLE_S):
            self._last_sample = now
            self._sample_memory()
            self._dirty = True
        if running or self._dirty:
            self._redraw(now)

    def _redraw(self, now: float) -> None:
        """Draw from the stored numbers; widgets whose figure did not change are left alone."""
        self.redraw_count += 1
        self._dirty = False
        f = self.figures
        self.plots.draw_rates(f.advance(now), f.gen, f.prompt)
        if f.lane_cells:
            self._draw_lanes()
        else:
            if self._lanes_drawn is not None:
                self._lanes_drawn = None
                self.lanes_row.hide()
                self._lanes_label.hide()
            self._draw_kv()
        self._draw_progress()
        total_rss = self._app_rss + self._engine_rss
        _set_bar(self.ram_bar, 1000, min(1000, total_rss * 1000 // max(1, self._total_ram)))
        engine = _size(self._engine_rss) if self._engine_pid else self.tr("none")
        ram = self.tr("app {0} + engine {1} of {2}")
        _set_text(self.ram_text, ram.format(_size(self._app_rss), engine, _size(self._total_ram)))
        self._draw_vram()
        self._draw_threads()
        self.plots.draw_histogram(f.histogram)

    def _draw_kv(self) -> None:
        f = self.figures
        cells = min(f.cells, f.n_ctx)  # never more than the context (a server's guess)
        _set_bar(self.kv_bar, f.n_ctx, cells)
        if f.no_model:
            _set_text(self.kv_text, self.tr("no model loaded"))
        elif f.kv_source == LLAMA_CPP:
            kv = self.tr("{0:,} of {1:,} cells · {2}")
            _set_text(self.kv_text, kv.format(cells, f.n_ctx, _size(f.kv_bytes)))
        elif f.kv_source:  # a server's own figure
            kv = self.tr("{0:,} of {1:,} cells (the server's {2})")
            _set_text(self.kv_text, kv.format(cells, f.n_ctx, f.kv_source))
        else:
            kv = self.tr("{0:,} of {1:,} positions by the last request; KV not reported by "
                         "this server")  # fmt: skip
            _set_text(
                self.kv_text,
                kv.format(cells, f.n_ctx),
                self.tr(
                    "The server does not report its KV cache; the bar shows the "
                    "prompt and reply of the last request, by its token counts"
                ),
            )

    def _describe_last_job(self) -> None:
        result = self.figures.last_job
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

    def _draw_threads(self) -> None:
        """How many threads llama.cpp computes with, of its most, and why the count last
        changed ("2 → 1 threads: another program is using a core")."""
        f = self.figures
        _set_bar(self.threads_bar, max(1, f.threads_max), f.threads)
        if not f.threads_max:
            _set_text(self.threads_text, self.tr("–"))
            return
        text = self.tr("{0} of {1} threads").format(f.threads, f.threads_max)
        ch = f.threads_change
        if ch is not None:
            why = {"busy": self.tr("another program is using a core"),
                   "quiet": self.tr("the machine is quiet again"),
                   "slow": self.tr("decoding became much slower than before")}  # fmt: skip
            text = self.tr("{0} → {1} threads: {2}").format(
                ch.before, ch.after, why.get(ch.cause, ch.reason)
            )
        why_fewer = self.tr(
            "llama.cpp computes on fewer threads while other programs keep cores busy: its "
            "threads wait for each other at every step, and one that has to share a core "
            "holds up the rest")  # fmt: skip
        if ch is not None:  # the measurement behind the last change, first in the tooltip
            figure = (self.tr("A decode took {0:.2f} s where {1:.2f} s was expected.").format(
                ch.took_s, ch.expected_s) if ch.cause == "slow" else
                self.tr("Other programs used {0:.1f} cores.").format(ch.others))  # fmt: skip
            why_fewer = f"{figure}\n\n{why_fewer}"
        _set_text(self.threads_text, text, why_fewer)

    def _draw_progress(self) -> None:
        """The prompt being evaluated (of its total, at the engine's rate, time left) and the
        pass of a multi-pass job (window i of n); each row shows once it has a figure."""
        ev = self.figures.eval
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
        p = self.figures.pass_
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

    def _hide_progress(self) -> None:
        for row in self._progress_rows:
            for widget in row:
                widget.hide()

    def _draw_lanes(self) -> None:
        """One bar per lane; the KV bar shows them all together against the lanes' cells."""
        cells, n_ctx = self.figures.lane_cells, self.figures.n_ctx
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
            _set_bar(bar, n_ctx, min(used, n_ctx))
        self.lanes_row.show()
        self._lanes_label.show()
        self._lanes_drawn = list(cells)
        total = len(cells) * n_ctx
        _set_bar(self.kv_bar, total, min(sum(cells), total))
        kv = self.tr("{0} lanes: {1:,} of {2} × {3:,} cells")
        _set_text(self.kv_text, kv.format(len(cells), sum(cells), len(cells), n_ctx))

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
