"""The main window, on the model and a document, on the display it is started on, answering a
test over stdin and stdout about what a person sees there: the status bar's phase line as it is
drawn at its real width, the Context size field and the texts and buttons beside it, and where
the thread pane is on the screen. The test drives the window with real keys and clicks
(xdotool on Xvfb) and asks again (tests/ui/test_third_pass_real_display.py).

Started as ``python -m tests.ui.window_probe MODEL DOCUMENT N_CTX THEME``. Commands, one a
line; each answer is one line of JSON:
- ``state``: ``{"ready", "running", "finished", "turns", "failed", "theme"}``;
- ``ask JSON``: ``{"question", "max_tokens"}`` chosen in the toolbar (the task "ask"), as a
  person picks them, before the test presses Ctrl+R; answers ``"ok"``;
- ``phase``: the phase line beside the progress bar: its ``text``, the ``shown`` text a person
  reads there (elided to its width by QFontMetrics, cut where a widget beside it covers it),
  the ``width`` left uncovered and the ``needed`` width, ``visible`` (on the screen),
  ``running`` (a run is going on and the line is not hidden);
- ``context``: the spin box labelled Context size, scrolled into view: ``x``, ``y`` (its middle
  on the screen), ``value``, ``top`` (its maximum), ``near``: each visible text or button
  beside it (``{"text", "button", "fit"}``; ``fit``: the memory line under the field), and
  ``panel``: the texts shown anywhere in the model panel, scrolled out of view or not;
- ``thread``: the thread pane's text area on the screen: ``x``, ``y``, ``w``, ``h``,
  ``visible``;
- ``quit``.
A command that fails answers ``{"error": …}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QSettings, QSocketNotifier, Qt
from PySide6.QtGui import QFontMetrics, QRegion, QTextDocumentFragment
from PySide6.QtGui import Qt as GuiQt
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QLabel,
    QScrollArea,
    QSpinBox,
    QWidget,
)

from app.core import config
from app.ui.gui_gc import collect_on_gui_thread
from app.ui.main_window import MainWindow
from app.ui.theme import apply_theme, current_theme
from app.ui.widgets import install_wheel_guard
from tests.ui.probe_window import serve

NEAR_PX = 160  # a text or button this close above or below the field is "beside" it


def _plain(text: str) -> str:
    """What a label shows: its rich text as plain text, a mnemonic's "&" dropped."""
    if GuiQt.mightBeRichText(text):
        text = QTextDocumentFragment.fromHtml(text).toPlainText()
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").strip()


def _screen_rect(widget: QWidget) -> QRect:
    return QRect(widget.mapToGlobal(widget.rect().topLeft()), widget.size())


def _shown(widget: QWidget) -> bool:
    """On the screen now: visible and not scrolled out of its panel."""
    return widget.isVisible() and not widget.visibleRegion().isEmpty()


def _uncovered(line: QWidget) -> int:
    """The pixels of ``line`` a person sees from its left edge on: inside the window and under
    none of the widgets beside it (a status bar lays its widgets over each other when they do
    not fit, and the line's own width then says nothing)."""
    region = line.visibleRegion()
    parent = line.parentWidget()
    beside = Qt.FindChildOption.FindDirectChildrenOnly
    if parent is not None:
        for other in parent.findChildren(QWidget, options=beside):
            if other is not line and other.isVisible():
                region -= QRegion(QRect(line.mapFrom(parent, other.pos()), other.size()))
    inside = line.contentsRect()
    x, y = inside.left(), inside.center().y()
    while x <= inside.right() and region.contains(QPoint(x, y)):
        x += 1
    return x - inside.left()


def _seen(text: str, metrics: QFontMetrics, width: int, room: int) -> str:
    """What is left to read of ``text`` elided to ``width`` when only ``room`` pixels show."""
    shown = metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)
    while shown and metrics.horizontalAdvance(shown) > room:
        shown = shown[:-1]
    return shown


class Probe:
    def __init__(self, app: QApplication, window: MainWindow) -> None:
        self.app, self.window = app, window
        self.ready = False
        self.running = False
        self.finished = 0
        self.failed: list[str] = []
        window.ready.connect(lambda: setattr(self, "ready", True))
        window.failed.connect(self.failed.append)
        window.job_finished.connect(lambda _outcome: setattr(self, "finished", self.finished + 1))
        window.session.running_changed.connect(lambda on: setattr(self, "running", on))
        self._notifier = QSocketNotifier(sys.stdin.fileno(), QSocketNotifier.Type.Read)
        self._notifier.activated.connect(self._read)

    def _read(self) -> None:
        command, _, arg = sys.stdin.readline().strip().partition(" ")
        answers = {"state": self._state, "phase": self._phase, "context": self._context,
                   "thread": self._thread}  # fmt: skip
        if command not in answers and command != "ask":
            QApplication.quit()
            return
        try:
            answer: object = answers[command]() if command in answers else self._ask(arg)
        except Exception as exc:  # said to the test, which would otherwise wait for ever
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)

    def _state(self) -> dict[str, object]:
        return {"ready": self.ready, "running": self.running, "finished": self.finished,
                "turns": len(self.window.buffers.thread.turns), "failed": self.failed,
                "theme": current_theme(self.app)}  # fmt: skip

    def _ask(self, arg: str) -> str:
        choice = json.loads(arg)
        w = self.window
        w.task_box.setCurrentIndex(w.task_box.findData("ask"))
        w.question.setText(str(choice["question"]))
        w.max_tokens.setValue(int(choice["max_tokens"]))
        return "ok"

    def _phase(self) -> dict[str, object]:
        line = self.window.run_line
        text, metrics, room = line.text(), line.fontMetrics(), _uncovered(line)
        return {"text": text, "width": room, "needed": metrics.horizontalAdvance(text),
                "shown": _seen(text, metrics, line.contentsRect().width(), room),
                "running": self.running and line.isVisible(), "visible": _shown(line)}  # fmt: skip

    def _context_field(self) -> QSpinBox:
        """The spin box a person finds by its label, "Context size"."""
        for label in self.window.model_panel.findChildren(QLabel):
            buddy = label.buddy()
            if isinstance(buddy, QSpinBox) and _plain(label.text()).rstrip(":").lower() == (
                "context size"
            ):
                return buddy
        raise LookupError("no spin box labelled Context size in the model panel")

    def _context(self) -> dict[str, object]:
        field = self._context_field()
        scroll = field.parentWidget()
        while scroll is not None and not isinstance(scroll, QScrollArea):
            scroll = scroll.parentWidget()
        if isinstance(scroll, QScrollArea):
            scroll.ensureWidgetVisible(field, 50, 120)
        area = _screen_rect(field)
        centre = area.center()
        near, shown = [], set()
        for widget in (scroll or self.window.model_panel).findChildren(QWidget):
            if not isinstance(widget, QLabel | QAbstractButton) or not widget.isVisible():
                continue
            shown.add(_plain(widget.text()))
            if not _shown(widget):
                continue
            if isinstance(widget, QLabel) and widget.buddy() is field:
                continue  # the field's own label
            rect = _screen_rect(widget)
            if rect.bottom() < area.top() - NEAR_PX or rect.top() > area.bottom() + NEAR_PX:
                continue
            text = _plain(widget.text())
            if text:
                near.append({"text": text, "button": isinstance(widget, QAbstractButton)
                             or (isinstance(widget, QLabel) and "<a " in widget.text()),
                             "fit": type(widget).__name__ == "MemoryFit"})  # fmt: skip
        return {"x": centre.x(), "y": centre.y(), "value": field.value(),
                "top": field.maximum(), "focused": field.hasFocus(), "near": near,
                "panel": sorted(shown)}  # fmt: skip

    def _thread(self) -> dict[str, object]:
        pane = self.window.buffers.thread.browser.viewport()
        rect = _screen_rect(pane)
        return {"x": rect.x(), "y": rect.y(), "w": rect.width(), "h": rect.height(),
                "visible": _shown(pane)}  # fmt: skip


def main(argv: list[str]) -> int:
    model, document, n_ctx, theme = Path(argv[0]), Path(argv[1]), int(argv[2]), argv[3]
    app = QApplication(sys.argv[:1])
    collect_on_gui_thread(app)  # as the app's entry point does (app/ui/main.py)
    install_wheel_guard(app)
    apply_theme(app, theme)

    def open_window(settings: QSettings, db: Path) -> MainWindow:
        return MainWindow(model, document, n_ctx=n_ctx, db_path=db, settings=settings)

    with config.using():  # the probe reports the load back once the event loop runs
        return serve(app, open_window, lambda window: Probe(app, window))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
