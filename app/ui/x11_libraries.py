"""The system libraries Qt needs to open a window on X11, named before Qt tries.

Qt 6.5 and later load its xcb platform plugin only when libxcb-cursor and a few other xcb
libraries are installed; without them it prints a line about plugins and aborts, which a person
who started the app from the desktop never sees. The app asks the system's library cache first
and says in one sentence which packages to install (Debian and Ubuntu names).
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping

# library name as ctypes finds it -> the Debian/Ubuntu package that installs it
NEEDED = {
    "xcb-cursor": "libxcb-cursor0",
    "xcb-icccm": "libxcb-icccm4",
    "xcb-keysyms": "libxcb-keysyms1",
    "xcb-shape": "libxcb-shape0",
    "xkbcommon-x11": "libxkbcommon-x11-0",
}


def uses_x11(env: Mapping[str, str], platform: str = sys.platform) -> bool:
    """Whether Qt will open the window through xcb: Linux, a DISPLAY, and no other platform
    chosen (a Wayland session is left to Qt, which prefers Wayland there)."""
    chosen = env.get("QT_QPA_PLATFORM", "")
    if not platform.startswith("linux") or chosen not in ("", "xcb"):
        return False
    return bool(env.get("DISPLAY")) and (chosen == "xcb" or not env.get("WAYLAND_DISPLAY"))


def missing_packages(find: Callable[[str], str | None] = ctypes.util.find_library) -> list[str]:
    """The packages of NEEDED whose library the system does not have."""
    return [package for library, package in NEEDED.items() if find(library) is None]


def problem(env: Mapping[str, str] = os.environ,
            find: Callable[[str], str | None] = ctypes.util.find_library) -> str:  # fmt: skip
    """One sentence saying what to install before the window can open, or "" when nothing is
    missing (or the window will not use X11)."""
    if not uses_x11(env):
        return ""
    missing = missing_packages(find)
    if not missing:
        return ""
    names = " ".join(missing)
    return (f"ContextLens cannot open its window: Qt needs the system's {', '.join(missing)} "
            f"on X11 (install with `sudo apt install {names}` or your system's equivalent).")
