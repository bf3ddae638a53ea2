"""The main window: a document, a model, the plan of what reaches it, and the live buffers.

The window is the view over one :class:`SessionModel`: it composes the panels in docks, builds
the menus and the toolbar (app/ui/main_actions.py), and wires the two together. The session's
state, where its slow work runs and when it is recorded are the model's; the window holds no
engine, planning or SQL code, so that each panel only has to follow the model's signals and each
request only has to reach the model with the toolbar's choices as plain values.

Its parts each have a module: the toolbar's requests (window_jobs.py), the engine as the panels
show it (window_engine.py), the files handed to it (window_files.py), the status bar
(window_status.py), the layout kept between starts (window_layout.py), what a later launch may
change (second_launch.py), a stored version's reply opened again (stored_reply.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QEvent, QRect, QSettings, Qt, Signal
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QMainWindow,
    QMessageBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.documents import Document
from app.core.engine.types import DEFAULT_N_CTX, LoadSettings
from app.core.jobs.events import JobFinished, ServerLost
from app.core.paths import models_dir, sample_document
from app.core.planning.plan import Plan
from app.core.textutil import clip_message
from app.services.errors import BadRequest
from app.services.history import History, VersionInfo, open_history
from app.services.question_plans import SideBySide
from app.ui.buffer_panel import BufferPanel
from app.ui.compare_view import CompareView
from app.ui.document_view import DocumentView
from app.ui.gauges import GaugesPanel
from app.ui.help import about_box
from app.ui.history_panel import HistoryPanel
from app.ui.i18n import FollowsLanguage, Retranslated, strategy_label, task_label
from app.ui.main_actions import MainActions
from app.ui.model_offer import ModelOffer
from app.ui.model_panel import ModelPanel
from app.ui.no_model_banner import NoModelBanner
from app.ui.plan_index import PlanIndex
from app.ui.question_plans import QuestionPlansView
from app.ui.sampling_box import SamplingBox
from app.ui.second_launch import SecondLaunch
from app.ui.session_model import JobChoices, SessionModel, StartedJob
from app.ui.stored_reply import StoredReply
from app.ui.widgets import plain_label, plain_message_box, scrolling
from app.ui.window_engine import USE_TUNED_KEY, WindowEngine
from app.ui.window_files import WindowFiles
from app.ui.window_jobs import REPLAN_DELAY_MS, JobRequests
from app.ui.window_layout import DEFAULT_SIZE, DockShares, restore_layout, save_layout
from app.ui.window_layout import fit_to as fit_window
from app.ui.window_status import WindowStatus

# Names callers import from here, with the window's own (the pieces' constants).
__all__ = ["DEFAULT_SIZE", "REPLAN_DELAY_MS", "USE_TUNED_KEY", "MainWindow"]

log = logging.getLogger(__name__)


class MainWindow(FollowsLanguage, QMainWindow):
    ready = Signal()  # the model is loaded and the document's tokens are counted
    failed = Signal(str)  # something the person was told about went wrong
    plan_shown = Signal(object)  # the Plan now highlighted in the document
    question_plans_shown = Signal(object)  # several questions' plans side by side (None: gone)
    job_finished = Signal(object)  # JobOutcome, once recorded in the history
    job_events = Signal(list)  # each batch of job events, after the panels have shown it
    engine_restarted = Signal()  # llama.cpp died and a new engine has the model loaded again
    closed = Signal()  # the window was closed cleanly (its engine and store shut down)

    def __init__(
        self,
        model: Path | None,
        document: Path | None,
        n_ctx: int = DEFAULT_N_CTX,
        *,
        db_path: Path | None = None,
        settings: QSettings | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("ContextLens")
        self.setAcceptDrops(True)
        self.settings = settings or QSettings()
        self.last_error = ""
        self._shut_down = False  # closeEvent has stopped the engine and closed the store
        self._quit_confirmed = False  # the person said Quit while a run was going on
        # asks whether to quit while a run is going on (a test answers for the person)
        self.confirm_quit: Callable[[], bool] = self._ask_to_quit
        self._open_store(db_path)
        self.session = SessionModel(self.store, n_ctx, self)
        self.engine = self.session.engine
        self._texts = Retranslated()
        self._build_panels()
        self._build_actions()
        self.retranslate()
        self._wire_session()
        restore_layout(self, self.settings, self._view_menu_docks)
        self.dock_shares = DockShares(self, self._view_menu_docks)  # kept as the window resizes
        self.session.choose(self.choices())

        self.model_panel.n_ctx.setValue(n_ctx)  # what Load uses, --n-ctx included
        if document is not None:
            self.open_path(document)
        if model is not None:
            self.model_panel.select_model(model)
            self.load_model(model, LoadSettings(n_ctx=n_ctx))
        else:
            self.window_engine.show_no_model()

    # ----- building -----

    def _open_store(self, db_path: Path | None) -> None:
        self.store: History | None = None
        try:
            self.store = open_history(db_path)
        except BadRequest as exc:
            self._store_problem = str(exc)
            return
        self._store_problem = self.store.notice

    def _build_panels(self) -> None:
        self.document_view = DocumentView()
        self.no_model = NoModelBanner()  # what to do first while there is no model
        self.no_model.hide()
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.no_model)
        column.addWidget(self.document_view, 1)
        self.setCentralWidget(central)

        self.model_panel = ModelPanel(models_dir(), settings=self.settings)
        self._dock("model", lambda: self.tr("Model"), scrolling(self.model_panel),
                   Qt.DockWidgetArea.LeftDockWidgetArea)  # fmt: skip
        self.sampling_box = SamplingBox(self.settings)  # what the next Run samples with
        self._dock("sampling", lambda: self.tr("Sampling"), self.sampling_box,
                   Qt.DockWidgetArea.LeftDockWidgetArea)  # fmt: skip

        self.buffers = BufferPanel()
        self.buffers.source_clicked.connect(self.document_view.highlight_sources)
        self.compare = CompareView()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.buffers, "")
        self.tabs.addTab(self.compare, "")
        # several questions under `retrieve`: their plans side by side, a tab shown only then
        self.question_plans = QuestionPlansView()
        self.question_plans.part_chosen.connect(
            lambda start, end: self.document_view.highlight_sources([(start, end)]))  # fmt: skip
        if self.store is not None:
            self.history: HistoryPanel | None = HistoryPanel(self.store)
            self.history.rollback_requested.connect(self.session.rollback)
            self.history.changed.connect(self.session.on_history_changed)
            self.history.open_requested.connect(self.session.open_version)
            self.history.failed.connect(self.session.fail)
            self.tabs.addTab(self.history, "")
        else:
            self.history = None
            self.tabs.addTab(plain_label(self._store_problem), "")
        self.tabs.addTab(self.question_plans, "")
        self.tabs.setTabVisible(self.tabs.indexOf(self.question_plans), False)
        self._dock("stages", lambda: self.tr("Three-stage buffer"), self.tabs,
                   Qt.DockWidgetArea.RightDockWidgetArea)  # fmt: skip

        # the three-stage buffer takes the right edge from top to bottom, the gauges only the
        # width beside it: on a laptop's 768 lines the reply and the thread get the room
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        self.gauges = GaugesPanel()
        self._dock("gauges", lambda: self.tr("Gauges"), scrolling(self.gauges),
                   Qt.DockWidgetArea.BottomDockWidgetArea)  # fmt: skip
        self.gauges.start()  # redraws ~10 times a second while shown
        st = self.window_status = WindowStatus(self, self.statusBar(), self.session)
        self.gauges.servers.said.connect(self.statusBar().showMessage)  # a pool's server lost
        self.progress, self.run_line, self.run_status = st.progress, st.run_line, st.run_status

        # loads and connections asked for in the panels, and the engine's state across them
        self.window_engine = WindowEngine(self.session, self.settings, self.model_panel,
                                          no_model=self.no_model, buffers=self.buffers,
                                          gauges=self.gauges, parent=self)  # fmt: skip
        self.files = WindowFiles(self, self.settings, self.session, model_panel=self.model_panel,
                                 tabs=self.tabs, history=self.history,
                                 store_problem=self._store_problem)  # fmt: skip
        self.stored_reply = StoredReply(self.session, self.buffers, self.tabs, self)

    def _dock(self, name: str, title: Callable[[], str], widget: QWidget,
              area: Qt.DockWidgetArea) -> None:  # fmt: skip
        dock = QDockWidget(self)
        self._texts.set(dock.setWindowTitle, title)  # its View menu entry follows it
        dock.setObjectName(f"dock-{name}")  # saveState needs names
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self._view_menu_docks = [*getattr(self, "_view_menu_docks", []), dock]

    def retranslate(self) -> None:
        """The docks' titles, the stages' tabs, the menus and the toolbar in the language now
        installed (each panel follows on its own)."""
        self._texts.retranslate()
        tabs = (self.tr("&Buffers"), self.tr("Comp&are"), self.tr("Histor&y"))
        for i, text in enumerate(tabs):
            self.tabs.setTabText(i, text)
        self.tabs.setTabText(self.tabs.indexOf(self.question_plans), self.tr("Questions"))
        self.controls.retranslate()

    def _build_actions(self) -> None:
        """The menus and the toolbar; the controls that the session guard, the demo and the
        tests set are reached through the window too."""
        c = self.controls = MainActions(self, self.settings, self._view_menu_docks,
                                        document=self.document_view, model=self.model_panel,
                                        stages=self.tabs,
                                        history=self.history.tree if self.history else None)
        self.task_box, self.question = c.task_box, c.question
        self.strategy_box, self.max_tokens = c.strategy_box, c.max_tokens
        self.run_action, self.cancel_action = c.run_action, c.cancel_action
        self.audit_action, self.needles = c.audit_action, c.needles
        c.quit_action.triggered.connect(self.request_quit)
        c.open_action.triggered.connect(self.files.choose_document)
        c.open_recent.connect(self.open_document)
        start = self.document_view.start
        start.open_requested.connect(self.files.choose_document)
        start.sample_requested.connect(lambda: self.open_document(sample_document()))
        start.recent_chosen.connect(self.open_document)
        start.set_recent(c.recent())
        c.recent_changed.connect(start.set_recent)
        c.get_model_action.triggered.connect(self.model_panel.get_default_model)
        c.get_hub_model_action.triggered.connect(self.model_panel.get_hub_model)
        c.about_action.triggered.connect(lambda: about_box(self, self.session.capabilities))
        self.jobs = JobRequests(self.session, c, self.sampling_box, self)  # Run, Compare, Cancel
        self.window_status.cancellable.connect(c.cancel_button.setVisible)  # Cancel and Esc
        self.window_status.cancellable.connect(c.cancel_action.setEnabled)  # while they can
        self.second_launch = SecondLaunch(self.session, c, self.model_panel,
                                          open_path=self.open_path, load_model=self.load_model,
                                          parent=self)  # fmt: skip

    def _wire_session(self) -> None:
        """Each panel follows the session model's signals."""
        s = self.session
        s.document_changed.connect(self._on_document_changed)
        s.counts_changed.connect(self.document_view.set_counts)
        s.plan_changed.connect(self._on_plan_changed)
        s.question_plans_changed.connect(self._on_question_plans_changed)
        s.job_started.connect(self._on_job_started)
        s.running_changed.connect(self.jobs.on_running_changed)
        s.job_events.connect(self._on_job_events)
        s.needle_retention.connect(self.compare.set_needle_retention)
        s.sampling_restored.connect(self.sampling_box.set_settings)
        if self.history is not None:
            s.recorded.connect(self.history.set_session)
            s.current_changed.connect(self.history.set_current)
            s.history_changed.connect(self.history.on_history_changed)
        s.thread_changed.connect(self.buffers.thread.set_turns)
        self.buffers.thread.open_requested.connect(s.open_version)
        s.version_restored.connect(self._show_version_job)
        s.version_opened.connect(lambda opened: self._show_version_job(opened.version))
        s.failed.connect(self._on_failed)
        s.ready.connect(self.ready)
        s.ready.connect(self._log_ready)
        s.job_finished.connect(self.job_finished)
        s.job_finished.connect(self.jobs.take_next_question)
        s.engine_restarted.connect(self.engine_restarted)
        self.model_offer = ModelOffer(self)  # a Run without a model offers one
        s.model_needed.connect(self.model_offer.offer)

    def choices(self) -> JobChoices:
        """What the toolbar, the Job menu and the Sampling box hold now."""
        return self.jobs.choices()

    # ----- documents -----

    def open_document(self, path: Path) -> None:
        """Read the file in the background, then show and plan it (see SessionModel)."""
        self.session.open_document(path)

    def _on_document_changed(self, doc: Document) -> None:
        self.setWindowTitle(f"ContextLens — {doc.name}")
        self.document_view.set_document(doc.text)
        self.controls.remember(doc.path)
        if not self.session.running:  # the last run was on the document that was open before
            self.buffers.clear()
            self.compare.clear()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        self.files.drag_enter(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self.files.drop(event)

    def open_path(self, path: Path) -> None:
        """A model, a session export or a document, each opened as what it is (WindowFiles)."""
        self.files.open_path(path)

    def launch_refusal(self, options: Mapping[str, object]) -> str:
        """Why this window cannot take a later launch's options ("": it can; SecondLaunch)."""
        return self.second_launch.refusal(options)

    def take_launch(self, paths: Sequence[Path], options: Mapping[str, object]) -> None:
        """The files and options a later launch handed over (SecondLaunch.take)."""
        self.second_launch.take(paths, options)

    @property
    def document_path(self) -> Path | None:
        """The file of the document shown (None: none yet, or one made from text)."""
        doc = self.session.document
        return doc.path if doc is not None else None

    @property
    def model_path(self) -> Path | None:
        """The model loaded, or being loaded (None: none chosen yet)."""
        return self.session.model_path

    # ----- the plan of what reaches the model -----

    def update_plan(self) -> None:
        """Plan the document for the chosen strategy and context, in the background."""
        self.jobs.update_plan()

    def _on_plan_changed(self, plan: Plan, index: PlanIndex) -> None:
        self.document_view.show_plan(plan, index)
        self.plan_shown.emit(plan)

    def _on_question_plans_changed(self, plans: SideBySide | None) -> None:
        """Several questions under `retrieve`: their plans side by side in the Questions tab,
        brought to the front when it appears (one question: the tab goes)."""
        view, tabs = self.question_plans, self.tabs
        index = tabs.indexOf(view)
        appears = plans is not None and not tabs.isTabVisible(index)
        view.set_plans(plans)
        tabs.setTabVisible(index, plans is not None)
        if appears and not self.session.running:
            tabs.setCurrentWidget(view)
        self.question_plans_shown.emit(plans)

    # ----- the model -----

    def load_model(self, path: Path, settings: LoadSettings, *, fresh: bool = False) -> None:
        """Load ``path`` as the model panel's Load does (WindowEngine.load_model)."""
        self.window_engine.load_model(path, settings, fresh=fresh)

    # ----- jobs -----

    def run_job(self, strategy: str | None = None) -> None:
        """Run the task under ``strategy`` (None: the one chosen in the toolbar)."""
        self.jobs.run(strategy)

    def run_compare(self, strategies: list[str] | None = None) -> None:
        """Run the task under ``strategies`` (None: those ticked in the Compare menu), side by
        side in the Compare tab."""
        self.jobs.compare(strategies)

    def cancel(self) -> None:
        """Esc: stop whatever the person waits for — the job, the plan, the file being read."""
        self.jobs.cancel()

    def _on_job_started(self, job: StartedJob) -> None:
        self.buffers.reset(job.n_ctx)
        asked = job.version.prompt.split("\n") if job.resumed and job.version is not None else (
            list(self.choices().questions))  # fmt: skip
        self.buffers.set_questions(asked)
        self.run_status.start(self.max_tokens.value())
        if job.resumed and job.version is not None:  # the version being run, not the toolbar's
            v = job.version
            self._show_version_job(v)
            self.buffers.set_caption(lambda: self.tr(
                "Resuming v{0} ({1}, {2}) from its saved KV state…").format(
                v.number, task_label(v.task), strategy_label(v.strategy)))  # fmt: skip
            self.buffers.show_restored(job.layout)  # the cache as the job left it
        if not job.resumed:
            self.gauges.reset(job.n_ctx)
        else:  # the cache figures stay (the state restored holds them); the prompt is not run
            self.gauges.clear_progress()
        if job.comparing:
            self.compare.start(list(job.strategies))
            self.tabs.setCurrentWidget(self.compare)
        else:
            self.tabs.setCurrentWidget(self.buffers)

    def _show_version_job(self, version: VersionInfo) -> None:
        """The toolbar takes a version's job (opened, rolled back to, resumed): its task, prompt,
        strategy and reply size, so what it shows is what runs (and what the next Run asks)."""
        for box, value in ((self.task_box, version.task), (self.strategy_box, version.strategy)):
            index = box.findData(value)
            if index >= 0:
                box.setCurrentIndex(index)
        self.question.setText(version.prompt)
        max_tokens = version.settings.get("max_tokens")
        if isinstance(max_tokens, int):
            self.max_tokens.setValue(max_tokens)

    def _on_job_events(self, events: list[object]) -> None:
        for ev in events:
            if isinstance(ev, ServerLost):  # the job runs again from its start on another server
                self._restart_shown_job()
            self.buffers.on_event(ev)
            self.gauges.on_event(ev)
            self.run_status.on_event(ev)
            if self.session.comparing:
                self.compare.on_event(ev)
            if isinstance(ev, JobFinished) and (resumed := self.session.resuming) is not None:
                self._resumed(resumed, ev.result.evaluated_tokens)
        self.job_events.emit(events)

    def _restart_shown_job(self) -> None:
        """A pool's server was lost mid-job: what it streamed is dropped (the job's result will
        be the next server's, whole), so the stages and the compared panes start again."""
        self.buffers.clear()
        self.run_status.start(self.max_tokens.value())

    def _resumed(self, v: VersionInfo, evaluated: int) -> None:
        """The "Resuming…" caption says the resume is over, and what it cost."""
        self.buffers.set_caption(lambda: self.tr(
            "v{0} ({1}, {2}) resumed from its saved KV state: {3:,} prompt token(s) "
            "evaluated").format(v.number, task_label(v.task), strategy_label(v.strategy),
                                evaluated))  # fmt: skip

    # ----- errors and progress -----

    def _log_ready(self) -> None:
        """A line in the log each time a model and a document are both ready to run (what a
        support request, or a script driving the window, looks for)."""
        doc, loaded = self.session.document, self.session.loaded
        log.info("ready: %s, %s tokens, on a %s-token context",
                 doc.name if doc else "no document", self.session.document_tokens,
                 loaded.n_ctx if loaded else "?")  # fmt: skip

    @property
    def waiting_for(self) -> frozenset[str]:
        """What runs now: "open", "load", "plan", "run", "calibrate"."""
        return self.session.waiting_for

    def _on_failed(self, message: str) -> None:
        if self._shut_down:  # the close itself stopped a load or a run ("loading cancelled"):
            return  # a message box shown now would keep the app running with no window
        message = clip_message(message)  # it may quote a server, a template or a document
        self.last_error = message
        self.model_panel.set_busy(False)
        self.window_status.show_error(message)
        self.failed.emit(message)

    def report_unexpected(self, kind: type[BaseException], exc: BaseException,
                          tb: TracebackType | None) -> None:  # fmt: skip
        """sys.excepthook: a bug is logged with its traceback and shown, never swallowed."""
        log.error("unexpected error", exc_info=(kind, exc, tb))
        self.session.fail(self.tr("Unexpected error (details in the log): {0}: {1}").format(
            kind.__name__, exc))  # fmt: skip

    # ----- layout and closing -----

    def fit_to(self, available: QRect) -> None:
        """Size the window to ``available`` and share it out among the docks (window_layout)."""
        fit_window(self, available, self._view_menu_docks)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LanguageChange and self._shut_down:
            return True  # closed for good: its panels, half torn down, need no new words
        return super().event(event)

    def request_quit(self) -> None:
        """File ▸ Quit (Ctrl+Q): during a run, only once the person says so."""
        if not self.session.running or self.confirm_quit():
            self._quit_confirmed = True
            self.close()

    def _ask_to_quit(self) -> bool:
        box = plain_message_box(QMessageBox(
            QMessageBox.Icon.Question, self.tr("ContextLens"),
            self.tr("A run is going on. Quit anyway? The run is cancelled."),
            parent=self))  # fmt: skip
        quit_button = box.addButton(self.tr("&Quit"), QMessageBox.ButtonRole.AcceptRole)
        keep = box.addButton(self.tr("&Keep Running"), QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(keep)  # Enter and Esc keep the run
        box.setEscapeButton(keep)
        box.exec()
        return box.clickedButton() is quit_button

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._shut_down:  # closed once already: the engine and the store are gone
            event.accept()
            return
        # the window's close button mid-run asks too (a close from code, a test's, does not)
        if (self.session.running and event.spontaneous() and not self._quit_confirmed
                and not self.confirm_quit()):  # fmt: skip
            event.ignore()
            return
        self._shut_down = True
        save_layout(self, self.settings)
        self.gauges.stop()
        self.model_panel.stop_search()
        self.session.close()  # the file being read, the engine, the planning child
        if self.store is not None:
            self.store.close()  # deletions made final, then the database closed
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()

