"""Every pane right after a rollback, a cache-reusing follow-up and an import (issue 49, rows 5,
6 and 12), in the window on the real default model: a follow-up whose chunks stay resident
lists them in the Input table; a rollback resumed from its saved KV state draws the segments
the job left (not one pinned block) and the thread shows its reply; opening a version of an
imported session puts its question, task and strategy in the toolbar."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from app.core.jobs.tasks import JobResult, OutputSpan
from app.services import history, versions
from app.services.jobs import JobOutcome, JobSpec
from app.ui.kv_bar import KVLayout
from app.ui.main_window import MainWindow
from tests.conftest import DATA
from tests.services.outcomes import DOC, FACTS
from tests.ui.windows import Windows

WAIT = 120_000
QUESTIONS = ("What does the note explain?", "Which strategies does it name?")


def _cache(kv: KVLayout) -> list[tuple[str, tuple[int, int] | None]]:
    """The KV map's segments as the person sees them: each one's kind, and its document span."""
    return [(s.kind.value, s.source) for s in kv.segments]


def _ask(qtbot, w: MainWindow, question: str) -> JobResult:
    w.question.setText(question)
    with qtbot.waitSignal(w.job_finished, timeout=WAIT) as done:
        w.run_job()
    [result] = done.args[0].results
    return result


def test_a_follow_up_lists_its_resident_chunks_and_a_resumed_rollback_draws_its_cache(
    qtbot, make_window: Windows, model_path: Path
) -> None:
    w = make_window(model_path, DATA / "sample.md", n_ctx=1024)
    with qtbot.waitSignal(w.ready, timeout=WAIT):
        w.show()
    repo, panel = w.store.repo, w.history
    assert repo is not None and panel is not None
    w.task_box.setCurrentIndex(w.task_box.findData("ask"))
    w.strategy_box.setCurrentIndex(w.strategy_box.findData("retrieve"))
    w.max_tokens.setValue(8)
    buffers = w.buffers

    _ask(qtbot, w, QUESTIONS[0])
    first = _cache(buffers.kv)
    assert {"system", "chunk", "question", "output"} <= {kind for kind, _ in first}
    qtbot.waitUntil(lambda: len(repo.history()) == 1, timeout=WAIT)
    [v1] = repo.history()

    # row 6: the follow-up keeps the same plan; its chunks stay in the cache, never queued again
    second = _ask(qtbot, w, QUESTIONS[1])
    assert second.evaluated_tokens < second.prompt_tokens - 100  # the document came from the cache
    table = buffers.table.model()
    listed = {table.span_at(row) for row in range(table.rowCount())}
    resident = {span for kind, span in _cache(buffers.kv) if kind == "chunk"}
    assert listed and listed == resident

    # row 5: a rollback resumed from v1's state draws the cache v1's job left, then its reply
    qtbot.waitUntil(lambda: len(repo.history()) == 2, timeout=WAIT)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.refresh()
    assert panel.has_kv(v1.id)
    panel.select_versions(v1.id)
    with qtbot.waitSignal(w.job_finished, timeout=WAIT) as done:
        panel.rollback_selected()
    [resumed] = done.args[0].results
    assert resumed.evaluated_tokens == 1 and resumed.text  # the prompt came from the state
    assert _cache(buffers.kv) == first  # the prefix, v1's chunks, its question, the reply
    listed = {table.span_at(row) for row in range(table.rowCount())}
    assert listed == {span for kind, span in first if kind == "chunk"}
    thread = buffers.thread
    # v1's copy in its place (the same question), its reply read back once recorded: the
    # text, not "…"
    qtbot.waitUntil(lambda: [t.answer for t in thread.turns] == [resumed.text], timeout=WAIT)


def _archive(folder: Path) -> Path:
    """A session of two versions (an ask, then a summary under it) exported as a .ctxlens."""
    def job(task: str, strategy: str, questions: tuple[str, ...]) -> JobOutcome:
        out = OutputSpan("answer 1" if questions else "summary", "Boats.", ((0, 40),), 1, "stop")
        result = JobResult(task, strategy, "stop", 512, outputs=[out])
        return JobOutcome(JobSpec(task, (strategy,), questions=questions), results=[result],
                          engine=FACTS)  # fmt: skip

    path = folder / "harbour.ctxlens"
    with versions.history(folder / "other.db") as h:
        asked = h.record_run(DOC, job("ask", "retrieve", ("What goes out?",)), versions.Target())
        h.record_run(DOC, job("summarize", "tail", ()),
                     versions.Target(asked.session, asked.versions[0]))  # fmt: skip
        history.export_session(h, asked.session, path)
    return path


def test_opening_a_version_of_an_imported_session_takes_its_question(
    qtbot, make_window: Windows, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _archive(tmp_path)
    w = make_window(None, DATA / "sample.md", n_ctx=1024)
    w.show()
    panel = w.history
    assert panel is not None
    w.question.setText("A question asked before")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    with qtbot.waitSignal(panel.imported, timeout=WAIT):
        panel.import_button.click()
    qtbot.waitUntil(lambda: len(panel.versions()) == 2, timeout=WAIT)
    asked, summary = sorted(panel.versions(), key=lambda v: v.number)

    for version, question in ((asked, "What goes out?"), (summary, ""), (asked, "What goes out?")):
        panel.select_versions(version.id)
        with qtbot.waitSignal(w.session.version_opened, timeout=WAIT):
            panel.open_selected()
        assert w.question.text() == question  # empty for a version that asked none
        assert w.task_box.currentData() == version.task
        assert w.strategy_box.currentData() == version.strategy
