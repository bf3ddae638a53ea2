"""The window on the real engine and model, offscreen: it loads, counts, and never blocks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QImage

from app.core.paths import sample_document
from app.ui.main_window import MainWindow


def test_window_shows_the_model_and_how_far_the_document_exceeds_the_context(
    qtbot, model_path: Path
) -> None:
    window = MainWindow(model_path, sample_document(), n_ctx=4096)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.ready, timeout=60_000):
        window.show()
    assert "4,096" in window.card._fields["n_ctx"].text()
    assert window.card._fields["arch"].text() == "llama"
    assert "× the 4,096-token context" in window.ratio.text()
    assert window.document_view.document().characterCount() > 1_000_000
    window.close()
    assert not window.engine.thread.isRunning()


def test_a_bad_model_is_reported_in_plain_words(qtbot, tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(32))
    window = MainWindow(bad, None)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.failed, timeout=30_000) as blocker:
        window.show()
    assert "version 1 is obsolete" in blocker.args[0]
    window.close()


def test_app_entry_point_saves_a_screenshot(tmp_path: Path, model_path: Path) -> None:
    shot = tmp_path / "window.png"
    proc = subprocess.run(
        [sys.executable, "-m", "app.ui.main", "--demo", "--n-ctx", "2048",
         "--screenshot", str(shot)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(shot))
    assert not image.isNull() and image.width() > 600 and image.height() > 400
