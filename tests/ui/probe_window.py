"""The window of a real-display probe (tests/ui/*_probe.py), in the probe's own process: settings
and history in a temporary folder of its own, "ready" on stdout once shown, then the event loop
until the probe quits it. :class:`~tests.ui.real_display.ProbeProcess` is the test's side."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.ui.main_window import MainWindow


def serve(app: QApplication, open_window: Callable[[QSettings, Path], MainWindow],
          probe: Callable[[MainWindow], object]) -> int:  # fmt: skip
    """``open_window(settings, history_db)`` shown, ``probe(window)`` answering commands (made
    before the event loop runs, so it sees every signal the window sends), until it quits."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(str(Path(tmp) / "s.ini"), QSettings.Format.IniFormat)
        window = open_window(settings, Path(tmp) / "h.db")
        window.show()
        answering = probe(window)
        print(json.dumps("ready"), flush=True)
        app.exec()
        del answering
        window.close()
    return 0
