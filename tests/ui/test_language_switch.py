"""View ▸ Language applies at once: the whole window, switched while it is shown, reads exactly
as a window started in the new language, and back."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

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
