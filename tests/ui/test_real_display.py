"""The app as a person uses it, on a real X server: started from the command line with a model,
a document opened through File > Open, a summary run, rolled back and exported, all through real
key presses (xdotool), with a screenshot of each step.

The screenshots go to build/real-display/ (docs/real-display/ keeps a set for the documentation
site, docs/desktop-app.md); the test reads what the app did from the history file it writes and
the log it keeps, as a person would see it in the window.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATA
from tests.ui.real_display import App, Display, missing_tools, wait_for

SHOTS = Path(__file__).parents[2] / "build" / "real-display"
DOCUMENT = DATA / "sample.md"

pytestmark = pytest.mark.skipif(
    bool(missing_tools()),
    reason=f"needs {', '.join(missing_tools())} (make setup installs them when run as root)",
)


def count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        try:
            return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        except sqlite3.OperationalError:  # the schema is being made
            return 0


@pytest.fixture
def display() -> Iterator[Display]:
    screen = Display("1366x768")
    yield screen
    screen.close()


@pytest.fixture
def shots() -> Path:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    return SHOTS


def test_open_summarize_roll_back_and_export_with_real_keys(
    display: Display, shots: Path, model_path: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    app = App(display, home, ["--lang", "en", "--model", str(model_path), "--n-ctx", "2048"])
    try:
        window = str(wait_for(lambda: display.window("ContextLens"), "the window", app, 60))
        display.focus(window)

        display.key("ctrl+o")  # File > Open Document…, then the path typed into its dialog
        display.dialog("Open Document", app)
        display.type(str(DOCUMENT))
        display.key("Return")
        titled = f"ContextLens — {DOCUMENT.name}"
        window = str(wait_for(lambda: display.window(titled), "the document", app))
        wait_for(lambda: f"ready: {DOCUMENT.name}" in app.log(), "the model and the document",
                 app)  # fmt: skip
        display.focus(window)  # the keys go back to the window once its dialog has closed
        display.shot(shots / "1-opened.png")

        display.key("alt+t", "s", "alt+s", "h")  # summarize under head (a first start opens
        # on ask under retrieve)
        display.key("alt+l", "ctrl+a")  # the reply's room: 32 tokens keep the test short
        display.type("32")
        display.key("Return", "ctrl+r")  # Run: summarize
        wait_for(lambda: count(app.db, "runs") == 1, "the summary's run in the history", app, 180)
        display.shot(shots / "2-summarized.png")

        display.key("ctrl+4", "Home", "alt+k")  # the History's versions, the first, Rollback
        wait_for(lambda: count(app.db, "prompt_versions") == 2, "the rolled-back version", app)
        wait_for(lambda: count(app.db, "runs") == 2, "the resumed run", app)
        display.shot(shots / "3-rolled-back.png")

        display.key("ctrl+4", "alt+e")  # back to the History; Export… offers a file at home
        display.dialog("Export Session", app)
        display.key("Return")
        exported = wait_for(lambda: list(home.glob("*.ctxlens")), "the exported file", app)
        display.shot(shots / "4-exported.png")
        assert [p.stat().st_size > 0 for p in exported] == [True]

        display.focus(window)  # the keys go back to the window once its dialog has closed
        display.key("ctrl+q")
        wait_for(lambda: not app.alive(), "the app to quit", app, 30)
        assert app.close() == 0
    finally:
        app.close()
    assert sorted(p.name for p in shots.iterdir()) == [
        "1-opened.png", "2-summarized.png", "3-rolled-back.png", "4-exported.png"]
