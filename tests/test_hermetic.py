"""The suite never reads the person's own set-up (issue: a machine where the app was used before
failed tests that a new one passed): settings, data, state and caches all live in folders the
test session made, whatever the environment says (tests/conftest.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs
from PySide6.QtCore import QCoreApplication, QSettings

from app.core.model_sources import places
from app.core.paths import cache_dir, user_data_dir


def _made_for_the_session(path: str | Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())


def test_settings_data_and_caches_are_the_sessions_own() -> None:
    names = QCoreApplication.organizationName(), QCoreApplication.applicationName()
    QCoreApplication.setOrganizationName("ContextLens")
    QCoreApplication.setApplicationName("ContextLens")
    try:
        assert _made_for_the_session(QSettings().fileName())
    finally:
        QCoreApplication.setOrganizationName(names[0])
        QCoreApplication.setApplicationName(names[1])
    assert _made_for_the_session(user_data_dir())
    assert _made_for_the_session(cache_dir())
    assert _made_for_the_session(platformdirs.user_state_dir("ContextLens"))
    assert _made_for_the_session(os.environ["CONTEXTLENS_DB"])
    assert os.environ["CONTEXTLENS_CALIBRATE"] == "0"
    assert "CONTEXTLENS_API_KEY" not in os.environ and "CONTEXTLENS_MODELS" not in os.environ


def test_the_models_of_other_programs_are_looked_for_in_the_sessions_folders_only() -> None:
    """LM Studio's, Ollama's, the caches' … folders (app/core/model_sources.py) of the person
    never reach a test: only the models folder of the checkout is outside the session's."""
    looked = [p for p in places() if p.source != "ContextLens"]
    assert looked and all(_made_for_the_session(p.folder) for p in looked), looked
