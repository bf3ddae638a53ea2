"""Help: the user guide opens rendered, the shortcuts list is the window's own keys."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QUrl
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QTableWidget, QTextBrowser

from app.ui.help import guide_dialog, guide_text, shortcuts, shortcuts_dialog
from app.ui.main_window import MainWindow


def test_help_has_the_guide_the_shortcuts_and_about(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(window)
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    texts = [a.text() for a in help_menu.actions() if not a.isSeparator()]
    assert texts == ["ContextLens &User Guide", "&Keyboard Shortcuts", "&About ContextLens"]

    assert guide_text("xx_YY").startswith("# ContextLens user guide")  # falls back to English
    guide = guide_dialog(window)
    qtbot.addWidget(guide)
    browser = guide.findChild(QTextBrowser)
    rendered = browser.toPlainText()
    assert "History, rollback and export" in rendered and "## " not in rendered  # rendered
    picture = browser.document().resource(QTextDocument.ResourceType.ImageResource,
                                           QUrl("guide/window.png"))  # fmt: skip
    assert picture is not None and picture.width() > 100  # its screenshots load

    keys = dict(shortcuts(window))
    assert keys["Run"] == "Ctrl+R" and keys["Open Document"] == "Ctrl+O"
    assert keys["Keyboard Shortcuts"] == "Ctrl+/"
    table = shortcuts_dialog(window).findChild(QTableWidget)
    assert table.rowCount() == len(keys) and table.item(0, 0).text() in keys
