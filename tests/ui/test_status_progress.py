"""Issue 49 row 2: a map-reduce over the sample (241 windows, 4 lanes) showed 0% for 35 s with
no estimate of the time left. In the window, on the real engine, the status bar's bar moves
while the first window's prompt is evaluated (before the second window starts), and the line
says the time left once a rate is measured."""

from __future__ import annotations

import re
from pathlib import Path

from app.core.jobs.events import PartialResult, PassStarted
from app.core.jobs.options import DEFAULT_LANES
from app.core.paths import sample_document
from tests.ui.windows import Windows

N_CTX = 512
LEFT = re.compile(r"about \d+ (s|min) left")


def test_a_map_phase_moves_the_bar_before_its_first_window_ends_and_says_the_time_left(
    qtbot, make_window: Windows, model_path: Path, tmp_path: Path
) -> None:
    doc = tmp_path / "brief.txt"  # about 900 tokens: a few windows at n_ctx 512
    doc.write_text(sample_document().read_text(encoding="utf-8")[:4_000], encoding="utf-8")
    window = make_window(model_path, doc, n_ctx=N_CTX)
    with qtbot.waitSignal(window.ready, timeout=120_000):
        window.show()
    window.max_tokens.setValue(8)
    assert window.controls.lanes() == DEFAULT_LANES
    with qtbot.waitSignal(window.plan_shown, timeout=60_000):
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("map-reduce"))
    first_prompt: list[int] = []  # the bar's value after each batch of the first prompt
    past: list[bool] = []  # the second window began (or the first ended)

    def watch(events: list[object]) -> None:  # after the window's own handler: its figures
        if any(isinstance(ev, PartialResult) or (isinstance(ev, PassStarted) and ev.index > 1)
               for ev in events):  # fmt: skip
            past.append(True)
        if not past:
            first_prompt.append(window.run_status.bar()[0])

    lines: list[str] = []
    window.job_events.connect(watch)
    window.run_status.changed.connect(lambda line, *_: lines.append(line))
    with qtbot.waitSignal(window.job_finished, timeout=300_000) as done:
        window.run_job()
    [result] = done.args[0].results
    assert result.lanes == min(DEFAULT_LANES, len(result.plan["windows"])) > 1
    assert past and any(value > 0 for value in first_prompt), first_prompt
    assert any(LEFT.search(line) for line in lines), lines
