"""The status line of a run (its phase and progress, not "Running…") and the one-line label it
is shown in, which elides instead of widening its panel and never lays the window out again."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget

from app.core.jobs.events import (
    ChunkQueued,
    EvalProgress,
    PartialResult,
    PassStarted,
    StrategyStarted,
    TokenBatch,
)
from app.ui import run_status
from app.ui.run_status import STEPS, RunStatus
from app.ui.widgets import ElidedLabel


def _batch(tokens: int, step: str = "answer") -> TokenBatch:
    return TokenBatch(step, "x" * tokens, tokens, 0, ())


@pytest.fixture
def status(qtbot) -> RunStatus:
    s = RunStatus()
    s.start(max_tokens=100)
    yield s
    s.stop()


def test_the_line_names_the_phase_and_its_progress(status: RunStatus, monkeypatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(run_status.time, "monotonic", lambda: clock[0])
    assert status.line() == "" and status.bar() == (0, STEPS)  # nothing known yet
    status.on_event(EvalProgress("answer", 1200, 3700, 6.0))  # 200 tokens/s
    assert status.line() == "prompt 1,200 of 3,700 tokens"  # no time left before a rate
    value, maximum = status.bar()  # the prompt's tokens, then the reply's (each weighs two)
    assert maximum == STEPS and value == round(STEPS * 1200 / (3700 + 2 * 100))
    status.on_event(EvalProgress("answer", 3700, 3700, 18.0))
    assert status.line() == "prompt 3,700 of 3,700 tokens"
    status.on_event(_batch(5))
    assert status.line() == "reply: 5 tokens"  # too soon for a rate
    clock[0] += 2.0
    for _ in range(4):
        status.on_event(_batch(5))
    assert status.line() == "reply: 25 tokens · 12 tokens/s"
    assert status.bar() == (round(STEPS * (3700 + 2 * 25) / (3700 + 2 * 100)), STEPS)


def test_a_multi_pass_job_says_its_window_and_fills_the_bar_pass_by_pass(status) -> None:
    status.on_event(PassStarted("window 3", 3, 9))
    status.on_event(EvalProgress("window 3", 100, 400, 1.0))
    assert status.line().startswith("Window 3 of 9 · prompt 100 of 400 tokens")
    value, maximum = status.bar()
    assert maximum == 9 * STEPS and 2 * STEPS < value < 3 * STEPS
    status.on_event(_batch(100, "window 3"))  # a whole reply: the pass is done
    assert status.bar() == (3 * STEPS, 9 * STEPS)
    status.on_event(ChunkQueued("window 4", 0, 10, 3))  # the next call's prompt: no reply yet
    assert status.line() == "Window 3 of 9"
    status.on_event(EvalProgress("summary", 30, 60, 0.0))  # a call after the passes
    assert status.line() == "summary · prompt 30 of 60 tokens"
    assert status.bar() == (round(STEPS * 30 / (60 + 2 * 100)), STEPS)  # its own bar


def test_a_compare_says_which_strategy_runs(status) -> None:
    status.on_event(StrategyStarted("retrieve"))
    status.on_event(EvalProgress("answer", 10, 20, 0.0))  # no rate yet: no time left
    assert status.line() == "retrieve · prompt 10 of 20 tokens"
    status.on_event(StrategyStarted("rolling"))  # the next strategy starts afresh
    assert status.line() == "rolling"


def test_updates_go_out_four_times_a_second_and_only_when_changed(qtbot, status) -> None:
    seen: list[tuple[str, int, int]] = []
    status.changed.connect(lambda *shown: seen.append(shown))
    for i in range(1, 201):  # a burst of events within one tick
        status.on_event(EvalProgress("answer", i, 200, i / 100))
    assert seen == []  # stored, not said
    qtbot.waitUntil(lambda: len(seen) == 1, timeout=2000)
    assert seen[0][0] == "prompt 200 of 200 tokens"
    qtbot.wait(3 * run_status.SHOW_MS)
    assert len(seen) == 1  # nothing new: nothing sent
    status.stop()
    status.on_event(_batch(3))
    qtbot.wait(2 * run_status.SHOW_MS)
    assert len(seen) == 1 and not status.active


def test_a_batched_map_phase_fills_the_bar_from_its_first_prompt_slice(status) -> None:
    """Issue 49 row 2: 241 windows in 4 lanes showed 0% until replies came. Each window's pass
    starts with its prompt, and the windows in flight fill their shares side by side."""
    status.on_event(PassStarted("part 1", 1, 241))
    status.on_event(EvalProgress("part 1", 0, 1700, 0.0))
    assert status.bar() == (0, 241 * STEPS)
    status.on_event(EvalProgress("part 1", 128, 1700, 1.0))  # the first slice: it moves
    assert status.bar()[0] > 0
    assert status.line() == "Window 1 of 241 · prompt 128 of 1,700 tokens"
    status.on_event(EvalProgress("part 1", 1700, 1700, 14.0))
    for i in range(2, 5):  # the next lanes' prompts, the first's half counted still
        status.on_event(PassStarted(f"part {i}", i, 241))
        status.on_event(EvalProgress(f"part {i}", 600, 1200, 5.0))
    assert status.bar() == (round(STEPS * (1700 / 1900 + 3 * 600 / 1400)), 241 * STEPS)
    for i in range(1, 5):
        status.on_event(TokenBatch(f"part {i}", "x" * 100, 100, 0, (), lane=i - 1))
    status.on_event(PartialResult("part 1", "a summary", ()))
    assert status.bar() == (4 * STEPS, 241 * STEPS)  # whole replies: four windows done
    status.on_event(PassStarted("part 5", 5, 241))  # the freed lane takes the next window
    assert status.bar() == (4 * STEPS, 241 * STEPS)
    assert status.line().startswith("Window 5 of 241")


def test_the_time_left_comes_from_the_measured_rate(qtbot, status, monkeypatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(run_status.time, "monotonic", lambda: clock[0])
    seen: list[str] = []
    status.changed.connect(lambda line, *_: seen.append(line))
    status.on_event(PassStarted("part 1", 1, 10))
    qtbot.wait(2 * run_status.SHOW_MS)
    status.on_event(EvalProgress("part 1", 100, 2000, 1.0))  # 100 tokens a second
    qtbot.wait(2 * run_status.SHOW_MS)  # the ticks measure the bar at the clock's time
    assert "left" not in status.line(), "no estimate until a span was measured"
    clock[0] += 1.0
    status.on_event(EvalProgress("part 1", 200, 2000, 2.0))
    # a pass's work, 2,000 prompt tokens and 100 reply tokens weighing two each, at 100 tokens
    # a second: 22 s a pass, 218 s for the 9.9 passes left
    qtbot.waitUntil(lambda: "left" in status.line(), timeout=2_000)
    assert status.line() == "Window 1 of 10 · prompt 200 of 2,000 tokens · about 4 min left"
    assert seen[-1] == status.line()  # said in the status bar
    status.on_event(EvalProgress("summary", 10, 20, 0.0))  # a bar of its own: measured afresh
    qtbot.waitUntil(lambda: "left" not in status.line(), timeout=2_000)


class _LayoutRequests(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            self.count += 1
        return False


def test_the_label_elides_with_a_tooltip_and_never_asks_for_a_new_layout(qtbot) -> None:
    panel = QWidget()
    qtbot.addWidget(panel)
    label = ElidedLabel("short")
    label.setToolTip("what the figure means")
    QVBoxLayout(panel).addWidget(label)
    panel.resize(200, 60)
    panel.show()
    qtbot.waitExposed(panel)
    assert not label.is_elided() and label.toolTip() == "what the figure means"
    QApplication.processEvents()  # the layout of the first show is done
    requests = _LayoutRequests()
    panel.installEventFilter(requests)
    hint = panel.sizeHint()
    long = "hatched: 211 positions only the other 3 see · " * 4
    label.setText(long)
    QApplication.processEvents()
    assert label.text() == long and label.is_elided()
    assert label.toolTip() == f"{long}\n\nwhat the figure means"  # the whole line, then the why
    assert panel.sizeHint() == hint and panel.width() == 200  # the panel kept its width
    for i in range(20):
        label.setText(f"{i:,} of 4,096 positions in use")
    QApplication.processEvents()
    assert requests.count == 0
    assert label.toolTip() == "what the figure means"  # shown whole again
    label.setToolTip("")
    assert label.toolTip() == ""
