"""Opening expensive documents in the window (issue 21, finding 4): Cancel ends the read at
once (its child process is killed), a refused file is one sentence, and the window carries on.
The log says a refusal as that sentence, without a traceback; a bug keeps its traceback
(issue 49, row 13)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psutil
import pytest

from app.ui.main_window import MainWindow

DATA = Path(__file__).resolve().parents[1] / "data"


def readers() -> list[psutil.Process]:
    """The window's own document readers: direct children only, since the planning child reads
    the same file through a reader of its own (a grandchild) that is not the window's to end."""
    found = []
    for child in psutil.Process().children():
        try:
            if "app.core.documents.child" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found


def test_cancel_stops_a_slow_read_and_the_next_file_opens(
    qtbot, empty_window: MainWindow, slow_page: Path
) -> None:
    empty_window.open_document(slow_page)
    assert "open" in empty_window.waiting_for and empty_window.cancel_action.isEnabled()
    qtbot.waitUntil(lambda: bool(readers()), timeout=30_000)
    child = readers()[0]
    qtbot.wait(300)
    start = time.monotonic()
    empty_window.cancel()  # what Esc and the status bar's Cancel do
    assert "open" not in empty_window.waiting_for
    qtbot.waitUntil(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
                    timeout=3_000)  # fmt: skip
    assert time.monotonic() - start < 3
    assert empty_window.document_path is None  # the slow file never arrives
    empty_window.open_document(DATA / "sample.html")
    qtbot.waitUntil(lambda: empty_window.document_path == DATA / "sample.html", timeout=60_000)
    qtbot.wait(500)
    assert empty_window.document_path == DATA / "sample.html"  # not replaced by the cancelled read
    assert not readers()


def test_opening_another_file_ends_the_read_in_progress(
    qtbot, empty_window: MainWindow, slow_page: Path
) -> None:
    empty_window.open_document(slow_page)
    qtbot.waitUntil(lambda: bool(readers()), timeout=30_000)
    child = readers()[0]
    empty_window.open_document(DATA / "sample.md")
    qtbot.waitUntil(lambda: empty_window.document_path == DATA / "sample.md", timeout=30_000)
    qtbot.waitUntil(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
                    timeout=3_000)  # fmt: skip


def test_a_hostile_page_is_refused_in_one_sentence_and_the_window_stays(
    qtbot, empty_window: MainWindow, tmp_path: Path
) -> None:
    page = tmp_path / "bold.html"
    page.write_bytes(b"<b>" * 10_000_000)  # before: 432 s and 4.8 GB in the window's process
    start = time.monotonic()
    with qtbot.waitSignal(empty_window.failed, timeout=60_000) as failed:
        empty_window.open_document(page)
    assert time.monotonic() - start < 30
    message = failed.args[0]
    assert message == ("bold.html holds more than 1,000,000 HTML elements, the most ContextLens "
                       "reads from one page.")  # fmt: skip
    assert "open" not in empty_window.waiting_for and empty_window.isVisible()
    empty_window.open_document(DATA / "sample.pdf")
    qtbot.waitUntil(lambda: empty_window.document_path == DATA / "sample.pdf", timeout=60_000)


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_refused_files_are_logged_as_their_sentence_without_a_traceback(
    qtbot, empty_window: MainWindow, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    archive = tmp_path / "notes.ctxlens"
    archive.write_text("not an archive")
    # a document read here, one read in its child process, and a session export
    for path in (DATA / "bad" / "empty.txt", DATA / "bad" / "not-a-zip.docx", archive):
        with qtbot.waitSignal(empty_window.failed, timeout=30_000) as failed:
            empty_window.open_path(path)
        sentence = failed.args[0]
        said = [r for r in caplog.records if sentence in r.getMessage()]
        assert [r.levelno for r in said if r.levelno >= logging.WARNING] == [logging.WARNING]
        assert _errors(caplog) == [], path.name
    model = tmp_path / "broken.gguf"
    model.write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(32))  # GGUF version 1
    with qtbot.waitSignal(empty_window.model_panel.file_failed, timeout=10_000) as failed:
        empty_window.open_path(model)
    logged = [r.getMessage().removeprefix("refused: ") for r in caplog.records
              if r.levelno in (logging.INFO, logging.WARNING)]  # fmt: skip
    assert any(m and m in failed.args[0] for m in logged), logged
    assert _errors(caplog) == []


def test_an_unexpected_error_opening_a_file_is_logged_with_its_traceback(
    qtbot, empty_window: MainWindow, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def broken(path: Path, **_: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr("app.services.workbench.model.read_document", broken)
    with qtbot.waitSignal(empty_window.failed, timeout=30_000):
        empty_window.open_document(DATA / "sample.md")
    (error,) = _errors(caplog)
    assert error.levelno == logging.ERROR and error.exc_info is not None
    assert error.exc_info[0] is KeyError
