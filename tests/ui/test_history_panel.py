"""The history panel on a real SQLite file, offscreen: tree, KV marker, diff, rollback, branch,
delete/undo, export/import through the panel with real progress and a Cancel that changes
nothing, plain-words errors, a read-only database."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QThreadPool
from PySide6.QtGui import QPalette
from PySide6.QtTest import QAbstractItemModelTester
from PySide6.QtWidgets import QFileDialog, QProgressBar, QPushButton

from app.core.documents import document_from_text
from app.core.engine.types import KVState
from app.core.jobs.tasks import JobResult, OutputSpan
from app.services import history as ops
from app.store.archive import export_session
from app.store.db import Database, open_database
from app.store.repository import Entry, Repository, VersionInfo
from app.ui import history_archive, operation_progress
from app.ui.history_columns import Column
from app.ui.history_panel import HistoryPanel
from tests.store.kv_states import engine_state
from tests.ui.history_cells import children as texts_beneath
from tests.ui.history_cells import row, text, tip, top_level

SHA = "m" * 64
WAIT = 10_000


@dataclasses.dataclass
class History:
    db: Database
    repo: Repository
    session: int
    v1: int  # has a KV state
    v2: int  # child of v1
    v3: int  # branched from v1 with another prompt


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    db = open_database(tmp_path / "h.db")
    repo = Repository(db)
    out = OutputSpan("summary", "Short.", ((0, 100),), 1, "stop")
    result = JobResult("summarize", "head", "stop", 512, prompt_tokens=400,
                       completion_tokens=20, outputs=[out])  # fmt: skip
    content = {"task": "summarize", "strategy": "head", "prompt": "Summarize.\nIn detail.",
               "model_path": "/m.gguf", "model_sha256": SHA,
               "settings": {"n_ctx": 512}}  # fmt: skip
    state = KVState((1, 2, 3, 4), engine_state(4), 512, "f16", "/m.gguf")  # as llama.cpp lays it
    doc = document_from_text("The harbour at dawn. " * 50, name="harbour.txt")
    [v1] = repo.record(doc, "harbour", [Entry(content, result, state, prompt_tokens=3)])
    session = repo.sessions()[0]["id"]
    [v2] = repo.record(doc, "harbour", [
        Entry({**content, "strategy": "tail"}, JobResult("summarize", "tail", "length", 512)),
    ], session=session, parent=v1)  # fmt: skip
    v3 = repo.branch(v1, prompt="Summarize in French.").id
    yield History(db, repo, session, v1, v2, v3)
    QThreadPool.globalInstance().waitForDone(WAIT)  # no read still running on a closed store
    repo.close()
    db.close()


def open_panel(qtbot, repo: Repository, session: int | None) -> HistoryPanel:
    """A panel showing ``session`` (None: all), once its history has been read."""
    panel = HistoryPanel(ops.History(repo))
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_session(session)
    return panel


def children(panel: HistoryPanel, version_id: int) -> list[str]:
    return texts_beneath(row(panel, version_id))


def click(qtbot, button: Any) -> None:
    assert button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_the_tree_follows_the_parents_and_marks_the_kv_state(qtbot, history: History) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    [top] = top_level(panel)
    assert text(top, Column.VERSION) == "v1"
    assert children(panel, history.v1) == ["v2", "v3"]
    v1, v2, v3 = (row(panel, v) for v in (history.v1, history.v2, history.v3))
    assert text(v1, Column.KV) == "⚡ instant" and "resumes" in tip(v1, Column.KV)
    assert text(v2, Column.KV) == text(v3, Column.KV) == ""
    assert text(v1, Column.PROMPT) == "Summarize."
    assert tip(v1, Column.PROMPT) == "Summarize.\nIn detail."
    assert text(v1, Column.FINISH) == "stop · 400 + 20 tokens"
    assert text(v2, Column.FINISH).startswith("length")
    assert (text(v1, Column.TASK), text(v2, Column.STRATEGY)) == ("summarize", "tail")
    assert panel.session_combo.currentData() == history.session

    # all sessions: the session is the top level, its versions beneath
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_session(None)
    [top] = top_level(panel)
    assert text(top, Column.VERSION) == f"harbour (#{history.session})"
    assert texts_beneath(top) == ["v1"] and children(panel, history.v1) == ["v2", "v3"]
    assert row(panel, history.v1).parent() == top


def test_diff_of_two_versions_in_a_tinted_monospace_dialog(qtbot, history: History) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    panel.select_versions(history.v3, history.v1)
    assert not panel.rollback_button.isEnabled()  # two selected: diff only
    with qtbot.waitSignal(panel.diffed, timeout=WAIT):
        click(qtbot, panel.diff_button)
    dialog = panel.diff_dialog
    assert dialog is not None and dialog.isVisible() and dialog.view.isReadOnly()
    lines = dialog.text().splitlines()
    assert lines[0] == "--- version 1" and lines[1] == "+++ version 3"
    assert "-Summarize." in lines and "-In detail." in lines and "+Summarize in French." in lines
    base = dialog.palette().color(QPalette.ColorRole.Base)
    plus, minus = lines.index("+Summarize in French."), lines.index("-Summarize.")
    assert dialog.line_background(plus) not in (base, dialog.line_background(minus))
    assert dialog.view.font().fixedPitch() or dialog.view.fontInfo().fixedPitch()
    dialog.close()


def test_rollback_asks_for_the_rollback_and_shows_what_it_made(qtbot, history: History) -> None:
    """The panel asks (the window rolls back through the workbench, the one rollback service)
    and redraws from the change report that comes back."""
    panel = open_panel(qtbot, history.repo, history.session)
    panel.select_versions(history.v1)
    assert "⚡" in panel.rollback_button.text()
    with qtbot.waitSignal(panel.rollback_requested, timeout=WAIT) as asked:
        click(qtbot, panel.rollback_button)
    assert asked.args == [history.v1, True]  # a saved KV state: resume from it
    on = ops.ResumeOn(model=Path("/m.gguf"), model_sha256=SHA, n_ctx=512, cache_type="f16")
    with qtbot.waitSignal(panel.rolled_back, timeout=WAIT) as blocker:
        panel.on_history_changed(ops.rollback(ops.History(history.repo), history.v1, resume_on=on))
    new = blocker.args[0]
    assert isinstance(new, VersionInfo) and new.parent == history.v1
    assert "instantly" in panel.message.text()
    qtbot.waitUntil(lambda: panel.item_for(new.id) is not None, timeout=WAIT)
    assert children(panel, history.v1) == ["v2", "v3", "v4"]
    assert text(row(panel, new.id), Column.KV) == "⚡ instant"  # a rollback copy shares the state
    assert [v.id for v in panel.selected_versions()] == [new.id]

    panel.select_versions(history.v2)
    assert "⚡" not in panel.rollback_button.text()
    with qtbot.waitSignal(panel.rollback_requested, timeout=WAIT) as asked:
        click(qtbot, panel.rollback_button)
    assert asked.args == [history.v2, False]
    with qtbot.waitSignal(panel.rolled_back, timeout=WAIT) as blocker:
        panel.on_history_changed(ops.rollback(ops.History(history.repo), history.v2))
    assert blocker.args[0].parent == history.v2
    assert "Run generates it again" in panel.message.text()


def test_branch_with_a_new_prompt(qtbot, history: History) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    panel.select_versions(history.v2)
    click(qtbot, panel.branch_button)
    dialog = panel.branch_dialog
    assert dialog is not None and dialog.prompt() == "Summarize.\nIn detail."
    dialog.editor.setPlainText("Shorter, please.")
    with qtbot.waitSignal(panel.branched, timeout=WAIT) as blocker:
        dialog.accept()
    new = blocker.args[0]
    assert (new.parent, new.prompt, new.strategy) == (history.v2, "Shorter, please.", "tail")
    qtbot.waitUntil(lambda: children(panel, history.v2) == ["v4"], timeout=WAIT)


def test_delete_and_undo(qtbot, history: History) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    assert not panel.undo_button.isEnabled()
    panel.select_versions(history.v3)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        click(qtbot, panel.delete_button)
    assert panel.item_for(history.v3) is None and children(panel, history.v1) == ["v2"]
    assert len(history.repo.history(history.session)) == 2
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        click(qtbot, panel.undo_button)
    assert children(panel, history.v1) == ["v2", "v3"]
    assert [v.id for v in panel.selected_versions()] == [history.v3]
    assert not panel.undo_button.isEnabled()


def test_an_error_from_the_store_is_one_plain_sentence(qtbot, history: History) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    panel.select_versions(history.v1, history.v2)
    history.repo.delete_version(history.v2)  # gone behind the panel's back
    with qtbot.waitSignal(panel.failed, timeout=WAIT) as blocker:
        click(qtbot, panel.diff_button)
    assert blocker.args[0] == f"there is no version {history.v2}"
    assert panel.message.text() == blocker.args[0]


def test_export_then_import_through_the_panel(
    qtbot, history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    target = tmp_path / "harbour"  # the suffix is added
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    panel.include_kv.setChecked(True)
    with qtbot.waitSignal(panel.exported, timeout=WAIT) as blocker:
        click(qtbot, panel.export_button)
    summary = blocker.args[0]
    exported = tmp_path / "harbour.ctxlens"
    assert summary.path == exported and exported.is_file()
    assert (summary.versions, summary.runs, summary.kv_states) == (3, 2, 1)
    assert "Exported 3 versions" in panel.message.text()

    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(exported), ""))
    with qtbot.waitSignal(panel.imported, timeout=WAIT) as blocker:
        click(qtbot, panel.import_button)
    new_session = blocker.args[0].session_id
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        pass
    assert new_session != history.session and panel.session_id() == new_session
    assert panel.session_combo.currentData() == new_session
    assert len(panel.versions()) == 3 and {v.session for v in panel.versions()} == {new_session}
    assert [v.number for v in panel.versions() if panel.has_kv(v.id)] == [1]  # the state came too
    assert len(history.repo.sessions()) == 2


def test_a_truncated_file_is_refused_and_changes_nothing(
    qtbot, history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    good = tmp_path / "good.ctxlens"
    export_session(history.repo, history.session, good)
    bad = tmp_path / "bad.ctxlens"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    panel = open_panel(qtbot, history.repo, None)
    before = len(history.repo.history())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(bad), ""))
    with qtbot.waitSignal(panel.failed, timeout=WAIT) as blocker:
        click(qtbot, panel.import_button)
    assert blocker.args[0] == "bad.ctxlens is not a ContextLens export (damaged or not a zip file)."
    assert panel.message.text() == blocker.args[0]
    assert len(history.repo.history()) == before and len(history.repo.sessions()) == 1


class Held:
    """Wraps an archive function so that it stops at its first report between 0 and the total
    until released, and records the totals it reports."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.started = threading.Event()
        self.release = threading.Event()
        self.totals: set[int] = set()

    def __call__(self, *args: Any, progress: Any, cancel: Any, **kwargs: Any) -> Any:
        def hold(done: int, total: int) -> None:
            self.totals.add(total)
            progress(done, total)
            if 0 < done < total and not self.started.is_set():
                self.started.set()
                self.release.wait(WAIT / 1000)

        return self.real(*args, progress=hold, cancel=cancel, **kwargs)


def cancel_button(panel: HistoryPanel) -> QPushButton:
    [button] = panel.progress.findChildren(QPushButton)
    return button


def hold_mid_way(qtbot, panel: HistoryPanel, held: Held, button: QPushButton) -> None:
    """Start the operation and wait until the dialog shows it part done."""
    click(qtbot, button)
    qtbot.waitUntil(held.started.is_set, timeout=WAIT)
    qtbot.waitUntil(panel.progress.isVisible, timeout=WAIT)  # after PROGRESS_DELAY_MS
    [total] = held.totals
    qtbot.waitUntil(lambda: 0 < panel.progress.value() < total, timeout=WAIT)
    assert (panel.progress.minimum(), panel.progress.maximum()) == (0, total)


def test_cancel_an_export_in_the_dialog_writes_nothing(
    qtbot, history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    held = Held(history_archive.export_session)
    monkeypatch.setattr(history_archive, "export_session", held)
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "held.ctxlens"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    panel.include_kv.setChecked(True)
    hold_mid_way(qtbot, panel, held, panel.export_button)
    button = cancel_button(panel)
    assert button.text() == "Cancel"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert panel.progress.isHidden()
    assert not panel.export_button.isEnabled()  # until the export has stopped
    with qtbot.waitSignal(panel.cancelled, timeout=WAIT) as blocker:
        held.release.set()
    message = panel.message.text()
    assert message == blocker.args[0]
    assert "held.ctxlens cancelled" in message and "nothing changed" in message
    assert list(folder.iterdir()) == []  # no file, no temporary file
    assert panel.export_button.isEnabled() and panel.import_button.isEnabled()
    assert panel.progress.isHidden()


def test_cancel_an_import_in_the_dialog_adds_nothing(
    qtbot, history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    source = tmp_path / "in.ctxlens"
    export_session(history.repo, history.session, source, include_kv=True)
    panel = open_panel(qtbot, history.repo, history.session)
    held = Held(history_archive.import_session)
    monkeypatch.setattr(history_archive, "import_session", held)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(source), ""))
    sessions, versions = history.repo.sessions(), history.repo.history()
    hold_mid_way(qtbot, panel, held, panel.import_button)
    qtbot.mouseClick(cancel_button(panel), Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(panel.cancelled, timeout=WAIT):
        held.release.set()
    assert "in.ctxlens cancelled" in panel.message.text()
    assert "nothing changed" in panel.message.text()
    assert history.repo.sessions() == sessions and history.repo.history() == versions
    assert panel.import_button.isEnabled() and panel.session_id() == history.session


def test_a_finished_export_fills_the_progress_dialog(
    qtbot, history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    totals: list[int] = []
    real_export = history_archive.export_session

    def recorded(*args: Any, progress: Any, **kwargs: Any) -> Any:
        def report(done: int, total: int) -> None:
            totals.append(total)
            progress(done, total)

        return real_export(*args, progress=report, **kwargs)

    monkeypatch.setattr(history_archive, "export_session", recorded)
    target = tmp_path / "full.ctxlens"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    bar = panel.progress.findChild(QProgressBar)
    seen: list[tuple[int, int]] = []
    bar.valueChanged.connect(lambda value: seen.append((value, bar.maximum())))
    panel.include_kv.setChecked(True)
    with qtbot.waitSignal(panel.exported, timeout=WAIT):
        click(qtbot, panel.export_button)
    assert target.is_file() and "Exported 3 versions" in panel.message.text()
    total = totals[-1]
    assert total > 0 and seen[-1] == (total, total)  # the dialog's range was 0..total, and full
    values = [v for v, _ in seen]
    assert values == sorted(values)
    assert panel.progress.isHidden() and panel.export_button.isEnabled()


def test_huge_totals_are_scaled_to_fit_the_progress_bar() -> None:
    value, maximum = operation_progress.bar_values(3 * 2**40, 4 * 2**40)
    assert maximum <= 2**31 - 1 and value * 4 == maximum * 3
    assert operation_progress.bar_values(5, 10) == (5, 10)  # small totals are exact bytes


def test_a_read_only_database_disables_the_write_actions(qtbot, history: History) -> None:
    read_only = Repository(dataclasses.replace(history.db, read_only=True))
    try:
        panel = open_panel(qtbot, read_only, history.session)
        assert "read-only" in panel.message.text()
        panel.select_versions(history.v1)
        for button in (panel.rollback_button, panel.branch_button, panel.delete_button,
                       panel.undo_button, panel.import_button):  # fmt: skip
            assert not button.isEnabled()
            assert "read-only" in button.toolTip()
        assert panel.export_button.isEnabled()  # reading is fine
        panel.select_versions(history.v1, history.v2)
        assert panel.diff_button.isEnabled()
        panel.delete_selected()  # the keyboard path is refused too
        assert len(history.repo.history(history.session)) == 3
    finally:
        read_only.close()


def test_the_keys_arriving_in_the_versions_select_the_current_one(qtbot, history: History) -> None:
    panel = open_panel(qtbot, history.repo, history.session)
    panel.set_current(None, history.v2)  # the version the next Run branches from
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.selected_versions() == []
    panel.tree.setFocus(Qt.FocusReason.ShortcutFocusReason)  # as Ctrl+4 or Tab does
    qtbot.waitUntil(lambda: [v.id for v in panel.selected_versions()] == [history.v2],
                    timeout=WAIT)  # fmt: skip
    assert panel.rollback_button.isEnabled()  # Alt+K rolls it back at once


def test_a_summary_without_a_typed_prompt_shows_the_instruction_it_ran_with(
    qtbot, history: History
) -> None:
    untyped = history.repo.branch(history.v1, prompt="")
    panel = open_panel(qtbot, history.repo, history.session)
    assert text(row(panel, untyped.id), Column.PROMPT) == "Summarize the document."


def test_the_history_is_read_as_typed_rows(history: History) -> None:
    view = ops.read_history(ops.History(history.repo), history.session)
    [session] = view.sessions
    assert isinstance(session, ops.SessionRow)
    assert (session.id, session.name, session.versions) == (history.session, "harbour", 3)
    assert session.document_name == "harbour.txt" and session.created.tzinfo is not None
    first, second = view.last_runs[history.v1], view.last_runs[history.v2]
    assert isinstance(first, ops.LastRun) and history.v3 not in view.last_runs  # never ran
    assert (first.finish_reason, first.prompt_tokens, first.completion_tokens) == ("stop", 400, 20)
    assert first.reply == "Short." and first.error is None and not first.cancelled
    assert second.finish_reason == "length" and second.reply == ""  # no output


def test_the_tree_model_passes_qt_s_checks_through_refreshes(qtbot, history: History) -> None:
    """Qt's model tester, stopping the process at the first inconsistency, watches the model
    from a reading of every session through a reading of one, a new current version, a
    rollback's new row, a deletion, a language change and back to every session."""
    panel = open_panel(qtbot, history.repo, None)
    mode = QAbstractItemModelTester.FailureReportingMode.Fatal
    tester = QAbstractItemModelTester(panel.model, mode, panel)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_session(history.session)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_current(history.session, history.v2)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.on_history_changed(ops.rollback(ops.History(history.repo), history.v1))
    assert children(panel, history.v1) == ["v2", "v3", "v4"]
    panel.set_current(None, history.v3)  # drawn again, not read again
    panel.select_versions(history.v2)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        click(qtbot, panel.delete_button)
    assert panel.item_for(history.v2) is None
    panel.retranslate()  # every row drawn again
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_session(None)
    [top] = top_level(panel)
    assert text(top, Column.FINISH) == "3 versions"
    assert tester.failureReportingMode() == mode  # it watched all along
