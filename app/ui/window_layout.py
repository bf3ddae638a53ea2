"""Where the main window's parts are: kept from one start to the next, and fitted to the screen.

The window's geometry, its docks and toolbar (``saveState``) and the splitters of its panels
whose object name starts with "splitter-" are saved when it closes and restored when it opens;
a layout saved on a larger screen is brought inside the one it opens on. Without one, the window
takes at most DEFAULT_SIZE of the screen and shares it out among its docks. Resized, the window
keeps each dock's share of it (:class:`DockShares`): Qt gives the whole change to the document.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QByteArray, QEvent, QObject, QRect, QSettings, QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QDockWidget, QMainWindow, QSplitter

DEFAULT_SIZE = QSize(1400, 900)  # on screens large enough; smaller ones get all they have


def named_splitters(window: QMainWindow) -> list[QSplitter]:
    """The panels' splitters whose place is kept from one start to the next."""
    return [s for s in window.findChildren(QSplitter) if s.objectName().startswith("splitter-")]


def restore_layout(window: QMainWindow, settings: QSettings,
                   docks: Sequence[QDockWidget]) -> None:  # fmt: skip
    """The layout the person left, or one proportioned to the screen; either way the window
    fits the screen it opens on (a layout saved on a larger screen is brought inside)."""
    geometry = settings.value("geometry")
    state = settings.value("window_state")
    screen = window.screen().availableGeometry()
    if isinstance(geometry, QByteArray) and window.restoreGeometry(geometry):
        if isinstance(state, QByteArray):
            window.restoreState(state)
        for splitter in named_splitters(window):
            saved = settings.value(f"splitters/{splitter.objectName()}")
            if isinstance(saved, QByteArray):
                splitter.restoreState(saved)
        if not screen.contains(window.frameGeometry()):
            fit_to(window, screen, docks)
    else:
        fit_to(window, screen, docks)


def save_layout(window: QMainWindow, settings: QSettings) -> None:
    """What restore_layout finds at the next start."""
    settings.setValue("geometry", window.saveGeometry())
    settings.setValue("window_state", window.saveState())
    for splitter in named_splitters(window):
        settings.setValue(f"splitters/{splitter.objectName()}", splitter.saveState())


def fit_to(window: QMainWindow, available: QRect, docks: Sequence[QDockWidget]) -> None:
    """Size the window to ``available`` (at most the default 1400x900) and share it out: the
    document keeps the widest part, the model and the buffers take a quarter and a third
    of the width, the gauges a quarter of 900 lines and less of fewer (a fifth of 720), so
    that the document keeps its lines on a small screen."""
    width = min(DEFAULT_SIZE.width(), available.width())
    height = min(DEFAULT_SIZE.height(), available.height())
    window.setGeometry(QRect(available.topLeft(), QSize(width, height)))
    by_name = {d.objectName(): d for d in docks}
    window.resizeDocks([by_name["dock-gauges"]], [min(230, height * height // 3600)],
                       Qt.Orientation.Vertical)  # fmt: skip
    window.resizeDocks([by_name["dock-model"], by_name["dock-stages"]],
                       [max(240, width * 23 // 100), width * 36 // 100],
                       Qt.Orientation.Horizontal)  # fmt: skip


_SIDES = (
    (Qt.Orientation.Horizontal, (Qt.DockWidgetArea.LeftDockWidgetArea,
                                 Qt.DockWidgetArea.RightDockWidgetArea)),
    (Qt.Orientation.Vertical, (Qt.DockWidgetArea.TopDockWidgetArea,
                               Qt.DockWidgetArea.BottomDockWidgetArea)),
)  # fmt: skip


class DockShares(QObject):
    """Keeps each dock area's share of the window as the window is resized. QMainWindow gives
    the whole change to the central widget, so a window made small and then large again kept
    its docks at the small widths."""

    def __init__(self, window: QMainWindow, docks: Sequence[QDockWidget]) -> None:
        super().__init__(window)
        self._window, self._docks = window, list(docks)
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # seen before the window's layout is: the docks still have their old sizes
        if watched is self._window and isinstance(event, QResizeEvent):
            self._rescale(event.oldSize(), event.size())
        return False

    def _rescale(self, old: QSize, new: QSize) -> None:
        if not old.isValid() or not self._window.isVisible():  # placed at start, not resized
            return
        for orientation, areas in _SIDES:
            horizontal = orientation == Qt.Orientation.Horizontal
            before, after = (old.width(), new.width()) if horizontal else (old.height(),
                                                                          new.height())
            if before <= 0 or before == after:
                continue
            shown = [d for d in map(self._first_docked, areas) if d is not None]
            if shown:
                sizes = [(d.width() if horizontal else d.height()) * after // before
                         for d in shown]  # fmt: skip
                self._window.resizeDocks(shown, sizes, orientation)

    def _first_docked(self, area: Qt.DockWidgetArea) -> QDockWidget | None:
        """One shown dock of ``area`` (its others share its width or height)."""
        return next((d for d in self._docks if d.isVisible() and not d.isFloating()
                     and self._window.dockWidgetArea(d) == area), None)  # fmt: skip
