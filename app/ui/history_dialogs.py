"""The History panel's two dialogs: a diff of two versions, and a new prompt to branch with."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.services.history import VersionInfo
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import fixed_font, mix


class DiffDialog(FollowsLanguage, QDialog):
    """A unified diff of two versions, monospace and read-only, with +/- lines tinted (the
    title, made by the panel, is only version numbers)."""

    def __init__(self, title: str, diff: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.resize(760, 520)
        self.view = QPlainTextEdit()
        self.view.setReadOnly(True)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setFont(fixed_font())
        base = self.palette().color(QPalette.ColorRole.Base)
        self.added = mix(base, QColor(0, 160, 60), 0.25)
        self.removed = mix(base, QColor(210, 40, 40), 0.25)
        self.header = mix(base, self.palette().color(QPalette.ColorRole.Highlight), 0.2)
        self._diff = diff
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.view)
        layout.addWidget(buttons)
        self.retranslate()

    def retranslate(self) -> None:
        """Only an empty diff has words of the app's to say (a diff is filled once)."""
        if self._diff and not self.view.document().isEmpty():
            return
        self.view.clear()
        self._fill(self._diff or self.tr("The two versions are the same."))

    def _fill(self, diff: str) -> None:
        cursor = QTextCursor(self.view.document())
        for i, line in enumerate(diff.splitlines()):
            tint = None
            if line.startswith(("+++", "---", "@@")):
                tint = self.header
            elif line.startswith("+"):
                tint = self.added
            elif line.startswith("-"):
                tint = self.removed
            block, chars = QTextBlockFormat(), QTextCharFormat()
            if tint is not None:
                block.setBackground(tint)  # the whole line's width
                chars.setBackground(tint)
            if i:
                cursor.insertBlock(block, chars)
            else:
                cursor.setBlockFormat(block)
            cursor.insertText(line, chars)

    def text(self) -> str:
        return self.view.toPlainText()

    def line_background(self, line: int) -> QColor:
        """The tint of one line (for tests and screenshots)."""
        block = self.view.document().findBlockByNumber(line)
        it = block.begin()
        return it.fragment().charFormat().background().color() if not it.atEnd() else QColor()


class BranchDialog(FollowsLanguage, QDialog):
    """Edit the prompt of a version; accepting makes a new version beside the old one."""

    def __init__(self, version: VersionInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.version = version
        self.label = QLabel()
        self.editor = QPlainTextEdit(version.prompt)
        self.label.setBuddy(self.editor)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        # a button of its own, not the standard Ok renamed: a language change names the
        # standard buttons again, after this dialog has named its own
        self.branch_button = buttons.addButton("", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label)
        layout.addWidget(self.editor)
        layout.addWidget(buttons)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Branch from v{0}").format(self.version.number))
        self.label.setText(self.tr("&Prompt for the new version:"))
        self.branch_button.setText(self.tr("&Branch"))

    def prompt(self) -> str:
        return self.editor.toPlainText()
