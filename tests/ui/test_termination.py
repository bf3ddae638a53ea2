"""A logout or a ``kill`` (SIGTERM) closes the window as its close button does: the app exits
0 and leaves neither its engine child nor the child's folder in /dev/shm behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.core.engine import scratch
from app.core.paths import project_root
from app.ui.main_window import MainWindow


def _engine_folder(pid: int) -> Path | None:
    where = Path(scratch.base_dir() or "/tmp")
    for folder in where.glob(f"{scratch.PREFIX}*"):
        try:
            if (folder / scratch.OWNER).read_text(encoding="ascii") == str(pid):
                return folder
        except OSError:
            continue
    return None


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_a_signal_closes_the_window_and_cleans_up(
    tmp_path: Path, model_path: Path, number: int
) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path),
           "CONTEXTLENS_DB": str(tmp_path / "h.db"), "CONTEXTLENS_CALIBRATE": "0"}  # fmt: skip
    output = tmp_path / "output.txt"
    with output.open("wb") as out:  # a file: a pipe nobody reads fills and stops the app
        app = subprocess.Popen([sys.executable, "-m", "app.ui.main", "--new-instance",
                                "--model", str(model_path)], cwd=project_root(), env=env,
                               stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        end = time.monotonic() + 60
        while (folder := _engine_folder(app.pid)) is None and time.monotonic() < end:
            assert app.poll() is None, output.read_text(errors="replace")
            time.sleep(0.2)
        assert folder is not None, "the engine never started"
        children = psutil.Process(app.pid).children(recursive=True)
        assert children
        time.sleep(1)  # the model loading or loaded: either way the signal must clean up
        app.send_signal(number)
        code = app.wait(timeout=30)
        assert code == 0, output.read_text(errors="replace")
        assert not folder.exists()
        _gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, alive
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(5)



def test_a_failure_that_arrives_after_the_close_shows_no_window(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    """Closing stops a load still running, and the load answered "loading cancelled" after the
    window was gone: a message box for it kept the app running with no window (a SIGINT half a
    second into a start hung the app: the tests above, when the signal fell in the load). Here
    the session reports that failure, as the engine thread does, once the window has closed."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.closed, timeout=30_000):
        w.close()
    w.session.failed.emit("loading cancelled")
    qtbot.wait(200)
    shown = [x.metaObject().className() for x in QApplication.topLevelWidgets() if x.isVisible()]
    assert shown == [] and w.last_error == ""
