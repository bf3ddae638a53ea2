"""The History panel's buttons: what can be done with the selection, and with the archive.

Open, Diff, Rollback, Branch, Delete and Undo Delete in two rows of three (the panel fits a
narrow dock), then Export with its "Include KV states" and Import. :class:`HistoryButtons` says
which are on for what :class:`Allowed` says (the selection, the history, the archive), and
words them: Rollback shows ⚡ where the rollback resumes from a saved KV state, and on a
read-only history every action that would change it says why it is off. The panel connects
the buttons to its actions.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.ui.history_columns import INSTANT
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import WrappingCheckBox


@dataclass(frozen=True)
class Allowed:
    """What the panel's state allows now."""

    versions: int = 0  # selected versions
    one: bool = False  # exactly one version selected, and no session
    instant: bool = False  # and a rollback to it resumes from a saved KV state
    selection: bool = False  # anything is selected (a session or a version)
    undoable: bool = False  # a deletion made here can be brought back
    idle: bool = True  # no export or import is running (one at a time)
    exportable: bool = False  # a session to export is known (shown, or of the selection)


class HistoryButtons(FollowsLanguage, QWidget):
    """The action buttons and the archive's; ``read_only``: the history cannot be changed."""

    def __init__(self, read_only: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._read_only = read_only
        self._allowed = Allowed()
        self.open_button = QPushButton()
        self.diff_button = QPushButton()
        self.rollback_button = QPushButton()
        self.branch_button = QPushButton()
        self.delete_button = QPushButton()
        self.undo_button = QPushButton()
        self.export_button = QPushButton()
        self.include_kv = WrappingCheckBox()
        self.import_button = QPushButton()

        actions = QGridLayout()  # two rows of three: the panel fits a narrow dock
        six = (self.open_button, self.diff_button, self.rollback_button,
               self.branch_button, self.delete_button, self.undo_button)  # fmt: skip
        for i, button in enumerate(six):
            actions.addWidget(button, *divmod(i, 3))
        actions.setColumnStretch(3, 1)
        archive = QHBoxLayout()
        archive.addWidget(self.export_button)
        archive.addWidget(self.include_kv)
        archive.addStretch(1)
        archive.addWidget(self.import_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(actions)
        layout.addLayout(archive)
        self.retranslate()

    def retranslate(self) -> None:
        self.open_button.setText(self.tr("Open"))  # every Alt letter of "Open" is taken
        self.diff_button.setText(self.tr("&Diff"))
        self.branch_button.setText(self.tr("Branch…"))
        self.delete_button.setText(self.tr("Delete"))
        self.undo_button.setText(self.tr("Undo Delete"))
        self.export_button.setText(self.tr("&Export…"))
        self.include_kv.setText(self.tr("Include KV states"))
        self.include_kv.setToolTip(
            self.tr("Exports carry the saved KV states, so rollbacks stay instant elsewhere")
        )
        self.import_button.setText(self.tr("&Import…"))
        self.allow(self._allowed)

    def allow(self, allowed: Allowed) -> None:
        """Turn each button on or off for ``allowed``, and word Rollback and the tooltips."""
        self._allowed = a = allowed
        write = not self._read_only
        self.open_button.setEnabled(a.one)
        self.diff_button.setEnabled(a.versions == 2)
        self.rollback_button.setEnabled(write and a.one)
        self.branch_button.setEnabled(write and a.one)
        self.delete_button.setEnabled(write and a.selection)
        self.undo_button.setEnabled(write and a.undoable)
        self.import_button.setEnabled(write and a.idle)
        self.export_button.setEnabled(a.idle and a.exportable)

        instant = a.one and a.instant
        self.rollback_button.setText(
            self.tr("Rollbac&k {0}").format(INSTANT) if instant else self.tr("Rollbac&k")
        )
        why = self.tr("The history database is read-only: nothing can be changed.")
        tips = {
            self.rollback_button: self.tr("A saved KV state: the rollback resumes instantly")
            if instant
            else self.tr("A new version equal to the selected one; nothing after it is lost"),
            self.branch_button: self.tr("A new version from the selected one, with a new prompt"),
            self.delete_button: self.tr("Hide the selection; Undo brings it back until you quit"),
            self.undo_button: self.tr("Bring back what was deleted last"),
            self.import_button: self.tr("Add a session from a .ctxlens file"),
        }
        for button, tip in tips.items():
            button.setToolTip(why if self._read_only else tip)
        self.diff_button.setToolTip(self.tr("Compare two selected versions: settings, prompt "
                                            "and reply"))  # fmt: skip
        self.open_button.setToolTip(self.tr("Show the selected version's reply in the output "
                                            "buffer (double-click does too)"))  # fmt: skip
        self.export_button.setToolTip(self.tr("Write the session to a .ctxlens file"))
