"""Stage 2 of the buffer: the KV cache as a bar of segments, its legend and its figures.

The bar draws a KVLayout (kv_bar.py), which the buffer panel keeps as the run's events say; a
batched map phase shows one bar per lane instead. Under the bars, a legend of the segment kinds
and a line of figures: the positions in use of the context (each lane's, during lanes) and, on a
model with sliding-window attention, on how many layers the window applies and how much of the
cache only the other layers see (hatched on the bar).
"""

from __future__ import annotations

from PySide6.QtGui import QPalette, QPixmap
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from app.core.jobs.ring import SegmentKind
from app.ui.i18n import FollowsLanguage
from app.ui.kv_bar import KIND_COLOURS, LOOSE_TEXT, KVBar, KVLayout
from app.ui.widgets import ElidedLabel


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
            if colour is None:  # free: the palette's own, so it follows the theme
                swatch.setFixedSize(12, 12)
                swatch.setAutoFillBackground(True)
                swatch.setBackgroundRole(QPalette.ColorRole.Base)
            else:
                pixmap = QPixmap(12, 12)
                pixmap.fill(colour)
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


class KVStage(QWidget):
    """The cache's bar (``bar``, drawing ``kv``), the lanes' bars (``lane_bars`` in
    ``lanes_box``, while a batched map phase runs), the legend and ``kv_label``. The buffer
    panel calls :meth:`retranslate` when the language changes, :meth:`show_kv` when the cache
    changed."""

    def __init__(self, n_ctx: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kv = KVLayout(n_ctx)
        self.bar = KVBar(self.kv)
        self.kv_label = ElidedLabel()  # its figures change with every event: never wider
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bar)
        self.lanes_box = QWidget()  # one bar per lane of a batched map phase
        self._lanes_layout = QVBoxLayout(self.lanes_box)
        self._lanes_layout.setContentsMargins(0, 0, 0, 0)
        self._lanes_layout.setSpacing(2)
        self.lanes_box.hide()
        self.lane_bars: list[KVBar] = []
        layout.addWidget(self.lanes_box)
        layout.addWidget(_Legend())
        layout.addWidget(self.kv_label)

    def retranslate(self) -> None:
        """The lanes' tooltips and the figures, in the language now installed."""
        self._name_lanes()
        self.show_kv()

    def set_sliding_window(self, window: int, windowed_layers: int, layers: int) -> None:
        """The loaded model's attention: ``windowed_layers`` of ``layers`` see the last
        ``window`` positions only (0: full attention), on every bar."""
        for kv in (self.kv, *(bar.kv for bar in self.lane_bars)):
            kv.window, kv.windowed_layers, kv.layers = window, windowed_layers, layers
        self.show_kv()

    def start_lanes(self, lanes: int, n_ctx: int) -> None:
        """A bar for each of ``lanes`` lanes of ``n_ctx`` positions, in place of the cache's."""
        self.end_lanes()
        kv = self.kv
        for _ in range(lanes):
            bar = KVBar(KVLayout(max(1, n_ctx), window=kv.window,
                                 windowed_layers=kv.windowed_layers, layers=kv.layers))  # fmt: skip
            bar.setMinimumHeight(12)
            self.lane_bars.append(bar)
            self._lanes_layout.addWidget(bar)
        self._name_lanes()
        self.bar.hide()
        self.lanes_box.show()

    def end_lanes(self) -> None:
        """The lanes' bars go; the cache's bar is back."""
        for bar in self.lane_bars:
            bar.deleteLater()
        self.lane_bars = []
        self.lanes_box.hide()
        self.bar.show()

    def lane_layout(self, lane: int) -> KVLayout:
        return self.lane_bars[lane].kv

    def _name_lanes(self) -> None:
        for lane, bar in enumerate(self.lane_bars):
            bar.setToolTip(self.tr("Lane {0}").format(lane + 1))

    def show_kv(self) -> None:
        """The figures under the bars, from what the layouts hold now; the bar redrawn."""
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
