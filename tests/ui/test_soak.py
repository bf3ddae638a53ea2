"""Memory that stays put: fifty runs in one window (questions under four strategies, compares,
rollbacks resumed from their KV state) grow the process's resident memory by less than 100 MB.

Each run hands the window a KV state of 10–20 MiB; before the allocator's threshold was fixed
(app/core/allocator.py) the window grew by about 180 MiB over its first ten runs. In the slow
tier (``SLOW=1 make test``): about three minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.core import allocator, telemetry
from app.core.paths import sample_document
from app.ui.main_window import MainWindow

pytestmark = pytest.mark.slow

RUNS = 50
MAX_GROWTH_MB = 100
STRATEGIES = ("head", "retrieve", "middle", "tail")


def test_fifty_runs_grow_the_window_by_less_than_100_mb(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    allocator.return_large_frees()  # as the app's entry point does
    doc = tmp_path / "doc.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:12_000], encoding="utf-8")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, doc, n_ctx=1024, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    w.resize(1366, 768)
    with qtbot.waitSignal(w.ready, timeout=120_000):
        w.show()
    w.max_tokens.setValue(16)
    w.task_box.setCurrentIndex(w.task_box.findData("ask"))
    rss: list[float] = []
    for i in range(RUNS):
        w.question.setText(f"What does part {i} say about hackers?")
        w.strategy_box.setCurrentIndex(w.strategy_box.findData(STRATEGIES[i % 4]))
        with qtbot.waitSignal(w.job_finished, timeout=300_000):
            if i % 10 == 5:
                w.run_compare(["head", "tail"])
            elif i % 10 == 8:  # the run before, rolled back and resumed from its KV state
                with qtbot.waitSignal(w.history.refreshed, timeout=30_000):
                    w.history.refresh()
                newest = w.store.repo.history()[-1]
                assert w.history.has_kv(newest.id)
                w.history.select_versions(newest.id)
                w.history.rollback_selected()
            else:
                w.run_job()
        rss.append(telemetry.process_rss() / 2**20)
    growth = rss[-1] - rss[0]
    print(f"RSS after run 1: {rss[0]:.0f} MiB, after run {RUNS}: {rss[-1]:.0f} MiB "
          f"(most {max(rss):.0f}): {growth:+.0f} MiB")  # fmt: skip
    assert len(w.store.repo.history()) >= RUNS
    assert growth < MAX_GROWTH_MB, [round(r) for r in rss]
    w.close()
