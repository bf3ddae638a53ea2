"""The real app on a real X server: Xvfb for the screen, xdotool for the person's keys and
mouse, ImageMagick's ``import`` for what the screen shows.

The app runs as its own process, as a person starts it; the test sees it only from outside:
the screen, the history database it writes and the log it keeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

TOOLS = ("Xvfb", "xdotool", "import")


def missing_tools() -> list[str]:
    """The programs this needs that the machine lacks (``make setup`` installs them as root)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


class Display:
    """One Xvfb screen of ``size``, with input and screenshots."""

    def __init__(self, size: str = "1366x768") -> None:
        read, write = os.pipe()
        self._xvfb = subprocess.Popen(
            # -noreset: a server whose last client leaves resets, and a client connecting
            # meanwhile is refused (an app restarted right after the first one quit was told
            # "could not connect to display")
            ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{size}x24", "-nolisten", "tcp",
             "-noreset"],
            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(write)
        with os.fdopen(read) as fh:  # Xvfb writes its display number once it listens
            number = fh.readline().strip()
        if not number:
            self._xvfb.kill()
            raise RuntimeError("Xvfb did not start")
        self.name = f":{number}"
        self.env = {**os.environ, "DISPLAY": self.name, "QT_QPA_PLATFORM": "xcb"}

    def xdotool(self, *args: str) -> str:
        done = subprocess.run(["xdotool", *args], env=self.env, capture_output=True, text=True,
                              timeout=30, check=True)  # fmt: skip
        return done.stdout.strip()

    def window(self, title: str) -> str:
        """The id of a mapped window whose title contains ``title``, or "" while there is none."""
        found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", title],
                               env=self.env, capture_output=True, text=True, timeout=30,
                               check=False)  # fmt: skip
        return found.stdout.split()[0] if found.returncode == 0 and found.stdout.strip() else ""

    def focus(self, window: str) -> None:
        """Give ``window`` the keyboard, as clicking on it would (there is no window manager to
        do it): keys then reach it as the person's keys reach the active window."""
        self.xdotool("windowfocus", "--sync", window)

    def dialog(self, title: str, app: App, timeout: float = 30) -> str:
        """Wait for the dialog titled ``title`` and give it the keyboard before anything is
        typed: the window is mapped before Qt moves the focus to it, and on a busy machine the
        first keys of a typed path went to the main window (the dialog then read the rest as
        a file name and said "File not found")."""
        dialog = str(wait_for(lambda: self.window(title), f"the {title} dialog", app, timeout))
        self.focus(dialog)
        return dialog

    def key(self, *keys: str) -> None:
        """Real key presses, one after another (``"ctrl+r"``, ``"alt+y"``, ``"Down"``)."""
        for k in keys:
            self.xdotool("key", "--clearmodifiers", k)
            time.sleep(0.3)  # what a person's pace gives the app: a repaint between keys

    def type(self, text: str) -> None:
        self.xdotool("type", "--delay", "20", text)

    def click(self, x: int, y: int) -> None:
        self.xdotool("mousemove", str(x), str(y), "click", "1")

    def shot(self, path: Path) -> Path:
        """What the whole screen shows now, as a PNG."""
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["import", "-display", self.name, "-window", "root", str(path)],
                       check=True, timeout=30)  # fmt: skip
        return path

    def close(self) -> None:
        self._xvfb.terminate()
        try:
            self._xvfb.wait(10)
        except subprocess.TimeoutExpired:
            self._xvfb.kill()


def home_env(display: Display, home: Path) -> dict[str, str]:
    """``display``'s environment with a home of its own: settings, data, state and cache under
    ``home``, nothing of the machine's user read or written; no calibration."""
    return {**display.env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"), "CONTEXTLENS_CALIBRATE": "0"}  # fmt: skip


class ProbeProcess:
    """A probe module (tests/ui/wheel_probe.py, window_probe.py) run as a process of its own:
    the real window on a display, answering each command line with one line of JSON."""

    def __init__(self, module: str, args: list[str], env: dict[str, str],
                 errors: Path | None = None) -> None:  # fmt: skip
        self.errors = errors
        with errors.open("wb") if errors is not None else contextlib.nullcontext() as err:
            self._process = subprocess.Popen(
                [sys.executable, "-m", module, *args], env=env, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                cwd=Path(__file__).parents[2],
            )  # fmt: skip
        assert self._answer() == "ready"

    def log(self) -> str:
        """What the probe wrote to its errors file (the last 3,000 characters), if it has one."""
        return "" if self.errors is None else self.errors.read_text(errors="replace")[-3000:]

    def _answer(self) -> object:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line, f"the probe ended (exit status {self._process.poll()})\n{self.log()}"
        return json.loads(line)

    def send(self, command: str) -> object:
        """``command``'s answer."""
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        try:
            assert self._process.stdin is not None
            self._process.stdin.write("quit\n")
            self._process.stdin.close()
            self._process.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait(5)


def until(condition: Callable[[], object], what: str, probe: ProbeProcess,
                timeout: float) -> object:  # fmt: skip
    """Poll ``condition`` until it is true; fail with the probe's errors when it never is."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := condition():
            return value
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {timeout:.0f} s:\n{probe.log()}")


class App:
    """``contextlens`` started with ``args`` on ``display``, with a home of its own."""

    def __init__(self, display: Display, home: Path, args: list[str]) -> None:
        self.home = home
        self.db = home / "history.db"
        env = {**home_env(display, home), "CONTEXTLENS_DB": str(self.db)}
        self.output = home / "app-output.txt"
        with self.output.open("wb") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "app.ui.main", "--new-instance", *args],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2],
            )  # fmt: skip

    def log(self) -> str:
        """The app's own log (the user log folder under its home) and what it printed."""
        texts = [p.read_text(errors="replace") for p in self.home.rglob("contextlens.log")]
        return "\n".join([*texts, self.output.read_text(errors="replace")])

    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> int | None:
        if self.alive():
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
        return self._process.returncode


def wait_for(condition: Callable[[], object], what: str, app: App, timeout: float = 120) -> object:
    """Poll ``condition`` until it is true; fail with the app's log when it never is."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        if not app.alive():
            raise AssertionError(f"the app ended while waiting for {what}:\n{app.log()[-3000:]}")
        time.sleep(0.25)
    raise AssertionError(f"no {what} after {timeout:.0f} s:\n{app.log()[-3000:]}")
