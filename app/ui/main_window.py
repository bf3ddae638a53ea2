"""The main window: a document, a model, the plan of what reaches it, and the live buffers.

The window is the view over one :class:`SessionModel`: it composes the panels in docks, builds
the menus and the toolbar (app/ui/main_actions.py), and wires the two together. The session's
state, where its slow work runs and when it is recorded are the model's; the window holds no
engine, planning or SQL code, so that each panel only has to follow the model's signals and each
request only has to reach the model with the toolbar's choices as plain values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QByteArray, QEvent, QRect, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core import calibrate
from app.core.documents import Document
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import DEFAULT_N_CTX, EngineCapabilities, LoadedModel, LoadSettings
from app.core.jobs.alignment import alignment_from
from app.core.jobs.events import JobFinished
from app.core.paths import models_dir, sample_document
from app.core.planning.plan import Plan
from app.core.textutil import clip_message
from app.services.errors import BadRequest
from app.services.history import History, VersionInfo, open_history
from app.services.question_plans import SideBySide
from app.services.versions import OpenedVersion
from app.ui.buffer_panel import BufferPanel
from app.ui.compare_view import MAX_PANES, CompareView
from app.ui.document_view import DocumentView
from app.ui.engine_thread import ServerSpec
from app.ui.gauges import GaugesPanel
from app.ui.help import about_box
from app.ui.history_panel import SUFFIX as SESSION_SUFFIX
from app.ui.history_panel import HistoryPanel
from app.ui.i18n import FollowsLanguage, Retranslated, finish_label, strategy_label, task_label
from app.ui.main_actions import MainActions
from app.ui.model_offer import ModelOffer
from app.ui.model_panel import MAX_CTX, MIN_CTX, ModelPanel
from app.ui.no_model_banner import NoModelBanner
from app.ui.plan_index import PlanIndex
from app.ui.question_plans import QuestionPlansView
from app.ui.run_status import RunStatus
from app.ui.sampling_box import SamplingBox
from app.ui.session_model import JobChoices, SessionModel, StartedJob
from app.ui.widgets import ElidedLabel, plain_label, plain_message_box, scrolling

log = logging.getLogger(__name__)
USE_TUNED_KEY = "model/use_tuned"
REPLAN_DELAY_MS = 400  # after the last keystroke in the question
DEFAULT_SIZE = QSize(1400, 900)  # on screens large enough; smaller ones get all they have


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
        self._resuming: VersionInfo | None = None  # the rolled-back version now resuming
        self._open_store(db_path)
        self.session = SessionModel(self.store, n_ctx, self)
        self.engine = self.session.engine
        self._replan_timer = QTimer(self, singleShot=True, interval=REPLAN_DELAY_MS)
        self._replan_timer.timeout.connect(self.update_plan)
        self._texts = Retranslated()
        self._build_panels()
        self._build_actions()
        self.retranslate()
        self._wire_session()
        self._restore_layout()
        self.session.choose(self.choices())

        self.model_panel.n_ctx.setValue(n_ctx)  # what Load uses, --n-ctx included
        if document is not None:
            self.open_path(document)
        if model is not None:
            self.model_panel.select_model(model)
            self.load_model(model, LoadSettings(n_ctx=n_ctx))
        else:
            self._show_no_model()

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
        self.model_panel.load_requested.connect(self.load_model)
        self.model_panel.model_fetched.connect(self._on_default_model_fetched)
        self.no_model.fetch_requested.connect(self.model_panel.get_default_model)
        self.no_model.choose_requested.connect(self._choose_model)
        self.model_panel.models_listed.connect(self._on_models_listed)
        self.model_panel.server.connect_requested.connect(self.connect_server)
        self.model_panel.server.disconnect_requested.connect(self.session.unload)
        self.model_panel.calibrate_requested.connect(self.calibrate_model)
        self.model_panel.calibration_cancel_requested.connect(self.session.cancel_calibration)
        self.model_panel.unload_requested.connect(self.session.unload)
        use_tuned = self.model_panel.tuning.use_tuned
        use_tuned.setChecked(bool(self.settings.value(USE_TUNED_KEY, True, type=bool)))
        use_tuned.toggled.connect(lambda on: self.settings.setValue(USE_TUNED_KEY, on))
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

        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 0)
        self.progress.hide()
        # what a run is doing ("Window 3 of 9 · prompt 1,200 of 3,700 tokens · 14 s left"),
        # beside the messages: a "Cancelling…" or an error is never written over
        self.run_line = ElidedLabel()
        self.run_line.setFixedWidth(self.fontMetrics().averageCharWidth() * 56)
        self.run_line.hide()
        self.run_status = RunStatus(self)
        self.run_status.changed.connect(self._show_run_status)
        self.statusBar().addPermanentWidget(self.run_line)
        self.statusBar().addPermanentWidget(self.progress)

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
        c.open_action.triggered.connect(self._choose_document)
        c.open_recent.connect(self.open_document)
        start = self.document_view.start
        start.open_requested.connect(self._choose_document)
        start.sample_requested.connect(lambda: self.open_document(sample_document()))
        start.recent_chosen.connect(self.open_document)
        start.set_recent(c.recent())
        c.recent_changed.connect(start.set_recent)
        c.get_model_action.triggered.connect(self.model_panel.get_default_model)
        c.get_hub_model_action.triggered.connect(self.model_panel.get_hub_model)
        c.about_action.triggered.connect(lambda: about_box(self, self.session.capabilities))
        c.task_box.currentIndexChanged.connect(lambda _i: self.update_plan())
        c.question.textChanged.connect(self._replan_soon)
        c.strategy_box.currentIndexChanged.connect(lambda _i: self.update_plan())
        c.max_tokens.valueChanged.connect(lambda _v: self.update_plan())
        # (a triggered(bool) signal must not become the strategy argument)
        c.run_action.triggered.connect(lambda _checked=False: self.run_job())
        c.question.returnPressed.connect(self._run_from_question)
        c.compare_button.clicked.connect(lambda _checked=False: self.run_compare())
        c.cancel_action.triggered.connect(self.cancel)
        c.cancel_button.clicked.connect(self.cancel)

    def _wire_session(self) -> None:
        """Each panel follows the session model's signals."""
        s = self.session
        s.document_changed.connect(self._on_document_changed)
        s.counts_changed.connect(self.document_view.set_counts)
        s.plan_changed.connect(self._on_plan_changed)
        s.question_plans_changed.connect(self._on_question_plans_changed)
        s.model_loaded.connect(self._on_model_loaded)
        s.server_connected.connect(self._on_server_connected)
        s.server_failed.connect(self.model_panel.server.show_error)
        s.model_unloaded.connect(self._on_model_unloaded)
        s.calibration_progress.connect(self._on_calibration_progress)
        s.calibrated.connect(self._on_calibrated)
        s.calibration_stopped.connect(self.model_panel.show_calibration_stopped)
        s.background_calibration.connect(self.model_panel.show_background_calibration)
        s.calibration_offered.connect(self.model_panel.offer_calibration)
        s.background_calibration_stopped.connect(self.model_panel.show_background_stopped)
        s.job_started.connect(self._on_job_started)
        s.running_changed.connect(self._on_running_changed)
        s.job_events.connect(self._on_job_events)
        s.needle_retention.connect(self.compare.set_needle_retention)
        s.sampling_restored.connect(self.sampling_box.set_settings)
        if self.history is not None:
            s.recorded.connect(self.history.set_session)
            s.current_changed.connect(self.history.set_current)
            s.history_changed.connect(self.history.on_history_changed)
        s.version_opened.connect(self._on_version_opened)
        s.thread_changed.connect(self.buffers.thread.set_turns)
        self.buffers.thread.open_requested.connect(s.open_version)
        s.version_restored.connect(self._show_version_job)
        s.waits_changed.connect(self._on_waits_changed)
        s.status.connect(self.statusBar().showMessage)
        s.status_over.connect(self._clear_status)
        s.failed.connect(self._on_failed)
        s.ready.connect(self.ready)
        s.ready.connect(self._log_ready)
        s.job_finished.connect(self.job_finished)
        s.job_finished.connect(self._take_next_question)
        s.engine_restarted.connect(self.engine_restarted)
        self.model_offer = ModelOffer(self)  # a Run without a model offers one
        s.model_needed.connect(self.model_offer.offer)

    def choices(self) -> JobChoices:
        """What the toolbar, the Job menu and the Sampling box hold now."""
        return self.controls.choices(self.sampling_box.settings())

    # ----- documents -----

    def _choose_document(self) -> None:
        start = str(self.settings.value("last_folder", ""))
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Open Document"), start)
        if path:
            self.open_document(Path(path))

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
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.open_path(Path(url.toLocalFile()))
                event.acceptProposedAction()
                return

    def open_path(self, path: Path) -> None:
        """A file from the command line, a second launch or a drop: a ``.gguf`` is chosen as
        the model, a ``.ctxlens`` session export is imported into the history, anything else
        opens as the document."""
        suffix = path.suffix.lower()
        if suffix == ".gguf":
            self.model_panel.select_model(path)
        elif suffix == SESSION_SUFFIX:
            if self.history is None:
                self.session.fail(self.tr("{0} cannot be imported: {1}").format(
                    path.name, self._store_problem))  # fmt: skip
                return
            self.tabs.setCurrentWidget(self.history)
            self.history.import_file(path)
        else:
            self.open_document(path)

    def launch_refusal(self, options: Mapping[str, object]) -> str:
        """Why this window cannot take the options a later ``contextlens`` launch gave (see
        take_launch), in one sentence the launch prints before it exits 1 ("": it can)."""
        n_ctx = options.get("n_ctx")
        if isinstance(n_ctx, int):
            if not MIN_CTX <= n_ctx <= MAX_CTX:
                return self.tr("--n-ctx {0:,} is not a context size ContextLens loads "
                               "({1:,} to {2:,}).").format(n_ctx, MIN_CTX, MAX_CTX)  # fmt: skip
            if self.session.running:
                return self.tr("The running ContextLens window is busy with a run, so it cannot "
                               "load the model again at --n-ctx {0:,}: cancel the run first, or "
                               "start another window with --new-instance.").format(n_ctx)
            if self.session.server is not None:
                return self.tr("The running ContextLens window works with a server, whose "
                               "context size the server sets: --n-ctx cannot change it.")
        for key, choices in self._view_choices():
            value = options.get(key)
            if isinstance(value, str) and value not in choices:
                return self.tr("--{0} {1} is not one of this window's choices: {2}.").format(
                    key, value, ", ".join(choices))  # fmt: skip
        return ""

    def take_launch(self, paths: Sequence[Path], options: Mapping[str, object]) -> None:
        """What a later ``contextlens [--n-ctx N] [--lang L] [--theme T] FILE…`` handed over
        (launch_refusal has let it in): the files open as open_path opens them, the language
        and theme change as the View menu changes them, and a context size loads the model
        again at that size (the model given, else the one loaded; with none loaded it is the
        size the next load uses)."""
        for path in paths:
            self.open_path(path)
        for key, choices in self._view_choices():
            action = choices.get(str(options.get(key)))
            if action is not None and not action.isChecked():
                action.trigger()
        n_ctx = options.get("n_ctx")
        if not isinstance(n_ctx, int):
            return
        model = next((p for p in paths if p.suffix.lower() == ".gguf"), None)
        model = model or (self.session.model_path if self.session.loaded is not None else None)
        if model is None:
            self.model_panel.n_ctx.setValue(n_ctx)
            return
        loaded = self.session.loaded
        if loaded is not None and loaded.n_ctx == n_ctx and Path(loaded.path) == model:
            return  # loaded so already
        self.load_model(model, replace(self.model_panel.settings(), n_ctx=n_ctx))

    def _view_choices(self) -> tuple[tuple[str, dict[str, QAction]], ...]:
        """The launch options the View menu chooses, each with its menu's entries by name."""
        languages = {str(a.data()): a for a in self.controls.language_menu.actions()}
        return (("lang", languages), ("theme", self.controls.theme_actions))

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
        self.session.update_plan(self.choices())

    def _replan_soon(self) -> None:
        """The question frames the plan too (its room, or extract's instruction): plan again
        once typing pauses."""
        self.session.choose(self.choices())
        self._replan_timer.start()

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
        """Load ``path``, with the settings tuned for this machine when the panel says so
        (measured now when there are none yet, or when ``fresh``)."""
        if self.session.server is not None:  # the engine lets the server go before it loads
            self.model_panel.server.show_disconnected()
        self.model_panel.n_ctx.setValue(settings.n_ctx)
        self.model_panel.set_busy(True)
        self.session.load_model(Path(path), settings, tuned=self.model_panel.use_tuned(),
                                fresh=fresh)  # fmt: skip

    def connect_server(self, spec: ServerSpec, use_local_model: bool = False) -> None:
        """Run jobs on the server ``spec`` names; with ``use_local_model`` the GGUF selected in
        the model panel (the same model) gives exact counts and its chat template."""
        local = self.model_panel.selected_model() if use_local_model else None
        self.session.connect_server(spec, local)

    def calibrate_model(self, path: Path, settings: LoadSettings) -> None:
        """Measure the candidates anew ("Calibrate again"), then load the fastest."""
        self.load_model(path, settings, fresh=True)

    def _on_model_loaded(self, info: ModelInfo, loaded: LoadedModel,
                         caps: EngineCapabilities | None) -> None:  # fmt: skip
        if not self.session.running:  # the KV stage shows the context just loaded, not 4,096
            self.buffers.reset(loaded.n_ctx)
        self.buffers.set_sliding_window(
            loaded.sliding_window if info.swa_layers else 0, len(info.swa_layers),
            info.n_layers or len(info.kv_heads_per_layer),
        )  # fmt: skip
        self.no_model.hide()
        self.model_panel.set_busy(False)
        self.model_panel.show_loaded(loaded)
        if caps is not None:
            self.model_panel.set_capabilities(caps)
        self.gauges.set_engine_pid(self.engine.driver.engine_pid)
        self.gauges.set_n_ctx(loaded.n_ctx)
        self.gauges.set_threads(max(loaded.n_threads, loaded.n_threads_batch))

    def _on_server_connected(self, info: ServerInfo) -> None:
        self.no_model.hide()
        self.model_panel.show_server(info)
        self.buffers.set_sliding_window(0, 0, 0)  # a server does not say
        self.gauges.set_engine_pid(None)
        self.gauges.set_n_ctx(info.n_ctx)
        self.gauges.set_threads(0)  # the server's own

    def _show_no_model(self) -> None:
        """The banner says what to do first: choose a model found here, or get the default."""
        self.no_model.set_found(self.model_panel.model_count())
        self.no_model.show()

    def _on_models_listed(self, count: int) -> None:
        """The search for models answered: the banner, while shown, counts what it found."""
        if not self.no_model.isHidden():
            self.no_model.set_found(count)

    def _choose_model(self) -> None:
        """The banner's Choose a Model: the model panel, shown and with the list in focus."""
        dock = self.model_panel.parentWidget()
        while dock is not None and not isinstance(dock, QDockWidget):
            dock = dock.parentWidget()
        if dock is not None:
            dock.show()
            dock.raise_()
        self.model_panel.models.setFocus()

    def _on_default_model_fetched(self, path: Path) -> None:
        """The model fetched from the banner (or the panel) loads at once when none is."""
        if self.session.model_path is None and self.session.server is None:
            self.load_model(path, self.model_panel.settings())

    def _on_model_unloaded(self) -> None:
        self._show_no_model()
        self.model_panel.show_unloaded()
        self.buffers.set_sliding_window(0, 0, 0)
        self.gauges.set_engine_pid(None)
        self.gauges.set_n_ctx(0)
        self.gauges.set_threads(0)

    def _on_calibration_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.model_panel.show_calibrating(done, total)

    def _on_calibrated(self, calibration: calibrate.Calibration, measured_now: bool) -> None:
        path = self.session.model_path
        if path is not None:
            self.model_panel.show_calibration(path, calibration, measured_now)

    # ----- jobs -----

    def run_job(self, strategy: str | None = None) -> None:
        """Run the task under ``strategy`` (None: the one chosen in the toolbar)."""
        self.session.run_job(self.choices(), strategy)

    def _run_from_question(self) -> None:
        """Enter in the question box runs it, as Ctrl+R does (not while a run is going on)."""
        if self.run_action.isEnabled():
            self.run_action.trigger()

    def run_compare(self, strategies: list[str] | None = None) -> None:
        """Run the task under ``strategies`` (None: those ticked in the Compare menu), side by
        side in the Compare tab."""
        chosen = strategies or self.controls.compared()
        if not 2 <= len(chosen) <= MAX_PANES:
            self.session.fail(
                self.tr("Choose two to four strategies to compare (Compare menu).")
            )
            return
        self.session.run_compare(self.choices(), tuple(chosen))

    def cancel(self) -> None:
        """Esc: stop whatever the person waits for — the job, the plan, the file being read."""
        self.session.cancel()

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
            self._resuming = v
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
        """The toolbar takes a version's job (rolled back to, or resumed): its task, prompt,
        strategy and reply size, so what it shows is what runs (and what the next Run asks)."""
        for box, value in ((self.task_box, version.task), (self.strategy_box, version.strategy)):
            index = box.findData(value)
            if index >= 0:
                box.setCurrentIndex(index)
        self.question.setText(version.prompt)
        max_tokens = version.settings.get("max_tokens")
        if isinstance(max_tokens, int):
            self.max_tokens.setValue(max_tokens)

    def _on_version_opened(self, opened: OpenedVersion) -> None:
        """An old version shown again: its recorded reply in the output buffer (its plan, when
        made on this document, is on the document already: see WorkbenchModel.open_version)."""
        v = opened.version

        def caption() -> str:  # again in the words of a language chosen meanwhile
            return self.tr("v{0} of session #{1}: {2} · {3} · {4}").format(
                v.number, v.session, task_label(v.task), strategy_label(v.strategy),
                finish_label(opened.finish_reason) if opened.finish_reason
                else self.tr("not run"))  # fmt: skip

        self.buffers.set_questions(v.prompt.split("\n") if v.task == "ask" else [])
        outputs = [(str(o.get("step", "")), str(o.get("text", "")),
                    tuple((int(a), int(b)) for a, b in o.get("source_spans", ())),
                    alignment_from(o.get("alignment")))  # () for runs recorded before it
                   for o in opened.outputs]  # fmt: skip
        self.buffers.show_outputs(caption, outputs)
        self.tabs.setCurrentWidget(self.buffers)

    def _take_next_question(self, outcome: object) -> None:
        """After an answer the question box takes the next question (typing replaces it)."""
        if self.task_box.currentData() == "ask" and self.question.isEnabled():
            self.question.selectAll()
            self.question.setFocus()

    def _on_running_changed(self, running: bool) -> None:
        self.run_action.setEnabled(not running)
        self.controls.compare_button.setEnabled(not running)

    def _on_job_events(self, events: list[object]) -> None:
        for ev in events:
            self.buffers.on_event(ev)
            self.gauges.on_event(ev)
            self.run_status.on_event(ev)
            if self.session.comparing:
                self.compare.on_event(ev)
            if isinstance(ev, JobFinished) and self._resuming is not None:
                self._resumed(self._resuming, ev.result.evaluated_tokens)
        self.job_events.emit(events)

    def _resumed(self, v: VersionInfo, evaluated: int) -> None:
        """The "Resuming…" caption says the resume is over, and what it cost."""
        self._resuming = None
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

    def _clear_status(self, message: str) -> None:
        """A wait is over: its "…ing" line goes, unless a newer message replaced it."""
        if self.statusBar().currentMessage() == message:
            self.statusBar().clearMessage()

    def _on_waits_changed(self, waits: frozenset[str]) -> None:
        """The status bar's busy bar shows while anything runs, its Cancel (and Esc) while
        something that can be cancelled does."""
        self.progress.setVisible(bool(waits))
        running = "run" in waits
        if not running:
            self.run_status.stop()
            self.run_line.hide()
        if "calibrate" in waits:
            pass  # the calibration counts its trials (_on_calibration_progress)
        elif running and self.run_status.active:
            self._show_run_status(*self.run_status.shown)
        else:
            self.progress.setRange(0, 0)  # busy: a load or a plan has no steps to count
        cancellable = self.session.cancellable
        self.controls.cancel_button.setVisible(cancellable)
        self.cancel_action.setEnabled(cancellable)

    def _show_run_status(self, line: str, value: int, maximum: int) -> None:
        self.run_line.setText(line)
        self.run_line.show()
        self.progress.setRange(0, maximum)
        self.progress.setValue(value)

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
        self.statusBar().showMessage(message)
        # open(), not exec(): the message is window-modal but never blocks the event loop.
        box = QMessageBox(QMessageBox.Icon.Warning, self.tr("ContextLens"), message,
                          QMessageBox.StandardButton.Ok, self)  # fmt: skip
        plain_message_box(box)  # the message may quote a file, a server or an archive
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.failed.emit(message)

    def report_unexpected(self, kind: type[BaseException], exc: BaseException,
                          tb: TracebackType | None) -> None:  # fmt: skip
        """sys.excepthook: a bug is logged with its traceback and shown, never swallowed."""
        log.error("unexpected error", exc_info=(kind, exc, tb))
        self.session.fail(self.tr("Unexpected error (details in the log): {0}: {1}").format(
            kind.__name__, exc))  # fmt: skip

    # ----- layout and closing -----

    def _restore_layout(self) -> None:
        """The layout the person left, or one proportioned to the screen; either way the window
        fits the screen it opens on (a layout saved on a larger screen is brought inside)."""
        geometry = self.settings.value("geometry")
        state = self.settings.value("window_state")
        screen = self.screen().availableGeometry()
        if isinstance(geometry, QByteArray) and self.restoreGeometry(geometry):
            if isinstance(state, QByteArray):
                self.restoreState(state)
            for splitter in self._named_splitters():
                saved = self.settings.value(f"splitters/{splitter.objectName()}")
                if isinstance(saved, QByteArray):
                    splitter.restoreState(saved)
            if not screen.contains(self.frameGeometry()):
                self.fit_to(screen)
        else:
            self.fit_to(screen)

    def _named_splitters(self) -> list[QSplitter]:
        """The panels' splitters whose place is kept from one start to the next."""
        return [s for s in self.findChildren(QSplitter) if s.objectName().startswith("splitter-")]

    def fit_to(self, available: QRect) -> None:
        """Size the window to ``available`` (at most the default 1400x900) and share it out: the
        document keeps the widest part, the model and the buffers take a quarter and a third
        of the width, the gauges a quarter of the height at most."""
        width = min(DEFAULT_SIZE.width(), available.width())
        height = min(DEFAULT_SIZE.height(), available.height())
        self.setGeometry(QRect(available.topLeft(), QSize(width, height)))
        docks = {d.objectName(): d for d in self._view_menu_docks}
        self.resizeDocks([docks["dock-gauges"]], [min(230, height // 4)],
                         Qt.Orientation.Vertical)  # fmt: skip
        self.resizeDocks([docks["dock-model"], docks["dock-stages"]],
                         [max(240, width * 23 // 100), width * 36 // 100],
                         Qt.Orientation.Horizontal)  # fmt: skip

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
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("window_state", self.saveState())
        for splitter in self._named_splitters():
            self.settings.setValue(f"splitters/{splitter.objectName()}", splitter.saveState())
        self.gauges.stop()
        self.model_panel.stop_search()
        self.session.close()  # the file being read, the engine, the planning child
        if self.store is not None:
            self.store.close()  # deletions made final, then the database closed
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()

