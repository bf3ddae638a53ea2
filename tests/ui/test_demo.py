"""The demo (``make run``): the plan of each question shown before it runs, two questions in one
thread, the second evaluating only what is not already in the KV cache, and the end on the
answer sentence that rests best on the kept text, its source highlighted in the document.

The choice it makes (app/services/demo.py) is measured by tests/benchmarks/bench_demo.py; this
checks, on the real default model and the real sample, that the demo shows what was measured:
the first answer rests on the text kept for it. Which words the answer has is the greedy reply of
this machine's kernels (app/core/engine/schedule.py), so no word of it is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QSettings

from app.core.paths import sample_document
from app.services.demo import DEMO_QUESTIONS, DEMO_SAMPLING, DEMO_STRATEGY, DEMO_TASK
from app.ui.demo_run import DemoRun
from app.ui.main_window import MainWindow

WAIT = 180_000


def test_the_demo_asks_in_a_thread_reuses_the_cache_and_ends_on_a_supported_source(
    qtbot, tmp_path: Path, model_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, sample_document(), db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    seen: list[str] = []  # what the person saw, in order
    w.plan_shown.connect(lambda plan: seen.append(f"plan {plan.strategy} {plan.question}"))
    w.session.job_started.connect(lambda _job: seen.append("run"))
    results = []
    w.job_finished.connect(lambda outcome: results.append(outcome.results[0]))
    demo = DemoRun(w, pause_ms=50)
    with qtbot.waitSignal(demo.finished, timeout=WAIT):
        w.show()

    assert w.task_box.currentData() == DEMO_TASK and w.strategy_box.currentData() == DEMO_STRATEGY
    assert w.sampling_box.settings().greedy == (DEMO_SAMPLING == "deterministic")
    for question in DEMO_QUESTIONS:  # each plan was on the document before its run started
        shown = seen.index(f"plan {DEMO_STRATEGY} {question}")
        assert seen[shown + 1 :].count("run") >= 1
    assert seen.count("run") == 2
    thread = w.buffers.thread  # the second turn joins once its version is recorded
    qtbot.waitUntil(lambda: len(thread.turns) == len(DEMO_QUESTIONS), timeout=WAIT)
    assert [t.question for t in thread.turns] == list(DEMO_QUESTIONS) and thread.isVisible()

    first, second = results
    # the follow-up kept the chunks both plans share where they were: only the rest evaluated
    assert 0 < second.evaluated_tokens < second.prompt_tokens
    # the first answer is the sample's definition, tied to the sentence it rests on
    answer = first.outputs[-1]
    supported = [a for a in answer.alignment if a.source is not None]
    assert supported, answer.text
    assert all(within(a.source, answer.source_spans) for a in supported)
    # the demo ends on the best-supported sentence of the thread, highlighted in the document
    assert demo.shown_source
    sentences = [a for r in results for o in r.outputs for a in o.alignment if a.source]
    best = max(sentences, key=lambda a: a.score)
    assert w.document_view._sources == [best.source]
    kept = [span for r in results for o in r.outputs for span in o.source_spans]
    assert within(best.source, kept)  # a sentence of the text the model was given
    w.close()


def within(span: tuple[int, int] | None, spans: Sequence[tuple[int, int]]) -> bool:
    return span is not None and any(s <= span[0] and span[1] <= e for s, e in spans)
