"""Help: the user guide, the keyboard shortcuts and About.

The guide is resources/help/guide.md with its screenshots (guide.<lang>.md when the UI's
language has one); the shortcuts are read from the window's own actions when the dialog opens,
so the list cannot drift from the keys that work.
"""

from __future__ import annotations

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app import __version__
from app.core.engine.types import EngineCapabilities
from app.core.paths import resources_dir
from app.ui.i18n import QT_TRANSLATE_NOOP, current_language


def _tr(text: str) -> str:
    return QCoreApplication.translate("Help", text)


def guide_text(language: str | None = None) -> str:
    """The user guide in ``language`` (e.g. "zh_CN"; default: the window's), else in English."""
    folder = resources_dir() / "help"
    language = language or current_language()
    for path in (folder / f"guide.{language}.md", folder / "guide.md"):
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return ""


def shortcuts(window: QWidget) -> list[tuple[str, str]]:
    """(what, keys) for every action of ``window`` that has a shortcut, in menu order, as the
    person's platform writes keys."""
    found: dict[str, str] = {}
    for action in window.findChildren(QAction):
        keys = [k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts()]
        text = action.text().replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…")
        if keys and text and text not in found:
            found[text] = ", ".join(keys)
    return list(found.items())


class _Dialog(QDialog):
    def __init__(self, title: str, body: QWidget, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(body, 1)
        layout.addWidget(buttons)


def guide_dialog(parent: QWidget) -> QDialog:
    """The user guide, rendered from its Markdown."""
    browser = QTextBrowser()
    browser.setOpenExternalLinks(True)
    browser.setSearchPaths([str(resources_dir() / "help")])  # its pictures: guide/*.png
    missing = _tr(QT_TRANSLATE_NOOP("Help", "The user guide is missing from this build."))
    browser.setMarkdown(guide_text() or missing)
    dialog = _Dialog(_tr(QT_TRANSLATE_NOOP("Help", "ContextLens User Guide")), browser, parent)
    dialog.resize(640, 560)
    return dialog


def shortcuts_dialog(window: QWidget) -> QDialog:
    """A table of the window's shortcuts."""
    rows = shortcuts(window)
    table = QTableWidget(len(rows), 2)
    table.setHorizontalHeaderLabels([_tr(QT_TRANSLATE_NOOP("Help", "Action")),
                                     _tr(QT_TRANSLATE_NOOP("Help", "Keys"))])
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    for row, (text, keys) in enumerate(rows):
        table.setItem(row, 0, QTableWidgetItem(text))
        item = QTableWidgetItem(keys)
        item.setTextAlignment(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft)
        table.setItem(row, 1, item)
    table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
    dialog = _Dialog(_tr(QT_TRANSLATE_NOOP("Help", "Keyboard Shortcuts")), table, window)
    dialog.resize(480, 520)
    return dialog


def about_box(parent: QWidget, caps: EngineCapabilities | None) -> None:
    """About: the versions of the app and of what it runs on (llama.cpp's once loaded)."""
    unknown = _tr(QT_TRANSLATE_NOOP("Help", "(load a model)"))
    text = _tr(QT_TRANSLATE_NOOP(
        "Help", "ContextLens {0}\nllama-cpp-python {1}\nllama.cpp build: {2}\nQt (PySide6) {3}"
    ))  # fmt: skip
    bindings = (caps.llama_cpp_python_version if caps else "") or unknown
    build = (caps.system_info if caps else "") or unknown
    title = _tr(QT_TRANSLATE_NOOP("Help", "About ContextLens"))
    QMessageBox.about(parent, title, text.format(__version__, bindings, build, pyside_version))
