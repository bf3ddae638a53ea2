"""Without the xcb libraries Qt needs on X11, the app says which packages to install."""

from __future__ import annotations

import subprocess
import sys

from app.ui import x11_libraries
from app.ui.x11_libraries import missing_packages, problem, uses_x11

X11 = {"DISPLAY": ":0"}


def test_only_an_x11_window_needs_them() -> None:
    assert uses_x11(X11, "linux")
    assert uses_x11({**X11, "QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "w"}, "linux")
    assert not uses_x11({**X11, "WAYLAND_DISPLAY": "wayland-0"}, "linux")  # Qt picks Wayland
    assert not uses_x11({**X11, "QT_QPA_PLATFORM": "offscreen"}, "linux")
    assert not uses_x11({}, "linux") and not uses_x11(X11, "darwin")


def test_a_missing_library_is_named_with_its_package() -> None:
    def lacking_cursor(name: str) -> str | None:
        return None if name == "xcb-cursor" else f"lib{name}.so"

    assert missing_packages(lacking_cursor) == ["libxcb-cursor0"]
    sentence = problem({**X11, "QT_QPA_PLATFORM": "xcb"}, lacking_cursor)
    assert "libxcb-cursor0" in sentence and "sudo apt install libxcb-cursor0" in sentence
    assert sentence.count(".") >= 1 and "\n" not in sentence
    assert problem(X11, lambda name: f"lib{name}.so") == ""


def test_the_app_stops_with_that_sentence_before_qt_aborts(tmp_path) -> None:
    code = ("import sys, app.ui.x11_libraries as x; "
            "x.NEEDED = {'surely-no-such-library-here': 'libsurely0'}; "
            "import app.ui.main as m; sys.exit(m.main(['--new-instance']))")  # fmt: skip
    env = {"DISPLAY": ":99", "QT_QPA_PLATFORM": "xcb", "HOME": str(tmp_path),
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().startswith("ContextLens cannot open its window")
    assert "libsurely0" in done.stderr and x11_libraries.NEEDED  # the real table is untouched
