"""Screenshots of the window on a real X display after a question, a follow-up, a compare and a
rollback (its history, then its three-stage buffer), at one screen size and one theme:

    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python docs/make_tour.py --theme dark

Each picture is the X screen itself (``QScreen.grabWindow(0)`` reads Xvfb's framebuffer, what a
person's monitor would show), saved as ``docs/tour/<width>x<height>-<theme>-<n>-<step>.png``.
The window fills the screen and runs the default model at n_ctx 2,048 on the app's sample text,
with settings and history of its own. Takes a few minutes on 2 cores.
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
os.environ["QT_QPA_PLATFORM"] = "xcb"  # the real display, never offscreen
os.environ.setdefault("CONTEXTLENS_CALIBRATE", "0")  # pictures, not a calibration

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.core.default_model import default_model_path  # noqa: E402
from app.core.paths import sample_document  # noqa: E402

N_CTX = 2048
QUESTION = "What is a kluge?"
FOLLOW_UP = "Where does the word come from?"
COMPARED = ["head", "retrieve", "entropy"]


def wait(done: Callable[[], bool], what: str, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        QApplication.processEvents()
        time.sleep(0.02)


def settle(seconds: float = 1.0) -> None:
    """Let the window paint what it was just told (gauges update on a timer)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--theme", choices=("light", "dark"), default="light")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tour")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    app = QApplication([])
    app.setApplicationName("ContextLens")
    from app.ui.main_window import MainWindow
    from app.ui.theme import apply_theme

    apply_theme(app, args.theme)
    screen = app.primaryScreen()
    size = screen.size()
    prefix = f"{size.width()}x{size.height()}-{args.theme}"

    def shot(n: int, step: str) -> None:
        settle()
        path = args.out / f"{prefix}-{n}-{step}.png"
        screen.grabWindow(0).save(str(path))
        print(path)

    scratch = Path(tempfile.mkdtemp(prefix="contextlens-tour-"))
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(default_model_path(), sample_document(), n_ctx=N_CTX,
                        settings=settings, db_path=scratch / "history.db")  # fmt: skip
    window.fit_to(screen.availableGeometry())
    window.show()
    ready: list[bool] = []
    window.ready.connect(lambda: ready.append(True))
    wait(lambda: bool(ready), "the model and the count")

    finished: list[object] = []
    window.job_finished.connect(finished.append)

    def run(question: str) -> None:
        finished.clear()
        window.question.setText(question)
        window.run_job()
        wait(lambda: bool(finished), f"the answer to {question!r}")

    window.task_box.setCurrentIndex(window.task_box.findData("ask"))
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("retrieve"))
    window.max_tokens.setValue(96)
    run(QUESTION)
    shot(1, "question")
    run(FOLLOW_UP)
    shot(2, "follow-up")

    window.run_compare(COMPARED)
    wait(lambda: not window.session.running, "the comparison")
    shot(3, "compare")

    history = window.history
    assert history is not None
    window.tabs.setCurrentWidget(history)
    wait(lambda: len(history.versions()) >= 2, "the recorded answers")
    first = min(v.id for v in history.versions())
    history.select_versions(first)
    finished.clear()
    history.request_rollback(True)
    wait(lambda: bool(finished), "the rollback's reply")
    window.tabs.setCurrentWidget(history)
    shot(4, "rollback")
    window.tabs.setCurrentWidget(window.buffers)  # the KV cache as the saved state left it
    shot(5, "rollback-buffers")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
