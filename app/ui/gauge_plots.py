"""The gauges' two plots: tokens per second over the last minute, and how full prompts were.

A redraw must cost the GUI thread a few milliseconds, not a relayout: the rates' x axis is fixed
(now is 0), its y axis moves only in whole steps (Y_STEPS), and neither axis changes its width
or SI prefix, so pyqtgraph repaints the curves and keeps the axes' pictures. A curve's data and
the histogram's bars are set only when they changed.

A title is drawn in the panel's own font size and shortened with "…" to the width its plot has,
the whole title in the plot's tooltip: pyqtgraph's title never wraps nor shortens, and at
1024x700 the histogram's ran past the plot's edge. Like an ElidedLabel's text(), the title
label's ``text`` stays the whole title; only its drawing is shortened.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPalette

from app.core.telemetry import PromptHistogram
from app.ui.gauge_figures import HISTORY_S, Point
from app.ui.widgets import still_plot

# The rate plot's y axis ends at one of these (tokens/s); see GaugePlots._fit_y.
Y_STEPS = (10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
AXIS_WIDTH = 48  # pixels for the y axis' labels, up to "100000"
GEN_COLOUR = QColor(74, 144, 217)
PROMPT_COLOUR = QColor(230, 162, 60)
LEGEND_ROOM = 1.4  # the rates' axis reaches this far above the highest point: the legend's row
BAR_COLOUR = QColor(142, 124, 195)


class GaugePlots(QObject):
    """The rates plot (``rates``: a generation and a prompt curve) and the prompt-length
    histogram (``hist``); the gauges place the two widgets and call the draw methods."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rates = still_plot(120)
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
        self._hist_drawn: list[int] = []
        self._titles: dict[pg.PlotWidget, str] = {}  # each plot's whole title
        self._shown: dict[pg.PlotWidget, str] = {}  # and what of it is drawn
        self._viewports = {self.rates.viewport(): self.rates, self.hist.viewport(): self.hist}
        for plot in (self.rates, self.hist):
            plot.viewport().installEventFilter(self)  # a new width: the title fitted again
            plot.getPlotItem().vb.sigResized.connect(lambda _vb, p=plot: self._fit_title(p))
        self.retranslate()

    def retranslate(self) -> None:
        """The titles, the axes and the legend in the language now installed; the histogram's
        title, made from its count, is made again at the next draw_histogram."""
        self.set_title(self.rates, self.tr("Tokens per second"))
        self.rates.setLabel("bottom", self.tr("seconds ago"))
        for curve, name in ((self.gen_curve, self.tr("generation")),
                            (self.prompt_curve, self.tr("prompt"))):  # fmt: skip
            curve.opts["name"] = name
            legend_label = self._legend.getLabel(curve)
            if legend_label is not None:
                legend_label.setText(name)
        labels = [f"{i * 10}" for i in range(10)] + [self.tr("over")]
        self.hist.getAxis("bottom").setTicks([list(enumerate(labels))])
        self._hist_drawn = []

    def draw_rates(self, t: float, gen: Sequence[Point], prompt: Sequence[Point]) -> None:
        """The curves at ``t`` seconds since the figures' reset (now is 0 on the x axis)."""
        for name, curve, points in (("gen", self.gen_curve, gen),
                                    ("prompt", self.prompt_curve, prompt)):  # fmt: skip
            drawn = (len(points), points[-1] if points else None, points[0] if points else None)
            if self._curves_drawn.get(name) != drawn:  # the prompt curve: once a call
                self._curves_drawn[name] = drawn
                xs = np.fromiter((p[0] for p in points), float, len(points))
                curve.setData(xs, np.fromiter((p[1] for p in points), float, len(points)))
            curve.setPos(-t, 0)  # x is seconds since reset(); shifted so that now is 0
        self._fit_y(max((p[1] for p in (*gen, *prompt)), default=0.0))

    def draw_histogram(self, histogram: PromptHistogram) -> None:
        bins = [*histogram.bins, histogram.over]
        if bins == self._hist_drawn:
            return
        self._hist_drawn = bins
        self._hist_bars.setOpts(height=bins)
        self.hist.setYRange(0, max(1, *bins), padding=0.05)
        n = sum(bins)
        count = self.tr("1 prompt") if n == 1 else self.tr("{0:,} prompts").format(n)
        self.set_title(self.hist, self.tr("Prompt length, % of n_ctx ({0})").format(count))

    def set_title(self, plot: pg.PlotWidget, title: str) -> None:
        """``plot``'s title, shortened to the width it has (see the module's docstring)."""
        self._titles[plot] = title
        self._fit_title(plot)

    def title(self, plot: pg.PlotWidget) -> str:
        """``plot``'s whole title, as set (the plot may show it shortened)."""
        return self._titles.get(plot, "")

    def shown_title(self, plot: pg.PlotWidget) -> str:
        """What of ``plot``'s title fits its width, as drawn."""
        return self._shown.get(plot, "")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and watched in self._viewports:
            self._fit_title(self._viewports[watched])
        return False

    def _fit_title(self, plot: pg.PlotWidget, force: bool = False) -> None:
        """Show as much of the title as fits above the plot's data (the axes take the rest of
        the plot's width; the text item keeps a margin each side)."""
        title = self._titles.get(plot, "")
        if not title:
            return
        item = plot.getPlotItem()
        label = item.titleLabel
        font = QFont(label.item.font())  # the text item's family, in the panel's size
        own = plot.font()
        if own.pointSizeF() > 0:
            font.setPointSizeF(own.pointSizeF())
            size = f"{own.pointSizeF():g}pt"
        else:  # a font sized in pixels
            font.setPixelSize(own.pixelSize())
            size = f"{own.pixelSize()}px"
        margin = 2 * label.item.document().documentMargin()
        room = plot.viewport().width() - (item.width() - item.vb.width()) - margin
        shown = QFontMetricsF(font).elidedText(title, Qt.TextElideMode.ElideRight, max(0, room))
        if force or shown != self._shown.get(plot):
            self._shown[plot] = shown
            item.setTitle(shown, size=size)
        label.text = title
        if plot.toolTip() != title:
            plot.setToolTip(title)

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

    def apply_palette(self, pal: QPalette) -> None:
        """Plot backgrounds and axis text from ``pal``, so light and dark themes both read."""
        background = pal.color(QPalette.ColorRole.Base)
        text = pal.color(QPalette.ColorRole.Text)
        for plot in (self.rates, self.hist):
            plot.setBackground(background)
            for side in ("left", "bottom"):
                axis = plot.getAxis(side)
                axis.setPen(pg.mkPen(text))
                axis.setTextPen(pg.mkPen(text))
            plot.getPlotItem().titleLabel.setAttr("color", text)
            self._fit_title(plot, force=True)  # LabelItem applies its colour when it renders
        self._legend.setLabelTextColor(text)
        for _sample, label in self._legend.items:
            label.setText(label.text)
