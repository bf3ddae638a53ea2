"""Fixtures of the window's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.ui_texts import compile_chinese


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding contextlens_zh_CN.qm compiled from the committed .ts."""
    return compile_chinese(tmp_path_factory.mktemp("translations"))
