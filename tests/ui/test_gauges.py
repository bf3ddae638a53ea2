"""The gauges: a steady redraw rate under a burst of tokens, the figures they show, "no GPU"."""

from __future__ import annotations

import itertools
import os
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.core import telemetry
from app.core.jobs.tasks import (
    ChunkEvaluated,
    ChunkQueued,
    JobFinished,
    JobResult,
    KVStats,
    LanesStarted,
    TokenBatch,
)
from app.core.telemetry import GPUMemory, GPUState
from app.ui.gauges import (
    GPU_REASONS,
    HISTORY_S,
    LEGEND_ROOM,
    REDRAW_MS,
    Y_STEPS,
    GaugesPanel,
)

N_CTX = 512


@pytest.fixture
def gauges(qtbot, monkeypatch: pytest.MonkeyPatch) -> GaugesPanel:
    monkeypatch.setattr(
        telemetry,
        "gpu_state",
        lambda: GPUState(reason="no GPU: the NVIDIA driver is not available"),
    )
    panel = GaugesPanel(N_CTX)
    qtbot.addWidget(panel)
    panel.resize(500, 500)
    panel.show()
    return panel


def test_a_burst_of_token_batches_redraws_at_most_ten_times_a_second(qtbot, gauges) -> None:
    gauges.start()
    before = gauges.redraw_count
    t0 = time.monotonic()
    sources = ((0, 317), (317, 724))
    for i in range(1000):  # about 0.1 s of events, the event loop turning in between
        gauges.on_event(TokenBatch("summary", "tok", 1, 10 + i, sources))
        if i % 100 == 99:
            qtbot.wait(10)
    qtbot.wait(300)
    redraws = gauges.redraw_count - before
    elapsed = time.monotonic() - t0
    assert 1 <= redraws <= elapsed * 10 + 2, f"{redraws} redraws in {elapsed:.2f} s"
    _, rates = gauges.gen_curve.getData()
    assert rates is not None and max(rates) > 0  # generation tokens/s came from the counts


def test_a_redraw_moves_the_curves_not_the_axes(qtbot, gauges) -> None:
    """The x axis stays at the last minute (now = 0) and the y axis moves in whole steps, so a
    redraw repaints the curves without laying the axes out again (the GUI thread's budget)."""
    gauges.start()
    tops = []
    for i in range(30):  # the rate climbs from ~10 to ~300 tokens/s
        gauges.on_event(TokenBatch("summary", "tok", 1 + i, 10 + i, ()))
        qtbot.wait(REDRAW_MS + 5)
        (x0, x1), (y0, y1) = gauges.rates.viewRange()
        assert (x0, x1) == (-HISTORY_S, 0) and y0 == 0
        tops.append(y1)
    _, rates = gauges.gen_curve.getData()
    assert max(rates) <= tops[-1] and set(tops) <= set(Y_STEPS)
    assert max(rates) * LEGEND_ROOM <= tops[-1]  # the curve stays below the legend's row
    changes = sum(a != b for a, b in itertools.pairwise(tops))
    assert changes <= Y_STEPS.index(tops[-1]), tops  # a step at a time, not a range per redraw
    xs, _ = gauges.gen_curve.getData()
    shown = xs + gauges.gen_curve.pos().x()  # where the points are drawn: seconds ago
    assert shown.min() >= -HISTORY_S and shown.max() <= 0


def test_no_gpu_is_shown_when_nvml_has_no_figures(qtbot, gauges) -> None:
    gauges.start()
    qtbot.waitUntil(lambda: gauges.vram_text_shown() == "no GPU")
    assert gauges.vram_text.toolTip() == "no GPU: the NVIDIA driver is not available"
    assert not gauges.vram_bar.isEnabled()


def test_every_reason_for_no_gpu_figures_can_be_translated() -> None:
    assert set(GPU_REASONS) == {telemetry.NO_NVML, telemetry.NO_DRIVER, telemetry.NO_GPU}


def test_the_plots_have_no_menu_and_no_zoom(qtbot, gauges) -> None:
    """pyqtgraph's own menus and export dialog are English only, and zooming would fight the
    fixed ranges: a right click on a gauge plot opens nothing."""
    for plot in (gauges.rates, gauges.hist):
        assert not plot.isInteractive()  # no mouse event reaches pyqtgraph's items
        assert plot.scene().contextMenu == []
        assert plot.getPlotItem().getViewBox().state["mouseEnabled"] == [False, False]
        qtbot.mouseClick(plot.viewport(), Qt.MouseButton.RightButton)
        assert QApplication.activePopupWidget() is None


def test_vram_is_shown_when_there_is_a_gpu(qtbot, gauges, monkeypatch) -> None:
    gpu = GPUState((GPUMemory(0, "NVIDIA H200", 2 * 2**30, 8 * 2**30),))
    monkeypatch.setattr(telemetry, "gpu_state", lambda: gpu)
    gauges.start()
    qtbot.waitUntil(lambda: gauges.vram_text_shown() == "2.00 GiB of 8.00 GiB")
    assert gauges.vram_bar.value() == 250 and gauges.vram_text.toolTip() == "NVIDIA H200"


def test_kv_memory_prompt_rate_and_histogram(qtbot, gauges) -> None:
    gauges.set_engine_pid(os.getpid())  # any live process stands in for the engine child
    gauges.start()
    title = gauges.hist.getPlotItem().titleLabel
    gauges.on_event(JobFinished(JobResult("summarize", "head", "stop", N_CTX,
                                          prompt_lengths=[100])))  # fmt: skip
    qtbot.waitUntil(lambda: title.text == "Prompt length, % of n_ctx (1 prompt)")
    gauges.on_event(ChunkQueued("summary", 0, 317, 102))
    qtbot.wait(60)  # the prefill, as the GUI sees it
    gauges.on_event(ChunkEvaluated("summary", 0, 317, 102, 35, 137, 4))
    gauges.on_event(KVStats(454, N_CTX, 10_466_352))
    result = JobResult("summarize", "head", "stop", N_CTX, evaluated_tokens=440,
                       completion_tokens=16, ttft_s=[0.5, 0.3], seconds=2.0,
                       prompt_lengths=[439, 126, 60])  # fmt: skip
    gauges.on_event(JobFinished(result))
    gauges.on_event(JobFinished(JobResult("summarize", "refuse", "error", N_CTX, refused="no")))
    qtbot.waitUntil(lambda: gauges.kv_text.text() == "454 of 512 cells · 10 MiB")
    assert gauges.kv_bar.value() == 454 and gauges.kv_bar.maximum() == N_CTX
    assert "engine 0 MiB" not in gauges.ram_text.text() and gauges.ram_bar.value() > 0
    xs, rates = gauges.prompt_curve.getData()
    assert (
        xs is not None and len(rates) == 1 and 0 < rates[0] <= 102 / 0.05
    )  # no more than 102 tokens in ~60 ms
    assert gauges.histogram().bins == [0, 2, 1, 0, 0, 0, 0, 0, 1, 0]
    assert gauges.histogram().over == 1
    qtbot.waitUntil(lambda: title.text == "Prompt length, % of n_ctx (5 prompts)")
    assert "440 prompt tokens evaluated in 0.80 s" in gauges.job_text.text()
    assert "550 tokens/s" in gauges.job_text.text()

    gauges.reset(1024)  # a new run: live figures go, the histogram across runs stays
    gauges.on_event(ChunkQueued("summary", 0, 317, 102))
    gauges.on_event(ChunkEvaluated("summary", 0, 317, 102, 35, 137, 4))  # one delivery batch
    qtbot.waitUntil(lambda: gauges.kv_text.text().startswith("0 of 1,024 cells"))
    assert gauges.prompt_curve.getData()[0] is None or len(gauges.prompt_curve.getData()[0]) == 0
    assert sum(gauges.histogram().bins) == 4


def test_the_timer_runs_only_while_started_and_shown(qtbot, gauges) -> None:
    assert not gauges.is_running()
    gauges.start()
    assert gauges.is_running()
    gauges.hide()
    assert not gauges.is_running()
    gauges.show()
    assert gauges.is_running()
    gauges.stop()
    assert not gauges.is_running()
    gauges.show()
    assert not gauges.is_running()
    gauges.start()
    gauges.close()
    assert not gauges.is_running()


def test_one_kv_bar_per_lane_while_lanes_run(qtbot, gauges) -> None:
    gauges.start()
    gauges.on_event(LanesStarted(lanes=3, windows=7, n_ctx=N_CTX))
    gauges.on_event(ChunkEvaluated("part 1", 0, 100, 90, 30, 120, 1, lane=0))
    gauges.on_event(ChunkEvaluated("part 2", 100, 200, 80, 30, 110, 1, lane=1))
    gauges.on_event(TokenBatch("part 1", "a", 5, 2, ((0, 100),), lane=0))
    qtbot.waitUntil(lambda: len(gauges.lane_bars) == 3)
    qtbot.waitUntil(lambda: [b.value() for b in gauges.lane_bars] == [125, 110, 0])
    assert "3 lanes: 235 of 3 × 512 cells" in gauges.kv_text.text()
    gauges.on_event(KVStats(140, N_CTX, 0, lane=0))  # llama.cpp's count when part 1 is done
    qtbot.waitUntil(lambda: gauges.lane_bars[0].value() == 140)
    gauges.on_event(KVStats(300, N_CTX, 4096))  # the next call runs in the loaded context
    qtbot.waitUntil(gauges.lanes_row.isHidden)
    assert "300 of 512 cells" in gauges.kv_text.text()
    gauges.stop()


def test_the_thread_count_and_why_it_changed(qtbot, gauges) -> None:
    from app.core.jobs.events import ThreadsSet  # noqa: PLC0415

    gauges.start()
    qtbot.waitUntil(lambda: gauges.threads_text_shown() == "–")  # nothing loaded
    gauges.set_threads(2)
    qtbot.waitUntil(lambda: gauges.threads_text_shown() == "2 of 2 threads")
    assert (gauges.threads_bar.value(), gauges.threads_bar.maximum()) == (2, 2)
    gauges.on_event(ThreadsSet("summary", 2, 1, "busy", "another program is using a core", 1.0))
    qtbot.waitUntil(lambda: gauges.threads_text_shown()
                    == "2 → 1 threads: another program is using a core")  # fmt: skip
    assert gauges.threads_bar.value() == 1
    tip = gauges.threads_text.toolTip()  # the figure behind the change first
    assert tip.startswith("Other programs used 1.0 cores.") and "share a core" in tip
    gauges.on_event(ThreadsSet("summary", 1, 2, "quiet", "the machine is quiet again", 0.0))
    qtbot.waitUntil(lambda: gauges.threads_text_shown()
                    == "1 → 2 threads: the machine is quiet again")  # fmt: skip
    gauges.on_event(ThreadsSet("summary", 2, 1, "slow", "decoding became much slower than "
                               "before", 0.0, 0.5, 0.1))  # fmt: skip
    qtbot.waitUntil(lambda: gauges.threads_text.toolTip().startswith(
        "A decode took 0.50 s where 0.10 s was expected."))
    gauges.on_event(ThreadsSet("summary", 1, 2, "quiet", "the machine is quiet again", 0.0))
    result = JobResult("summarize", "head", "stop", N_CTX, threads=1)
    gauges.on_event(JobFinished(result))  # the job's own figure at its end
    qtbot.waitUntil(lambda: gauges.threads_bar.value() == 1)
    gauges.set_threads(0)  # a server: its threads are its own
    qtbot.waitUntil(lambda: gauges.threads_text_shown() == "–")
    gauges.stop()
