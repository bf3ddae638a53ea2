"""Follow-up questions in the window, on the real default model: each question is a version,
child of the one before, the thread beside the output shows them all, the question box takes
the next one, and a question whose plan keeps the same spans as the last evaluates only itself
(the document stays in the KV cache), which the status line says."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QSettings

from app.core.jobs.job_setup import question_text
from app.core.paths import sample_document
from app.core.tokens import gguf_encoding
from app.ui.main_window import MainWindow
from tests.conftest import DATA

WAIT = 120_000
QUESTIONS = ("What does the note explain?", "Which strategies does it name?",
             "What happens when a document does not fit?")  # fmt: skip
DONE = re.compile(r"([\d,]+) of ([\d,]+) prompt tokens evaluated, ([\d,]+) reused")


def test_three_questions_make_a_thread_and_a_same_plan_evaluates_only_the_question(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, DATA / "sample.md", n_ctx=1024, db_path=tmp_path / "h.db",
                   settings=settings)  # fmt: skip
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.ready, timeout=WAIT):
        w.show()
    assert w.store.repo is not None and w.history is not None
    repo = w.store.repo
    w.task_box.setCurrentIndex(w.task_box.findData("ask"))
    w.strategy_box.setCurrentIndex(w.strategy_box.findData("retrieve"))  # by the question
    w.max_tokens.setValue(8)

    results, statuses = [], []
    said: list[str] = []  # the status lines, as the session model says them
    w.session.status.connect(lambda text, _ms: said.append(text))
    for question in QUESTIONS:
        w.question.setText(question)
        said.clear()
        with qtbot.waitSignal(w.job_finished, timeout=WAIT) as done:
            w.run_job()
        results.append(done.args[0].results[0])
        statuses.append(next((t for t in said if t.startswith("Done: ")), ""))
        qtbot.waitUntil(lambda: len(repo.history()) == len(results), timeout=WAIT)
        # the box takes the next question: focused, its text selected for typing over
        assert w.question.hasFocus() and w.question.selectedText() == question

    versions = repo.history()
    assert len(repo.sessions()) == 1
    assert [v.prompt for v in versions] == list(QUESTIONS)
    assert [v.parent for v in versions] == [None, versions[0].id, versions[1].id]
    last = versions[-1].id
    qtbot.waitUntil(lambda: w.history.item_for(last) is not None, timeout=WAIT)
    assert w.history.item_for(last).parent() == w.history.item_for(versions[1].id)

    thread = w.buffers.thread
    qtbot.waitUntil(lambda: len(thread.turns) == 3, timeout=WAIT)
    assert [t.question for t in thread.turns] == list(QUESTIONS)
    assert [t.answer for t in thread.turns] == [r.outputs[-1].text for r in results]
    assert thread.isVisible() and "3" in thread.heading.text()

    # The first question evaluated the document; the second kept the same plan, so llama.cpp
    # evaluated only what follows the document (the question and the answer's cue).
    first, second = results[0], results[1]
    document = w.session.document_tokens
    assert document is not None and document > 300  # sample.md: 387 tokens
    assert first.evaluated_tokens > document
    assert 0 < second.evaluated_tokens <= 40  # "Question: …" (9 tokens) and the reply's cue
    found = DONE.search(statuses[1])
    assert found is not None, statuses[1]
    evaluated, prompt, reused = (int(g.replace(",", "")) for g in found.groups())
    assert (evaluated, prompt) == (second.evaluated_tokens, second.prompt_tokens)
    assert reused == prompt - evaluated > document
    w.close()


FOLLOW_UPS = ("What is jargon?", "How does jargon differ from techspeak?")


def test_a_follow_up_keeps_the_chunks_its_plan_shares_resident(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    """A document longer than the context, asked under `retrieve` with the audit on: the second
    question's plan shares chunks with the first's, which stay in the KV cache (ring order); the
    follow-up evaluates at most 1.1x the tokens of its other chunks, its question and the
    frame's end, and the audit passes on both."""
    text = sample_document().read_text(encoding="utf-8")[:60_000]
    path = tmp_path / "jargon-start.txt"
    path.write_text(text, encoding="utf-8")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, path, n_ctx=1024, db_path=tmp_path / "h.db",
                   settings=settings)  # fmt: skip
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.ready, timeout=WAIT):
        w.show()
    w.task_box.setCurrentIndex(w.task_box.findData("ask"))
    w.strategy_box.setCurrentIndex(w.strategy_box.findData("retrieve"))
    w.max_tokens.setValue(8)
    w.audit_action.setChecked(True)
    outcomes = []
    for question in FOLLOW_UPS:
        w.question.setText(question)
        with qtbot.waitSignal(w.job_finished, timeout=WAIT) as done:
            w.run_job()
        outcomes.append(done.args[0])
    for outcome in outcomes:
        assert outcome.audit is not None and outcome.audit.ok, outcome.audit.summary()
    first, second = (o.results[0] for o in outcomes)
    assert first.truncated and second.error is None
    before = set(first.outputs[-1].source_spans)
    after = list(second.outputs[-1].source_spans)
    shared = [s for s in after if s in before]
    assert shared, "the two plans share chunks"
    assert after[: len(shared)] == shared  # resident first, where the first call left them
    counter = gguf_encoding(model_path)
    unshared = sum(counter.count(text[a:b]) for a, b in after if (a, b) not in before)
    asked = counter.count(question_text(FOLLOW_UPS[1]))
    # the frame's end: SmolLM2's "<|im_end|>\n<|im_start|>assistant\n" (5 tokens) and the
    # prompt's last token, evaluated alone with the reply
    assert second.evaluated_tokens <= 1.1 * (unshared + asked + 6), (second.evaluated_tokens,
                                                                     unshared, asked)  # fmt: skip
    assert second.evictions >= 1
    w.close()
