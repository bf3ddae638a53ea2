"""The main window: a document, a model, the plan of what reaches it, and the live buffers.

The window composes the panels and wires them together; it holds no engine or SQL code. Slow
work never runs here: the engine thread owns llama.cpp (loads, jobs), a child process plans and
counts the document whenever its counter can be rebuilt there (so its GIL-bound Python never
stalls this process; stale plan requests are skipped), a one-thread pool waits on it in order
(or plans in this process when it cannot), and store calls run in the background. Panels only
observe events and emit requests.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from PySide6.QtCore import QByteArray, QSettings, Qt, QThreadPool, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QFrame,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QToolBar,
    QToolButton,
    QWidget,
)
from shiboken6 import isValid

from app import __version__
from app.core import calibrate
from app.core.default_model import sha256_of
from app.core.documents import Document
from app.core.documents.isolated import ReadCancelled, read_document
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import EngineCapabilities, LoadedModel, LoadSettings
from app.core.gc_pause import gc_paused
from app.core.jobs.tasks import DEFAULT_LANES, JobFinished, planning
from app.core.paths import models_dir
from app.core.planning.frame import FrameSource
from app.core.planning.plan import Plan
from app.core.planning.process import PlanProcess, Superseded
from app.core.planning.strategies import STRATEGIES, Planner, needle_spans, plan_for
from app.core.sampling import from_version, stored
from app.core.tokens import CL100K_KEY, TokenCounter, cl100k, counter_key
from app.store.db import Database, StoreError, open_database
from app.store.repository import Entry, Repository
from app.ui.background import run_in_background
from app.ui.buffer_panel import BufferPanel
from app.ui.compare_view import MAX_PANES, CompareView
from app.ui.document_view import DocumentView
from app.ui.engine_thread import (
    EngineThread,
    JobOutcome,
    JobSpec,
    ResumeSpec,
    ServerSpec,
    TuneSpec,
)
from app.ui.gauges import GaugesPanel
from app.ui.history_panel import SUFFIX as SESSION_SUFFIX
from app.ui.history_panel import HistoryPanel
from app.ui.i18n import language_menu, task_label
from app.ui.model_panel import ModelPanel
from app.ui.plan_index import PlanIndex, index_plan
from app.ui.sampling_box import SamplingBox
from app.ui.theme import apply_theme, current_theme
from app.ui.widgets import plain_label, plain_message_box

log = logging.getLogger(__name__)
MAX_RECENT = 8
TASKS = ("summarize", "ask", "extract")
# a model load runs to its end; the calibration before it can stop (the load then goes on)
CANCELLABLE = frozenset({"open", "plan", "run", "calibrate"})
USE_TUNED_KEY = "model/use_tuned"
REPLAN_DELAY_MS = 400  # after the last keystroke in the question


class MainWindow(QMainWindow):
    ready = Signal()  # the model is loaded and the document's tokens are counted
    failed = Signal(str)  # something the person was told about went wrong
    plan_shown = Signal(object)  # the Plan now highlighted in the document
    job_finished = Signal(object)  # JobOutcome, once recorded in the history
    job_events = Signal(list)  # each batch of job events, after the panels have shown it
    engine_restarted = Signal()  # llama.cpp died and a new engine has the model loaded again
    closed = Signal()  # the window was closed cleanly (its engine and store shut down)

    def __init__(
        self,
        model: Path | None,
        document: Path | None,
        n_ctx: int = 8192,
        *,
        db_path: Path | None = None,
        settings: QSettings | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("ContextLens")
        self.setAcceptDrops(True)
        self.resize(1400, 900)
        self.settings = settings or QSettings()
        self.last_error = ""
        self._n_ctx = n_ctx
        self._model_path: Path | None = None
        self._model_sha = ""
        self._loaded: LoadedModel | None = None
        self._server: ServerInfo | None = None  # jobs run on this server, not a model here
        self._shut_down = False  # closeEvent has stopped the engine and closed the store
        self._doc: Document | None = None
        self._doc_tokens: int | None = None
        self._doc_estimate: int | None = None  # cl100k tokens, once counted
        self._planner: Planner | None = None  # plans in this process when the child cannot
        self._plan: Plan | None = None
        self._plan_generation = 0
        self._plans_pending: set[int] = set()  # generations of the plans being made
        self._open_generation = 0
        self._open_cancel = threading.Event()  # set: the file being read is no longer wanted
        self._waits: set[str] = set()  # see _wait
        self.plans = PlanProcess()  # plans and counts in a child process, started on first use
        self._plan_pool = QThreadPool(self)
        self._plan_pool.setMaxThreadCount(1)  # plans are answered in the order they were asked
        self._replan_timer = QTimer(self, singleShot=True, interval=REPLAN_DELAY_MS)
        self._replan_timer.timeout.connect(self.update_plan)
        self._running = False
        self._starting: JobSpec | None = None  # a job whose plans are being made
        self._cancel_start = False
        self._comparing = False
        self._resuming: int | None = None  # the version a rollback is generating for
        self._resuming_session = 0
        self._system_info = self._engine_version = ""  # from the engine child, once started
        # The candidates a first load measures (None: calibrate's own); fewer make it quicker.
        self.calibration_trials: tuple[LoadSettings, ...] | None = None

        self.engine = EngineThread(self)
        self._open_store(db_path)
        self._build_panels()
        self._build_actions()
        self._wire_engine()
        self._restore_layout()

        if document is not None:
            self.open_path(document)
        if model is not None:
            self.model_panel.select_model(model)
            self.load_model(model, LoadSettings(n_ctx=n_ctx))

    # ----- building -----

    def _open_store(self, db_path: Path | None) -> None:
        self.db: Database | None = None
        self.repo: Repository | None = None
        try:
            self.db = open_database(db_path)
        except StoreError as exc:
            self._store_problem = str(exc)
            return
        self._store_problem = self.db.notice or ""
        self.repo = Repository(self.db)

    def _build_panels(self) -> None:
        self.document_view = DocumentView()
        self.setCentralWidget(self.document_view)

        self.model_panel = ModelPanel(models_dir(), settings=self.settings)
        self.model_panel.load_requested.connect(self.load_model)
        self.model_panel.server.connect_requested.connect(self.connect_server)
        self.model_panel.server.disconnect_requested.connect(self.engine.request_unload)
        self.model_panel.calibrate_requested.connect(self.calibrate_model)
        self.model_panel.calibration_cancel_requested.connect(self.engine.cancel)
        self.model_panel.unload_requested.connect(self.engine.request_unload)
        use_tuned = self.model_panel.tuning.use_tuned
        use_tuned.setChecked(bool(self.settings.value(USE_TUNED_KEY, True, type=bool)))
        use_tuned.toggled.connect(lambda on: self.settings.setValue(USE_TUNED_KEY, on))
        # scrolls rather than squeezing its wrapped hints when the window is short
        model_scroll = QScrollArea()
        model_scroll.setWidget(self.model_panel)
        model_scroll.setWidgetResizable(True)
        model_scroll.setFrameShape(QFrame.Shape.NoFrame)
        model_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._dock("model", self.tr("Model"), model_scroll, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.sampling_box = SamplingBox(self.settings)  # what the next Run samples with
        self._dock("sampling", self.tr("Sampling"), self.sampling_box,
                   Qt.DockWidgetArea.LeftDockWidgetArea)  # fmt: skip

        self.buffers = BufferPanel()
        self.buffers.source_clicked.connect(self.document_view.highlight_sources)
        self.compare = CompareView()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.buffers, self.tr("&Buffers"))
        self.tabs.addTab(self.compare, self.tr("Comp&are"))
        if self.repo is not None:
            self.history: HistoryPanel | None = HistoryPanel(self.repo)
            self.history.rolled_back.connect(self._on_rolled_back)
            self.history.failed.connect(self._on_failed)
            self.tabs.addTab(self.history, self.tr("Histor&y"))
        else:
            self.history = None
            self.tabs.addTab(plain_label(self._store_problem), self.tr("Histor&y"))
        self._dock("stages", self.tr("Three-stage buffer"), self.tabs,
                   Qt.DockWidgetArea.RightDockWidgetArea)  # fmt: skip

        self.gauges = GaugesPanel()
        self._dock("gauges", self.tr("Gauges"), self.gauges, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.gauges.start()  # redraws ~10 times a second while shown
        docks = {d.objectName(): d for d in self._view_menu_docks}
        self.resizeDocks([docks["dock-gauges"]], [230], Qt.Orientation.Vertical)
        self.resizeDocks([docks["dock-model"], docks["dock-stages"]], [330, 560],
                         Qt.Orientation.Horizontal)  # fmt: skip

        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 0)
        self.progress.hide()
        self.statusBar().addPermanentWidget(self.progress)

    def _dock(self, name: str, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> None:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock-{name}")  # saveState needs names
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self._view_menu_docks = [*getattr(self, "_view_menu_docks", []), dock]

    def _build_actions(self) -> None:
        bar = QToolBar(self.tr("Job"))
        bar.setObjectName("toolbar-job")
        self.addToolBar(bar)

        file_menu = self.menuBar().addMenu(self.tr("&File"))
        open_action = QAction(self.tr("&Open Document…"), self)
        open_action.setShortcut(QKeySequence.StandardKey.Open)
        open_action.triggered.connect(self._choose_document)
        file_menu.addAction(open_action)
        self.recent_menu = file_menu.addMenu(self.tr("Open &Recent"))
        self._fill_recent()
        get_model = file_menu.addAction(self.tr("Get the &Default Model…"))
        get_model.triggered.connect(self.model_panel.get_default_model)
        file_menu.addSeparator()
        quit_action = QAction(self.tr("&Quit"), self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)
        bar.addAction(open_action)

        self.task_box = QComboBox()
        for task in TASKS:
            self.task_box.addItem(task_label(task), task)
        self.task_box.setToolTip(self.tr("What the model does with the document"))
        self.task_box.currentIndexChanged.connect(self._on_task_changed)
        bar.addWidget(_buddy(self.tr(" &Task "), self.task_box))
        bar.addWidget(self.task_box)
        self.question = QLineEdit()
        self.question.setPlaceholderText(self.tr("Question, or instruction for extract"))
        self.question.setMinimumWidth(240)
        self.question.setEnabled(False)
        self.question.textChanged.connect(self._replan_soon)
        bar.addWidget(self.question)

        self.strategy_box = QComboBox()
        for name in STRATEGIES:
            self.strategy_box.addItem(name, name)
        self.strategy_box.setCurrentIndex(self.strategy_box.findData("head"))
        self.strategy_box.setToolTip(self.tr("What to do with a document longer than the context"))
        self.strategy_box.currentIndexChanged.connect(lambda _i: self.update_plan())
        bar.addWidget(_buddy(self.tr(" &Strategy "), self.strategy_box))
        bar.addWidget(self.strategy_box)

        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 8192)
        self.max_tokens.setValue(256)
        self.max_tokens.setToolTip(self.tr("Longest reply, in tokens (kept free in the context)"))
        self.max_tokens.valueChanged.connect(lambda _v: self.update_plan())
        bar.addWidget(_buddy(self.tr(" Rep&ly "), self.max_tokens))
        bar.addWidget(self.max_tokens)

        self.run_action = QAction(self.tr("&Run"), self)
        self.run_action.setShortcut(QKeySequence("Ctrl+R"))
        self.run_action.triggered.connect(self._run_clicked)
        bar.addAction(self.run_action)

        self.compare_button = QToolButton()
        self.compare_button.setText(self.tr("Com&pare"))
        self.compare_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        menu = self.menuBar().addMenu(self.tr("&Compare"))
        self.compare_choices: dict[str, QAction] = {}
        for name in STRATEGIES:
            choice = QAction(name, self, checkable=True)
            choice.setChecked(name in ("head", "entropy", "map-reduce"))
            menu.addAction(choice)
            self.compare_choices[name] = choice
        self.compare_button.setMenu(menu)
        self.compare_button.clicked.connect(self._compare_clicked)
        bar.addWidget(self.compare_button)

        self.needles = QLineEdit()
        self.needles.setPlaceholderText(self.tr("Needles: facts to track, separated by |"))
        self.needles.setToolTip(
            self.tr("Texts from the document; Compare shows the share that reaches the model")
        )
        self.needles.setMaximumWidth(220)
        bar.addWidget(self.needles)

        self.cancel_action = QAction(self.tr("&Cancel"), self)
        self.cancel_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.cancel_action.setEnabled(False)
        self.cancel_action.triggered.connect(self.cancel)
        bar.addAction(self.cancel_action)
        job_menu = self.menuBar().addMenu(self.tr("&Job"))
        job_menu.addAction(self.run_action)
        job_menu.addAction(self.cancel_action)
        job_menu.addSeparator()
        self.audit_action = QAction(self.tr("&Audit Each Run Against llama.cpp"), self,
                                    checkable=True)  # fmt: skip
        self.audit_action.setToolTip(
            self.tr("Check after each model call that llama.cpp holds exactly the plan shown")
        )
        self.audit_action.setChecked(self.settings.value("audit", False, type=bool))
        self.audit_action.toggled.connect(lambda on: self.settings.setValue("audit", on))
        job_menu.addAction(self.audit_action)
        self._add_lanes_menu(job_menu)
        cancel_button = QPushButton(self.tr("Cancel"))
        cancel_button.clicked.connect(self.cancel)
        cancel_button.hide()
        self._progress_cancel = cancel_button
        self.statusBar().addPermanentWidget(cancel_button)

        view_menu = self.menuBar().addMenu(self.tr("&View"))
        for dock in self._view_menu_docks:
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
        docks = {d.objectName(): d for d in self._view_menu_docks}
        for text, keys, target, dock in (
            (self.tr("Go to the &Document"), "Ctrl+1", self.document_view, None),
            (self.tr("Go to the &Model"), "Ctrl+2", self.model_panel, docks["dock-model"]),
            (self.tr("Go to the &Three-Stage Buffer"), "Ctrl+3", self.tabs, docks["dock-stages"]),
        ):
            go = QAction(text, self)
            go.setShortcut(QKeySequence(keys))
            go.triggered.connect(lambda _c=False, t=target, d=dock: _focus_into(t, d))
            view_menu.addAction(go)
        view_menu.addSeparator()
        theme_menu = view_menu.addMenu(self.tr("T&heme"))
        themes = QActionGroup(self)
        current = current_theme(
            QApplication.instance(), str(self.settings.value("theme", "system"))
        )
        for name, text in (("system", self.tr("&System")), ("light", self.tr("&Light")),
                           ("dark", self.tr("&Dark"))):  # fmt: skip
            choice = QAction(text, self, checkable=True)
            choice.setData(name)
            choice.setChecked(name == current)
            themes.addAction(choice)
            theme_menu.addAction(choice)
        themes.triggered.connect(self._set_theme)
        view_menu.addMenu(language_menu(self, self.settings, self.statusBar().showMessage))

        help_menu = self.menuBar().addMenu(self.tr("&Help"))
        about = QAction(self.tr("&About ContextLens"), self)
        about.triggered.connect(self._about)
        help_menu.addAction(about)

    def _set_theme(self, choice: QAction) -> None:
        name = str(choice.data())
        self.settings.setValue("theme", name)
        apply_theme(QApplication.instance(), name)

    def _wire_engine(self) -> None:
        w = self.engine.worker
        w.model_loaded.connect(self._on_model_loaded)
        w.server_connected.connect(self._on_server_connected)
        w.server_failed.connect(self._on_server_failed)
        w.unloaded.connect(self._on_unloaded)
        w.tokens_counted.connect(self._on_tokens_counted)
        w.job_events.connect(self._on_job_events)
        w.job_done.connect(self._on_job_done)
        w.crashed.connect(self._on_crashed)
        # Bound methods only: a lambda connected to the worker's signals would run on the
        # engine thread, and widgets must only be touched on the GUI thread.
        w.restarted.connect(self._on_restarted)
        w.failed.connect(self._on_failed)
        w.status.connect(self.statusBar().showMessage)
        w.calibration_progress.connect(self._on_calibration_progress)
        w.calibrated.connect(self._on_calibrated)
        w.calibration_stopped.connect(self._on_calibration_stopped)

    # ----- documents -----

    def _choose_document(self) -> None:
        start = str(self.settings.value("last_folder", ""))
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Open Document"), start)
        if path:
            self.open_document(Path(path))

    def open_document(self, path: Path) -> None:
        """Read (and decode, and extract) the file in the background, then show and plan it.
        Cancel (or opening another file) drops it: HTML, PDF and DOCX are read in a child
        process (app/core/documents/isolated.py), which is killed at once."""
        self._open_cancel.set()  # a file still being read is not wanted any more
        cancel = self._open_cancel = threading.Event()
        self._open_generation += 1
        generation = self._open_generation
        self._wait("open", True, self.tr("Opening {0}…").format(path.name))

        def load() -> Document | None:
            # ~400k blocks, none of them garbage: the full collections their allocation triggers
            # would hold the GIL ~100 ms each. Frozen, later full collections skip them (they are
            # still freed by reference counting when the document is closed).
            with gc_paused():
                try:
                    doc = read_document(path, cancel=cancel)
                except ReadCancelled:
                    return None  # whoever cancelled it has moved on: nothing to report
                gc.freeze()
            return doc

        def loaded(doc: Document | None) -> None:
            if doc is not None and generation == self._open_generation:
                self._on_document_loaded(doc)

        def failed(message: str) -> None:
            if generation == self._open_generation:
                self._wait("open", False)
                self._on_failed(message)

        run_in_background(load, loaded, failed)

    def _on_document_loaded(self, doc: Document) -> None:
        self._wait("open", False)
        self._doc = doc
        self._doc_tokens = self._doc_estimate = None
        self._planner = None
        self.setWindowTitle(f"ContextLens — {doc.name}")
        self.document_view.set_document(doc.text)
        self._remember(doc.path)
        self._show_counts()
        if self._loaded is not None:
            self._count_exact()
        self.update_plan()

    def _remember(self, path: Path | None) -> None:
        if path is None:
            return
        recent = [str(path)] + [p for p in self._recent() if p != str(path)]
        self.settings.setValue("recent", recent[:MAX_RECENT])
        self.settings.setValue("last_folder", str(path.parent))
        self._fill_recent()

    def _recent(self) -> list[str]:
        value = self.settings.value("recent", [])
        return [value] if isinstance(value, str) else list(value or [])

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for entry in self._recent():
            action = self.recent_menu.addAction(entry)
            action.triggered.connect(lambda _c=False, p=entry: self.open_document(Path(p)))
        self.recent_menu.setEnabled(bool(self._recent()))

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
                self._on_failed(self.tr("{0} cannot be imported: {1}").format(
                    path.name, self._store_problem))  # fmt: skip
                return
            self.tabs.setCurrentWidget(self.history)
            self.history.import_file(path)
        else:
            self.open_document(path)

    @property
    def document_path(self) -> Path | None:
        """The file of the document shown (None: none yet, or one made from text)."""
        return self._doc.path if self._doc is not None else None

    @property
    def model_path(self) -> Path | None:
        """The model loaded, or being loaded (None: none chosen yet)."""
        return self._model_path

    # ----- the plan of what reaches the model -----

    def _framing(self) -> Callable[[str, TokenCounter | None], tuple[str, int]]:
        """(instruction, reserve) per strategy, as the job that Run starts now will plan it:
        the plan the window shows is the plan the job runs. Call it off the GUI thread (it may
        count the question, and build cl100k when no model is loaded)."""
        task, text, max_tokens = (
            self.task_box.currentData(), self.question.text().strip(), self.max_tokens.value()
        )  # fmt: skip

        def framing(strategy: str, counter: TokenCounter | None) -> tuple[str, int]:
            return planning(
                task, strategy, counter if counter is not None else cl100k(),
                max_tokens=max_tokens, questions=(text,) if task == "ask" and text else (),
                instruction=text if task == "extract" else "",
            )  # fmt: skip

        return framing

    def _child_key(self, counter: TokenCounter | None) -> str | None:
        """The key the planning child rebuilds ``counter`` (None: cl100k) from, or None: plan
        here. cl100k is named, not built: building it costs ~0.2 s of this thread's time."""
        if self._doc is None or self._doc.path is None:
            return None  # the child reads the document from its file
        return CL100K_KEY if counter is None else counter_key(counter)

    def _frame_source(self) -> FrameSource:
        """What frames the document in a plan, as the job will frame it: the loaded GGUF, or
        the server's template (its GGUF here when given), or None."""
        return self._server.frame if self._server is not None else self._model_path

    def _local_planner(self, counter: TokenCounter) -> Planner:
        assert self._doc is not None
        if self._planner is None or self._planner.counter is not counter:
            self._planner = Planner(self._doc, counter)
        return self._planner

    def _planning(self) -> tuple[PlanProcess | Planner, str | None]:
        """(PlanProcess or Planner, child key): where the plans the window shows are made, with
        the loaded model's counter, else cl100k."""
        counter = self.engine.worker.counter
        key = self._child_key(counter)
        if key is not None:
            return self.plans, key
        return self._local_planner(counter if counter is not None else cl100k()), None

    def update_plan(self) -> None:
        """Plan the document for the chosen strategy and context, in the background."""
        if self._doc is None:
            return
        self._plan_generation += 1
        generation = self._plan_generation
        strategy = self.strategy_box.currentData()
        n_ctx = self._loaded.n_ctx if self._loaded else self._n_ctx
        model, framing, counter = self._frame_source(), self._framing(), self.engine.worker.counter
        doc, (where, key) = self._doc, self._planning()
        ticket = self.plans.ticket() if key is not None else None

        def work() -> tuple[Plan, PlanIndex] | None:
            instruction, reserve = framing(strategy, counter)
            # A 50 MB document's plan and its index are ~400k objects, none of them garbage:
            # as with a document's blocks (open_document), no collection runs while they are
            # made and they are frozen, or full collections of 20-165 ms each hold the GIL.
            with gc_paused():
                plan = _plan(where, doc, key, strategy, model=model, n_ctx=n_ctx,
                             reserve=reserve, instruction=instruction, ticket=ticket)  # fmt: skip
                planned = None if plan is None else (plan, index_plan(plan))  # off the GUI
                gc.freeze()
            return planned

        def settle() -> None:
            self._plans_pending.discard(generation)
            self._wait("plan", bool(self._plans_pending))

        def done(planned: tuple[Plan, PlanIndex] | None) -> None:
            settle()
            if planned is not None and generation == self._plan_generation:
                self._plan, index = planned
                self.document_view.show_plan(self._plan, index)
                self.plan_shown.emit(self._plan)

        def failed(message: str) -> None:
            settle()
            if generation == self._plan_generation:
                self._on_failed(message)

        self._plans_pending.add(generation)
        self._wait("plan", True, self.tr("Planning {0}…").format(strategy))
        run_in_background(work, done, failed, self._plan_pool)

    def _replan_soon(self) -> None:
        """The question frames the plan too (its room, or extract's instruction): plan again
        once typing pauses."""
        self._replan_timer.start()

    def _on_task_changed(self, _index: int) -> None:
        self.question.setEnabled(self.task_box.currentData() != "summarize")
        self.update_plan()

    def _show_counts(self) -> None:
        if self._doc is None:
            return
        n_ctx = self._loaded.n_ctx if self._loaded else None
        doc = self._doc

        def show(n: int | None) -> None:
            if n is not None and doc is self._doc:
                self._doc_estimate = n
                self.document_view.set_counts(len(doc.text), self._doc_tokens, n, n_ctx)

        if self._doc_estimate is not None:
            show(self._doc_estimate)
            return
        plans, key = self.plans, self._child_key(None)
        run_in_background(lambda: _count(plans, doc, key, cl100k), show, self._on_failed)

    def _count_exact(self) -> None:
        """The document's tokens by the loaded model, then ``ready``."""
        doc, counter = self._doc, self.engine.worker.counter
        if doc is None or counter is None:
            return
        key = self._child_key(counter)
        if key is None:  # llama.cpp counts (the engine thread), or a document without a file
            self.engine.request_count.emit(doc.text)
            return
        self.statusBar().showMessage(self.tr("Counting tokens…"))
        plans = self.plans

        def counted(n: int | None) -> None:
            if n is not None and doc is self._doc:
                self._on_tokens_counted(n, len(doc.text))

        run_in_background(lambda: _count(plans, doc, key, lambda: counter), counted,
                          self._on_failed)  # fmt: skip

    # ----- the model -----

    def load_model(self, path: Path, settings: LoadSettings, *, fresh: bool = False) -> None:
        """Load ``path``. With tuned settings on, the model's sha256 comes first: it keys the
        calibration, measured now when this machine has none (or when ``fresh``)."""
        self._model_path = Path(path)
        if self._server is not None:  # the worker lets the server go before it loads
            self._server = None
            self.model_panel.server.show_disconnected()
        self.model_panel.n_ctx.setValue(settings.n_ctx)
        self._model_sha = ""
        self.model_panel.set_busy(True)
        self._wait("load", True, self.tr("Loading {0}…").format(Path(path).name))
        if not (self.model_panel.use_tuned() and calibrate.automatic()):
            self.engine.request_load.emit(str(path), settings)
            run_in_background(lambda: sha256_of(Path(path)), self._set_model_sha, lambda _m: None)
            return
        tune = (fresh, self.calibration_trials)

        def hashed(sha: str) -> None:
            if not isValid(self):  # closed while the file was read
                return
            self._set_model_sha(sha)
            spec = TuneSpec(sha, fresh=tune[0], trials=tune[1])
            self.engine.request_load_tuned.emit(str(path), settings, spec)

        def unreadable(_message: str) -> None:  # the load says what is wrong with the file
            self.engine.request_load.emit(str(path), settings)

        run_in_background(lambda: sha256_of(Path(path)), hashed, unreadable)

    def connect_server(self, spec: ServerSpec, use_local_model: bool = False) -> None:
        """Run jobs on the server ``spec`` names; with ``use_local_model`` the GGUF selected in
        the model panel (the same model) gives exact counts and its chat template."""
        local = self.model_panel.selected_model() if use_local_model else None
        if local is not None:
            spec = replace(spec, model_path=str(local))
        self._model_sha = ""
        if local is not None:
            run_in_background(lambda: sha256_of(local), self._set_model_sha, lambda _m: None)
        self._wait("load", True, self.tr("Connecting to {0}…").format(spec.url))
        self.engine.request_connect.emit(spec)

    def _on_server_connected(self, info: ServerInfo, loaded: LoadedModel) -> None:
        self._wait("load", False)
        self._server, self._loaded, self._model_path = info, loaded, None
        self.model_panel.show_server(info)
        self.buffers.set_sliding_window(0, 0, 0)  # a server does not say
        self.gauges.set_engine_pid(None)
        self.statusBar().showMessage(self.tr("Connected to {0} ({1}), context {2:,} tokens").format(
            info.url, info.model, info.n_ctx), 5000)  # fmt: skip
        self._planner = None  # the server's counts now
        if self._doc is not None:
            self._count_exact()
            self.update_plan()
        else:
            self.ready.emit()

    def _on_server_failed(self, message: str) -> None:
        self._wait("load", False)
        self.model_panel.server.show_error(message)
        self.statusBar().showMessage(message)

    def calibrate_model(self, path: Path, settings: LoadSettings) -> None:
        """Measure the candidates anew ("Calibrate again"), then load the fastest."""
        self.load_model(path, settings, fresh=True)

    def _set_model_sha(self, sha: str) -> None:
        self._model_sha = sha

    def _on_calibration_progress(self, done: int, total: int) -> None:
        self._wait("calibrate", True, self.tr("Calibrating: {0}/{1} settings tried…").format(
            done, total))  # fmt: skip
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.model_panel.show_calibrating(done, total)

    def _on_calibrated(self, calibration: calibrate.Calibration, measured_now: bool) -> None:
        self._calibration_ended()
        if self._model_path is not None:
            self.model_panel.show_calibration(self._model_path, calibration, measured_now)

    def _on_calibration_stopped(self, message: str) -> None:
        self._calibration_ended()
        self.model_panel.show_calibration_stopped(message)
        self.statusBar().showMessage(message)

    def _calibration_ended(self) -> None:
        self.progress.setRange(0, 0)  # busy again: the load itself has no steps to count
        self._wait("calibrate", False)

    def _on_model_loaded(self, info: ModelInfo, loaded: LoadedModel,
                         caps: EngineCapabilities | None) -> None:  # fmt: skip
        self._wait("load", False)
        self.buffers.set_sliding_window(
            loaded.sliding_window if info.swa_layers else 0, len(info.swa_layers),
            info.n_layers or len(info.kv_heads_per_layer),
        )  # fmt: skip
        self._loaded, self._server = loaded, None
        self.model_panel.set_busy(False)
        self.model_panel.show_loaded(loaded)
        if caps is not None:
            self.model_panel.set_capabilities(caps)
            self._system_info = caps.system_info
            self._engine_version = caps.llama_cpp_python_version
        self.gauges.set_engine_pid(self.engine.worker.engine_pid)
        self.statusBar().showMessage(
            self.tr("Model loaded in {0:.2f} s").format(loaded.load_seconds), 5000
        )
        for warning in loaded.warnings:
            self.statusBar().showMessage(warning)
        self._planner = None  # exact counts now
        if self._doc is not None:
            self._count_exact()
            self.update_plan()
        else:
            self.ready.emit()

    def _on_unloaded(self) -> None:
        self._loaded, self._server = None, None
        self.model_panel.show_unloaded()
        self.buffers.set_sliding_window(0, 0, 0)
        self.gauges.set_engine_pid(None)
        self._planner = None
        self.update_plan()

    def _on_tokens_counted(self, tokens: int, _chars: int) -> None:
        self._doc_tokens = tokens
        self._show_counts()
        self.statusBar().showMessage(self.tr("Ready"))
        self.ready.emit()

    def _add_lanes_menu(self, job_menu: QMenu) -> None:
        """How many of a map phase's replies are generated together, as parallel sequences."""
        menu = job_menu.addMenu(self.tr("Map Phase in Parallel &Lanes"))
        menu.setToolTipsVisible(True)
        group = QActionGroup(self)
        chosen = self.settings.value("lanes", DEFAULT_LANES, type=int)
        self.lanes_actions: dict[int, QAction] = {}
        for n in (0, 2, 4, 8):
            label = self.tr("&One Window at a Time") if n == 0 else self.tr("&{0} Lanes").format(n)
            action = QAction(label, self, checkable=True)
            action.setToolTip(self.tr("Generate the replies of a map phase this many at a time; "
                                      "each lane holds a context of its own"))  # fmt: skip
            action.setChecked(n == chosen)
            action.triggered.connect(lambda _on, n=n: self.settings.setValue("lanes", n))
            group.addAction(action)
            menu.addAction(action)
            self.lanes_actions[n] = action

    def lanes(self) -> int | None:
        """The lanes chosen for a map phase (None: one window at a time)."""
        n = next((n for n, a in self.lanes_actions.items() if a.isChecked()), DEFAULT_LANES)
        return n or None

    # ----- jobs -----

    def _spec(self, strategies: tuple[str, ...]) -> JobSpec | None:
        if self._doc is None:
            self._on_failed(self.tr("Open a document first."))
            return None
        if self._loaded is None:
            self._on_failed(self.tr("Load a model first."))
            return None
        task = self.task_box.currentData()
        text = self.question.text().strip()
        if task != "summarize" and not text:
            self._on_failed(self.tr("Type the question (or the extract instruction) first."))
            return None
        return JobSpec(task, strategies, self._doc.text,
                       questions=(text,) if task == "ask" else (),
                       instruction=text if task == "extract" else "",
                       max_tokens=self.max_tokens.value(),
                       audit=self.audit_action.isChecked(), lanes=self.lanes(),
                       sampling=self.sampling_box.settings())  # fmt: skip

    def _run_clicked(self) -> None:
        self.run_job()  # (a triggered(bool) signal must not become the strategy argument)

    def _compare_clicked(self) -> None:
        self.run_compare()

    def run_job(self, strategy: str | None = None) -> None:
        spec = self._spec((strategy or self.strategy_box.currentData(),))
        if spec is not None:
            self._start(spec, comparing=False)

    def run_compare(self, strategies: list[str] | None = None) -> None:
        chosen = strategies or [n for n, a in self.compare_choices.items() if a.isChecked()]
        if not 2 <= len(chosen) <= MAX_PANES:
            self._on_failed(self.tr("Choose two to four strategies to compare (Compare menu)."))
            return
        spec = self._spec(tuple(chosen))
        if spec is not None:
            self.compare.start(chosen)
            self.tabs.setCurrentWidget(self.compare)
            self._measure_needles(chosen)
            self._start(spec, comparing=True)

    def _measure_needles(self, strategies: list[str]) -> None:
        """Each compared strategy's needle retention (the plans the window shows), in the
        background."""
        wanted = [n.strip() for n in self.needles.text().split("|") if n.strip()]
        if not wanted or self._doc is None:
            return
        model, framing, counter = self._frame_source(), self._framing(), self.engine.worker.counter
        n_ctx = self._loaded.n_ctx if self._loaded else self._n_ctx
        doc, (where, key) = self._doc, self._planning()

        def work() -> list[tuple[str, float]] | None:
            spans = needle_spans(doc.text, wanted)
            if not spans:
                return []
            found = []
            for strategy in strategies:
                instruction, reserve = framing(strategy, counter)
                plan = _plan(where, doc, key, strategy, model=model, n_ctx=n_ctx,
                             reserve=reserve, instruction=instruction)  # fmt: skip
                if plan is None:
                    return None
                found.append((strategy, plan.needle_retention(spans)))
            return found

        def done(found: list[tuple[str, float]] | None) -> None:
            if found == []:
                self.statusBar().showMessage(self.tr("None of the needles occurs in the document."))
            for strategy, retention in found or ():
                self.compare.set_needle_retention(strategy, retention)

        run_in_background(work, done, self._on_failed, self._plan_pool)

    def _start(self, spec: JobSpec, *, comparing: bool) -> None:
        """Show the job as running, plan it (in the child when it can), then hand it to the
        engine with a planner that holds those plans: the job plans the document as shown."""
        assert self._loaded is not None and self._doc is not None
        self._running, self._comparing = True, comparing
        self.buffers.reset(self._loaded.n_ctx)
        self.gauges.reset(self._loaded.n_ctx)
        if not comparing:
            self.tabs.setCurrentWidget(self.buffers)
        self._set_running(True)
        counter = self.engine.worker.counter
        if counter is None:  # the model is being loaded again: the worker says what is wrong
            self.engine.request_job.emit(spec)
            return
        doc, key = self._doc, self._child_key(counter)
        planner = Planner(doc, counter)
        if key is None:
            self.engine.request_job.emit(replace(spec, planner=planner))
            return
        plans, model, n_ctx = self.plans, self._frame_source(), self._loaded.n_ctx
        asks = [(strategy, *planning(spec.task, strategy, counter, max_tokens=spec.max_tokens,
                                     questions=spec.questions, instruction=spec.instruction))
                for strategy in spec.strategies]  # fmt: skip

        def work() -> list[Plan] | None:
            made = []
            for strategy, instruction, reserve in asks:
                plan = _plan(plans, doc, key, strategy, model=model, n_ctx=n_ctx,
                             reserve=reserve, instruction=instruction)  # fmt: skip
                if plan is None:
                    return None
                made.append(plan)
            return made

        def done(made: list[Plan] | None) -> None:
            self._starting = None
            for plan in made or ():
                planner.remember(plan)
            if made is None or self._cancel_start:  # closing, or cancelled while planning
                self._on_job_done(JobOutcome(spec))
                return
            self.engine.request_job.emit(replace(spec, planner=planner))

        def failed(message: str) -> None:
            self._starting = None
            self._on_failed(message)
            self._on_job_done(JobOutcome(spec))

        self._starting, self._cancel_start = spec, False
        self.statusBar().showMessage(self.tr("Planning…"))
        run_in_background(work, done, failed, self._plan_pool)

    def cancel(self) -> None:
        """Esc: stop whatever the person waits for — the job, the plan, the file being read."""
        if self._running:
            self.statusBar().showMessage(self.tr("Cancelling…"))
            self._cancel_start = self._starting is not None
            if self._starting is not None:
                self.plans.cancel()  # the job's plans are being made
            self.engine.cancel()
            return
        if "plan" in self._waits:
            self._plan_generation += 1  # a plan made here anyway is dropped when it arrives
            self._plans_pending.clear()
            self.plans.cancel()
            self._wait("plan", False, self.tr("Planning cancelled; the plan shown is the last "
                                              "one made."))  # fmt: skip
        if "open" in self._waits:
            self._open_generation += 1
            self._open_cancel.set()
            self._wait("open", False, self.tr("Opening cancelled."))
        if "calibrate" in self._waits:
            self.statusBar().showMessage(self.tr("Cancelling the calibration…"))
            self.engine.cancel()

    def _set_running(self, running: bool) -> None:
        self.run_action.setEnabled(not running)
        self.compare_button.setEnabled(not running)
        self._wait("run", running, self.tr("Running…") if running else "")

    def _on_job_events(self, events: list[Any]) -> None:
        for ev in events:
            self.buffers.on_event(ev)
            self.gauges.on_event(ev)
            if self._comparing:
                self.compare.on_event(ev)
            if isinstance(ev, JobFinished) and ev.result.refused:
                self.statusBar().showMessage(self.tr("Refused: {0}").format(ev.result.refused))
        self.job_events.emit(events)

    def _on_job_done(self, outcome: JobOutcome) -> None:
        self._running = False
        self._set_running(False)
        reasons = ", ".join(r.finish_reason for r in outcome.results) or self.tr("nothing")
        self.statusBar().showMessage(self.tr("Done: {0}").format(reasons))
        self._report_audit(outcome)
        self._record(outcome)

    def _report_audit(self, outcome: JobOutcome) -> None:
        """A passed audit is a line in the status bar; a failed one is a warning with findings."""
        audit = outcome.audit
        if audit is None:
            return
        if audit.ok:
            self.statusBar().showMessage(audit.summary())
            return
        shown = "\n".join(f"• {f}" for f in audit.findings[:10])
        self._on_failed(f"{audit.summary()}:\n{shown}")

    def _record(self, outcome: JobOutcome) -> None:
        """Store the job as a session with a version (and run, and KV state) per strategy."""
        repo, doc, loaded = self.repo, self._doc, self._loaded
        resumed, self._resuming = self._resuming, None
        resumed_session = self._resuming_session
        if repo is None or doc is None or loaded is None or not outcome.results:
            self.job_finished.emit(outcome)
            return
        if resumed is not None:  # a rollback: its run belongs to the version the panel made
            result = outcome.results[0]
            run_in_background(lambda: repo.save_run(resumed, result),
                              lambda _id: self._recorded(resumed_session, outcome),
                              lambda m: self._record_failed(m, outcome))  # fmt: skip
            return
        spec, sha, server = outcome.spec, self._model_sha, self._server
        # a server's model is recorded as "URL model" (never with a key); its sha256 is the
        # local GGUF's when one was given for the counts, else unknown
        model = loaded.path if server is not None else str(self._model_path or "")
        engine = server.url if server is not None else "local"
        prompt = "\n".join(spec.questions) or spec.instruction

        def work() -> int:
            model_sha = sha or ("" if server is not None else sha256_of(Path(model)))
            entries = [
                Entry({"task": r.task, "strategy": r.strategy, "prompt": prompt,
                       "model_path": model, "model_sha256": model_sha,
                       "settings": {"n_ctx": r.n_ctx, "max_tokens": spec.max_tokens,
                                    "kv_cache_type": loaded.kv_cache_type, "engine": engine,
                                    "sampling": stored(spec.sampling)}},
                      r, outcome.states.get(i), len(r.final_prompt))
                for i, r in enumerate(outcome.results)
            ]  # fmt: skip
            ids = repo.record(doc, doc.name, entries)
            return repo.get_version(ids[0]).session if ids else 0

        run_in_background(work, lambda session: self._recorded(session, outcome),
                          lambda m: self._record_failed(m, outcome))  # fmt: skip

    def _recorded(self, session: int, outcome: JobOutcome) -> None:
        if self.history is not None and session:
            self.history.set_session(session)
        self.job_finished.emit(outcome)

    def _record_failed(self, message: str, outcome: JobOutcome) -> None:
        self._on_failed(self.tr("The run was not recorded: {0}").format(message))
        self.job_finished.emit(outcome)

    # ----- rollback with the KV state -----

    def _on_rolled_back(self, version: Any, has_kv: bool) -> None:
        # the version's sampling comes back with it: the resumed reply and the next Run use it
        sampling = from_version(version.settings)
        self.sampling_box.set_settings(sampling)
        repo, loaded = self.repo, self._loaded
        if not has_kv or repo is None or loaded is None or not self._model_sha:
            self.statusBar().showMessage(
                self.tr("Rolled back to a new version #{0}; run it to see its output.").format(
                    version.id
                )
            )
            return
        sha = self._model_sha

        def work() -> ResumeSpec | None:
            saved = repo.kv_state(version.id, model_sha256=sha, n_ctx=loaded.n_ctx,
                                  cache_type=loaded.kv_cache_type)  # fmt: skip
            if saved is None:
                return None
            sources = repo.output_sources(saved.version)
            max_tokens = int(version.settings.get("max_tokens", 256))
            return ResumeSpec(saved.state, saved.prompt_tokens, version.task, version.strategy,
                              max_tokens, sources, sampling)  # fmt: skip

        def done(spec: ResumeSpec | None) -> None:
            if spec is None:
                self.statusBar().showMessage(
                    self.tr("No KV state for the loaded model and context; run it again.")
                )
                return
            self._running, self._comparing = True, False
            self.buffers.reset(loaded.n_ctx)
            self.tabs.setCurrentWidget(self.buffers)
            self._set_running(True)
            self.statusBar().showMessage(self.tr("Resuming from the saved KV state…"))
            self._resuming, self._resuming_session = version.id, version.session
            self.engine.request_resume.emit(spec)

        run_in_background(work, done, self._on_failed)

    # ----- errors and progress -----

    def _wait(self, what: str, waiting: bool, message: str = "") -> None:
        """What the person waits for: the status bar's busy bar shows while anything runs, its
        Cancel (and Esc) while something that can be cancelled does."""
        if waiting:
            self._waits.add(what)
        else:
            self._waits.discard(what)
        self.progress.setVisible(bool(self._waits))
        cancellable = bool(self._waits & CANCELLABLE)
        self._progress_cancel.setVisible(cancellable)
        self.cancel_action.setEnabled(cancellable)
        if message:
            self.statusBar().showMessage(message)

    @property
    def waiting_for(self) -> frozenset[str]:
        """What runs now: "open", "load", "plan", "run"."""
        return frozenset(self._waits)

    def _on_restarted(self) -> None:
        self.statusBar().showMessage(self.tr("Engine restarted"))
        self.engine_restarted.emit()

    def _on_crashed(self, message: str) -> None:
        self._on_failed(self.tr("The engine stopped: {0}. Starting it again…").format(message))

    def _on_failed(self, message: str) -> None:
        log.warning("%s", message)
        self.last_error = message
        self._wait("load", False)  # the engine answers a failed load this way
        self._calibration_ended()
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
        self._on_failed(self.tr("Unexpected error (details in the log): {0}: {1}").format(
            kind.__name__, exc))  # fmt: skip

    def _about(self) -> None:
        from PySide6 import __version__ as pyside_version

        QMessageBox.about(
            self,
            self.tr("About ContextLens"),
            self.tr(
                "ContextLens {0}\nllama-cpp-python {1}\nllama.cpp build: {2}\nQt (PySide6) {3}"
            ).format(
                __version__,
                self._engine_version or self.tr("(load a model)"),
                self._system_info or self.tr("(load a model)"),
                pyside_version,
            ),
        )

    # ----- layout and closing -----

    def _restore_layout(self) -> None:
        geometry = self.settings.value("geometry")
        state = self.settings.value("window_state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state)

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._shut_down:  # closed once already: the engine and the store are gone
            event.accept()
            return
        self._shut_down = True
        self._open_generation += 1
        self._open_cancel.set()  # a document being read in its child process: killed
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("window_state", self.saveState())
        self.gauges.stop()
        self.engine.stop()
        self.plans.close()  # a plan in flight ends at once (superseded), the child with it
        self._plan_pool.waitForDone(10_000)
        if self.repo is not None:
            self.repo.close()
        if self.db is not None:
            self.db.close()
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()


def _plan(where: PlanProcess | Planner, doc: Document, key: str | None, strategy: str, *,
          model: FrameSource, n_ctx: int, reserve: int, instruction: str,
          ticket: int | None = None) -> Plan | None:  # fmt: skip
    """``plan_for`` in the child (None when superseded) or by a planner of this process."""
    if isinstance(where, Planner):
        return plan_for(where, strategy, model, instruction=instruction, n_ctx=n_ctx,
                        reserve=reserve)  # fmt: skip
    assert key is not None
    try:
        return where.plan(doc, key, strategy, model=model, n_ctx=n_ctx, reserve=reserve,
                          instruction=instruction, ticket=ticket)  # fmt: skip
    except Superseded:
        return None


def _count(plans: PlanProcess, doc: Document, key: str | None,
           counter: Callable[[], TokenCounter]) -> int | None:  # fmt: skip
    """The document's tokens: in the child when ``key`` names the counter there (None when
    the child is closed), else here with ``counter()``."""
    if key is None:
        return counter().count(doc.text)
    try:
        return plans.count(doc, key)
    except Superseded:
        return None


def _buddy(text: str, widget: QWidget) -> QLabel:
    """A label whose mnemonic (Alt + the underlined letter) puts the focus on ``widget``."""
    label = QLabel(text)
    label.setBuddy(widget)
    return label


def _takes_tab(widget: QWidget) -> bool:
    policy = widget.focusPolicy()
    tab = (policy & Qt.FocusPolicy.TabFocus) == Qt.FocusPolicy.TabFocus
    return tab and widget.isVisible() and widget.isEnabled()


def _focus_into(widget: QWidget, dock: QDockWidget | None) -> None:
    """Show ``dock`` if it was closed, then focus the first control of ``widget`` that takes
    the keyboard (the keyboard's way into each part of the window)."""
    if dock is not None:
        dock.show()
        dock.raise_()
    candidate = widget
    while True:  # the focus chain is a ring through every widget of the window
        if _takes_tab(candidate) and (candidate is widget or widget.isAncestorOf(candidate)):
            candidate.setFocus(Qt.FocusReason.ShortcutFocusReason)
            return
        candidate = candidate.nextInFocusChain()
        if candidate is widget:
            return
