"""A pool of servers in the window: addresses added in the Server box (remembered in the
settings), a refusal for servers of different context sizes said in the box in one sentence and
lifted by "Use the smallest context", and two real llama-servers serving one question, the first
killed (SIGKILL) while it generates: the reply finishes whole on the second, the gauges show the
first lost and the second running the job, the status bar says the loss once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QToolButton

from app.core.jobs.events import ServerLost, StrategyStarted, TokenBatch
from app.core.paths import sample_document
from app.services.job_engine import ServerSpec
from app.services.server_pool import SMALLEST_CONTEXT_HINT
from app.ui.compare_view import CompareView
from app.ui.engine_thread import PoolServer
from app.ui.main_window import MainWindow
from app.ui.server_box import MORE_URLS_KEY, URL_KEY, ServerBox
from app.ui.server_gauges import SAY_LOSS_MS, ServerRows
from tests.llama_servers import NO_LLAMA_SERVER, have_llama_server, llama_servers
from tests.ui.gui_thread import on_gui_thread
from tests.ui.windows import Windows

WAIT = 120_000
A, B = "http://127.0.0.1:8081", "http://127.0.0.1:8082"
QUESTION = "List every term this text defines, and explain each of them in a few sentences."
MAX_TOKENS = 160  # a reply long enough to be cut in the middle

# how a whole reply ends (a loop the sampling cuts is whole too); never "error" or "cancelled"
WHOLE = ("stop", "length", "repetition")

needs_llama_server = pytest.mark.skipif(not have_llama_server(), reason=NO_LLAMA_SERVER)


@pytest.fixture
def box(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ServerBox:
    monkeypatch.setattr("app.ui.server_box.api_key", lambda _url: None)  # no keyring here
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    widget = ServerBox(settings)
    qtbot.addWidget(widget)
    widget.show()
    return widget


def test_addresses_are_added_removed_remembered_and_asked_for_as_a_pool(
    qtbot, box: ServerBox, tmp_path: Path
) -> None:
    asked: list[tuple[object, ...]] = []
    box.pool_requested.connect(lambda *args: asked.append(args))
    single: list[object] = []
    box.connect_requested.connect(lambda spec, _local: single.append(spec))
    assert not box.smallest_context.isVisible()  # one address: nothing to choose
    qtbot.keyClicks(box.url, A)
    qtbot.mouseClick(box.more.add_button, Qt.MouseButton.LeftButton)
    second = box.more.fields[0]
    assert second.hasFocus() and second.objectName() == "serverAddress-2"
    qtbot.keyClicks(second, B)
    qtbot.mouseClick(box.more.add_button, Qt.MouseButton.LeftButton)
    qtbot.keyClicks(box.more.fields[1], "http://127.0.0.1:8083")
    assert box.smallest_context.isVisible()
    remove = box.more.findChild(QToolButton, "removeServer-3")
    assert remove is not None and remove.accessibleName() == "Remove"
    qtbot.mouseClick(remove, Qt.MouseButton.LeftButton)
    assert [f.text() for f in box.more.fields] == [B]
    box.smallest_context.setChecked(True)
    qtbot.mouseClick(box.connect_button, Qt.MouseButton.LeftButton)

    assert single == [] and len(asked) == 1
    specs, smallest, use_local = asked[0]
    assert [s.url for s in specs] == [A, B] and smallest is True and use_local is False
    assert all(isinstance(s, ServerSpec) for s in specs)
    assert not box.connect_button.isEnabled() and not box.more.add_button.isEnabled()
    assert not box.more.fields[0].isEnabled()  # fixed while connecting

    again = ServerBox(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    assert again.url.text() == A and again.more.texts() == [B]


def test_a_bad_or_repeated_address_is_one_sentence_and_nothing_is_asked(
    qtbot, box: ServerBox
) -> None:
    asked: list[object] = []
    box.pool_requested.connect(lambda *args: asked.append(args))
    box.url.setText(A)
    box.more.add("ftp://example.org")
    box.connect_button.click()
    assert box.message.text() == "'ftp://example.org' is not an http:// or https:// address"
    box.more.fields[0].setText(A + "/v1")  # the same server, written otherwise
    box.connect_button.click()
    assert box.message.text() == f"{A} is listed twice"
    assert asked == [] and box.connect_button.isEnabled()


def test_one_address_connects_as_it_always_did(qtbot, box: ServerBox, tmp_path: Path) -> None:
    single: list[object] = []
    box.connect_requested.connect(lambda spec, _local: single.append(spec))
    box.more.add("")  # a line left blank is no server
    box.url.setText(A)
    box.connect_button.click()
    assert [s.url for s in single] == [A]  # type: ignore[attr-defined]
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    assert settings.value(URL_KEY) == A and settings.value(MORE_URLS_KEY) is None


def test_rows_say_each_server_and_a_loss_once(qtbot) -> None:
    rows = ServerRows()
    qtbot.addWidget(rows)
    said: list[str] = []
    rows.said.connect(said.append)
    rows.set_servers([PoolServer(A, True, slots=2), PoolServer(B, True)])
    assert not rows.isHidden()
    rows.set_running(True)
    assert rows.texts() == [(A, "up", "running the job"), (B, "up", "idle")]
    rows.on_event(ServerLost(A, "connection refused", B))
    rows.set_servers([PoolServer(A, False, "connection refused"), PoolServer(B, True)])
    assert rows.texts() == [(A, "lost", f"its job runs again on {B} · connection refused"),
                            (B, "up", f"running the job, moved from {A}")]  # fmt: skip
    rows.set_running(False)
    assert rows.texts()[0][2] == f"its job ran again on {B} · connection refused"
    assert said == [f"Server {A} stopped answering: the job runs again from its start on {B}"]
    rows.set_servers([PoolServer(A, True), PoolServer(B, True)])
    assert said[-1] == f"Server {A} answers again" and len(said) == 2
    rows.set_running(True)  # the pool's copy comes first, the job's event a moment later
    rows.set_servers([PoolServer(A, True), PoolServer(B, False, "timed out")])
    rows.on_event(ServerLost(B, "timed out", A))
    qtbot.wait(SAY_LOSS_MS + 300)
    assert said[2:] == [f"Server {B} stopped answering: the job runs again from its start on {A}"]
    rows.set_running(False)
    rows.set_servers([PoolServer(A, False, "refused"), PoolServer(B, False, "timed out")])
    assert said[3:] == [f"Server {A} does not answer; it is probed again now and then"]
    rows.set_servers([])
    assert rows.isHidden() and rows.texts() == []


def test_a_compared_strategy_cut_by_a_lost_server_starts_its_pane_again(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.start(["head", "tail"])
    view.on_event(StrategyStarted("head"))
    view.on_event(TokenBatch("answer", "cut in the mid", 4, 1, ()))
    assert view.panes["head"].output.toPlainText() == "cut in the mid"
    view.on_event(ServerLost(A, "connection refused", B))
    view.on_event(StrategyStarted("head"))  # the strategy from its start, on the other server
    view.on_event(TokenBatch("answer", "whole", 1, 1, ()))
    assert view.panes["head"].output.toPlainText() == "whole"


# ----- two real llama-servers -----------------------------------------------------------------


@pytest.fixture
def doc_window(qtbot, make_window: Windows, tmp_path: Path) -> MainWindow:
    """A window with no model and 1,500 characters of the sample open."""
    doc = tmp_path / "lexicon.txt"
    text = sample_document().read_text(encoding="utf-8")
    doc.write_text(text[text.index("Verb Doubling") :][:1_500], encoding="utf-8")
    w = make_window(None, doc)
    w.show()
    qtbot.waitUntil(lambda: w.document_path == doc, timeout=WAIT)
    return w


def _type_pool(qtbot, w: MainWindow, urls: list[str]) -> ServerBox:
    """The addresses typed into the Server box, a line added for each after the first."""
    box = w.model_panel.server
    qtbot.keyClicks(box.url, urls[0])
    for url in urls[1:]:
        qtbot.mouseClick(box.more.add_button, Qt.MouseButton.LeftButton)
        qtbot.keyClicks(box.more.fields[-1], url)
    return box


@needs_llama_server
@pytest.mark.serial
def test_a_server_killed_mid_reply_moves_the_question_to_the_other(
    qtbot, doc_window: MainWindow, model_path: Path, tmp_path: Path
) -> None:
    w = doc_window
    with llama_servers(model_path, 2, tmp_path / "servers", parallel=1,
                       ctx_per_slot=2048) as (first, second):  # fmt: skip
        box = _type_pool(qtbot, w, [first.url, second.url])
        with qtbot.waitSignal(w.ready, timeout=WAIT):
            qtbot.mouseClick(box.connect_button, Qt.MouseButton.LeftButton)
        rows = w.gauges.servers
        assert box.connected and not rows.isHidden()
        assert [t[:2] for t in rows.texts()] == [(first.url, "up"), (second.url, "up")]
        assert box.details.text().startswith("A pool of 2 servers")
        assert w.model_panel.status.text().startswith("Connected to a pool of 2 servers")
        assert w.session.loaded is not None and w.session.loaded.n_ctx == 2048

        w.task_box.setCurrentIndex(w.task_box.findData("ask"))
        w.question.setText(QUESTION)
        w.max_tokens.setValue(MAX_TOKENS)
        said: list[str] = []
        w.statusBar().messageChanged.connect(said.append)
        seen: list[object] = []
        at_kill: list[list[tuple[str, str, str]]] = []

        def kill_while_it_generates(events: list[object]) -> None:
            seen.extend(events)
            if not at_kill and any(isinstance(ev, TokenBatch) for ev in events):
                at_kill.append(rows.texts())
                first.kill()

        w.job_events.connect(kill_while_it_generates)
        with qtbot.waitSignal(w.job_finished, timeout=WAIT) as done:
            w.run_job()

    assert at_kill and at_kill[0][0] == (first.url, "up", "running the job"), at_kill
    lost = [ev for ev in seen if isinstance(ev, ServerLost)]
    assert [(ev.url, ev.moved_to) for ev in lost] == [(first.url, second.url)]
    outcome = done.args[0]
    result = outcome.results[0]
    assert result.error is None and result.finish_reason in WHOLE
    assert result.text.strip() and outcome.engine.engine == second.url
    # the reply shown is the second server's whole, not the first's cut text before it
    assert w.buffers.output_text().strip() == result.text.strip()
    texts = rows.texts()
    assert texts[0][:2] == (first.url, "lost")
    assert texts[0][2].startswith(f"its job ran again on {second.url} · ")
    assert texts[1] == (second.url, "up", "idle")
    losses = [s for s in said if s.startswith(f"Server {first.url}")]
    assert losses == [f"Server {first.url} stopped answering: the job runs again from its "
                      f"start on {second.url}"], said  # fmt: skip
    with sqlite3.connect(tmp_path / "h.db") as db:
        recorded = db.execute("SELECT settings FROM prompt_versions").fetchall()
    assert [json.loads(s)["engine"] for (s,) in recorded] == [second.url]  # recorded once


@needs_llama_server
@pytest.mark.serial
def test_servers_of_different_context_sizes_are_refused_unless_the_smallest_is_asked_for(
    qtbot, doc_window: MainWindow, model_path: Path, tmp_path: Path
) -> None:
    w = doc_window
    with llama_servers(model_path, 1, tmp_path / "small", parallel=1, ctx_per_slot=1024) as (
            small,), llama_servers(model_path, 1, tmp_path / "large", parallel=1,
                                   ctx_per_slot=2048) as (large,):  # fmt: skip
        box = _type_pool(qtbot, w, [large.url, small.url])
        assert box.smallest_context.isVisible() and not box.smallest_context.isChecked()
        failed = on_gui_thread(w.engine.driver.server_failed, w)
        with qtbot.waitSignal(failed, timeout=WAIT):
            qtbot.mouseClick(box.connect_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: box.message.text() != "", timeout=5_000)
        message = box.message.text()
        assert message == (f"The servers' context sizes differ ({large.url}: 2,048, {small.url}: "
                           "1,024 tokens); use the smallest, 1,024, on all of them "
                           f"({SMALLEST_CONTEXT_HINT})")  # fmt: skip
        assert not box.connected and box.connect_button.isEnabled()

        qtbot.mouseClick(box.smallest_context, Qt.MouseButton.LeftButton)
        with qtbot.waitSignal(w.ready, timeout=WAIT):
            qtbot.mouseClick(box.connect_button, Qt.MouseButton.LeftButton)
        assert box.connected and w.session.loaded is not None
        assert w.session.loaded.n_ctx == 1024
        assert [t[:2] for t in w.gauges.servers.texts()] == [(large.url, "up"),
                                                             (small.url, "up")]  # fmt: skip
        assert w.session.document_tokens is not None  # counted by the pool's tokenizer
