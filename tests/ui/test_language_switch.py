"""View ▸ Language applies at once: the whole window, switched while it is shown, reads exactly
as a window started in the new language, and back."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication, QSettings
from PySide6.QtWidgets import QMainWindow

from app.ui import i18n
from app.ui.main_window import MainWindow
from tests.ui.ui_texts import assert_follows_language


def test_the_window_follows_the_language_live(qtbot, tmp_path: Path, compiled: Path) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    made: list[MainWindow] = []

    def make() -> MainWindow:
        window = MainWindow(None, None, db_path=tmp_path / f"h{len(made)}.db", settings=settings)
        qtbot.addWidget(window)
        made.append(window)
        return window

    def settle(window: MainWindow) -> None:
        """Shown, with what it finds out in the background known: the default model's card
        and whether there is a GPU, drawn by the gauges' timer."""
        window.show()
        qtbot.waitUntil(lambda: window.model_panel.card.value("arch") != "–", timeout=10_000)
        qtbot.waitUntil(lambda: window.gauges.vram_text_shown() != "–", timeout=10_000)

    assert_follows_language(make, compiled, settle)
    for window in made:
        window.close()


def test_a_language_without_a_font_is_said_with_the_package_to_install(
    qtbot, tmp_path: Path, compiled: Path, monkeypatch
) -> None:
    """Chinese without a CJK font is boxes, the warning too: it is said in English, with the
    package that brings a font."""
    assert i18n.missing_font_note("en") == ""
    assert i18n.missing_font_note("zh_CN", families=["Noto Sans CJK SC"]) == ""
    note = i18n.missing_font_note("zh_CN", families=[])
    assert note.startswith("No font for Chinese is installed") and "fonts-noto-cjk" in note
    assert note.isascii()

    monkeypatch.setattr(i18n.QFontDatabase, "families", lambda *_args: [])
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = QMainWindow()
    qtbot.addWidget(window)
    menu = i18n.LanguageMenu(window, settings, folder=compiled)
    chinese = next(a for a in menu.actions() if a.data() == "zh_CN")
    try:
        chinese.trigger()
        assert window.statusBar().currentMessage() == note
    finally:
        i18n.install_translator(QCoreApplication.instance(), i18n.ENGLISH)
