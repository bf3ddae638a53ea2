"""What the job toolbar asks of the session model: a plan, a run, a comparison, a cancel.

The toolbar, the Job menu and the Sampling box hold the next job's choices; they reach the
session model as one plain JobChoices. Each change of a choice plans again (the question once
typing pauses), Run and Enter in the question box run, Compare runs the strategies ticked in
the Compare menu side by side, Cancel and Esc stop what the person waits for. While a run is
going on Run and Compare wait; after an answer the question box takes the next question.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer

from app.ui.compare_view import MAX_PANES
from app.ui.main_actions import MainActions
from app.ui.sampling_box import SamplingBox
from app.ui.session_model import JobChoices, SessionModel

REPLAN_DELAY_MS = 400  # after the last keystroke in the question


class JobRequests(QObject):
    """Connects the toolbar's ``controls`` (and the ``sampling`` box) to ``session``."""

    def __init__(self, session: SessionModel, controls: MainActions, sampling: SamplingBox,
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._session, self._controls, self._sampling = session, controls, sampling
        self._replan_timer = QTimer(self, singleShot=True, interval=REPLAN_DELAY_MS)
        self._replan_timer.timeout.connect(self.update_plan)
        c = controls
        c.task_box.currentIndexChanged.connect(lambda _i: self.update_plan())
        c.question.textChanged.connect(self._replan_soon)
        c.strategy_box.currentIndexChanged.connect(lambda _i: self.update_plan())
        c.max_tokens.valueChanged.connect(lambda _v: self.update_plan())
        # (a triggered(bool) signal must not become the strategy argument)
        c.run_action.triggered.connect(lambda _checked=False: self.run())
        c.question.returnPressed.connect(self._run_from_question)
        c.compare_button.clicked.connect(lambda _checked=False: self.compare())
        c.cancel_action.triggered.connect(self.cancel)
        c.cancel_button.clicked.connect(self.cancel)

    def choices(self) -> JobChoices:
        """What the toolbar, the Job menu and the Sampling box hold now."""
        return self._controls.choices(self._sampling.settings())

    def update_plan(self) -> None:
        """Plan the document for the chosen strategy and context, in the background."""
        self._session.update_plan(self.choices())

    def _replan_soon(self) -> None:
        """The question frames the plan too (its room, or extract's instruction): plan again
        once typing pauses."""
        self._session.choose(self.choices())
        self._replan_timer.start()

    def run(self, strategy: str | None = None) -> None:
        """Run the task under ``strategy`` (None: the one chosen in the toolbar)."""
        self._session.run_job(self.choices(), strategy)

    def _run_from_question(self) -> None:
        """Enter in the question box runs it, as Ctrl+R does (not while a run is going on)."""
        if self._controls.run_action.isEnabled():
            self._controls.run_action.trigger()

    def compare(self, strategies: list[str] | None = None) -> None:
        """Run the task under ``strategies`` (None: those ticked in the Compare menu), side by
        side in the Compare tab."""
        chosen = strategies or self._controls.compared()
        if not 2 <= len(chosen) <= MAX_PANES:
            self._session.fail(self.tr("Choose two to four strategies to compare (Compare menu)."))
            return
        self._session.run_compare(self.choices(), tuple(chosen))

    def cancel(self) -> None:
        """Esc: stop whatever the person waits for — the job, the plan, the file being read."""
        self._session.cancel()

    def take_next_question(self, _outcome: object) -> None:
        """After an answer the question box takes the next question (typing replaces it)."""
        question = self._controls.question
        if self._controls.task_box.currentData() == "ask" and question.isEnabled():
            question.selectAll()
            question.setFocus()

    def on_running_changed(self, running: bool) -> None:
        """Run and Compare wait while a run is going on."""
        self._controls.run_action.setEnabled(not running)
        self._controls.compare_button.setEnabled(not running)
