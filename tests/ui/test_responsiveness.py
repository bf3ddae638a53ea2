"""GUI responsiveness, measured: the gaps of a 10 ms timer on the GUI thread while the window
opens a large document and while it streams a generation (a benchmark figure, printed; the
issue's goal is p99 < 50 ms, checked by ``make bench``, never asserted on this noisy machine)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from app.ui.main_window import MainWindow
from tests.benchmarks.bench_gui_responsiveness import big_document, measure, report


def test_the_gui_thread_keeps_ticking_while_opening_and_generating(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model_path, None, n_ctx=1024, db_path=tmp_path / "h.db",
                        settings=settings)  # fmt: skip
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.ready, timeout=120_000):
        window.show()
    # 5 MB: some 1.3 million tokens, counted and planned off the GUI thread (make bench: 10 MB)
    opening, generating = measure(window, big_document(tmp_path, 5), max_tokens=32)
    print()
    report("opening a 5 MB document", opening)
    report("generating 32 tokens", generating)
    assert window.session.plan is not None and window.session.plan.total_tokens > 1_000_000
    assert len(generating) > 10 and window.buffers.output_text().strip()
    window.close()
