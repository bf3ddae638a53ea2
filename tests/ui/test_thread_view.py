"""The thread beside the output: the questions of the current line of work with their answers,
hidden while there are none, a click opening a turn's version, in the window's language."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl

from app.services.versions import Turn
from app.ui.thread_view import ThreadView
from tests.ui.ui_texts import assert_follows_language

TURNS = [
    Turn(4, 1, "Where is the harbour?", "In the north.", "stop", "head"),
    Turn(7, 2, "When do <boats> leave?", "At dawn,\nmostly.", "length", "retrieve"),
]


def test_the_thread_shows_each_question_and_answer_and_opens_a_version(qtbot) -> None:
    view = ThreadView()
    qtbot.addWidget(view)
    view.show()
    view.set_turns([])
    assert view.isHidden()
    view.set_turns(TURNS, current=7)
    assert view.isVisible() and view.heading.text() == "Thread: 2 questions"
    text = view.browser.toPlainText()
    for turn in TURNS:
        assert turn.question in text  # as written, not as markup
        assert all(line in text for line in turn.answer.splitlines())
    assert text.index("Where is the harbour?") < text.index("When do <boats> leave?")
    with qtbot.waitSignal(view.open_requested) as opened:
        view.browser.anchorClicked.emit(QUrl("version:7"))
    assert opened.args == [7]
    view.set_turns(TURNS[:1])
    assert view.heading.text() == "Thread: 1 question"


def test_the_thread_follows_the_language(qtbot, compiled: Path) -> None:
    def make() -> ThreadView:
        view = ThreadView()
        qtbot.addWidget(view)
        view.set_turns(TURNS, current=4)
        return view

    assert_follows_language(make, compiled)
