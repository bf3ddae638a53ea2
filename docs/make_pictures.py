"""Make the pictures of the user guide (resources/help/guide.md) from the real app, offscreen.

    .venv/bin/python docs/make_pictures.py [--out resources/help/guide]

Opens the sample document on the default model at n_ctx 2,048 in a window with its own temporary
settings and history, then saves: the document pane under each strategy's plan
(strategy-<name>.png), the three-stage buffer and the gauges after a summary, the comparison of
three strategies, and the history after a rollback of the summary. Takes a few minutes on
2 cores; every picture is of the window as a person sees it, nothing is drawn by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("CONTEXTLENS_CALIBRATE", "0")  # pictures, not a calibration

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.core.default_model import default_model_path  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.core.planning.strategies import STRATEGIES  # noqa: E402

N_CTX = 2048


def wait(app: QApplication, done: Callable[[], bool], what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        app.processEvents()
        time.sleep(0.01)


def save(widget: QWidget, path: Path) -> None:
    QApplication.processEvents()
    widget.grab().save(str(path))
    print(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "resources" / "help" / "guide")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    app = QApplication([])
    app.setApplicationName("ContextLens")
    from app.ui.main_window import MainWindow

    scratch = Path(tempfile.mkdtemp(prefix="contextlens-pictures-"))
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(default_model_path(), sample_document(), n_ctx=N_CTX,
                        settings=settings, db_path=scratch / "history.db")  # fmt: skip
    window.resize(1400, 900)
    window.show()
    ready: list[bool] = []
    window.ready.connect(lambda: ready.append(True))
    wait(app, lambda: bool(ready), "the model and the count")

    shown: list[str] = []
    window.plan_shown.connect(lambda plan: shown.append(plan.strategy if plan else ""))
    view = window.document_view
    side = [d for d in window._view_menu_docks if d.objectName() != "dock-gauges"]
    for dock in side:  # the document pane alone across the window: its plan map is tall
        dock.hide()
    view.reveal(len(view._text_str) // 3)  # a place where strategies differ
    for name in STRATEGIES:
        shown.clear()
        window.strategy_box.setCurrentIndex(window.strategy_box.findData(name))
        wait(app, lambda name=name: name in shown, f"the plan of {name}")
        save(view, args.out / f"strategy-{name}.png")
    for dock in side:
        dock.show()

    finished: list[object] = []
    window.job_finished.connect(finished.append)
    window.max_tokens.setValue(128)
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("entropy"))
    window.run_job()
    wait(app, lambda: bool(finished), "the summary")
    window.tabs.setCurrentWidget(window.buffers)
    save(window.tabs, args.out / "buffers.png")
    save(window.gauges, args.out / "gauges.png")
    save(window, args.out / "window.png")

    history = window.history
    if history is not None:  # a rollback of the summary: resumed from its KV state
        window.tabs.setCurrentWidget(history)
        wait(app, lambda: bool(history.versions()), "the recorded summary")
        history.select_versions(history.versions()[0].id)
        finished.clear()
        history.rollback_button.click()
        wait(app, lambda: bool(finished), "the rollback's reply")
        window.tabs.setCurrentWidget(history)
        history.tree.expandAll()
        save(window.tabs, args.out / "history.png")

    window.task_box.setCurrentIndex(window.task_box.findData("summarize"))
    window.max_tokens.setValue(48)
    window.run_compare(["head", "middle", "entropy"])
    wait(app, lambda: not window.session.running, "the comparison")
    save(window.tabs, args.out / "compare.png")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
