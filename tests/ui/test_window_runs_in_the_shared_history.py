"""A run made in the window is a run the command line knows: both record through the one
service (app/services/versions.py), so `contextlens-cli batch` on the same document and settings
finds the window's run done and skips it, and a run made otherwise is not done."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QSettings

from app.core.paths import sample_document
from app.ui.main_window import MainWindow
from tests.cli.runner import run

N_CTX = 512


def test_batch_finds_the_windows_run_done(qtbot, tmp_path: Path, model_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    doc = folder / "lexicon.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:6_000], encoding="utf-8")
    db = tmp_path / "h.db"
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model_path, doc, n_ctx=N_CTX, db_path=db, settings=settings)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.ready, timeout=120_000):
        window.show()
    window.max_tokens.setValue(8)
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))
    with qtbot.waitSignal(window.job_finished, timeout=300_000):
        window.run_job()
    window.close()

    def batch(max_tokens: int) -> dict[str, object]:
        proc = run("batch", str(folder), "--strategy", "head", "--n-ctx", str(N_CTX),
                   "--max-tokens", str(max_tokens), "--model", str(model_path), "--db", str(db),
                   "--json", timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        [document] = [line for line in lines if line["type"] == "document"]
        return document

    same = batch(8)
    assert same["status"] == "skipped", same
    assert same["message"] == "done before as version #1"
    other = batch(9)  # another reply length is another job: it runs
    assert other["status"] == "done" and other["version"] == 2, other
