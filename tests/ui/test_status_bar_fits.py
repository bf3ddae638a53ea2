"""Issue 49 row 1: at 1366x768 the status bar squeezed the run's phase to "r … k" under the
progress bar, and at 1024 px the line overlapped the bar. At both sizes the line now sits
beside the bar, whole, and a longer one is cut at its end only, the phase still read."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.ui.windows import Windows

PHASE = "map-reduce · Window 123 of 241"
LINE = f"{PHASE} · prompt 1,200 of 1,742 tokens · about 12 min left"
LONG = f"{PHASE} · reply: 256 tokens · 45 tokens/s · about 12 min left · " * 2


def _shown(label, text: str) -> str:
    """What the label paints of ``text``: its contents' width, elided at the end."""
    return label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight,
                                          label.contentsRect().width())  # fmt: skip


@pytest.mark.parametrize("size", [(1366, 768), (1024, 700)])
def test_the_run_line_reads_whole_beside_the_bar(qtbot, make_window: Windows, size) -> None:
    window = make_window(n_ctx=2048)
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    status, bar = window.window_status, window.statusBar()
    status.progress.show()
    status.show_run_status(LINE, 300, 241 * 100)
    qtbot.waitUntil(lambda: status.run_line.isVisible() and status.progress.isVisible())
    qtbot.wait(50)  # the status bar's layout, once the two show
    assert window.width() == size[0]
    line, progress = status.run_line.geometry(), status.progress.geometry()
    assert line.left() >= 0 and line.right() < progress.left(), (line, progress)
    assert progress.right() < bar.width(), (progress, bar.width())
    assert _shown(status.run_line, LINE) == LINE and not status.run_line.is_elided()
    status.show_run_status(LONG, 30, 241 * 100)  # the first window's first slice
    shown = _shown(status.run_line, LONG)
    assert shown.endswith("…") and shown.startswith(PHASE), shown
    assert status.run_line.toolTip() == LONG  # the whole line, on hover
    assert status.progress.text() == "<1%"  # not "0%" beside a line that moves
