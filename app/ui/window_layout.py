"""Where the main window's parts are: kept from one start to the next, and fitted to the screen.

The window's geometry, its docks and toolbar (``saveState``) and the splitters of its panels
whose object name starts with "splitter-" are saved when it closes and restored when it opens;
a layout saved on a larger screen is brought inside the one it opens on. Without one, the window
takes at most DEFAULT_SIZE of the screen and shares it out among its docks.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QByteArray, QRect, QSettings, QSize, Qt
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
    of the width, the gauges a quarter of the height at most."""
    width = min(DEFAULT_SIZE.width(), available.width())
    height = min(DEFAULT_SIZE.height(), available.height())
    window.setGeometry(QRect(available.topLeft(), QSize(width, height)))
    by_name = {d.objectName(): d for d in docks}
    window.resizeDocks([by_name["dock-gauges"]], [min(230, height // 4)],
                       Qt.Orientation.Vertical)  # fmt: skip
    window.resizeDocks([by_name["dock-model"], by_name["dock-stages"]],
                       [max(240, width * 23 // 100), width * 36 // 100],
                       Qt.Orientation.Horizontal)  # fmt: skip
