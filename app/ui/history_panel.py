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
progress and can be cancelled, which leaves everything as it was. A
read-only database can be browsed and exported, and the actions that would change it say why
they are off.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QEvent, QItemSelectionModel, QObject, Qt, Signal
from PySide6.QtGui import (
    QAction,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.planning.frame import SUMMARIZE
from app.core.sampling import from_version
from app.services import history as ops
from app.services.history import (  # the archive's two by name: tests hold them mid-way
    Cancelled,
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
    export_session,
    import_session,
    read_history,
)
from app.ui.background import Progress, run_for
from app.ui.history_dialogs import BranchDialog, DiffDialog
from app.ui.i18n import FollowsLanguage, finish_label, strategy_label, task_label
from app.ui.operation_progress import OperationProgress
from app.ui.widgets import MessageLine, WrappingCheckBox

SUFFIX = ".ctxlens"
INSTANT = "⚡"
PROMPT_COLUMN_MAX = 360  # pixels; the whole prompt is in the tooltip
REPLY_COLUMN_MAX = 420  # pixels; the whole reply is in the tooltip
TOOLTIP_CHARS = 2000  # the longest reply a tooltip shows
_KIND_ROLE = Qt.ItemDataRole.UserRole
_ID_ROLE = Qt.ItemDataRole.UserRole + 1
T = TypeVar("T")


def _first_line(text: str, limit: int = 80) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _reply(run: dict[str, Any]) -> str:
    """A run's reply: its last output (a multi-pass job's partial results come before it)."""
    outputs = run.get("outputs") or []
    return str(outputs[-1].get("text", "")) if outputs else ""


def _settings_tip(settings: dict[str, Any]) -> str:
    """Every recorded setting, one per line (the column shows the context and reply size)."""
    return "\n".join(f"{key}: {value}" for key, value in sorted(settings.items()))


def _unless_cancelled(call: Callable[[], T]) -> T | None:
    """``call()``, or None when the person cancelled it: not a failure, nothing changed."""
    try:
        return call()
    except Cancelled:
        return None


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

    # the columns by their index (shown in the order of SHOWN)
    NAMES = ("version", "created", "task", "strategy", "prompt", "finish", "kv", "settings",
             "reply")  # fmt: skip
    COLUMNS = len(NAMES)
    SHOWN = ("version", "created", "task", "prompt", "strategy", "settings", "finish", "reply",
             "kv")  # fmt: skip

    def __init__(self, store: History, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self._read_only = store.read_only
        self._session_id: int | None = None
        self._view = HistoryView([], [], {}, {})
        self._versions: dict[int, VersionInfo] = {}
        self._reading = False  # a read of the history is running
        self._reread = False  # and another was asked for meanwhile
        self._select_after: int | None = None
        self._undoable = 0  # deletions made here that undo can bring back
        self._current: int | None = None  # the version the next Run branches from
        self.diff_dialog: DiffDialog | None = None
        self.branch_dialog: BranchDialog | None = None

        self.session_combo = QComboBox()
        self.session_combo.setMinimumContentsLength(24)
        self.session_combo.activated.connect(self._on_session_chosen)
        self.session_label = QLabel()
        self.session_label.setBuddy(self.session_combo)
        self.refresh_button = QPushButton()
        self.refresh_button.clicked.connect(self.refresh)

        self.tree = QTreeWidget()
        self.tree.setColumnCount(self.COLUMNS)
        header = self.tree.header()
        for place, name in enumerate(self.SHOWN):
            header.moveSection(header.visualIndex(self.column(name)), place)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.itemSelectionChanged.connect(self._update_actions)
        self.tree.itemDoubleClicked.connect(self._on_double_clicked)
        self.tree.installEventFilter(self)  # the keyboard's arrival selects a version (below)

        # texts and tooltips: retranslate and _update_actions
        self.open_button = QPushButton()
        self.open_button.clicked.connect(self.open_selected)
        self.diff_button = QPushButton()
        self.diff_button.clicked.connect(self.diff_selected)
        self.rollback_button = QPushButton()
        self.rollback_button.clicked.connect(self.rollback_selected)
        self.branch_button = QPushButton()
        self.branch_button.clicked.connect(self.branch_selected)
        self.delete_button = QPushButton()
        self.delete_button.clicked.connect(self.delete_selected)
        self.undo_button = QPushButton()
        self.undo_button.clicked.connect(self.undo_delete)
        self.export_button = QPushButton()
        self.export_button.clicked.connect(self.export_session)
        self.include_kv = WrappingCheckBox()
        self.import_button = QPushButton()
        self.import_button.clicked.connect(self.import_session)
        self.message = MessageLine()
        self._operation = OperationProgress(self)  # export and import: one at a time
        self._operation.changed.connect(self._update_actions)
        self._operation.cancelling.connect(self._on_cancelling)
        self.progress = self._operation.dialog

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

        top = QHBoxLayout()
        top.addWidget(self.session_label)
        top.addWidget(self.session_combo, 1)
        top.addWidget(self.refresh_button)
        actions = QGridLayout()  # two rows of three: the panel fits a narrow dock
        for i, button in enumerate((self.open_button, self.diff_button, self.rollback_button,
                                    self.branch_button, self.delete_button, self.undo_button)):
            actions.addWidget(button, *divmod(i, 3))
        actions.setColumnStretch(3, 1)
        archive = QHBoxLayout()
        archive.addWidget(self.export_button)
        archive.addWidget(self.include_kv)
        archive.addStretch(1)
        archive.addWidget(self.import_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.tree, 1)
        layout.addLayout(actions)
        layout.addLayout(archive)
        layout.addWidget(self.message)

        self._read_only_note = ""  # the note a read-only history shows, as last worded
        self.retranslate()
        self.refresh()

    def retranslate(self) -> None:
        """Every label, button, header and tooltip, and the rows shown, in the language now
        installed; the rows are worded again in place, so what is selected, expanded and
        current stays as it is."""
        self.session_label.setText(self.tr("Session:"))
        self.refresh_button.setText(self.tr("Refresh"))
        self.tree.setHeaderLabels([
            self.tr("Version"), self.tr("Created"), self.tr("Task"), self.tr("Strategy"),
            self.tr("Prompt / question"), self.tr("Finish"), self.tr("KV state"),
            self.tr("Settings"), self.tr("Reply"),
        ])  # fmt: skip
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
        self.progress.setWindowTitle(self.tr("ContextLens"))
        self.progress.setCancelButtonText(self.tr("Cancel"))
        names = (self.tr("Delete"), self.tr("Undo Delete"), self.tr("Refresh"))
        for action, name in zip(self._shortcuts, names, strict=True):
            action.setText(name)
        # the read-only note, while it is what the message line says
        if self._read_only and self.message.label.text() in ("", self._read_only_note):
            self._read_only_note = self.tr(
                "This history is read-only: it can be browsed and exported, not changed."
            )
            self.message.show_message(self._read_only_note, error=False)
        self._reword_rows()
        self._update_actions()

    # ----- reading -----

    def set_session(self, session_id: int | None) -> None:
        """Show one session's versions (None: every session) and read them again."""
        self._session_id = session_id
        self.refresh()

    def session_id(self) -> int | None:
        return self._session_id

    @classmethod
    def column(cls, name: str) -> int:
        """The index of the column ``name`` (one of NAMES)."""
        return cls.NAMES.index(name)

    def set_current(self, session_id: int | None, version_id: int | None) -> None:
        """The session model's current version (bold): shows its session and reads it again.
        None: no current version (the open document has no session yet); the session shown
        stays."""
        self._current = version_id
        if session_id is not None:
            self.set_session(session_id)
        else:
            self._mark_current()

    def current_version(self) -> int | None:
        return self._current

    def _mark_current(self) -> None:
        for item in self._items():
            if item.data(0, _KIND_ROLE) == "version":
                current = item.data(0, _ID_ROLE) == self._current
                font = item.font(0)
                font.setBold(current)
                for column in range(self.COLUMNS):
                    item.setFont(column, font)
        self.tree.resizeColumnToContents(0)  # a bold "v12" deep in the tree is not elided

    def refresh(self) -> None:
        """Read the history again in the background; ``refreshed`` when it is shown. While a
        read runs, further requests make one more read after it (never two at once)."""
        if self._reading:
            self._reread = True
            return
        self._reading = True
        self._reread = False
        store, session_id = self._store, self._session_id
        self._background(lambda: read_history(store, session_id), self._on_read,
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
        self._view = view
        self._versions = {v.id: v for v in view.versions}
        known = {s["id"] for s in view.sessions}
        if self._session_id is not None and self._session_id not in known:
            self._session_id = None
        self._fill_sessions(view.sessions)

        self.tree.clear()
        items: dict[int, QTreeWidgetItem] = {}
        parents: dict[int, QTreeWidgetItem] = {}
        if self._session_id is None:
            for s in view.sessions:
                item = QTreeWidgetItem(self.tree)
                self._fill_session(item, s)
                parents[s["id"]] = item
        for v in view.versions:  # creation order: a parent always comes before its children
            holder = items.get(v.parent) if v.parent is not None else None
            if holder is None:
                holder = parents.get(v.session)
            item = QTreeWidgetItem(holder) if holder is not None else QTreeWidgetItem(self.tree)
            self._fill_version(item, v)
            items[v.id] = item
        self.tree.expandAll()
        self._mark_current()  # first: the current version's bold row is the wider one
        self._fit_columns()
        self.select_versions(*(vid for vid in selected if vid in items))
        self._update_actions()

    def _fit_columns(self) -> None:
        """Each column as wide as its text, the prompt's and the reply's up to a limit."""
        for column in range(self.COLUMNS):
            self.tree.resizeColumnToContents(column)
        for name, widest in (("prompt", PROMPT_COLUMN_MAX), ("reply", REPLY_COLUMN_MAX)):
            column = self.column(name)
            self.tree.setColumnWidth(column, min(self.tree.columnWidth(column), widest))

    def _reword_rows(self) -> None:
        """The rows and sessions shown, worded again from what was read (no store read: the
        items stay, with their selection, expansion and bold)."""
        sessions = {s["id"]: s for s in self._view.sessions}
        for item in self._items():
            ident = item.data(0, _ID_ROLE)
            if item.data(0, _KIND_ROLE) == "session" and ident in sessions:
                self._fill_session(item, sessions[ident])
            elif item.data(0, _KIND_ROLE) == "version" and ident in self._versions:
                self._fill_version(item, self._versions[ident])
        self._fit_columns()
        self._fill_sessions(self._view.sessions)

    def _versions_count(self, n: int) -> str:
        return self.tr("1 version") if n == 1 else self.tr("{0} versions").format(n)

    def _fill_session(self, item: QTreeWidgetItem, s: dict[str, Any]) -> None:
        """A session's row (shown when every session is): its name, document and size."""
        item.setText(0, self.tr("{0} (#{1})").format(s["name"], s["id"]))
        item.setToolTip(0, s["document"] or "")
        item.setText(self.column("finish"), self._versions_count(s["versions"]))
        item.setData(0, _KIND_ROLE, "session")
        item.setData(0, _ID_ROLE, s["id"])

    def _fill_version(self, item: QTreeWidgetItem, v: VersionInfo) -> None:
        item.setData(0, _KIND_ROLE, "version")
        item.setData(0, _ID_ROLE, v.id)
        item.setText(0, f"v{v.number}")
        item.setToolTip(0, self.tr("Version #{0} of session #{1}").format(v.id, v.session))
        item.setText(1, v.created.astimezone().strftime("%Y-%m-%d %H:%M"))
        item.setText(2, task_label(v.task))
        item.setText(3, strategy_label(v.strategy))
        prompt = v.prompt or (SUMMARIZE if v.task == "summarize" else "")
        item.setText(4, _first_line(prompt))  # summarize's own instruction when none was typed
        item.setToolTip(4, prompt)
        settings = self.tr("n_ctx {0} · max {1}").format(
            v.settings.get("n_ctx", "?"), v.settings.get("max_tokens", "?"))  # fmt: skip
        sampling = from_version(v.settings)
        if not sampling.greedy:  # two versions that differ only in sampling must not look alike
            settings += " · " + self.tr("temperature {0:g} · seed {1}").format(
                sampling.temperature, sampling.seed)  # fmt: skip
        item.setText(self.column("settings"), settings)
        item.setToolTip(self.column("settings"), _settings_tip(v.settings))
        run = self._view.last_runs.get(v.id)
        if run is not None and run["finish_reason"] == "cancelled":  # not a finished answer
            font = item.font(0)
            font.setItalic(True)
            for column in range(self.COLUMNS):
                item.setFont(column, font)
            item.setText(0, self.tr("v{0} (cancelled)").format(v.number))
            item.setToolTip(0, self.tr("Version #{0} of session #{1}: its run was cancelled, "
                                       "so its reply is cut short").format(v.id, v.session))
        if run is not None:
            item.setText(5, self.tr("{0} · {1:,} + {2:,} tokens").format(
                finish_label(run["finish_reason"]), run["prompt_tokens"],
                run["completion_tokens"]))  # fmt: skip
            reply = _reply(run)
            item.setText(self.column("reply"), _first_line(reply))
            item.setToolTip(self.column("reply"), reply[:TOOLTIP_CHARS])
        state = self._view.states.get(v.id)
        if state is not None:
            item.setText(6, self.tr("{0} instant").format(INSTANT))
            where = (
                self.tr("its own") if state.version == v.id
                else self.tr("that of the version it equals (#{0})").format(state.version)
            )  # fmt: skip
            item.setToolTip(6, self.tr(
                "A rollback resumes from a saved KV state ({0}): {1:,} prompt tokens, context "
                "{2:,}, {3} cache, {4:,.1f} MiB; the prompt is not evaluated again."
            ).format(where, state.prompt_tokens, state.n_ctx, state.cache_type,
                     state.state_bytes / 2**20))  # fmt: skip

    def _fill_sessions(self, sessions: list[dict[str, Any]]) -> None:
        combo = self.session_combo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem(self.tr("All sessions"), None)
        for s in sessions:
            combo.addItem(
                self.tr("{0} (#{1}, {2})").format(s["name"], s["id"],
                                                  self._versions_count(s["versions"])),
                s["id"],
            )  # fmt: skip
        index = combo.findData(self._session_id) if self._session_id is not None else 0
        combo.setCurrentIndex(max(0, index))
        combo.blockSignals(False)

    def _on_session_chosen(self, index: int) -> None:
        self.set_session(self.session_combo.itemData(index))

    # ----- selection -----

    def versions(self) -> list[VersionInfo]:
        """What is shown, in creation order."""
        return list(self._view.versions)

    def has_kv(self, version_id: int) -> bool:
        """Whether rolling back to this version resumes from a saved KV state."""
        return version_id in self._view.states

    def item_for(self, version_id: int) -> QTreeWidgetItem | None:
        for item in self._items():
            if item.data(0, _KIND_ROLE) == "version" and item.data(0, _ID_ROLE) == version_id:
                return item
        return None

    def select_versions(self, *version_ids: int) -> None:
        self.tree.clearSelection()
        for vid in version_ids:
            item = self.item_for(vid)
            if item is not None:
                self.tree.setCurrentItem(item, 0, QItemSelectionModel.SelectionFlag.NoUpdate)
                item.setSelected(True)

    def selected_versions(self) -> list[VersionInfo]:
        ids = [
            i.data(0, _ID_ROLE)
            for i in self.tree.selectedItems()
            if i.data(0, _KIND_ROLE) == "version"
        ]
        return sorted((self._versions[i] for i in ids if i in self._versions),
                      key=lambda v: (v.session, v.number))  # fmt: skip

    def _selected_sessions(self) -> list[int]:
        return [i.data(0, _ID_ROLE) for i in self.tree.selectedItems()
                if i.data(0, _KIND_ROLE) == "session"]  # fmt: skip

    def _items(self) -> list[QTreeWidgetItem]:
        out: list[QTreeWidgetItem] = []
        stack = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        while stack:
            item = stack.pop()
            if item is not None:
                out.append(item)
                stack.extend(item.child(i) for i in range(item.childCount()))
        return out

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Keys arriving in the versions (Tab, Ctrl+4) with nothing selected select the current
        version, else the first: Rollback, Open and Export act on it at once, as they would
        after a click."""
        if (watched is self.tree and event.type() == QEvent.Type.FocusIn
                and not self.tree.selectedItems()):  # fmt: skip
            target = next((i for i in self._items() if i.data(0, _KIND_ROLE) == "version"
                           and i.data(0, _ID_ROLE) == self._current), None)  # fmt: skip
            target = target or self.tree.topLevelItem(0)
            if target is not None:
                self.tree.setCurrentItem(target)  # selects it too
        return super().eventFilter(watched, event)

    def _on_double_clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        if item.data(0, _KIND_ROLE) == "version":
            self.open_requested.emit(int(item.data(0, _ID_ROLE)))

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
        write = not self._read_only
        self.open_button.setEnabled(one)
        self.diff_button.setEnabled(len(versions) == 2)
        self.rollback_button.setEnabled(write and one)
        self.branch_button.setEnabled(write and one)
        self.delete_button.setEnabled(write and bool(self.tree.selectedItems()))
        self.undo_button.setEnabled(write and self._undoable > 0)
        idle = self._operation.waiting is None  # one archive operation at a time
        self.import_button.setEnabled(write and idle)
        self.export_button.setEnabled(idle and self._export_target() is not None)

        instant = one and self.has_kv(versions[0].id)
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
            self.message.show_message(text.format(old.number, new.number), error=False)
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
        self.message.show_message(
            self.tr("v{0} branched from v{1}.").format(new.number, old.number), error=False
        )
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
        self.message.show_message(
            self.tr("Deleted {0} item(s); Undo Delete brings them back until you quit.")
            .format(done.undoable),
            error=False,
        )  # fmt: skip
        self._made(done)

    def undo_delete(self) -> None:
        if self._read_only or self._undoable <= 0:
            return
        store = self._store
        self._background(lambda: ops.undo_delete(store), self._on_undone)

    def _on_undone(self, done: Undone) -> None:
        if done.kind is None:
            self._undoable = 0
            self.message.show_message(self.tr("Nothing to undo."), error=False)
        else:
            self._undoable = max(0, self._undoable - 1)
            what = self.tr("version") if done.kind == "version" else self.tr("session")
            self.message.show_message(
                self.tr("The {0} #{1} is back.").format(what, done.item), error=False
            )
        self._made(done)

    def export_session(self) -> None:
        """Ask for a file, then write the session to it in the background."""
        session_id = self._export_target()
        if session_id is None:
            self._fail(self.tr("Choose a session to export (above, or select one of its "
                               "versions)."))  # fmt: skip
            return
        name = next((s["name"] for s in self._view.sessions if s["id"] == session_id), "session")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "session"
        chosen, _ = QFileDialog.getSaveFileName(
            self, self.tr("Export Session"), str(Path.home() / f"{safe}{SUFFIX}"),
            self.tr("ContextLens sessions (*.ctxlens)"),
        )  # fmt: skip
        if not chosen:
            return
        path = Path(chosen)
        if path.suffix.lower() != SUFFIX:
            path = path.with_name(path.name + SUFFIX)
        include_kv = self.include_kv.isChecked()
        store = self._store
        wait = self._operation.start(self.tr("Exporting the session to {0}…").format(path.name))

        def work() -> Exported | None:  # holds plain values only (see _background)
            return _unless_cancelled(lambda: export_session(
                store, session_id, path, include_kv=include_kv, progress=wait.report,
                cancel=wait.cancel))  # fmt: skip

        self._background(work, self._on_exported, path, wait=wait)

    def _on_exported(self, path: Path, done: Exported | None) -> None:
        if done is None:
            self._cancelled(
                self.tr("Export to {0} cancelled; no file was written and nothing changed.")
                .format(path.name)
            )  # fmt: skip
            return
        summary = done.summary
        self.message.show_message(
            self.tr("Exported {0} versions, {1} runs and {2} KV states to {3} "
                    "({4}).").format(
                summary.versions, summary.runs, summary.kv_states, summary.path,
                self.locale().formattedDataSize(summary.bytes)),
            error=False,
        )  # fmt: skip
        self.apply_changes(done)  # none: the history is as it was
        self.exported.emit(summary)

    def import_session(self) -> None:
        """Ask for a .ctxlens file, then add it as a new session in the background."""
        if self._read_only:
            return
        chosen, _ = QFileDialog.getOpenFileName(
            self, self.tr("Import Session"), str(Path.home()),
            self.tr("ContextLens sessions (*.ctxlens);;All files (*)"),
        )  # fmt: skip
        if chosen:
            self.import_file(Path(chosen))

    def import_file(self, path: Path) -> None:
        """Add the session exported in ``path`` as a new session, in the background (also for
        a .ctxlens file opened from the command line or a second launch)."""
        if self._read_only:
            self._fail(self.tr("This history is read-only: {0} cannot be imported.").format(
                path.name))  # fmt: skip
            return
        if self._operation.waiting is not None:
            self._fail(self.tr("An export or import is running: open {0} again when it has "
                               "finished.").format(path.name))  # fmt: skip
            return
        store = self._store
        wait = self._operation.start(self.tr("Importing {0}…").format(path.name))

        def work() -> Imported | None:  # holds plain values only (see _background)
            return _unless_cancelled(lambda: import_session(
                store, path, progress=wait.report, cancel=wait.cancel))  # fmt: skip

        self._background(work, self._on_imported, path, wait=wait)

    def _on_imported(self, path: Path, done: Imported | None) -> None:
        if done is None:
            self._cancelled(
                self.tr("Import of {0} cancelled; nothing changed in the history.")
                .format(path.name)
            )  # fmt: skip
            return
        summary = done.summary
        self.message.show_message(
            self.tr("Imported {0} as session #{1}: {2} versions, {3} runs, {4} KV states.")
            .format(path.name, summary.session_id, summary.versions, summary.runs,
                    summary.kv_states),
            error=False,
        )  # fmt: skip
        self._session_id = summary.session_id  # show what came in
        self._made(done)
        self.imported.emit(summary)

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

    def _cancelled(self, text: str) -> None:
        self.message.show_message(text, error=False)
        self.cancelled.emit(text)

    # ----- plumbing -----

    def _on_cancelling(self) -> None:
        self.message.show_message(self.tr("Cancelling…"), error=False)

    def _background(
        self,
        work: Callable[[], Any],
        handler: Callable[..., None],
        *args: Any,
        wait: Progress | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """``work()`` on a pool thread, then ``handler(*args, result)`` (a method of this panel)
        or the error (to ``on_error``, another method, else shown), if the panel still exists;
        ``wait``'s progress dialog ends first."""
        operation = self._operation
        run_for(self, work, handler, *args, on_error=on_error or self._fail,
                settle=None if wait is None else lambda: operation.end(wait))  # fmt: skip

    def _fail(self, message: str) -> None:
        self.message.show_message(message)
        self.failed.emit(message)
