"""The token totals the window says, read back for the tests: the number a pattern finds in a
line, and the document header's count by the model."""

from __future__ import annotations

import re

from app.ui.main_window import MainWindow


def said(pattern: str, text: str) -> int:
    """The number ``pattern`` (one group) finds in ``text``."""
    found = re.search(pattern, text)
    assert found is not None, (pattern, text)
    return int(found.group(1).replace(",", ""))


def header_total(window: MainWindow) -> int:
    """The document's tokens by the model, as its header says them."""
    return said(r"([\d,]+) tokens \(model\)", window.document_view.summary.text())
