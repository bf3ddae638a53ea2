"""The main window on the display it is started on, answering a test over stdin and stdout:
where each spin box and combo box is on the screen and what it holds. The test turns the real
mouse wheel over them (xdotool on Xvfb) and asks again (tests/ui/test_wheel_real_display.py).

Commands, one a line; each answer is one line of JSON:
- ``list``: ``[{"name", "x", "y", "value", "shown", "focused"}]`` for every enabled spin box and
  combo box, ``x``, ``y`` the middle of it on the screen;
- ``show I``: the panel around widget ``I`` scrolls it into view; answers ``"ok"``;
- ``quit``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PySide6.QtCore import QSettings, QSocketNotifier
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QScrollArea, QWidget

from app.ui.main_window import MainWindow
from app.ui.widgets import install_wheel_guard
from tests.ui.probe_window import serve


def _name(widget: QWidget) -> str:
    named = widget.objectName() or widget.accessibleName() or widget.toolTip()[:40]
    return f"{type(widget).__name__} {named}".strip()


def _value(widget: QWidget) -> str:
    return widget.text() if isinstance(widget, QAbstractSpinBox) else str(widget.currentIndex())


class Probe:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.widgets = [w for w in window.findChildren(QWidget)
                        if isinstance(w, QAbstractSpinBox | QComboBox) and w.isEnabled()
                        and w.isVisibleTo(window)]  # fmt: skip
        self._notifier = QSocketNotifier(sys.stdin.fileno(), QSocketNotifier.Type.Read)
        self._notifier.activated.connect(self._read)

    def _read(self) -> None:
        line = sys.stdin.readline()
        command, _, arg = line.strip().partition(" ")
        if command == "list":
            answer: object = [self._describe(w) for w in self.widgets]
        elif command == "show":
            widget = self.widgets[int(arg)]
            parent = widget.parentWidget()
            while parent is not None and not isinstance(parent, QScrollArea):
                parent = parent.parentWidget()
            if isinstance(parent, QScrollArea):
                parent.ensureWidgetVisible(widget)
            answer = "ok"
        else:
            QApplication.quit()
            return
        print(json.dumps(answer), flush=True)

    def _describe(self, widget: QWidget) -> dict[str, object]:
        visible = widget.visibleRegion().boundingRect()
        centre = widget.mapToGlobal(visible.center())
        return {"name": _name(widget), "x": centre.x(), "y": centre.y(), "value": _value(widget),
                "shown": not visible.isEmpty() and visible.height() >= widget.height() // 2,
                "focused": widget.hasFocus()}  # fmt: skip


def main() -> int:
    app = QApplication(sys.argv[:1])
    install_wheel_guard(app)  # as the app's entry point does

    def open_window(settings: QSettings, db: Path) -> MainWindow:
        window = MainWindow(None, None, db_path=db, settings=settings)
        window.setWindowTitle("wheel probe")
        return window

    def probe(window: MainWindow) -> Probe:
        window.document_view.setFocus()
        return Probe(window)

    return serve(app, open_window, probe)


if __name__ == "__main__":
    sys.exit(main())
