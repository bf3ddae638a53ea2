"""The history panel: every prompt version of a session as a tree, and what can be done with it.

Work is never lost in ContextLens: a session is one document's line of work, each run is a
version (a child of the version it was made from), editing an old one branches, a rollback is a
new version equal to an old one. This panel shows that tree, with each version's task, prompt,
strategy, settings, finish reason and reply, marks the current version (bold: the next Run
branches from it), opens a version again (double-click or Open), and marks the versions whose KV
state is saved, because rolling back to those resumes instantly instead of evaluating the whole
prompt again. Diff, rollback, branch, delete with undo, export and import all go through the
history's services (app/services/history.py) on a pool thread; the panel redraws from the
changes each reports (the version it selects next among them). Export and import show their
progress and can be cancelled, which leaves everything as it was. A read-only database can be
browsed and exported, and the actions that would change it say why they are off.

This module holds the actions and wires the parts: the tree's model over typed rows
(history_tree_model), its columns and their words (history_columns), its view
(history_tree_view), the session list (history_sessions), the buttons (history_buttons), and
export and import with their progress (history_archive).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.services import history as ops
from app.services.history import (
    Changes,
    Deleted,
    Exported,
    History,
    HistoryView,
    Imported,
    NewVersion,
    RolledBack,
    Undone,
    VersionInfo,
)
from app.ui.background import run_for
from app.ui.history_archive import SUFFIX, SessionArchive
from app.ui.history_buttons import Allowed, HistoryButtons
from app.ui.history_dialogs import BranchDialog, DiffDialog
from app.ui.history_sessions import SessionChooser
from app.ui.history_tree_model import HistoryTreeModel, Kind
from app.ui.history_tree_view import HistoryTree
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import MessageLine

__all__ = ["SUFFIX", "HistoryPanel"]  # SUFFIX: the files the window opens here


class HistoryPanel(FollowsLanguage, QWidget):
    """The version tree of one session (or all), with diff, rollback, branch, delete/undo,
    export and import."""

    refreshed = Signal()
    # a version id, whether to resume its reply from its saved KV state: the window rolls back
    # through the workbench (one rollback service for both faces) and answers on_history_changed
    rollback_requested = Signal(int, bool)
    rolled_back = Signal(object)  # the new VersionInfo, once the rollback is written
    changed = Signal(object)  # Changes: what an operation of this panel changed in the history
    branched = Signal(object)  # the new VersionInfo
    diffed = Signal(str)  # the diff shown
    exported = Signal(object)  # ExportSummary
    imported = Signal(object)  # ImportSummary
    cancelled = Signal(str)  # an export or import was cancelled: the sentence shown
    failed = Signal(str)  # one sentence, also shown in the panel
    open_requested = Signal(int)  # the id of a version to show again

    def __init__(self, store: History, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self._read_only = store.read_only
        self._session_id: int | None = None
        self._reading = False  # a read of the history is running
        self._reread = False  # and another was asked for meanwhile
        self._select_after: int | None = None
        self._undoable = 0  # deletions made here that undo can bring back
        self.diff_dialog: DiffDialog | None = None
        self.branch_dialog: BranchDialog | None = None

        self.model = HistoryTreeModel(self)
        self.sessions = SessionChooser(self.model.columns)
        self.sessions.chosen.connect(self.set_session)
        self.sessions.refresh_button.clicked.connect(self.refresh)
        self.session_combo, self.refresh_button = self.sessions.combo, self.sessions.refresh_button
        self.tree = HistoryTree(self.model)
        self.tree.selectionModel().selectionChanged.connect(self._update_actions)
        self.tree.version_activated.connect(self.open_requested)

        self.buttons = HistoryButtons(self._read_only)  # worded and turned on there
        b = self.buttons
        self.open_button, self.diff_button, self.rollback_button = (
            b.open_button, b.diff_button, b.rollback_button)  # fmt: skip
        self.branch_button, self.delete_button, self.undo_button = (
            b.branch_button, b.delete_button, b.undo_button)  # fmt: skip
        self.export_button, self.include_kv, self.import_button = (
            b.export_button, b.include_kv, b.import_button)  # fmt: skip
        for button, slot in ((b.open_button, self.open_selected),
                             (b.diff_button, self.diff_selected),
                             (b.rollback_button, self.rollback_selected),
                             (b.branch_button, self.branch_selected),
                             (b.delete_button, self.delete_selected),
                             (b.undo_button, self.undo_delete),
                             (b.export_button, self.export_session),
                             (b.import_button, self.import_session)):  # fmt: skip
            button.clicked.connect(slot)
        self.message = MessageLine()
        self.archive = SessionArchive(store, self)  # export and import: one at a time
        self.archive.busy_changed.connect(self._update_actions)
        self.archive.said.connect(self._say)
        self.archive.failed.connect(self._fail)
        self.archive.exported.connect(self._on_exported)
        self.archive.imported.connect(self._on_imported)
        self.archive.cancelled.connect(self.cancelled)
        self.progress = self.archive.progress

        self._shortcuts: list[QAction] = []  # Delete, Undo Delete, Refresh
        for keys, slot in (
            (QKeySequence.StandardKey.Delete, self.delete_selected),
            (QKeySequence.StandardKey.Undo, self.undo_delete),
            (QKeySequence.StandardKey.Refresh, self.refresh),
        ):
            action = QAction(self)
            action.setShortcut(keys)
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            action.triggered.connect(slot)
            self.addAction(action)
            self._shortcuts.append(action)

        layout = QVBoxLayout(self)
        layout.addWidget(self.sessions)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.buttons)
        layout.addWidget(self.message)

        self._read_only_note = ""  # the note a read-only history shows, as last worded
        self.retranslate()
        self.refresh()

    def retranslate(self) -> None:
        """Every text in the language now installed (the session list and the buttons follow
        on their own); the tree's headers and rows are drawn again in it (their texts are
        worded as they are drawn), so what is selected, expanded and current stays as it is."""
        self.archive.retranslate()
        names = (self.tr("Delete"), self.tr("Undo Delete"), self.tr("Refresh"))
        for action, name in zip(self._shortcuts, names, strict=True):
            action.setText(name)
        # the read-only note, while it is what the message line says
        if self._read_only and self.message.label.text() in ("", self._read_only_note):
            self._read_only_note = self.tr(
                "This history is read-only: it can be browsed and exported, not changed."
            )
            self.message.show_message(self._read_only_note, error=False)
        self.model.retranslate()
        self.tree.fit_columns()
        self._update_actions()

    # ----- reading -----

    @property
    def _view(self) -> HistoryView:
        return self.model.view

    def set_session(self, session_id: int | None) -> None:
        """Show one session's versions (None: every session) and read them again."""
        self._session_id = session_id
        self.refresh()

    def session_id(self) -> int | None:
        return self._session_id

    def set_current(self, session_id: int | None, version_id: int | None) -> None:
        """The session model's current version (bold): shows its session and reads it again.
        None: no current version (the open document has no session yet); the session shown
        stays."""
        self.tree.set_current(version_id)
        if session_id is not None:
            self.set_session(session_id)

    def current_version(self) -> int | None:
        return self.model.current

    def refresh(self) -> None:
        """Read the history again in the background; ``refreshed`` when it is shown. While a
        read runs, further requests make one more read after it (never two at once)."""
        if self._reading:
            self._reread = True
            return
        self._reading = True
        self._reread = False
        store, session_id = self._store, self._session_id
        self._background(lambda: ops.read_history(store, session_id), self._on_read,
                         on_error=self._on_read_failed)  # fmt: skip

    def _on_read(self, view: HistoryView) -> None:
        self._reading = False
        if self._reread:  # something changed while reading: what was read is already stale
            self.refresh()
            return
        self._show(view)
        self.refreshed.emit()

    def _on_read_failed(self, message: str) -> None:
        self._reading = False
        self._fail(message)
        if self._reread:
            self.refresh()

    def _show(self, view: HistoryView) -> None:
        selected = {v.id for v in self.selected_versions()}
        if self._select_after is not None:
            selected = {self._select_after}
            self._select_after = None
        if self._session_id is not None and all(s.id != self._session_id for s in view.sessions):
            self._session_id = None
        self.sessions.show_sessions(view.sessions, self._session_id)
        self.tree.show_view(view, sessions=self._session_id is None, select=selected)
        self._update_actions()

    # ----- selection -----

    def versions(self) -> list[VersionInfo]:
        """What is shown, in creation order."""
        return list(self._view.versions)

    def has_kv(self, version_id: int) -> bool:
        """Whether rolling back to this version resumes from a saved KV state."""
        return version_id in self._view.states

    def item_for(self, version_id: int) -> QModelIndex | None:
        """The index (first column) of a version's row in the tree; None when not shown."""
        return self.tree.index_for(version_id)

    def select_versions(self, *version_ids: int) -> None:
        self.tree.select_versions(*version_ids)

    def selected_versions(self) -> list[VersionInfo]:
        found = (self.model.version(vid) for vid in self.tree.selected(Kind.VERSION))
        return sorted((v for v in found if v is not None),
                      key=lambda v: (v.session, v.number))  # fmt: skip

    def _selected_sessions(self) -> list[int]:
        return self.tree.selected(Kind.SESSION)

    def open_selected(self) -> None:
        """Show the selected version again: its reply in the output buffer (and its plan on
        the document, when it was made on the open document)."""
        versions = self.selected_versions()
        if len(versions) != 1:
            self._fail(self.tr("Select one version to open."))
            return
        self.open_requested.emit(versions[0].id)

    def _export_target(self) -> int | None:
        """The session to export: the one shown, else the one of the selection."""
        if self._session_id is not None:
            return self._session_id
        sessions = {v.session for v in self.selected_versions()} | set(self._selected_sessions())
        return sessions.pop() if len(sessions) == 1 else None

    def _update_actions(self) -> None:
        versions = self.selected_versions()
        one = len(versions) == 1 and not self._selected_sessions()
        self.buttons.allow(Allowed(
            versions=len(versions), one=one, instant=one and self.has_kv(versions[0].id),
            selection=self.tree.selectionModel().hasSelection(), undoable=self._undoable > 0,
            idle=not self.archive.busy, exportable=self._export_target() is not None,
        ))  # fmt: skip

    # ----- actions -----
    # Each action reads what it needs on the GUI thread, runs a store call on a pool thread, and
    # handles the answer in an ``_on_*`` method; see :meth:`_background` for why methods.

    def diff_selected(self) -> None:
        versions = self.selected_versions()
        if len(versions) != 2:
            self._fail(self.tr("Select exactly two versions to compare."))
            return
        a, b = versions
        title = self.tr("v{0} → v{1}").format(a.number, b.number)
        store = self._store
        self._background(lambda: store.diff(a.id, b.id), self._on_diff, title)

    def _on_diff(self, title: str, diff: str) -> None:
        self.diff_dialog = DiffDialog(title, diff, self)
        self.diff_dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.diff_dialog.open()
        self.diffed.emit(diff)

    def rollback_selected(self) -> None:
        """Rollback: resumed from the saved KV state where the panel shows one."""
        versions = self.selected_versions()
        if len(versions) == 1:
            self.request_rollback(self.has_kv(versions[0].id))

    def request_rollback(self, resume: bool) -> None:
        """Ask for a rollback of the one selected version (``rollback_requested``); ``resume``:
        generate its reply again from its saved KV state (`snapshots rollback --resume`)."""
        versions = self.selected_versions()
        if len(versions) == 1 and not self._read_only:
            self.rollback_requested.emit(versions[0].id, resume)

    def on_history_changed(self, changes: Changes) -> None:
        """What an operation made elsewhere (the workbench's rollback) changed: redraw, and
        say what a rollback made."""
        if isinstance(changes, RolledBack):
            old, new = changes.copied, changes.version
            text = (
                self.tr("Rolled back to v{0} as v{1}: it resumes instantly from the saved KV "
                        "state.")
                if changes.resume is not None
                else self.tr("Rolled back to v{0} as v{1}: its recorded reply is shown, and Run "
                             "generates it again.")
            )  # fmt: skip
            self._say(text.format(old.number, new.number))
        self.apply_changes(changes)
        if isinstance(changes, RolledBack):
            self.rolled_back.emit(changes.version)

    def branch_selected(self) -> None:
        versions = self.selected_versions()
        if len(versions) != 1 or self._read_only:
            return
        dialog = BranchDialog(versions[0], self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(self._on_branch_accepted)  # a bound method, not a closure
        self.branch_dialog = dialog
        dialog.open()

    def _on_branch_accepted(self) -> None:
        dialog = self.sender()
        if not isinstance(dialog, BranchDialog):
            return
        old, prompt = dialog.version, dialog.prompt()
        store = self._store
        self._background(lambda: ops.branch(store, old.id, prompt=prompt), self._on_branched,
                         old)  # fmt: skip

    def _on_branched(self, old: VersionInfo, done: NewVersion) -> None:
        new = done.version
        self._say(self.tr("v{0} branched from v{1}.").format(new.number, old.number))
        self._made(done)
        self.branched.emit(new)

    def delete_selected(self) -> None:
        if self._read_only:
            return
        sessions = self._selected_sessions()
        versions = [v.id for v in self.selected_versions() if v.session not in sessions]
        if not versions and not sessions:
            return
        store = self._store
        self._background(lambda: ops.delete(store, versions=versions, sessions=sessions),
                         self._on_deleted)  # fmt: skip

    def _on_deleted(self, done: Deleted) -> None:
        self._undoable += done.undoable
        self._say(self.tr("Deleted {0} item(s); Undo Delete brings them back until you quit.")
                  .format(done.undoable))  # fmt: skip
        self._made(done)

    def undo_delete(self) -> None:
        if self._read_only or self._undoable <= 0:
            return
        store = self._store
        self._background(lambda: ops.undo_delete(store), self._on_undone)

    def _on_undone(self, done: Undone) -> None:
        if done.kind is None:
            self._undoable = 0
            self._say(self.tr("Nothing to undo."))
        else:
            self._undoable = max(0, self._undoable - 1)
            what = self.tr("version") if done.kind == "version" else self.tr("session")
            self._say(self.tr("The {0} #{1} is back.").format(what, done.item))
        self._made(done)

    def export_session(self) -> None:
        """Ask for a file, then write the session to it in the background."""
        session_id = self._export_target()
        if session_id is None:
            self._fail(self.tr("Choose a session to export (above, or select one of its "
                               "versions)."))  # fmt: skip
            return
        name = next((s.name for s in self._view.sessions if s.id == session_id), "session")
        self.archive.export_session(session_id, name, include_kv=self.include_kv.isChecked())

    def _on_exported(self, done: Exported) -> None:
        self.apply_changes(done)  # none: the history is as it was
        self.exported.emit(done.summary)

    def import_session(self) -> None:
        """Ask for a .ctxlens file, then add it as a new session in the background."""
        if not self._read_only:
            self.archive.choose_import()

    def import_file(self, path: Path) -> None:
        """Add the session exported in ``path`` as a new session, in the background (also for
        a .ctxlens file opened from the command line or a second launch)."""
        self.archive.import_file(path)

    def _on_imported(self, done: Imported) -> None:
        self._session_id = done.summary.session_id  # show what came in
        self._made(done)
        self.imported.emit(done.summary)

    def apply_changes(self, changes: Changes) -> None:
        """Redraw after an operation from what it says it changed: the version it selects
        next, and a new read when anything shown changed (every session's size is shown in
        the session list, so any change is)."""
        if changes.select is not None:
            self._select_after = changes.select
        if changes.changed:
            self.refresh()

    def _made(self, changes: Changes) -> None:
        """An operation of this panel's own: redrawn here, and reported (``changed``) to the
        window's other listeners (the workbench's line of work)."""
        self.apply_changes(changes)
        if changes.changed:
            self.changed.emit(changes)

    # ----- plumbing -----

    def _background(self, work: Callable[[], Any], handler: Callable[..., None], *args: Any,
                    on_error: Callable[[str], None] | None = None) -> None:  # fmt: skip
        """``work()`` on a pool thread, then ``handler(*args, result)`` (a method of this panel)
        or the error (to ``on_error``, another method, else shown), if the panel still exists.
        ``work`` holds plain values only: the last reference to a widget must not go on the
        pool thread."""
        run_for(self, work, handler, *args, on_error=on_error or self._fail)

    def _say(self, text: str) -> None:
        self.message.show_message(text, error=False)

    def _fail(self, message: str) -> None:
        self.message.show_message(message)
        self.failed.emit(message)
