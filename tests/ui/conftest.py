"""Fixtures of the window's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from app.core.planning.strategies import Planner
from app.core.tokens import cl100k
from app.ui.main_window import MainWindow
from tests.ui.ui_texts import compile_chinese
from tests.ui.windows import Windows


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding contextlens_zh_CN.qm compiled from the committed .ts."""
    return compile_chinese(tmp_path_factory.mktemp("translations"))


@pytest.fixture(scope="module")
def sample_planner(sample_text: str) -> Planner:
    """The sample document planned with the cl100k counter, shared by the module's tests."""
    return Planner(sample_text, cl100k())


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    """The app's settings as a file of this test's own, tmp_path/settings.ini."""
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def make_window(qtbot: Any, tmp_path: Path) -> Iterator[Windows]:
    """Main windows as main() makes them (tests/ui/windows.py): ``make_window(model, document,
    n_ctx)``, the other MainWindow arguments by keyword; by default on the test's settings file
    (tmp_path/settings.ini) and a history of its own (tmp_path/h.db). Each is handed to qtbot
    and closed when the test is done."""
    windows = Windows(qtbot, tmp_path)
    yield windows
    windows.close()


@pytest.fixture
def empty_window(make_window: Windows) -> MainWindow:
    """A window shown with no model and no document, at n_ctx 2048."""
    window = make_window(n_ctx=2048)
    window.show()
    return window


@pytest.fixture
def models_dir(tmp_path: Path, model_path: Path) -> Path:
    """A models folder holding the default model (a link), a GGUF of an obsolete version
    (broken.gguf) and a text file that is not a model."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / model_path.name).symlink_to(model_path)
    (folder / "broken.gguf").write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(32))  # GGUF version 1
    (folder / "notes.txt").write_text("not a model")
    return folder
