"""The charts' titles fit their charts at 1024x700, the smallest screen the window is laid out
for (issue 49, row 10: the prompt-length histogram's title ran past the plot's edge)."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRect

from app.core.jobs.events import JobFinished, JobResult
from tests.ui.windows import Windows

pytestmark = pytest.mark.window


def test_each_chart_title_fits_its_chart_at_1024x700(make_window: Windows, qtbot) -> None:
    window = make_window(n_ctx=2048)
    window.fit_to(QRect(0, 0, 1024, 700))
    window.show()
    qtbot.waitExposed(window)
    gauges = window.gauges
    prompts = JobResult("ask", "retrieve", "stop", 2048, prompt_lengths=[900] * 1234)
    gauges.on_event(JobFinished(prompts))  # the longest title: "… (1,234 prompts)"
    gauges.start()
    qtbot.waitUntil(lambda: "1,234" in gauges.plots.title(gauges.hist))
    qtbot.wait(50)  # the docks settle after the first layout pass
    titled = [p for p in window.findChildren(pg.PlotWidget) if p.getPlotItem().titleLabel.text]
    assert {gauges.rates, gauges.hist} <= set(titled)
    for plot in titled:
        item = plot.getPlotItem()
        label = item.titleLabel
        whole, text = label.text, gauges.plots.shown_title(plot)
        drawn = plot.mapFromScene(label.item.sceneBoundingRect()).boundingRect()
        where = f"{whole!r} drawn as {text!r} at {drawn} in {plot.viewport().rect()}"
        assert drawn.width() <= item.vb.width() + 1, where  # the width above the data
        assert drawn.left() >= 0 and drawn.right() <= plot.viewport().width(), where
        assert text == whole or whole.startswith(text.removesuffix("…")), where
        assert plot.toolTip() == whole
