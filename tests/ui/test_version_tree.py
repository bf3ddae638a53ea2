"""Versions as a person understands them, offscreen on a real SQLite file: a session is one
document's line of work, each Run a child of the version it was made from, a rollback makes the
rolled-back version current (the next Run branches from it), the History panel shows the tree
with each version's prompt, settings, finish reason and reply and marks the current one, Diff
shows what the replies said, and an old version opens in the output buffer.

The panel and the session model's bookkeeping are tested on a history made here (no model);
one test drives the whole story in the window on the real default model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QFont

from app.core.documents import load_document
from app.core.jobs.tasks import JobResult, OutputSpan
from app.core.paths import sample_document
from app.core.planning.plan import Plan, Span
from app.services.history import History
from app.store.repository import Entry, Repository
from app.ui.history_columns import Column
from app.ui.history_panel import HistoryPanel
from app.ui.main_window import MainWindow
from app.ui.session_model import JobChoices, SessionModel
from tests.conftest import DATA
from tests.ui.history_cells import children, font, row, text, tip, top_level

DOC = DATA / "sample.md"
WAIT = 30_000
PLAN = Plan("head", 100, 300, (Span(0, 50, 12, "head"),), (Span(50, 120, 20, "cut"),))


def _entry(strategy: str, reply: str, prompt: str = "", max_tokens: int = 8, *,
           sampling: dict[str, float] | None = None, finish: str = "stop") -> Entry:  # fmt: skip
    settings: dict[str, object] = {"n_ctx": 512, "max_tokens": max_tokens}
    if sampling is not None:
        settings["sampling"] = sampling
    content = {"task": "ask" if prompt else "summarize", "strategy": strategy, "prompt": prompt,
               "model_path": "/models/m.gguf", "model_sha256": "m" * 64,
               "settings": settings}  # fmt: skip
    out = OutputSpan("summary", reply, ((0, 50),), 1, finish)
    result = JobResult(content["task"], strategy, finish, 512, prompt_tokens=40,
                       completion_tokens=3, outputs=[out], plan=PLAN.as_dict())  # fmt: skip
    return Entry(content, result)


def _seed(repo: Repository) -> tuple[int, int, int, int]:
    """A session on DOC: v1, its child v2 (a question), and v3 branched from v1."""
    doc = load_document(DOC)
    [v1] = repo.record(doc, doc.name, [_entry("head", "The first reply.\nSecond line.")])
    session = repo.get_version(v1).session
    [v2] = repo.record(doc, doc.name, [_entry("tail", "Tail says.", "Who wrote it?", 16)],
                       session=session, parent=v1)  # fmt: skip
    [v3] = repo.record(doc, doc.name, [_entry("middle", "Middle says.",
                                              sampling={"temperature": 0.7, "seed": 3})],
                       session=session, parent=v1)  # fmt: skip
    return session, v1, v2, v3


def test_a_cancelled_run_is_marked_so(qtbot, repo: Repository) -> None:
    session, v1, _v2, _v3 = _seed(repo)
    doc = load_document(DOC)
    [cut] = repo.record(doc, doc.name, [_entry("tail", "Half a", finish="cancelled")],
                        session=session, parent=v1)  # fmt: skip
    panel = _panel(qtbot, repo, session)
    item, done = row(panel, cut), row(panel, v1)
    assert text(item, Column.VERSION) == "v4 (cancelled)" and font(item).italic()
    assert all(font(item, column).italic() for column in Column)  # the whole row
    assert text(item, Column.FINISH).startswith("cancelled")
    assert "cancelled" in tip(item, Column.VERSION)
    assert text(done, Column.VERSION) == "v1" and not font(done).italic()


def _panel(qtbot, repo: Repository, session: int | None) -> HistoryPanel:
    panel = HistoryPanel(History(repo))
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_session(session)
    return panel


def _bold(panel: HistoryPanel, version: int) -> bool:
    return font(row(panel, version)).weight() == QFont.Weight.Bold


def test_the_panel_shows_the_tree_with_prompt_settings_reply_and_the_current_version(
    qtbot, repo: Repository
) -> None:
    session, v1, v2, v3 = _seed(repo)
    panel = _panel(qtbot, repo, session)
    item = row(panel, v1)
    assert children(item) == ["v2", "v3"]
    second = row(panel, v2)
    assert second.parent() == item
    said = {column: text(second, column) for column in Column}
    assert said[Column.PROMPT] == "Who wrote it?" and said[Column.STRATEGY] == "tail"
    assert said[Column.SETTINGS] == "n_ctx 512 · max 16"
    assert said[Column.FINISH].startswith("stop")
    assert said[Column.REPLY] == "Tail says." and said[Column.TASK] == "ask"
    sampled = row(panel, v3)  # what differs between versions shows: the sampling too
    assert text(sampled, Column.SETTINGS) == "n_ctx 512 · max 8 · temperature 0.7 · seed 3"
    assert text(item, Column.REPLY) == "The first reply."  # its first line
    assert "Second line." in tip(item, Column.REPLY)
    header = panel.tree.header()  # shown: prompt before strategy, settings, finish and reply
    shown = [Column(header.logicalIndex(i)).name for i in range(header.count())]
    assert shown == ["VERSION", "CREATED", "TASK", "PROMPT", "STRATEGY", "SETTINGS", "FINISH",
                     "REPLY", "KV"]  # fmt: skip
    model = panel.tree.model()
    assert [model.headerData(c, header.orientation()) for c in Column] == [
        "Version", "Created", "Task", "Prompt / question", "Strategy", "Settings", "Finish",
        "Reply", "KV state"]  # fmt: skip
    assert not any(_bold(panel, v) for v in (v1, v2, v3))
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_current(session, v2)
    assert _bold(panel, v2) and not _bold(panel, v1) and panel.current_version() == v2
    with qtbot.waitSignal(panel.open_requested) as opened:
        panel.tree.doubleClicked.emit(row(panel, v3).siblingAtColumn(Column.REPLY))
    assert opened.args == [v3]
    panel.select_versions(v1)
    with qtbot.waitSignal(panel.open_requested) as opened:
        panel.open_button.click()
    assert opened.args == [v1]

    # every session: its row names the session, never the file in the prompt column
    repo.record(load_document(DATA / "sample.md"), "one", [_entry("head", "x")])
    with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
        panel.set_session(None)
    top = top_level(panel)
    assert [text(t, Column.PROMPT) for t in top] == ["", ""]
    assert [text(t, Column.FINISH) for t in top] == ["3 versions", "1 version"]
    assert panel.session_combo.itemText(2).endswith(", 1 version)")


def test_diff_in_the_panel_shows_the_replies(qtbot, repo: Repository) -> None:
    session, v1, _v2, v3 = _seed(repo)
    panel = _panel(qtbot, repo, session)
    panel.select_versions(v1, v3)
    with qtbot.waitSignal(panel.diffed, timeout=WAIT) as shown:
        panel.diff_button.click()
    diff = shown.args[0]
    assert "-The first reply." in diff and "+Middle says." in diff
    assert panel.diff_dialog is not None and "+Middle says." in panel.diff_dialog.text()


@pytest.fixture
def session_model(qtbot, repo: Repository) -> Iterator[SessionModel]:
    model = SessionModel(History(repo), n_ctx=256)
    model.choose(JobChoices(max_tokens=32))
    yield model
    model.close()


def test_the_session_model_keeps_the_line_of_work_of_the_open_document(
    qtbot, repo: Repository, session_model: SessionModel, tmp_path: Path
) -> None:
    session, v1, v2, v3 = _seed(repo)
    changes: list[tuple[object, object]] = []
    session_model.current_changed.connect(lambda s, v: changes.append((s, v)))
    with qtbot.waitSignal(session_model.plan_changed, timeout=120_000):
        session_model.open_document(DOC)
    # opening a document goes on with its latest session, from its newest version
    qtbot.waitUntil(lambda: session_model.current_version == v3, timeout=WAIT)
    assert session_model.current_session == session and changes[-1] == (session, v3)

    # an old version opens: its reply, and its recorded plan on this very document
    with (
        qtbot.waitSignal(session_model.version_opened, timeout=WAIT) as opened,
        qtbot.waitSignal(session_model.plan_changed, timeout=WAIT) as planned,
    ):
        session_model.open_version(v1)
    got = opened.args[0]
    assert got.version.id == v1 and got.outputs[0]["text"].startswith("The first reply.")
    assert planned.args[0].kept == PLAN.kept and session_model.plan == planned.args[0]
    assert session_model.current_version == v3  # opening only shows it

    # a rollback makes the rolled-back copy current: the next Run branches from it
    with qtbot.waitSignal(session_model.version_restored, timeout=WAIT) as restored:
        session_model.rollback(v2, False)
    copy = repo.history()[-1]
    assert restored.args[0] == copy and copy.parent == v2
    qtbot.waitUntil(lambda: session_model.current_version == copy.id, timeout=WAIT)

    # another document: no line of work until its first Run
    other = tmp_path / "other.txt"
    other.write_text("A text with no history.", encoding="utf-8")
    with qtbot.waitSignal(session_model.plan_changed, timeout=120_000):
        session_model.open_document(other)
    qtbot.wait(200)  # the look-up for its sessions finds none
    assert (session_model.current_session, session_model.current_version) == (None, None)
    # a rollback of another document's version shows it but does not make it current
    with qtbot.waitSignal(session_model.version_restored, timeout=WAIT):
        session_model.rollback(v1, False)
    qtbot.wait(200)
    assert session_model.current_version is None


def test_runs_in_the_window_make_a_tree_a_rollback_branches_and_old_replies_open(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    """Three Runs with edits in between: one session, v1 → v2 → v3. Diff of v1 and v2 shows
    their replies. Rolling back v1 resumes it (the toolbar and the buffers show v1's job
    meanwhile) and makes the copy current: the next Run is its child, so v1 has two children.
    Opening v2 puts its reply in the output buffer."""
    doc = tmp_path / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:700], encoding="utf-8")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, doc, n_ctx=256, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.ready, timeout=120_000):
        w.show()
    assert w.history is not None and w.store.repo is not None
    panel, repo = w.history, w.store.repo

    def run(max_tokens: int, strategy: str = "head") -> int:
        w.max_tokens.setValue(max_tokens)  # the edit between runs
        w.strategy_box.setCurrentIndex(w.strategy_box.findData(strategy))
        with qtbot.waitSignal(w.job_finished, timeout=120_000):
            w.run_job()
        qtbot.waitUntil(lambda: w.session.current_version == repo.history()[-1].id,
                        timeout=WAIT)  # fmt: skip
        return repo.history()[-1].id

    v1, v2, v3 = run(2), run(3), run(2, "tail")
    tree = {v.id: v for v in repo.history()}
    assert len(repo.sessions()) == 1
    assert (tree[v1].parent, tree[v2].parent, tree[v3].parent) == (None, v1, v2)
    qtbot.waitUntil(lambda: panel.item_for(v3) is not None, timeout=WAIT)
    item = row(panel, v3)
    assert item.parent() == row(panel, v2)
    assert font(item).weight() == QFont.Weight.Bold  # the current version

    replies = {v: repo.runs(v)[-1]["outputs"][-1]["text"] for v in (v1, v2)}
    panel.select_versions(v1, v2)
    with qtbot.waitSignal(panel.diffed, timeout=WAIT) as shown:
        panel.diff_button.click()
    diff = shown.args[0].splitlines()
    assert '-  "max_tokens": 2,' in diff and '+  "max_tokens": 3,' in diff
    said = diff[diff.index(" reply:") + 1 :]
    assert f"-{replies[v1].splitlines()[0]}" in said
    assert f"+{replies[v2].splitlines()[0]}" in said

    captions: list[str] = []
    w.session.job_started.connect(lambda _job: captions.append(w.buffers.plan_label.text()))
    panel.select_versions(v1)
    with qtbot.waitSignal(w.job_finished, timeout=120_000) as done:
        panel.rollback_selected()
    assert done.args[0].results[0].evaluated_tokens == 1  # resumed from v1's KV state
    assert captions == ["Resuming v4 (summarize, head) from its saved KV state…"]  # v1's copy
    assert (w.strategy_box.currentData(), w.max_tokens.value()) == ("head", 2)  # v1's job
    qtbot.waitUntil(lambda: len(repo.history()) == 4, timeout=WAIT)
    copy = repo.history()[-1].id
    assert w.session.current_version == copy
    v5 = run(2)
    tree = {v.id: v for v in repo.history()}
    assert tree[v5].parent == copy and tree[v1].children == (v2, copy)  # a branch at v1

    said: list[object] = []  # the plans shown and the opening, in order
    w.session.plan_changed.connect(lambda plan, _index: said.append(plan))
    w.session.version_opened.connect(lambda _opened: said.append("opened"))
    with qtbot.waitSignal(w.session.version_opened, timeout=WAIT):
        panel.tree.doubleClicked.emit(row(panel, v2))
    assert w.buffers.output_text() == replies[v2]
    assert w.buffers.plan_label.text().startswith("v2 of session")
    # just before it opened, v2's plan (made again with the model it ran on, matching the
    # recorded figures) was painted on the document
    plan = said[said.index("opened") - 1]
    figures = repo.last_plan(v2)
    assert isinstance(plan, Plan) and plan.kept and plan.strategy == "head"
    assert (plan.budget, plan.kept_tokens) == (figures["budget"], figures["kept_tokens"])
    w.close()
