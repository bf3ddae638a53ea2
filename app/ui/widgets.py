"""Small widgets the panels share."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QPoint, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QFontInfo,
    QPainter,
    QPaintEvent,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QMessageBox,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QStyle,
    QWidget,
)

from app.core.textutil import clip_message

# Value widgets the mouse wheel changes only once they have the focus (QScrollBar, also a slider,
# is left alone: turning the wheel over it is how a panel scrolls).
WHEEL_GUARDED = (QAbstractSpinBox, QComboBox, QSlider)


def mix(a: QColor, b: QColor, share: float) -> QColor:
    """``a`` moved ``share`` of the way to ``b``: a tint that stays readable on light and dark
    palettes."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * share,
        a.greenF() + (b.greenF() - a.greenF()) * share,
        a.blueF() + (b.blueF() - a.blueF()) * share,
    )


def still_plot(minimum_height: int) -> pg.PlotWidget:
    """A pyqtgraph plot that only shows a figure the app redraws itself: no mouse zoom, no
    auto-range button and no context menu. pyqtgraph's menus (View All, the axes, Export…) and
    its export dialog cannot be translated, and zooming would fight the app's own ranges."""
    plot = pg.PlotWidget()
    plot.setMinimumHeight(minimum_height)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    # The view passes no mouse or key event to the plot, so no menu can open. (Turning
    # pyqtgraph's menu off instead leaves a ViewBox without one, which crashed a later paint.)
    plot.setInteractive(False)
    scene = plot.scene()
    for action in scene.contextMenu:  # the scene's own "Export..." entry, never reachable now
        action.deleteLater()
    scene.contextMenu.clear()
    return plot


def fixed_font() -> QFont:
    """The system's fixed-pitch font, or the first fixed-pitch family installed when that one
    is not (fontconfig's "monospace" can resolve to a proportional font on a machine with many
    fonts, and a diff or a column of code then loses its columns)."""
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    if QFontInfo(font).fixedPitch():
        return font
    families = [f for f in QFontDatabase.families() if QFontDatabase.isFixedPitch(f)]
    preferred = ("DejaVu Sans Mono", "Liberation Mono", "Noto Sans Mono", "Cascadia Mono")
    for family in (*[f for f in preferred if f in families], *families):
        candidate = QFont(family, font.pointSize())
        if QFontInfo(candidate).fixedPitch():
            return candidate
    return font


def plain_label(text: str = "") -> QLabel:
    """A label that shows its text as written: text from outside the app (error messages, a
    server's reply, file and model names, archive members) could otherwise hold markup that
    QLabel's automatic format renders (a heading, an image, a link)."""
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


class ElidedLabel(QWidget):
    """One line of plain text that shortens itself with "…" to the width its panel gives it,
    the whole line in its tooltip while it is cut. A long figure ("hatched: 211 positions only
    the other 3 see") must not widen its panel and squeeze the document beside it, and a
    figure that changes with every event must not lay the window out again: a QLabel's new
    text asks every layout up to the main window for room, and the main window then repaints
    all of its docks (most of the window's CPU time during a run). This one only repaints
    itself."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._text = text
        self._alignment = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
        self._own_tooltip = ""  # a tooltip set by the panel, shown when the text is not cut
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:
        if text != self._text:
            self._text = text
            self._update_tooltip()
            self.update()

    def clear(self) -> None:
        self.setText("")

    def setAlignment(self, alignment: Qt.AlignmentFlag) -> None:
        self._alignment = alignment
        self.update()

    def setToolTip(self, tooltip: str) -> None:
        self._own_tooltip = tooltip
        self._update_tooltip()

    def sizeHint(self) -> QSize:
        m = self.contentsMargins()
        return QSize(self.fontMetrics().averageCharWidth() * 24 + m.left() + m.right(),
                     self.fontMetrics().height() + m.top() + m.bottom())  # fmt: skip

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4, self.sizeHint().height())

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self._text) > self.contentsRect().width()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.FontChange:
            self.updateGeometry()  # the line's height follows the font
        super().changeEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._update_tooltip()

    def paintEvent(self, event: QPaintEvent) -> None:
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self._text, Qt.TextElideMode.ElideRight,
                                              rect.width())  # fmt: skip
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(self._alignment), shown)

    def _update_tooltip(self) -> None:
        if self.is_elided():
            tip = f"{self._text}\n\n{self._own_tooltip}" if self._own_tooltip else self._text
        else:
            tip = self._own_tooltip
        if self.toolTip() != tip:
            super().setToolTip(tip)


class WrappingCheckBox(QCheckBox):
    """A check box whose text wraps to the width its panel gives it. A QCheckBox never wraps
    its text, so one long option ("Count with the selected GGUF (the same model)") set the
    minimum width of its whole panel, and the panel's scroll area then cut off the right of
    every row at 1024x700. The text is a word-wrapped label beside the indicator; a click
    anywhere on it toggles the box."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QLabel(text, self)
        self._label.setTextFormat(Qt.TextFormat.PlainText)
        self._label.setWordWrap(True)
        self._label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        style = self.style()
        indent = (style.pixelMetric(QStyle.PixelMetric.PM_IndicatorWidth, None, self)
                  + style.pixelMetric(QStyle.PixelMetric.PM_CheckBoxLabelSpacing, None, self)
                  + 2)  # fmt: skip
        layout = QHBoxLayout(self)
        layout.setContentsMargins(indent, 1, 0, 1)
        layout.addWidget(self._label)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def text(self) -> str:
        return self._label.text()

    def setText(self, text: str) -> None:
        self._label.setText(text)
        self.updateGeometry()

    def hitButton(self, pos: QPoint) -> bool:
        return self.rect().contains(pos)

    def _indicator_height(self) -> int:
        return self.style().pixelMetric(QStyle.PixelMetric.PM_IndicatorHeight, None, self) + 2

    def _own_layout(self) -> QLayout:
        layout = self.layout()
        assert layout is not None  # set in __init__
        return layout

    def sizeHint(self) -> QSize:
        hint = self._own_layout().sizeHint()
        return QSize(hint.width(), max(hint.height(), self._indicator_height()))

    def minimumSizeHint(self) -> QSize:
        hint = self._own_layout().minimumSize()
        return QSize(hint.width(), max(hint.height(), self._indicator_height()))

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return max(self._own_layout().totalHeightForWidth(width), self._indicator_height())


def plain_message_box(box: QMessageBox) -> QMessageBox:
    """``box`` with its texts shown as written (see :func:`plain_label`)."""
    box.setTextFormat(Qt.TextFormat.PlainText)
    return box


class MessageLine(QWidget):
    """An inline message with a standard icon: errors and notes without a modal box."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.icon = QLabel()
        self.label = plain_label()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.label, 1)
        self.hide()

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()

    def show_message(self, text: str, *, error: bool = True) -> None:
        icons = QStyle.StandardPixmap
        pixmap = icons.SP_MessageBoxWarning if error else icons.SP_MessageBoxInformation
        size = self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize)
        self.icon.setPixmap(self.style().standardIcon(pixmap).pixmap(size, size))
        self.label.setText(clip_message(text))  # it may quote a server, a template, a file
        self.show()

    def clear(self) -> None:
        self.label.clear()
        self.hide()


class WheelGuard(QObject):
    """An application-wide event filter: the wheel over a spin box, combo box or slider that
    does not have the focus scrolls the panel around it instead of changing the value. A person
    scrolling a long panel once turned the context size from 2,048 to 16 without noticing.

    Qt gives a spin box or combo box the focus on the wheel's first notch (their focus policy
    is ``WheelFocus``) before any filter sees the event, so from a real mouse the guard found
    them focused and let the wheel through; each is polished to ``StrongFocus`` (a click or
    Tab) instead."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Polish and isinstance(watched, WHEEL_GUARDED):
            if watched.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            return False
        if not (event.type() == QEvent.Type.Wheel and isinstance(watched, WHEEL_GUARDED)
                and not watched.hasFocus()):  # fmt: skip
            return False
        area = _scroll_area_around(watched)
        if area is None:  # ignored: Qt may still offer it to the parents
            event.ignore()
            return True
        # Handed to the panel's scroll area and accepted there, so it scrolls once (Qt offers a
        # wheel event to the parents only when it comes from the system, never one sent).
        QCoreApplication.sendEvent(area.viewport(), event)
        event.accept()
        return True


def _scroll_area_around(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    return parent


def install_wheel_guard(app: QCoreApplication) -> WheelGuard:
    """Install one :class:`WheelGuard` on ``app`` (again: the one already there)."""
    found = app.findChild(WheelGuard)
    if isinstance(found, WheelGuard):
        return found
    guard = WheelGuard(app)
    app.installEventFilter(guard)
    return guard


def scrolling(panel: QWidget) -> QScrollArea:
    """``panel`` in a frameless area that scrolls it up and down when the window is too short
    for it, rather than squeezing its wrapped hints or pushing the docks below off the window."""
    area = QScrollArea()
    area.setWidget(panel)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return area
