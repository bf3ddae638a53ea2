"""A strip beside the document that shows the whole plan at once, and where the screen is.

The text pane shows a screenful; a plan of a document forty times the context keeps a few
stretches scattered through it. The map scales the whole text to the strip's height, so the
pattern of each strategy (the start kept, the ends kept, windows alternating, informative spans
kept all through) reads at a glance, and a click or drag there scrolls the text to that place.

Each pixel row stands for an equal slice of the text; two ``searchsorted`` calls (numpy) find
whether it holds kept or dropped text. A row holding any kept text is drawn kept, so a short
kept span in a long dropped stretch still shows. Rows are worked out once per plan and height.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QResizeEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.ui.i18n import FollowsLanguage
from app.ui.plan_index import DROPPED, KEPT_A, KEPT_A_SHARED, KEPT_B, KEPT_B_SHARED

MAP_WIDTH = 14
NOTHING = -1  # a row outside every stretch: text the plan does not speak of
_KEPT = np.array([KEPT_A, KEPT_B, KEPT_A_SHARED, KEPT_B_SHARED])


def _first_meeting(
    starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """For each range ``[lo, hi)``, the first of the sorted disjoint stretches that meets it,
    or -1 when none does."""
    i = np.searchsorted(ends, lo, side="right")  # the first stretch ending after lo
    j = np.minimum(i, max(0, starts.size - 1))
    meets = (i < starts.size) & (starts[j] < hi) if starts.size else np.zeros(lo.size, bool)
    return np.where(meets, j, -1)


def row_kinds(
    length: int, stretches: tuple[list[int], list[int], list[int]], rows: int
) -> np.ndarray:
    """The kind each of ``rows`` equal slices of a ``length``-character text is drawn in:
    kept (the first kept stretch in it) if it holds any kept text at all, else dropped if it
    holds dropped text, else NOTHING."""
    if rows <= 0:
        return np.zeros(0, dtype=np.int64)
    starts, ends, kinds = (np.asarray(a, dtype=np.int64) for a in stretches)
    if length <= 0 or starts.size == 0:
        return np.full(rows, NOTHING, dtype=np.int64)
    edges = (np.arange(rows + 1) * (length / rows)).astype(np.int64)
    lo, hi = edges[:-1], np.maximum(edges[1:], edges[:-1] + 1)
    out = np.full(rows, NOTHING, dtype=np.int64)
    dropped = kinds == DROPPED
    seen = _first_meeting(starts[dropped], ends[dropped], lo, hi)
    out[seen >= 0] = DROPPED
    kept = np.isin(kinds, _KEPT)
    k_starts, k_ends, k_kinds = starts[kept], ends[kept], kinds[kept]
    seen = _first_meeting(k_starts, k_ends, lo, hi)
    out[seen >= 0] = k_kinds[seen[seen >= 0]]
    return out


class PlanMap(FollowsLanguage, QWidget):
    """The whole document as a thin strip: kept, dropped and windows, and the screen on it."""

    jump_requested = Signal(int)  # a character offset the person pointed at

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedWidth(MAP_WIDTH)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Expanding)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._length = 0
        self._stretches: tuple[list[int], list[int], list[int]] = ([], [], [])
        self._screen = (0, 0)
        self._rows: np.ndarray | None = None  # row_kinds for the current plan and height
        self._colours: dict[int, QColor] = {}
        self._frame = QColor()
        self.retranslate()

    def retranslate(self) -> None:
        self.setAccessibleName(self.tr("Plan map"))
        self.setToolTip(self.tr("The whole document: kept, dropped and passes; click to go there"))

    def sizeHint(self) -> QSize:
        return QSize(MAP_WIDTH, 200)

    def set_colours(self, colours: dict[int, QColor], frame: QColor) -> None:
        """Colours by stretch kind (KEPT_A … DROPPED, NOTHING) and the screen marker's."""
        self._colours = dict(colours)
        self._frame = QColor(frame)
        self.update()

    def set_plan(self, length: int, stretches: tuple[list[int], list[int], list[int]]) -> None:
        """The text's length and the plan's stretches (``PlanIndex.stretches``)."""
        self._length = length
        self._stretches = stretches
        self._rows = None
        self.update()

    def set_screen(self, top: int, bottom: int) -> None:
        """The text offsets at the top and the bottom of the screen."""
        if (top, bottom) != self._screen:
            self._screen = (top, bottom)
            self.update()

    def rows(self) -> np.ndarray:
        """The kind of each pixel row, as painted."""
        if self._rows is None or len(self._rows) != self.height():
            self._rows = row_kinds(self._length, self._stretches, self.height())
        return self._rows

    def offset_at(self, y: float) -> int:
        """The character offset that pixel row ``y`` stands for."""
        if self.height() <= 0:
            return 0
        share = min(max(y / self.height(), 0.0), 1.0)
        return min(self._length, int(share * self._length))

    # -- Qt ----------------------------------------------------------------------------------

    def paintEvent(self, _event: QPaintEvent) -> None:
        painter = QPainter(self)
        width = self.width()
        background = self._colours.get(NOTHING, self.palette().color(QPalette.ColorRole.Base))
        painter.fillRect(self.rect(), background)
        rows = self.rows()
        if rows.size:
            # one rectangle per run of rows of the same kind
            cuts = np.flatnonzero(np.diff(rows)) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, rows.size], strict=True):
                colour = self._colours.get(int(rows[a]))
                if colour is not None and int(rows[a]) != NOTHING:
                    painter.fillRect(QRect(0, int(a), width, int(b - a)), colour)
        if self._length > 0:
            top, bottom = self._screen
            y0 = int(top / self._length * self.height())
            y1 = max(y0 + 3, int(bottom / self._length * self.height()))
            painter.setPen(self._frame)
            painter.drawRect(QRect(0, y0, width - 1, min(y1, self.height() - 1) - y0))
        painter.end()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._rows = None

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self._length > 0:
            self.jump_requested.emit(self.offset_at(event.position().y()))

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if event.buttons() & Qt.MouseButton.LeftButton and self._length > 0:
            self.jump_requested.emit(self.offset_at(event.position().y()))
