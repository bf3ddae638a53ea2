"""The gauges follow the cache while a model call runs: the KV gauge moves during prompt
processing (not only at the end), never shows more cells than the loaded context, and shows the
loaded context before the first run; prompt progress and the passes of a multi-pass job show."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QTimer

from app.core import telemetry
from app.core.engine.threads import default_threads
from app.core.jobs.tasks import (
    ChunkQueued,
    EvalProgress,
    KVLive,
    KVStats,
    LanesStarted,
    PassStarted,
    TokenBatch,
)
from app.core.paths import sample_document
from app.core.telemetry import GPUState
from app.ui.gauges import REDRAW_MS, GaugesPanel

N_CTX = 10_240
PROMPT = 9_950


@pytest.fixture
def live_gauges(qtbot, monkeypatch: pytest.MonkeyPatch) -> GaugesPanel:
    """A gauges panel with no context of its own (it shows the loaded model's), no GPU found."""
    monkeypatch.setattr(telemetry, "gpu_state", lambda: GPUState(reason="no GPU found"))
    panel = GaugesPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 400)
    panel.show()
    return panel


def _cells_shown(text: str) -> tuple[int, int]:
    m = re.match(r"([\d,]+) of ([\d,]+) cells", text)
    assert m, text
    return int(m[1].replace(",", "")), int(m[2].replace(",", ""))


def _prompt_reports(n: int = 12) -> list[object]:
    """What a job yields while the engine evaluates a ~10k-token prompt: one progress report
    and the cache's figures per slice, llama.cpp's cells growing to the prompt's length."""
    events: list[object] = [ChunkQueued("summary", 0, 40_000, PROMPT - 30)]
    for k in range(n + 1):
        done = PROMPT * k // n
        events.append(EvalProgress("summary", done, PROMPT, 0.5 * k))
        events.append(KVLive("summary", done, N_CTX, done * 23_000))
    return events


def test_the_kv_gauge_moves_while_the_prompt_is_evaluated(qtbot, live_gauges) -> None:
    live_gauges.set_n_ctx(N_CTX)
    live_gauges.reset(N_CTX)
    live_gauges.start()
    shown: list[str] = []
    for ev in _prompt_reports():
        live_gauges.on_event(ev)
        if isinstance(ev, KVLive):
            qtbot.wait(REDRAW_MS + 20)  # the reports come a few times a second
            shown.append(live_gauges.kv_text.text())
    live_gauges.on_event(TokenBatch("summary", "Hello", 1, 3, ((0, 40_000),)))
    changes = sum(a != b for a, b in itertools.pairwise(shown))
    assert changes >= 4, shown
    cells = [_cells_shown(text) for text in shown]
    assert all(used <= total == N_CTX for used, total in cells)
    assert cells[-1][0] == PROMPT and live_gauges.kv_bar.value() == PROMPT
    # the prompt row: all of it evaluated, at the engine's rate
    assert live_gauges.prompt_text.text() == "9,950 tokens evaluated in 6.0 s (1,658 tokens/s)"
    assert live_gauges.prompt_bar.value() == live_gauges.prompt_bar.maximum() == PROMPT
    live_gauges.stop()


def test_prompt_progress_shows_the_rate_and_the_time_left(qtbot, live_gauges) -> None:
    live_gauges.set_n_ctx(N_CTX)
    live_gauges.start()
    assert live_gauges.prompt_bar.isHidden() and live_gauges.pass_bar.isHidden()
    live_gauges.on_event(PassStarted("part 2", 2, 5))
    live_gauges.on_event(EvalProgress("part 2", 3_000, 9_000, 2.0))
    qtbot.waitUntil(lambda: live_gauges.prompt_text.text() != "")
    assert live_gauges.prompt_text.text() == "3,000 of 9,000 tokens · 1,500 tokens/s · 4 s left"
    assert live_gauges.pass_text.text() == "Window 2 of 5 · part 2"
    assert (live_gauges.pass_bar.value(), live_gauges.pass_bar.maximum()) == (2, 5)
    assert live_gauges.prompt_bar.isVisible() and live_gauges.pass_bar.isVisible()
    _, rates = live_gauges.prompt_curve.getData()
    assert rates is not None and list(rates) == [1_500]  # the engine's own rate, one per call
    live_gauges.on_event(EvalProgress("part 2", 6_000, 9_000, 4.0))
    qtbot.waitUntil(lambda: live_gauges.prompt_text.text().startswith("6,000"))
    assert len(live_gauges.prompt_curve.getData()[1]) == 1  # the same call's point, moved
    # a rollback resumed from its KV state evaluates no prompt: the last run's rows go, and
    # stay gone through the redraws that follow
    live_gauges.clear_progress()
    count = live_gauges.redraw_count
    qtbot.waitUntil(lambda: live_gauges.redraw_count > count + 2)
    assert live_gauges.prompt_bar.isHidden() and live_gauges.pass_bar.isHidden()
    live_gauges.stop()


def test_the_gauge_never_shows_more_cells_than_the_context(qtbot, live_gauges) -> None:
    live_gauges.set_n_ctx(2_048)
    live_gauges.start()
    live_gauges.on_event(KVStats(2_300, 2_048, 0, reported_by="/slots"))  # a server's own count
    qtbot.waitUntil(lambda: "server" in live_gauges.kv_text.text())
    assert _cells_shown(live_gauges.kv_text.text()) == (2_048, 2_048)
    live_gauges.stop()


def test_before_a_run_the_gauge_shows_the_loaded_context(qtbot, live_gauges) -> None:
    live_gauges.start()
    qtbot.waitUntil(lambda: live_gauges.kv_text.text() == "no model loaded")
    live_gauges.set_n_ctx(2_048)
    qtbot.waitUntil(lambda: live_gauges.kv_text.text() == "0 of 2,048 cells · 0 MiB")
    assert live_gauges.kv_bar.maximum() == 2_048
    live_gauges.set_n_ctx(0)  # unloaded
    qtbot.waitUntil(lambda: live_gauges.kv_text.text() == "no model loaded")
    live_gauges.stop()


@pytest.mark.serial  # its CPU row is checked with a core kept busy: every core, alone
def test_the_window_shows_the_loaded_context_then_the_cache_filling_during_a_run(
    qtbot, tmp_path: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real engine, through the engine thread and the session: before the first run the
    gauge shows the context loaded (2,048, not 4,096); during the run's ~1.4k-token prompt it
    follows llama.cpp's figures, never past the context."""
    from app.ui.main_window import MainWindow  # noqa: PLC0415 (the window: this test only)

    monkeypatch.setattr(telemetry, "gpu_state", lambda: GPUState(reason="no GPU found"))
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model_path, None, n_ctx=2_048, db_path=tmp_path / "h.db",
                        settings=settings)  # fmt: skip
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.ready, timeout=120_000):
        window.show()
    gauge = window.gauges.kv_text
    qtbot.waitUntil(lambda: gauge.text() == "0 of 2,048 cells · 0 MiB", timeout=60_000)
    assert window.gauges.kv_bar.maximum() == 2_048
    cores = default_threads()
    qtbot.waitUntil(lambda: window.gauges.threads_text_shown() == f"{cores} of {cores} threads")

    doc = tmp_path / "doc.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:8_000], encoding="utf-8")
    with qtbot.waitSignal(window.plan_shown, timeout=120_000):
        window.open_document(doc)
    window.max_tokens.setValue(4)
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))
    shown: list[str] = []
    replied: list[bool] = []
    window.job_events.connect(
        lambda events: replied.append(True) if any(isinstance(e, TokenBatch) for e in events)
        else None
    )
    sampler = QTimer(window)
    sampler.timeout.connect(lambda: None if replied else shown.append(gauge.text()))
    sampler.start(20)
    with qtbot.waitSignal(window.job_finished, timeout=300_000):
        window.run_job()
    sampler.stop()
    distinct = [text for text, _ in itertools.groupby(shown)]  # each change of the gauge
    assert len(distinct) >= 5, distinct  # four changes or more before the first output token
    assert all(used <= total == 2_048 for used, total in map(_cells_shown, distinct))

    if cores > 1:  # a program that keeps a core busy: the CPU row says the engine gave it up
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("tail"))
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                start_new_session=True)  # fmt: skip
        try:
            qtbot.wait(1_500)  # the engine's meter reports the last half second
            with qtbot.waitSignal(window.job_finished, timeout=300_000):
                window.run_job()
        finally:
            busy.kill()
            busy.wait()
        qtbot.waitUntil(lambda: window.gauges.threads_bar.value() < cores)
        text = window.gauges.threads_text_shown()
        assert text.endswith(" threads: another program is using a core") or \
            text == f"1 of {cores} threads", text  # fmt: skip  (busy before the first run)
    window.close()


def test_each_lane_follows_its_cache_while_the_lanes_generate(qtbot, live_gauges) -> None:
    live_gauges.start()
    live_gauges.on_event(LanesStarted(lanes=2, windows=5, n_ctx=2_048))
    live_gauges.on_event(KVLive("part 1", 700, 2_048, 0, lane=0))
    live_gauges.on_event(KVLive("part 2", 650, 2_048, 0, lane=1))
    qtbot.waitUntil(lambda: [b.value() for b in live_gauges.lane_bars] == [700, 650])
    live_gauges.on_event(KVLive("part 1", 720, 2_048, 0, lane=0))
    qtbot.waitUntil(lambda: live_gauges.lane_bars[0].value() == 720)
    assert "2 lanes: 1,370 of 2 × 2,048 cells" in live_gauges.kv_text.text()
    live_gauges.stop()
