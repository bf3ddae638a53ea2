"""Before any document: the pane says what to do first (open a document, the sample, a recent
file), and Run says it in the status line instead of an error box."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMessageBox

from app.core.paths import sample_document
from app.ui.main_window import MainWindow


def _window(qtbot, tmp_path: Path, settings: QSettings) -> MainWindow:
    w = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def test_the_start_page_opens_the_sample_and_then_the_recent_file(
    qtbot, tmp_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = _window(qtbot, tmp_path, settings)
    start = w.document_view.start
    assert start.isVisible() and not w.document_view.text.isVisible()
    assert start.open_button.isVisible() and not start.recent.isVisible()  # nothing recent yet

    w.run_job()  # nothing to run yet: said in the status line, no error box
    assert w.statusBar().currentMessage() == "Open a document first."
    assert not [b for b in w.findChildren(QMessageBox) if b.isVisible()]

    with qtbot.waitSignal(w.document_view.document_ready, timeout=60_000):
        qtbot.mouseClick(start.sample_button, Qt.MouseButton.LeftButton)
    assert w.document_path == sample_document()
    assert w.document_view.text.isVisible() and not start.isVisible()
    assert start.recent.count() == 1 and start.recent.item(0).toolTip() == str(sample_document())
    w.close()

    again = _window(qtbot, tmp_path, settings)  # the next start lists it
    recent = again.document_view.start.recent
    assert recent.isVisible() and recent.count() == 1
    with qtbot.waitSignal(again.document_view.document_ready, timeout=60_000):
        recent.itemActivated.emit(recent.item(0))
    assert again.document_path == sample_document()
