"""The main window with no model and a document, on the display it is started on, answering a
test over stdin and stdout about the Server box and the gauges' rows of a pool of servers: where
a widget is on the screen (scrolled into view first) so that the test clicks and types there with
real input (xdotool on Xvfb), and what each server's row shows
(tests/ui/test_server_pool_real_display.py).

Started as ``python -m tests.ui.pool_probe DOCUMENT``. Commands, one a line; each answer is one
line of JSON:
- ``state``: ``{"document", "ready", "connected", "running", "finished", "tokens", "failed",
  "message", "said"}``: ``document``, the document is shown and planned; ``tokens``, the reply
  tokens streamed so far; ``message``, the Server box's message line; ``said``, every status
  bar message shown so far, in order;
- ``widget NAME``: the widget of that object name, scrolled into view: ``x``, ``y`` (its
  middle on the screen), ``shown`` (on the screen now), ``enabled``, ``focused``, ``text``;
- ``rows``: each server's row in the gauges, scrolled into view: ``{"address", "state",
  "job", "shown"}``;
- ``ask JSON``: ``{"question", "max_tokens"}`` chosen in the toolbar (the task "ask"), as
  a person picks them, before the test presses Ctrl+R; answers ``"ok"``;
- ``result``: the last job's first result: ``{"finish_reason", "job_error", "text", "engine"}``;
- ``quit``.
A command that fails answers ``{"error": …}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PySide6.QtCore import QRect, QSettings, QSocketNotifier
from PySide6.QtWidgets import QApplication, QLineEdit, QScrollArea, QWidget

from app.core import config
from app.core.jobs.events import TokenBatch
from app.services.jobs import JobOutcome
from app.ui.gui_gc import collect_on_gui_thread
from app.ui.main_window import MainWindow
from app.ui.widgets import install_wheel_guard
from tests.ui.probe_window import serve


def _screen_rect(widget: QWidget) -> QRect:
    return QRect(widget.mapToGlobal(widget.rect().topLeft()), widget.size())


def _shown(widget: QWidget) -> bool:
    """On the screen now: visible and not scrolled out of its panel."""
    return widget.isVisible() and not widget.visibleRegion().isEmpty()


def _into_view(widget: QWidget) -> None:
    """Scroll the panel holding ``widget`` until it is in view, as a person would."""
    scroll = widget.parentWidget()
    while scroll is not None and not isinstance(scroll, QScrollArea):
        scroll = scroll.parentWidget()
    if isinstance(scroll, QScrollArea):
        scroll.ensureWidgetVisible(widget, 20, 20)
    QApplication.processEvents()


class Probe:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.ready = False
        self.planned = False
        self.running = False
        self.tokens = 0
        self.outcomes: list[JobOutcome] = []
        self.failed: list[str] = []
        self.said: list[str] = []
        window.ready.connect(lambda: setattr(self, "ready", True))
        window.plan_shown.connect(lambda _plan: setattr(self, "planned", True))
        window.failed.connect(self.failed.append)
        window.job_finished.connect(self.outcomes.append)
        window.job_events.connect(self._count)
        window.session.running_changed.connect(lambda on: setattr(self, "running", on))
        window.statusBar().messageChanged.connect(lambda text: text and self.said.append(text))
        self._notifier = QSocketNotifier(sys.stdin.fileno(), QSocketNotifier.Type.Read)
        self._notifier.activated.connect(self._read)

    def _count(self, events: list[object]) -> None:
        self.tokens += sum(ev.tokens for ev in events if isinstance(ev, TokenBatch))

    def _read(self) -> None:
        command, _, arg = sys.stdin.readline().strip().partition(" ")
        answers = {"state": self._state, "rows": self._rows, "result": self._result}
        if command not in {*answers, "widget", "ask"}:
            QApplication.quit()
            return
        try:
            if command == "widget":
                answer: object = self._widget(arg)
            elif command == "ask":
                answer = self._ask(arg)
            else:
                answer = answers[command]()
        except Exception as exc:  # said to the test, which would otherwise wait for ever
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)

    def _state(self) -> dict[str, object]:
        box = self.window.model_panel.server
        return {"document": self.planned, "ready": self.ready, "connected": box.connected,
                "running": self.running, "finished": len(self.outcomes), "tokens": self.tokens,
                "failed": self.failed, "message": box.message.text(),
                "said": self.said}  # fmt: skip

    def _widget(self, name: str) -> dict[str, object]:
        widget = self.window.findChild(QWidget, name)
        if widget is None:
            raise LookupError(f"no widget named {name!r}")
        _into_view(widget)
        centre = _screen_rect(widget).center()
        text = widget.text() if isinstance(widget, QLineEdit) else getattr(widget, "text", str)()
        return {"x": centre.x(), "y": centre.y(), "shown": _shown(widget),
                "enabled": widget.isEnabled(), "focused": widget.hasFocus(),
                "text": text}  # fmt: skip

    def _rows(self) -> list[dict[str, object]]:
        rows = self.window.gauges.servers
        if rows.isVisible():
            _into_view(rows)
        found = []
        for number, (address, state, job) in enumerate(rows.texts(), start=1):
            label = rows.findChild(QWidget, f"serverRow-{number}-state")
            found.append({"address": address, "state": state, "job": job,
                          "shown": label is not None and _shown(label)})  # fmt: skip
        return found

    def _ask(self, arg: str) -> str:
        choice = json.loads(arg)
        w = self.window
        w.task_box.setCurrentIndex(w.task_box.findData("ask"))
        w.question.setText(str(choice["question"]))
        w.max_tokens.setValue(int(choice["max_tokens"]))
        return "ok"

    def _result(self) -> dict[str, object]:
        outcome = self.outcomes[-1]
        result = outcome.results[0]
        engine = outcome.engine.engine if outcome.engine is not None else None
        return {"finish_reason": result.finish_reason, "job_error": result.error,
                "text": result.text, "engine": engine}  # fmt: skip


def main(argv: list[str]) -> int:
    document = Path(argv[0])
    app = QApplication(sys.argv[:1])
    collect_on_gui_thread(app)  # as the app's entry point does (app/ui/main.py)
    install_wheel_guard(app)

    def open_window(settings: QSettings, db: Path) -> MainWindow:
        window = MainWindow(None, document, db_path=db, settings=settings)
        window.resize(1366, 768)
        return window

    with config.using():
        return serve(app, open_window, Probe)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
