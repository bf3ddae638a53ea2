"""Several questions at once in the window: typed one per line (a paste, or the Several…
dialog), their `retrieve` plans side by side in the Questions tab (a column each, the chunks
they share marked in every column that keeps them, the totals at the bottom), and, run on the
real default model, each answer its own version in the thread, the child of the one before."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRect, QSettings, QUrl
from PySide6.QtGui import QGuiApplication

from app.services.question_plans import SideBySide
from app.ui.main_window import MainWindow
from app.ui.question_plans import SHARED_MARK, SHARED_ROLE, QuestionPlansView
from tests.conftest import DATA
from tests.ui.layout_probes import problems

WAIT = 120_000
TOPICS = ("Boats leave the harbour at dawn with the tide. ",
          "The keeper of the harbour keeps the key of the lighthouse. ",
          "Nets dry in the sun on the stones all day long. ")  # fmt: skip
ASKED = ("When do the boats leave the harbour?",
         "When do the boats leave the harbour, and where do nets dry?")


def window(qtbot, tmp_path: Path, model: Path | None, document: Path,
           n_ctx: int) -> MainWindow:  # fmt: skip
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model, document, n_ctx=n_ctx, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    return w


def check_grid(view: QuestionPlansView, plans: SideBySide) -> None:
    """A column per question, a row per chunk any keeps, the shared ones marked in every column
    that keeps them, each column's count of shares and its totals."""
    table = view.table
    n = len(plans.questions)
    assert table.columnCount() == n
    for i, q in enumerate(plans.questions):
        head = table.horizontalHeaderItem(i)
        assert head.text().startswith(f"Q{i + 1}: ") and head.toolTip() == q.question
    rows = plans.rows()
    assert table.rowCount() == len(rows) + 2
    both = 0
    for r, (_span, cells) in enumerate(rows, start=1):
        keeping = [i for i, part in enumerate(cells) if part is not None]
        both += len(keeping) == n
        for i in range(n):
            item = table.item(r, i)
            if i not in keeping:
                assert item is None
                continue
            shared = len(keeping) > 1
            assert item.text().startswith(SHARED_MARK) == shared, item.text()
            assert bool(item.data(SHARED_ROLE)) == shared
    if n == 2:
        for i, q in enumerate(plans.questions):
            assert table.item(0, i).text() == (
                f"shares {both} of {len(q.parts)} chunks with Q{2 - i}")  # fmt: skip
    for i, q in enumerate(plans.questions):
        total = table.item(len(rows) + 1, i).text()
        assert total == f"{q.kept_tokens:,} tokens kept, {q.shared_tokens:,} shared"
    assert f"{plans.shared_tokens:,} tokens" in view.heading.text()


def test_two_questions_typed_show_their_plans_side_by_side(qtbot, tmp_path: Path) -> None:
    doc = tmp_path / "harbour.txt"
    doc.write_text("\n\n".join(t * 8 for t in TOPICS) * 3, encoding="utf-8")
    w = window(qtbot, tmp_path, None, doc, 1024)  # no model: planned with cl100k
    w.fit_to(QRect(0, 0, 1024, 700))
    w.show()
    qtbot.waitUntil(lambda: w.session.plan is not None, timeout=WAIT)
    tab = w.tabs.indexOf(w.question_plans)
    assert not w.tabs.isTabVisible(tab)  # one question (none yet): no tab
    assert not w.controls.several_button.isEnabled()  # a summary asks nothing
    w.strategy_box.setCurrentIndex(w.strategy_box.findData("retrieve"))
    w.task_box.setCurrentIndex(w.task_box.findData("ask"))

    # the Several… dialog takes one question per line; OK puts them in the question box
    dialog = w.controls.ask_several()
    dialog.editor.setPlainText(f"{ASKED[0]}\n\n{ASKED[1]}\n")
    with qtbot.waitSignal(w.question_plans_shown, timeout=WAIT,
                          check_params_cb=lambda p: p is not None) as shown:  # fmt: skip
        dialog.accept()
    assert w.question.text() == "\n".join(ASKED)
    assert w.choices().questions == ASKED
    plans = shown.args[0]
    assert [q.question for q in plans.questions] == list(ASKED)
    assert w.tabs.isTabVisible(tab) and w.tabs.currentWidget() is w.question_plans
    assert 0 < len(plans.shared_parts) < len(plans.rows())  # some shared, some each its own
    check_grid(w.question_plans, plans)
    assert w.session.plan is not None and w.session.plan.question == ASKED[0]
    qtbot.wait(50)
    assert problems(w) == []  # the grid fits a 1024x700 window
    w.fit_to(QRect(0, 0, 1366, 768))
    qtbot.wait(50)
    assert problems(w) == []  # and a 1366x768 one

    # a double click on a chunk shows it in the document
    row = next(r for r in range(1, w.question_plans.table.rowCount() - 1)
               if w.question_plans.table.item(r, 0) is not None)  # fmt: skip
    w.question_plans.table.cellDoubleClicked.emit(row, 0)

    # back to one question: the tab goes
    with qtbot.waitSignal(w.question_plans_shown, timeout=WAIT,
                          check_params_cb=lambda p: p is None):  # fmt: skip
        w.question.setText(ASKED[0])
    assert not w.tabs.isTabVisible(tab)
    w.close()


def test_two_questions_run_make_two_versions_in_the_thread(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    w = window(qtbot, tmp_path, model_path, DATA / "sample.md", 1024)
    with qtbot.waitSignal(w.ready, timeout=WAIT):
        w.show()
    repo = w.store.repo
    assert repo is not None and w.history is not None
    w.task_box.setCurrentIndex(w.task_box.findData("ask"))
    w.strategy_box.setCurrentIndex(w.strategy_box.findData("retrieve"))
    w.max_tokens.setValue(16)
    QGuiApplication.clipboard().setText("\n".join(("What does the note explain?",
                                                   "Which strategies does it name?")) + "\n")
    w.question.clear()
    w.question.paste()  # a paste of several lines: a question per line
    asked = w.choices().questions
    assert len(asked) == 2

    seen: list[SideBySide | None] = []
    w.question_plans_shown.connect(seen.append)
    with qtbot.waitSignal(w.job_finished, timeout=WAIT) as done:
        w.run_job()
    outcome = done.args[0]
    assert [o.step for o in outcome.results[0].outputs] == ["answer 1", "answer 2"]
    shown = [p for p in seen if p is not None]
    assert shown and [q.question for q in shown[-1].questions] == list(asked)
    check_grid(w.question_plans, shown[-1])
    assert w.tabs.isTabVisible(w.tabs.indexOf(w.question_plans))

    qtbot.waitUntil(lambda: len(repo.history()) == 2, timeout=WAIT)
    first, second = sorted(repo.history(), key=lambda v: v.number)
    assert (first.prompt, second.prompt) == asked
    assert (first.parent, second.parent) == (None, first.id)
    assert w.session.current_version == second.id  # the next question follows the last
    thread = w.buffers.thread
    qtbot.waitUntil(lambda: len(thread.turns) == 2, timeout=WAIT)
    answers = [o.text for o in outcome.results[0].outputs]
    assert [(t.version, t.question, t.answer) for t in thread.turns] == [
        (first.id, asked[0], answers[0]), (second.id, asked[1], answers[1])]  # fmt: skip
    assert repo.kv_states(second.id) and not repo.kv_states(first.id)  # the last call's state

    # each turn opens its own version: its question, its answer
    with qtbot.waitSignal(w.session.version_opened, timeout=WAIT) as opened:
        thread.browser.anchorClicked.emit(QUrl(f"version:{first.id}"))
    version = opened.args[0]
    assert version.version.id == first.id
    assert [o["text"] for o in version.outputs] == [answers[0]]
    w.close()
