"""The session lock: left behind by a dead process it means an unclean exit, held by a live one
it does not; a clean close removes it; after a crash the window offers the last session back
and restoring re-opens it (real windows, the real default model, real lock files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QThreadPool
from PySide6.QtWidgets import QMessageBox

from app.core.documents import document_from_text
from app.core.jobs.tasks import JobResult
from app.core.paths import project_root, sample_document
from app.store.repository import Entry
from app.ui.main import parse_args, start_options
from app.ui.main_window import MainWindow
from app.ui.session_guard import (
    FIRST_START,
    LastSession,
    SessionGuard,
    SessionLock,
    restore,
    restore_choices,
    state_dir,
)
from tests.ui.session_locks import answer, crash_with, lock_holder

N_CTX = 512
WAIT = 120_000


def test_the_state_folder_follows_contextlens_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTLENS_STATE", str(tmp_path / "s"))
    assert state_dir() == tmp_path / "s"
    monkeypatch.delenv("CONTEXTLENS_STATE")
    assert project_root() not in state_dir().parents  # never beside the code


def test_a_lock_left_by_a_dead_process_is_an_unclean_exit(qapp, tmp_path: Path) -> None:
    path = tmp_path / "state" / "session.lock"
    first = SessionLock(path)
    assert first.acquire() and not first.unclean  # nothing before: a clean start
    first.release()
    assert not path.exists()
    crash_with(path)
    after_crash = SessionLock(path)
    assert after_crash.acquire() and after_crash.unclean and after_crash.held
    after_crash.release()


def test_a_lock_held_by_a_live_process_is_not_an_unclean_exit(qapp, tmp_path: Path) -> None:
    path = tmp_path / "session.lock"
    live = lock_holder(path, "live")
    try:
        second = SessionLock(path)
        assert not second.acquire() and not second.unclean and not second.held
    finally:
        assert live.stdin is not None
        live.stdin.close()
        assert live.wait(timeout=60) == 0  # it let go as it ended
    after = SessionLock(path)
    assert after.acquire() and not after.unclean
    after.release()


def test_a_lock_file_cut_short_counts_as_unclean(qapp, tmp_path: Path) -> None:
    path = tmp_path / "session.lock"
    path.write_bytes(b"")  # a power cut while the lock was being written
    lock = SessionLock(path)
    assert lock.acquire() and lock.unclean
    lock.release()


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "lexicon.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:6_000], encoding="utf-8")
    return path


def _window(qtbot, tmp_path: Path, settings: QSettings, model: Path | None = None,
            document: Path | None = None) -> MainWindow:  # fmt: skip
    w = MainWindow(model, document, n_ctx=N_CTX, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def windows() -> Iterator[list[MainWindow]]:
    made: list[MainWindow] = []
    yield made
    for w in made:
        w.close()
    QThreadPool.globalInstance().waitForDone(WAIT)


def _choose(box, value: str) -> None:
    box.setCurrentIndex(box.findData(value))


def test_a_clean_close_removes_the_lock_and_keeps_the_last_session(
    qtbot, tmp_path: Path, settings: QSettings, doc: Path
) -> None:
    lock = SessionLock(tmp_path / "session.lock")
    guard = SessionGuard(settings, lock)
    assert guard.start() and not guard.unclean
    w = _window(qtbot, tmp_path, settings)
    assert guard.attach(w) is None  # a clean start offers nothing
    with qtbot.waitSignal(w.plan_shown, timeout=WAIT):
        w.open_document(doc)
    _choose(w.strategy_box, "middle")
    w.max_tokens.setValue(321)
    assert lock.path.exists()
    w.close()
    assert not lock.path.exists() and not lock.held
    last = LastSession.read(settings)
    assert (last.document, last.strategy, last.max_tokens) == (str(doc), "middle", 321)
    assert last.task == "summarize" and last.model == ""


def test_after_a_crash_restore_reopens_the_document_model_and_choices(
    qtbot, tmp_path: Path, settings: QSettings, doc: Path, model_path: Path
) -> None:
    lock_path = tmp_path / "session.lock"
    first = SessionGuard(settings, SessionLock(lock_path))
    assert first.start()
    before = _window(qtbot, tmp_path, settings, model_path, doc)
    first.attach(before)
    with qtbot.waitSignal(before.ready, timeout=WAIT):
        pass
    _choose(before.task_box, "ask")
    before.question.setText("Which word comes first?")
    _choose(before.strategy_box, "tail")
    before.max_tokens.setValue(77)
    assert before.store is not None and before.history is not None
    text = document_from_text("The harbour at dawn. " * 20, name="harbour.txt")
    content = {"task": "ask", "strategy": "tail", "prompt": "Which?", "model_path": "/m",
               "model_sha256": "m" * 64, "settings": {"n_ctx": N_CTX}}  # fmt: skip
    repo = before.store.repo
    repo.record(text, "harbour", [Entry(content, JobResult("ask", "tail", "stop", 512))])
    session = repo.sessions()[0]["id"]
    with qtbot.waitSignal(before.history.refreshed, timeout=WAIT):
        before.history.set_session(session)
    saved = LastSession.read(settings)
    before.close()
    crash_with(lock_path)  # the next run finds the lock of a process that is gone

    guard = SessionGuard(settings, SessionLock(lock_path))
    assert guard.start() and guard.unclean and guard.previous == saved
    after = _window(qtbot, tmp_path, settings)
    box = guard.attach(after)
    assert box is not None and box.isVisible() and str(doc) in box.informativeText()
    answer(box, QMessageBox.ButtonRole.AcceptRole).click()
    qtbot.waitUntil(lambda: after.document_path == doc and after.model_path == model_path
                    and not after.waiting_for, timeout=WAIT)  # fmt: skip
    assert after.model_panel.n_ctx.value() == N_CTX
    assert after.task_box.currentData() == "ask" and after.strategy_box.currentData() == "tail"
    assert after.question.text() == "Which word comes first?" and after.max_tokens.value() == 77
    assert after.history is not None and after.history.session_id() == session
    after.close()
    assert not lock_path.exists()
    QThreadPool.globalInstance().waitForDone(WAIT)


def test_start_fresh_leaves_the_last_session_behind(
    qtbot, tmp_path: Path, settings: QSettings, doc: Path, windows: list[MainWindow]
) -> None:
    LastSession(document=str(doc), strategy="tail", max_tokens=99).write(settings)
    lock_path = tmp_path / "session.lock"
    crash_with(lock_path)
    guard = SessionGuard(settings, SessionLock(lock_path))
    assert guard.start() and guard.unclean
    w = _window(qtbot, tmp_path, settings)
    windows.append(w)
    box = guard.attach(w)
    assert box is not None
    answer(box, QMessageBox.ButtonRole.RejectRole).click()
    assert w.document_path is None and w.strategy_box.currentData() == "head"
    last = LastSession.read(settings)  # from now on the last session is this one
    assert last.document == "" and last.strategy == "head" and last.max_tokens == 256


def test_a_second_window_with_the_lock_taken_tracks_nothing(
    qtbot, tmp_path: Path, settings: QSettings, windows: list[MainWindow]
) -> None:
    lock_path = tmp_path / "session.lock"
    live = lock_holder(lock_path, "live")
    try:
        guard = SessionGuard(settings, SessionLock(lock_path))
        assert not guard.start()
        w = _window(qtbot, tmp_path, settings)
        windows.append(w)
        assert guard.attach(w) is None
        _choose(w.strategy_box, "tail")
        assert LastSession.read(settings) == LastSession()  # the first window's to keep
    finally:
        assert live.stdin is not None
        live.stdin.close()
        live.wait(timeout=60)
    assert not lock_path.exists()


def test_restoring_files_that_are_gone_says_so_and_changes_nothing_else(
    qtbot, tmp_path: Path, settings: QSettings, windows: list[MainWindow]
) -> None:
    w = _window(qtbot, tmp_path, settings)
    windows.append(w)
    gone = LastSession(document=str(tmp_path / "moved.txt"), model=str(tmp_path / "old.gguf"),
                       n_ctx=N_CTX, strategy="no-such-strategy")  # fmt: skip
    assert restore(w, gone) == [
        f"The model {tmp_path / 'old.gguf'} is no longer there.",
        f"The document {tmp_path / 'moved.txt'} is no longer there.",
    ]
    assert w.document_path is None and w.model_path is None and not w.waiting_for
    assert w.strategy_box.currentData() == "head"


def test_every_start_opens_on_the_last_choices_and_context(
    qtbot, tmp_path: Path, settings: QSettings, model_path: Path, windows: list[MainWindow]
) -> None:
    """A clean restart came back on summarize, head, no question and the default context: the
    last session was read only after a crash. A first start opens on ask under retrieve (what
    the guide recommends); later ones on the last choices and the context the model was loaded
    at, unless the command line names another."""
    lock_path = tmp_path / "session.lock"
    first = SessionGuard(settings, SessionLock(lock_path))
    assert first.start() and first.choices() == FIRST_START
    assert first.context(model_path) is None  # nothing loaded yet: the model's default
    w = _window(qtbot, tmp_path, settings, model_path)  # loads it at N_CTX
    windows.append(w)
    restore_choices(w, first.choices())
    assert (w.task_box.currentData(), w.strategy_box.currentData()) == ("ask", "retrieve")
    first.attach(w)
    qtbot.waitUntil(lambda: w.session.loaded is not None, timeout=WAIT)
    _choose(w.task_box, "extract")
    w.question.setText("every date")
    _choose(w.strategy_box, "tail")
    w.max_tokens.setValue(77)
    w.model_panel.n_ctx.setValue(N_CTX * 2)  # typed but not loaded: the loaded one is kept
    w.close()

    again = SessionGuard(settings, SessionLock(lock_path))
    assert again.start() and not again.unclean
    assert again.context(model_path) == N_CTX
    assert again.context(tmp_path / "another.gguf") is None  # another model: its own default
    assert start_options(parse_args([]), again.context) == (model_path, N_CTX)
    assert start_options(parse_args(["--n-ctx", "1024"]), again.context) == (model_path, 1024)
    after = _window(qtbot, tmp_path, settings)
    windows.append(after)
    restore_choices(after, again.choices())
    assert (after.task_box.currentData(), after.strategy_box.currentData()) == ("extract", "tail")
    assert after.question.text() == "every date" and after.max_tokens.value() == 77
    again.lock.release()
