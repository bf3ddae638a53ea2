"""Session locks held by another process, as the session guard's tests and the server window's
need them: one that takes the lock and is killed (a crash leaves its lock file behind), one that
holds it while it lives; and the offer's answer buttons."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QPushButton

from app.core.paths import project_root

HOLD = """
import os, signal, sys
from PySide6.QtCore import QLockFile
lock = QLockFile(sys.argv[1])
assert lock.tryLock(0)
print(os.getpid(), flush=True)
if sys.argv[2] == "crash":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()  # live until the test closes stdin
"""


def lock_holder(lock: Path, how: str) -> subprocess.Popen[str]:
    """Another process that takes ``lock``, then dies at once ("crash") or waits ("live")."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), how], cwd=project_root(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip().isdigit()
    return proc


def crash_with(lock: Path) -> None:
    """A run that held the lock and was killed: its lock file stays behind."""
    proc = lock_holder(lock, "crash")
    assert proc.wait(timeout=60) == -9 and lock.exists()


def answer(box: QMessageBox, role: QMessageBox.ButtonRole) -> QPushButton:
    [button] = [b for b in box.buttons() if box.buttonRole(b) == role]
    return button
