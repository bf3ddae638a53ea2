"""How the model panel's list draws its rows: a title per source (even when there is one), and
each model's name over a dimmer line of what it is (parameters, quantization, size); and how tall
the list asks to be: its rows, up to ``SHOWN_MODELS`` of them, so that a long list scrolls inside
itself and leaves the context size, the fit and Load in sight under it.

The list stays a ``QListWidget`` whose items' text is the model's name (what the panel and its
tests select by); a source's title is an item that cannot be selected or focused. The second
line and the hover text come from item data read when drawn or hovered, so a row never shows a
figure older than the last search, and the hover text is said in the language in effect.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QFont, QHelpEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QListWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolTip,
)

PATH_ROLE = Qt.ItemDataRole.UserRole  # the model file's path (str); None on a title row
DETAILS_ROLE = Qt.ItemDataRole.UserRole + 1  # the dimmer second line, or ""
SOURCE_ROLE = Qt.ItemDataRole.UserRole + 2  # a title row's source (str)
PAD = 3  # pixels above and below a row's text
SHOWN_MODELS = 4  # the most model rows the list asks room for; more scroll inside it

Index = QModelIndex | QPersistentModelIndex


class ModelRowDelegate(QStyledItemDelegate):
    """Draws title rows bold and model rows on two lines; ``hover_text(path)`` says what the
    pointer resting on a model shows (None: its path, as the item holds)."""

    def __init__(self, hover_text: Callable[[str], str | None], parent: QAbstractItemView) -> None:
        super().__init__(parent)
        self._hover_text = hover_text

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        size = super().sizeHint(option, index)
        lines = 2 if index.data(DETAILS_ROLE) else 1
        height = option.fontMetrics.height() * lines + 2 * PAD
        if index.data(SOURCE_ROLE):
            height += PAD * 2  # a little air above a source's title
        # as wide as the view: a long name is elided in the middle, never scrolled to
        width = size.width() if not isinstance(option.widget, QAbstractItemView) else 0
        return QSize(width, max(size.height(), height))

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        title = index.data(SOURCE_ROLE)
        details = index.data(DETAILS_ROLE)
        if not title and not details:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        name = opt.text
        opt.text = ""
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        main = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        painter.save()
        if title:
            font = QFont(opt.font)
            font.setBold(True)
            painter.setFont(font)
            painter.setPen(opt.palette.color(QPalette.ColorGroup.Active, main))
            painter.drawText(rect.adjusted(0, 0, 0, -PAD), Qt.AlignmentFlag.AlignLeft
                             | Qt.AlignmentFlag.AlignBottom, name)  # fmt: skip
        else:
            metrics = opt.fontMetrics
            line = metrics.height()
            top = rect.top() + (rect.height() - 2 * line) // 2
            elide = Qt.TextElideMode.ElideMiddle
            painter.setPen(opt.palette.color(main))
            painter.drawText(rect.left(), top, rect.width(), line, Qt.AlignmentFlag.AlignLeft,
                             metrics.elidedText(name, elide, rect.width()))  # fmt: skip
            dim = main if selected else QPalette.ColorRole.PlaceholderText
            painter.setPen(opt.palette.color(dim))
            painter.drawText(rect.left(), top + line, rect.width(), line,
                             Qt.AlignmentFlag.AlignLeft,
                             metrics.elidedText(str(details), elide, rect.width()))  # fmt: skip
        painter.restore()

    def helpEvent(self, event: QHelpEvent, view: QAbstractItemView,
                  option: QStyleOptionViewItem, index: Index) -> bool:  # fmt: skip
        path = index.data(PATH_ROLE) if index.isValid() else None
        if event.type() == QEvent.Type.ToolTip and path:
            text = self._hover_text(str(path))
            if text:
                QToolTip.showText(event.globalPos(), text, view)
                return True
        return super().helpEvent(event, view, option, index)


class ModelList(QListWidget):
    """A list as tall as its rows, up to ``SHOWN_MODELS`` models (and the titles among them)."""

    def sizeHint(self) -> QSize:
        height, models = 0, 0
        for row in range(self.count()):
            if models == SHOWN_MODELS:
                break
            height += self.sizeHintForRow(row)
            models += bool(self.item(row).data(PATH_ROLE))
        one_model = self.fontMetrics().height() * 2 + 2 * PAD  # room for a row when empty
        return QSize(super().sizeHint().width(), max(height, one_model) + 2 * self.frameWidth())
