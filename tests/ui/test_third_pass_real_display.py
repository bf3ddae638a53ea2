"""Issue 49's rows that only a real display shows, checked there: the window on Xvfb at
1366x768 (tests/ui/window_probe.py says what it draws), real keys and clicks through xdotool,
the screen read back with ImageMagick's ``import``.

- the status bar's phase line during a run shows its phase, not "r … k" (the line was laid out
  under the progress bar: its own width said nothing, what a person sees of it does);
- the thread pane, once View › Theme › Dark is chosen, is dark with no white band across it
  (its turns were coloured when they were shown: white bands with near-white text, dark blue
  links; a window started in the dark theme never showed it);
- typing 131072 or 16384 into Context size is taken with a warning or refused in one sentence,
  never cut to 1,310 or 1,638, and a new size is offered a reload beside the field.

One display and one window for the module: each start costs seconds. The screenshots go to
build/real-display-3/.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from app.core.engine.gguf import inspect_model
from tests.conftest import DATA
from tests.ui.real_display import Display, ProbeProcess, home_env, missing_tools, until

pytestmark = [
    pytest.mark.window,
    pytest.mark.skipif(
        bool(missing_tools()),
        reason=f"needs {', '.join(missing_tools())} (make setup installs them when run as root)",
    ),
]

SHOTS = Path(__file__).parents[2] / "build" / "real-display-3"
DOCUMENT = DATA / "sample.md"
N_CTX = 1024  # the context the model loads with: a short run
QUESTION = {"question": "What is this document about?", "max_tokens": 96}
BRIGHT = 0.85  # a pixel this light (relative luminance) is near-white
WHITE_ROW = 0.8  # a row of the thread pane with this share of near-white pixels is white
BAND_ROWS = 4  # this many white rows in a row are a band (the 1-pixel rule between turns is not)
DARK = 0.35  # the most the thread pane's median luminance may be in the dark theme
SETTLE_S = 0.3  # between two looks at the field, for the fit line's debounced answer


class Probe(ProbeProcess):
    """The window in a process of its own on ``display`` (tests/ui/window_probe.py)."""

    def __init__(self, display: Display, home: Path, model: Path) -> None:
        super().__init__("tests.ui.window_probe",
                         [str(model), str(DOCUMENT), str(N_CTX), "light"],
                         home_env(display, home), errors=home / "probe-errors.txt")  # fmt: skip

    def ask(self, command: str) -> dict:
        answer = self.send(command)
        assert isinstance(answer, dict | str), answer
        if isinstance(answer, dict):
            assert "error" not in answer, f"the probe could not answer {command!r}: {answer}"
            return answer
        return {"answer": answer}


@dataclass
class Screen:
    display: Display
    probe: Probe
    window: str  # the X window's id


@dataclass
class Run:
    """What the phase line showed while a question ran, with a screenshot taken meanwhile."""

    phases: list[dict]
    shot: Path


@pytest.fixture(scope="module")
def screen(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Screen]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    display = Display("1366x768")
    probe = Probe(display, tmp_path_factory.mktemp("home"), model_path)
    try:
        window = str(until(lambda: display.window("ContextLens"), "window", probe, 30))
        state = until(lambda: (s := probe.ask("state"))["ready"] and s, "model and document",
                      probe, 120)  # fmt: skip
        assert isinstance(state, dict) and not state["failed"], state
        display.focus(window)
        yield Screen(display, probe, window)
    finally:
        probe.close()
        display.close()


@pytest.fixture(scope="module")
def run(screen: Screen) -> Run:
    """A question asked with Ctrl+R; the phase line read four times a second until it ends."""
    display, probe = screen.display, screen.probe
    probe.ask("ask " + json.dumps(QUESTION))
    display.focus(screen.window)
    display.key("ctrl+r")
    phases: list[dict] = []
    shot = SHOTS / "1-phase-during-a-run.png"
    end = time.monotonic() + 240
    while probe.ask("state")["finished"] < 1 and time.monotonic() < end:
        phase = probe.ask("phase")
        if phase["text"] and phase["running"]:
            phases.append(phase)
            if not shot.exists():
                display.shot(shot)
        time.sleep(0.25)
    assert probe.ask("state")["finished"] == 1, f"the run did not finish:\n{probe.log()}"
    until(lambda: probe.ask("state")["turns"], "turn in the thread", probe, 30)
    return Run(phases, shot)


def test_the_phase_beside_the_progress_bar_is_readable_during_a_run(run: Run) -> None:
    assert run.phases, "the status bar showed no phase line during the run"
    assert run.shot.exists()
    for phase in run.phases:
        head = phase["text"].split(" · ")[0]  # the phase: "Head", "Window 2 of 3", "reply: …"
        shown = phase["shown"].rstrip("…").rstrip()
        assert phase["visible"] and shown.startswith(head), (
            f"the phase line {phase['text']!r} is drawn as {phase['shown']!r} in "
            f"{phase['width']} px (it needs {phase['needed']} px)")  # fmt: skip


def luminance(shot: Path, pane: dict) -> list[list[float]]:
    """The relative luminance (0 black … 1 white) of each pixel of ``pane`` in ``shot``, row by
    row."""
    image = QImage(str(shot)).copy(pane["x"], pane["y"], pane["w"], pane["h"])
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    data, stride = bytes(image.constBits()), image.bytesPerLine()
    rows = []
    for y in range(image.height()):
        line = data[y * stride : y * stride + 3 * image.width()]
        rows.append([(0.2126 * line[i] + 0.7152 * line[i + 1] + 0.0722 * line[i + 2]) / 255
                     for i in range(0, len(line), 3)])  # fmt: skip
    return rows


def white_bands(rows: list[list[float]]) -> list[tuple[int, int]]:
    """The runs of at least BAND_ROWS near-white rows: (first row, rows)."""
    bands, start = [], None
    for y, row in enumerate([*rows, []]):
        white = bool(row) and sum(v > BRIGHT for v in row) > WHITE_ROW * len(row)
        if white and start is None:
            start = y
        elif not white and start is not None:
            if y - start >= BAND_ROWS:
                bands.append((start, y - start))
            start = None
    return bands


def test_the_thread_turns_dark_with_the_dark_theme(screen: Screen, run: Run) -> None:
    display, probe = screen.display, screen.probe
    display.focus(screen.window)
    display.key("alt+v", "e", "d")  # View › Theme › Dark
    until(lambda: probe.ask("state")["theme"] == "dark", "dark theme", probe, 10)
    pane = probe.ask("thread")
    assert pane["visible"] and pane["w"] > 50 and pane["h"] > 30, pane
    time.sleep(0.5)  # the repaint after the theme changed
    shot = display.shot(SHOTS / "2-dark-thread.png")
    rows = luminance(shot, pane)
    median = statistics.median(v for row in rows for v in row)
    assert median < DARK, f"the thread pane's median luminance is {median:.2f} in the dark theme"
    bands = white_bands(rows)
    assert not bands, f"white bands (first row, rows) across the thread pane: {bands} ({shot})"


def settled(probe: Probe) -> dict:
    """The Context size field and what is beside it once two looks agree."""
    before = probe.ask("context")
    for _ in range(20):
        time.sleep(SETTLE_S)
        now = probe.ask("context")
        if now == before:
            return now
        before = now
    return before


def type_context(screen: Screen, value: int) -> dict:
    """Click into Context size, select all, type ``value``, Tab away: what the field holds."""
    field = screen.probe.ask("context")
    screen.display.click(field["x"], field["y"])
    screen.display.key("ctrl+a")
    screen.display.type(str(value))
    screen.display.key("Tab")
    return settled(screen.probe)


def one_sentence(text: str) -> bool:
    return len(re.findall(r"[.!?](?:\s|$)", text.strip())) <= 1


def test_a_context_size_above_the_trained_one_is_warned_or_refused_never_cut(
    screen: Screen, model_path: Path
) -> None:
    trained = inspect_model(model_path).n_ctx_train
    assert trained is not None and trained < 16384
    limit = (f"{trained:,}", str(trained))
    start = settled(screen.probe)
    seen = set(start["panel"])  # in the model panel before anything was typed
    for typed in (131072, 16384):
        before = settled(screen.probe)["value"]
        after = type_context(screen, typed)
        said = [n["text"] for n in after["near"] if n["text"] not in seen and not n["button"]
                and (not n["fit"] or any(t in n["text"] for t in limit))]  # fmt: skip
        assert after["value"] in (typed, before), (
            f"typing {typed:,} into Context size gave {after['value']:,} (it held {before:,}; "
            f"the most it takes is {after['top']:,}); beside it: {said}")  # fmt: skip
        if after["value"] == typed:
            assert said, f"{typed:,} above the trained {trained:,} was taken with no warning"
        else:
            assert [s for s in said if one_sentence(s)], (
                f"{typed:,} was refused with no sentence beside the field: {after['near']}"
            )
        screen.display.shot(SHOTS / f"3-context-{typed}.png")

    changed = type_context(screen, N_CTX * 2)  # a size the model takes, not the one loaded
    assert changed["value"] == N_CTX * 2
    offers = [n["text"] for n in changed["near"] if n["button"] and "load" in n["text"].lower()]
    assert offers, f"no reload offered beside Context size after a change: {changed['near']}"
    screen.display.shot(SHOTS / "4-context-reload-offer.png")
