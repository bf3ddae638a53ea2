"""Text from outside the app is shown as written, never as markup (issue: status messages
rendered HTML from error text). A file, a model, a server or an archive member may carry a name
or an error such as ``<h1 style="font-size:90px">…</h1><img src=…>``; QLabel and QMessageBox
render that as a huge heading and fetch the image unless told the text is plain."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QLabel, QMessageBox

from app.core.textutil import MAX_MESSAGE_CHARS
from app.ui.document_view import DocumentView
from app.ui.main_window import MainWindow
from app.ui.model_panel import ModelPanel
from app.ui.widgets import ElidedLabel, MessageLine

MARKUP = '<h1 style="font-size:90px">BIG</h1><img src="file:///etc/passwd">'


def test_a_failure_quoting_markup_shows_it_as_text(qtbot, tmp_path: Path) -> None:
    bad = tmp_path / "<h1>bad<img src=x>.gguf"  # a file name cannot hold '/'; markup still
    bad.write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(32))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(bad, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.failed, timeout=30_000) as blocker:
        w.show()
    assert "<h1>bad<img src=x>" in blocker.args[0]
    w.session.fail(f"cannot import: the member {MARKUP} is not part of an export")
    for quoted in ("<h1>bad<img src=x>", MARKUP):
        boxes = [b for b in w.findChildren(QMessageBox) if quoted in b.text()]
        assert boxes and all(b.textFormat() == Qt.TextFormat.PlainText for b in boxes)
    w.close()


def test_labels_that_show_outside_text_are_plain(qtbot, tmp_path: Path) -> None:
    view = DocumentView()
    qtbot.addWidget(view)
    panel = ModelPanel(tmp_path)
    qtbot.addWidget(panel)
    line = MessageLine()
    qtbot.addWidget(line)
    outside = [view.summary, view.plan_info, view.caret_info, line.label, panel.memory,
               panel.gpu_reason, panel.backend, panel.status]  # fmt: skip
    for key in ("name", "file", "arch", "kind", "loaded"):  # one line each, drawn as plain text
        field = panel.card._fields[key]
        field.setText(MARKUP)
        assert isinstance(field, ElidedLabel) and field.text() == MARKUP
    for label in outside:
        assert isinstance(label, QLabel)
        label.setText(MARKUP)
        assert label.textFormat() == Qt.TextFormat.PlainText, label
        assert label.text() == MARKUP


def test_a_message_of_a_million_characters_is_capped_before_a_widget_shows_it(
    qtbot, tmp_path: Path
) -> None:
    """Review round 3, row 4: a word-wrapped label given 1,000,000 characters kept the window
    busy 56 s. Messages that quote outside text are cut at MAX_MESSAGE_CHARS first."""
    huge = "cannot load: " + "x" * 1_000_000
    line = MessageLine()
    qtbot.addWidget(line)
    line.show_message(huge)
    assert len(line.text()) < MAX_MESSAGE_CHARS + 50 and line.text().endswith("characters)")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    w.session.fail(huge)
    assert len(w.last_error) < MAX_MESSAGE_CHARS + 50
    assert all(len(b.text()) < MAX_MESSAGE_CHARS + 50 for b in w.findChildren(QMessageBox))
    assert len(w.statusBar().currentMessage()) < MAX_MESSAGE_CHARS + 50
    w.close()
