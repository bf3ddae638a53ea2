"""What survives a restart of the real app on a real X server (issue 49, row 4): the task, the
strategy, the question, the reply size, the context the model was loaded at and the window's
size and panels. The app is started twice with one home, as a person starts it; the test sees
it from outside: the log it keeps (the context each start loaded), the settings file it writes
(what each start held when it closed), the window's size through xdotool, and screenshots in
build/real-display-restart/.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.ui.real_display import App, Display, missing_tools, wait_for

pytestmark = [
    pytest.mark.window,
    pytest.mark.skipif(
        bool(missing_tools()),
        reason=f"needs {', '.join(missing_tools())} (make setup installs them when run as root)",
    ),
]

SHOTS = Path(__file__).parents[2] / "build" / "real-display-restart"
TEXT = "The river rose in the spring and the town watched it from the bridge. " * 30


def settings(home: Path) -> dict[str, str]:
    """The app's settings file (QSettings on Linux, under XDG_CONFIG_HOME) as key -> raw value,
    its groups' keys as group/key."""
    found: dict[str, str] = {}
    group = ""
    for line in (home / "config" / "ContextLens" / "ContextLens.conf").read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            group = "" if line == "[General]" else line[1:-1] + "/"
        elif "=" in line:
            key, _, value = line.partition("=")
            found[group + key] = value
    return found


def quit_app(display: Display, app: App, window: str) -> None:
    display.focus(window)
    display.key("ctrl+q")
    wait_for(lambda: not app.alive(), "the app to quit", app, 30)
    assert app.close() == 0


def window_size(display: Display, window: str) -> tuple[int, int]:
    shown = display.xdotool("getwindowgeometry", window)
    found = re.search(r"Geometry: (\d+)x(\d+)", shown)
    assert found, shown
    return int(found[1]), int(found[2])


def test_choices_context_and_panels_survive_a_restart(model_path: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    document = tmp_path / "river.txt"
    document.write_text(TEXT, encoding="utf-8")
    shutil.rmtree(SHOTS, ignore_errors=True)
    display = Display("1366x768")
    first = second = None
    try:
        first = App(display, home, ["--lang", "en", "--model", str(model_path), "--n-ctx",
                                    "2048", str(document)])  # fmt: skip
        window = str(wait_for(lambda: display.window("river.txt"), "the window", first, 60))
        wait_for(lambda: "ready: river.txt" in first.log(), "the model and the document", first)
        assert "on a 2048-token context" in first.log()
        display.focus(window)
        display.key("alt+t", "e")  # the task: extract
        display.key("Tab")  # to the question, enabled for extract
        display.type("every date")
        display.key("alt+s", "t")  # the strategy: tail
        display.key("alt+l", "ctrl+a")
        display.type("77")
        display.key("Tab")
        display.xdotool("windowsize", "--sync", window, "1200", "680")  # the docks keep shares
        time.sleep(1)
        display.shot(SHOTS / "1-before-quitting.png")
        quit_app(display, first, window)
        before = settings(home)
        assert (before["last-session/task"], before["last-session/strategy"]) == ("extract",
                                                                                 "tail")
        assert before["last-session/question"] == "every date"

        second = App(display, home, ["--lang", "en", str(document)])  # no --model, no --n-ctx
        window = str(wait_for(lambda: display.window("river.txt"), "the window", second, 60))
        wait_for(lambda: second.log().count("ready: river.txt") == 2, "the second start's ready",
                 second)  # fmt: skip
        # the log holds both starts: the second loaded the default model at 2,048 again
        assert second.log().count("on a 2048-token context") == 2, second.log()[-2000:]
        assert window_size(display, window) == (1200, 680)
        display.shot(SHOTS / "2-after-restarting.png")
        quit_app(display, second, window)
        after = settings(home)  # what the second start held when it closed
        kept = ("task", "strategy", "question", "max_tokens", "n_ctx")
        assert {k: after[f"last-session/{k}"] for k in kept} == {
            "task": "extract", "strategy": "tail", "question": "every date", "max_tokens": "77",
            "n_ctx": "2048"}  # fmt: skip
        # the docks, and the splitters of the panes shown (one in a tab never opened keeps
        # no sizes of its own to compare)
        panels = ("window_state", "splitters/splitter-stages", "splitters/splitter-document")
        assert {k: after[k] for k in panels} == {k: before[k] for k in panels}
    finally:
        for app in (first, second):
            if app is not None:
                app.close()
        display.close()
