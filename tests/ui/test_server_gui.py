"""The window on a real server (llama-cpp-python's own, on loopback): connect from the model panel,
plan with the server's counts, run a job, the gauges saying the server reports no KV figures,
the history naming the server; a bad address and an unreachable one in one sentence; an API key
kept in the keyring only; after a crash, the last session brought back on the same server."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from PySide6.QtWidgets import QMessageBox

from app.core.engine.types import LoadSettings
from app.core.paths import sample_document
from app.services.jobs import JobOutcome, JobRun, JobSpec
from app.ui.engine_thread import EngineDriver, JobRequest
from app.ui.main_window import MainWindow
from app.ui.server_box import URL_KEY
from app.ui.session_guard import LastSession, SessionGuard, SessionLock
from tests.remote_server import ALIAS, SERVER_N_CTX, Server, free_port
from tests.ui.gui_thread import on_gui_thread
from tests.ui.session_locks import answer, crash_with
from tests.ui.windows import Windows

N_CTX = SERVER_N_CTX  # the shared server's (tests/conftest.py: server)
WAIT = 120_000


class MemoryKeyring(KeyringBackend):
    """A keyring in memory, standing in for the system's (there is none offscreen)."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.entries.pop((service, username), None)


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    before = keyring.get_keyring()
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    yield ring
    keyring.set_keyring(before)


@pytest.fixture
def doc_window(qtbot, make_window: Windows, tmp_path: Path) -> MainWindow:
    """A window with no model and 6,000 characters of the sample open; replies of 16 tokens."""
    doc = tmp_path / "lexicon.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:6_000], encoding="utf-8")
    w = make_window(None, doc)
    w.show()
    qtbot.waitUntil(lambda: w.document_path == doc, timeout=WAIT)
    w.max_tokens.setValue(16)
    return w


def _connect(qtbot, w: MainWindow, url: str, *, n_ctx: int = N_CTX) -> None:
    box = w.model_panel.server
    box.url.setText(url)
    box.n_ctx.setValue(n_ctx)
    with qtbot.waitSignal(w.ready, timeout=WAIT):
        box.connect_button.click()


def test_a_job_runs_on_the_server_and_the_window_says_what_it_reports(
    qtbot, doc_window: MainWindow, server: Server, tmp_path: Path
) -> None:
    _connect(qtbot, doc_window, server.url)
    box = doc_window.model_panel.server
    assert box.connected and not box.connect_button.isEnabled()
    details = box.details.text()
    assert f"llama-cpp-python at {server.url}, model {ALIAS}" in details
    assert "KV figures: not reported by this server" in details
    assert "Token counts: the server (/extras/tokenize)" in details
    assert doc_window.model_panel.status.text().startswith(f"Connected to {server.url}")
    assert doc_window.engine.driver.server is not None and doc_window.session.loaded.n_ctx == N_CTX
    # counted by the server: the document overflows
    assert doc_window.session.document_tokens > N_CTX

    with qtbot.waitSignal(doc_window.plan_shown, timeout=WAIT) as shown:
        doc_window.strategy_box.setCurrentIndex(doc_window.strategy_box.findData("head"))
    with qtbot.waitSignal(doc_window.job_finished, timeout=300_000) as done:
        doc_window.run_job()
    outcome = done.args[0]
    result = outcome.results[0]
    assert result.error is None and result.outputs and result.outputs[0].text
    plan = shown.args[0]  # what ran is what the window showed
    assert (result.plan["budget"], result.plan["kept_tokens"]) == (plan.budget, plan.kept_tokens)
    assert outcome.states == {}  # a server keeps no KV state for an instant rollback
    qtbot.waitUntil(lambda: "KV not reported by this server" in doc_window.gauges.kv_text.text(),
                    timeout=5_000)  # fmt: skip
    with sqlite3.connect(tmp_path / "h.db") as db:
        model, settings = db.execute("SELECT model_path, settings FROM prompt_versions").fetchone()
    assert model == f"{server.url} {ALIAS}" and json.loads(settings)["engine"] == server.url

    assert box.disconnect_button.isEnabled()
    unloaded = on_gui_thread(doc_window.engine.driver.unloaded, doc_window)
    with qtbot.waitSignal(unloaded, timeout=WAIT):
        box.disconnect_button.click()
    qtbot.waitUntil(lambda: not box.connected, timeout=5_000)
    assert doc_window.engine.driver.server is None and box.connect_button.isEnabled()


def test_loading_a_model_here_ends_the_server_connection(
    qtbot, doc_window: MainWindow, server: Server, model_path: Path
) -> None:
    _connect(qtbot, doc_window, server.url)
    with qtbot.waitSignal(doc_window.ready, timeout=WAIT):
        doc_window.load_model(model_path, LoadSettings(n_ctx=512))
    assert doc_window.engine.driver.server is None and not doc_window.model_panel.server.connected
    loaded = doc_window.session.loaded
    assert loaded is not None and loaded.path == str(model_path)
    assert doc_window.engine.driver.engine_pid is not None  # the local engine runs the jobs again


def test_the_audit_is_refused_on_a_server_with_the_reason(qtbot, doc_window: MainWindow,
                                                          server: Server) -> None:  # fmt: skip
    _connect(qtbot, doc_window, server.url)
    failed_here = on_gui_thread(doc_window.engine.driver.failed, doc_window)
    with qtbot.waitSignal(failed_here, timeout=WAIT) as failed:
        doc_window.engine.request_job.emit(JobRequest(JobSpec("summarize", ("head",), audit=True),
                                                  "text"))
    assert failed.args[0][0].startswith("The audit needs the local engine: the faithfulness audit")


def test_bad_and_unreachable_addresses_are_one_sentence(qtbot, doc_window: MainWindow) -> None:
    box = doc_window.model_panel.server
    box.url.setText("ftp://example.org")
    box.connect_button.click()
    assert box.message.text() == "'ftp://example.org' is not an http:// or https:// address"
    port = free_port()
    box.url.setText(f"127.0.0.1:{port}")
    failed = on_gui_thread(doc_window.engine.driver.server_failed, doc_window)
    with qtbot.waitSignal(failed, timeout=WAIT):
        box.connect_button.click()
    qtbot.waitUntil(lambda: box.message.text() != "", timeout=5_000)
    assert box.message.text().startswith(f"cannot reach the server at http://127.0.0.1:{port}")
    assert not box.connected and box.connect_button.isEnabled()


def test_an_api_key_goes_to_the_keyring_and_never_to_the_settings(
    qtbot, doc_window: MainWindow, server: Server, memory_keyring: MemoryKeyring, tmp_path: Path
) -> None:
    box = doc_window.model_panel.server
    box.key.setText("sk-window-91f2")
    box.remember.setChecked(True)
    _connect(qtbot, doc_window, server.url)  # this server takes any key
    assert memory_keyring.entries == {("ContextLens", server.url): "sk-window-91f2"}
    assert box.key.text() == "" and box.key.placeholderText() == "kept in the system keyring"
    doc_window.settings.sync()
    stored = (tmp_path / "settings.ini").read_text(encoding="utf-8")
    assert doc_window.settings.value(URL_KEY) == server.url and "sk-window-91f2" not in stored


def test_after_a_crash_the_last_session_connects_to_its_server_again(
    qtbot, doc_window: MainWindow, server: Server, tmp_path: Path
) -> None:
    lock_path = tmp_path / "session.lock"
    first = SessionGuard(doc_window.settings, SessionLock(lock_path))
    assert first.start()
    first.attach(doc_window)
    _connect(qtbot, doc_window, server.url)
    with qtbot.waitSignal(doc_window.plan_shown, timeout=WAIT):
        doc_window.strategy_box.setCurrentIndex(doc_window.strategy_box.findData("tail"))
    saved = LastSession.read(doc_window.settings)
    assert (saved.server, saved.server_model, saved.n_ctx) == (server.url, "", N_CTX)
    assert saved.model == "" and saved.document == str(doc_window.document_path)
    first.lock.release()
    crash_with(lock_path)  # the window's run was killed: its lock stays behind

    guard = SessionGuard(doc_window.settings, SessionLock(lock_path))
    assert guard.start() and guard.unclean and guard.previous == saved
    after = MainWindow(None, None, db_path=tmp_path / "h2.db", settings=doc_window.settings)
    qtbot.addWidget(after)
    after.show()
    offer = guard.attach(after)
    assert offer is not None and f"Server: {server.url}" in offer.informativeText()
    answer(offer, QMessageBox.ButtonRole.AcceptRole).click()
    box = after.model_panel.server
    qtbot.waitUntil(lambda: box.connected and after.document_path == doc_window.document_path
                    and not after.waiting_for, timeout=WAIT)  # fmt: skip
    assert after.engine.driver.server is not None and after.engine.driver.server.url == server.url
    assert after.session.loaded is not None and after.session.loaded.n_ctx == N_CTX
    assert after.strategy_box.currentData() == "tail" and after.model_path is None
    after.close()
    assert not lock_path.exists()


def test_a_job_that_ends_on_an_unexpected_error_still_ends(qapp) -> None:
    """Review round 3, row 5: a server reply of an unexpected shape raised AttributeError or
    TypeError out of the engine, which the engine thread did not catch: ``job_done`` never
    came and the window waited for ever. Now the error is said and the job ends."""
    driver = EngineDriver()
    said: list[str] = []
    done: list[object] = []
    driver.failed.connect(said.append)
    driver.job_done.connect(done.append)
    outcome = JobOutcome(spec=None)  # type: ignore[arg-type]

    def start() -> JobRun:
        raise AttributeError("'int' object has no attribute 'get'")

    driver._execute(start, outcome)
    assert done == [outcome]
    assert said == ["The job stopped on an unexpected error (AttributeError: 'int' object has no "
                    "attribute 'get'); the log has the details."]  # fmt: skip
    driver.session.close()
