"""The engine child's private folder (its cancel flag, its log, a KV state being saved), in RAM
where /dev/shm exists, and the folders that processes which ended without closing left behind.

A window killed (SIGKILL, the OOM killer, a crash) cannot remove its folder, and /dev/shm is
memory: each holds a log and may hold a KV state of tens of megabytes, until the next reboot. So
each folder names its owner's pid, and a new engine removes the folders of owners that are gone.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

log = logging.getLogger(__name__)
PREFIX = "contextlens-engine-"
OWNER = "owner.pid"
UNOWNED_AGE_S = 24 * 3600  # a folder without an owner file (made by an older version)
_live: set[Path] = set()  # this process's folders not removed yet


def base_dir() -> str | None:
    """/dev/shm when this process may write there, else the system's temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def make() -> Path:
    """A new private folder (mode 0700) naming this process as its owner; left-overs of
    processes that are gone are removed first."""
    where = base_dir()
    sweep(Path(where or tempfile.gettempdir()))
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=where))
    (folder / OWNER).write_text(str(os.getpid()), encoding="ascii")
    _live.add(folder)
    return folder


def remove(folder: Path) -> None:
    """The engine that used ``folder`` has stopped: remove it."""
    _live.discard(folder)
    shutil.rmtree(folder, ignore_errors=True)


@atexit.register
def _remove_left() -> None:
    """At exit, the folders of engines still stopping (the window closed during a load that
    llama.cpp does not interrupt): their child ends on its own once it reads the closed pipe."""
    for folder in list(_live):
        remove(folder)


def sweep(where: Path, now: float | None = None) -> list[Path]:
    """Remove this user's engine folders in ``where`` whose owner process is gone (or, without
    an owner file, older than a day); the folders removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(where.glob(f"{PREFIX}*"))
    except OSError:
        return removed
    for folder in entries:
        try:
            info = folder.lstat()
            if not folder.is_dir() or folder.is_symlink() or info.st_uid != os.getuid():
                continue
            owner = _owner(folder)
            gone = (now - info.st_mtime > UNOWNED_AGE_S if owner is None
                    else not psutil.pid_exists(owner))  # fmt: skip
        except OSError:
            continue
        if gone:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.info("removed %d engine folder(s) of processes that are gone", len(removed))
    return removed


def _owner(folder: Path) -> int | None:
    try:
        text = (folder / OWNER).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
