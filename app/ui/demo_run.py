"""The demo (``make run``, ``contextlens --demo``): the product at its best on the sample.

Once the model is loaded and the sample counted, the toolbar takes the task, strategy and first
question measured best (app/services/demo.py, tests/benchmarks/bench_demo.py); the plan for that
question is shown on the document for a moment before it runs; then the follow-up is asked in the
same thread (the chunks the two plans share stay in the KV cache), and the demo ends with the
source of the thread's best-supported answer sentence highlighted in the document, as hovering it
would (a small model's follow-up may paraphrase; the thread shows both answers). The person's own
sampling choice is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.planning.plan import Plan
from app.services.demo import DEMO_QUESTIONS, DEMO_SAMPLING, DEMO_STRATEGY, DEMO_TASK

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

PLAN_PAUSE_MS = 2500  # the plan stays on screen this long before the run starts


class DemoRun(QObject):
    """Drives the window through the demo once; ``finished`` when the last answer is shown."""

    finished = Signal()

    def __init__(self, window: MainWindow, questions: Sequence[str] = DEMO_QUESTIONS,
                 pause_ms: int = PLAN_PAUSE_MS) -> None:  # fmt: skip
        super().__init__(window)
        self._window = window
        self._questions = list(questions)
        self._pause_ms = pause_ms
        self._asked = 0  # questions run so far
        self._waiting_for: str | None = None  # the question whose plan is awaited
        self.shown_source = False  # an answer's source is highlighted in the document
        self._best: tuple[float, tuple[int, int]] | None = None  # (score, source) of the answers
        window.ready.connect(self._start)
        window.plan_shown.connect(self._on_plan)
        window.job_finished.connect(self._on_finished)

    def _start(self) -> None:
        if self._asked or self._waiting_for is not None:
            return  # ready again after a reload: the demo runs once
        w = self._window
        w.task_box.setCurrentIndex(w.task_box.findData(DEMO_TASK))
        w.strategy_box.setCurrentIndex(w.strategy_box.findData(DEMO_STRATEGY))
        w.sampling_box.choose_preset(DEMO_SAMPLING, remember=False)
        self._ask_next()

    def _ask_next(self) -> None:
        question = self._questions[self._asked]
        self._waiting_for = question
        self._window.question.setText(question)
        self._window.update_plan()

    def _on_plan(self, plan: Plan | None) -> None:
        question = self._waiting_for
        if plan is None or question is None or plan.strategy != DEMO_STRATEGY:
            return
        if (plan.question or "") != question:
            return
        self._waiting_for = None
        ranked = [s for s in plan.kept if s.rank is not None]
        if ranked:  # the document shows where the best match is, before the run
            best = min(ranked, key=lambda s: s.rank or 0)
            self._window.document_view.reveal(best.start)
        self._later(self._run)

    def _run(self) -> None:
        self._asked += 1
        self._window.run_job()

    def _on_finished(self, outcome: object) -> None:
        if not self._asked or self._waiting_for is not None:
            return
        for result in getattr(outcome, "results", ()):
            for output in result.outputs:
                for sentence in output.alignment:
                    if sentence.source is not None and (
                            self._best is None or sentence.score > self._best[0]):  # fmt: skip
                        self._best = (sentence.score, sentence.source)
        if self._asked < len(self._questions):
            self._later(self._ask_next)
            return
        if self._best is not None:
            self._window.buffers.source_clicked.emit([self._best[1]])
            self.shown_source = True
        self.finished.emit()

    def _later(self, step: Callable[[], None]) -> None:
        QTimer.singleShot(self._pause_ms, self, step)
