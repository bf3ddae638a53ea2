"""The window's menus, its job toolbar and the status bar's Cancel.

Built apart from the window so that the window reads as its panels and their wiring: here are
the actions and controls with their shortcuts, mnemonics and remembered choices (recent files,
theme, audit, lanes), and the toolbar's choices read as one plain :class:`JobChoices` for the
session model. What Open, Run, Compare and Cancel do is connected by the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QSignalBlocker, QSize, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDockWidget,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPushButton,
    QSpinBox,
    QStyle,
    QTabWidget,
    QToolBar,
    QToolButton,
    QWidget,
)

from app.core.engine.types import SamplingSettings
from app.core.jobs.options import DEFAULT_LANES, TASKS
from app.core.planning.strategies import STRATEGIES
from app.ui.help import guide_dialog, shortcuts_dialog
from app.ui.i18n import LanguageMenu, Retranslated, strategy_label, task_label
from app.ui.menus import ChecklistMenu
from app.ui.question_plans import SeveralQuestions
from app.ui.session_model import JobChoices
from app.ui.theme import apply_theme, current_theme

MAX_RECENT = 8
# the toolbar fits a 1024-pixel screen with these; wider windows give the question the rest
QUESTION_MIN_WIDTH = 180
NEEDLES_MIN_WIDTH = 110
# a View menu entry that puts the focus into a part of the window: text, keys, part, its dock
GoTo = tuple[Callable[[], str], str, QWidget, QDockWidget | None]


class MainActions(QObject):
    """The File, Compare, Job, View and Help menus and the job toolbar of ``window``.

    ``docks`` are the window's docks (the View menu shows and hides them); ``document``,
    ``model``, ``stages`` and ``history`` (the versions, in a tab of the stages) are where
    Ctrl+1 to Ctrl+4 put the focus. The window calls :meth:`retranslate` when the language
    changes: every text here is set through ``self._texts`` so that it can be set again."""

    open_recent = Signal(object)  # the Path chosen in File ▸ Open Recent
    recent_changed = Signal(list)  # the recent files (str), newest first

    def __init__(self, window: QMainWindow, settings: QSettings, docks: list[QDockWidget], *,
                 document: QWidget, model: QWidget, stages: QTabWidget,
                 history: QWidget | None = None) -> None:  # fmt: skip
        super().__init__(window)
        self._window, self._settings = window, settings
        self._texts = t = Retranslated()
        bar = QToolBar()
        t.set(bar.setWindowTitle, lambda: self.tr("Job"))
        bar.setObjectName("toolbar-job")
        side = bar.fontMetrics().height()  # an icon no taller than the text beside it
        bar.setIconSize(QSize(side, side))
        window.addToolBar(bar)
        self._file_menu(bar)
        self._job_controls(bar)
        self._job_menu()
        by_name = {d.objectName(): d for d in docks}
        go_to: tuple[GoTo, ...] = (
            (lambda: self.tr("Go to the &Document"), "Ctrl+1", document, None),
            (lambda: self.tr("Go to the &Model"), "Ctrl+2", model, by_name["dock-model"]),
            (lambda: self.tr("Go to the &Three-Stage Buffer"), "Ctrl+3", stages,
             by_name["dock-stages"]),
        )  # fmt: skip
        if history is not None:  # in a tab of the stages: its tab comes to the front first
            go_to += ((lambda: self.tr("Go to the &History"), "Ctrl+4", history,
                       by_name["dock-stages"]),)  # fmt: skip
        self._stages = stages
        self._view_menu(docks, go_to)
        help_menu = window.menuBar().addMenu("")
        t.set(help_menu.setTitle, lambda: self.tr("&Help"))
        guide = help_menu.addAction("")
        t.set(guide.setText, lambda: self.tr("ContextLens &User Guide"))
        guide.setShortcut(QKeySequence.StandardKey.HelpContents)
        guide.triggered.connect(lambda: guide_dialog(window).open())
        keys = help_menu.addAction("")
        t.set(keys.setText, lambda: self.tr("&Keyboard Shortcuts"))
        keys.setShortcut(QKeySequence("Ctrl+/"))
        keys.triggered.connect(lambda: shortcuts_dialog(window).open())
        help_menu.addSeparator()
        self.about_action = QAction(window)
        t.set(self.about_action.setText, lambda: self.tr("&About ContextLens"))
        help_menu.addAction(self.about_action)

    def retranslate(self) -> None:
        """Every text of the menus and the toolbar again, in the language now installed; the
        task and strategy boxes keep their choice and send no change."""
        self._texts.retranslate()
        for box, label in ((self.task_box, task_label), (self.strategy_box, strategy_label)):
            with QSignalBlocker(box):
                for i in range(box.count()):
                    box.setItemText(i, label(str(box.itemData(i))))
        for name, choice in self.compare_choices.items():
            choice.setText(strategy_label(name))

    def _file_menu(self, bar: QToolBar) -> None:
        window = self._window
        t = self._texts
        file_menu = window.menuBar().addMenu("")
        t.set(file_menu.setTitle, lambda: self.tr("&File"))
        self.open_action = QAction(window)
        t.set(self.open_action.setText, lambda: self.tr("&Open Document…"))
        self.open_action.setShortcut(QKeySequence.StandardKey.Open)
        file_menu.addAction(self.open_action)
        self.recent_menu = file_menu.addMenu("")
        t.set(self.recent_menu.setTitle, lambda: self.tr("Open &Recent"))
        self._fill_recent()
        self.get_model_action = file_menu.addAction("")
        t.set(self.get_model_action.setText, lambda: self.tr("Get the &Default Model…"))
        self.get_hub_model_action = file_menu.addAction("")
        t.set(self.get_hub_model_action.setText,
              lambda: self.tr("Get a Model from &Hugging Face…"))  # fmt: skip
        file_menu.addSeparator()
        quit_action = self.quit_action = QAction(window)
        t.set(quit_action.setText, lambda: self.tr("&Quit"))
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        file_menu.addAction(quit_action)
        # an icon alone in the toolbar (its text is the tooltip): the job's controls need the room
        style = window.style()
        self.open_action.setIcon(QIcon.fromTheme(
            QIcon.ThemeIcon.DocumentOpen,
            style.standardIcon(QStyle.StandardPixmap.SP_DialogOpenButton)))  # fmt: skip
        bar.addAction(self.open_action)

    def _job_controls(self, bar: QToolBar) -> None:
        """The task, the question, the strategy and the reply's room; Run and Compare."""
        window, t = self._window, self._texts
        self.task_box = QComboBox()
        for task in TASKS:
            self.task_box.addItem(task_label(task), task)
        t.set(self.task_box.setToolTip, lambda: self.tr("What the model does with the document"))
        self.task_box.currentIndexChanged.connect(self._on_task_changed)
        bar.addWidget(_buddy(t, lambda: self.tr(" &Task "), self.task_box))
        bar.addWidget(self.task_box)
        self.question = QLineEdit()
        t.set(self.question.setPlaceholderText, lambda: self.tr("Question or instruction"))
        t.set(self.question.setToolTip, lambda: self.tr(
            "A question to ask, or the instruction for extract. Several questions: paste them "
            "one per line, or use Several…"))  # fmt: skip
        self.question.setMinimumWidth(QUESTION_MIN_WIDTH)  # wider as the window widens
        self.question.setEnabled(False)
        bar.addWidget(self.question)
        self.several_button = QToolButton()
        t.set(self.several_button.setText, lambda: self.tr("Several…"))
        t.set(self.several_button.setToolTip, lambda: self.tr(
            "Ask several questions at once, one per line: their plans side by side, each "
            "answer its own version"))  # fmt: skip
        self.several_button.setEnabled(False)
        self.several_button.clicked.connect(lambda _checked=False: self.ask_several())
        bar.addWidget(self.several_button)

        self.strategy_box = QComboBox()
        for name in STRATEGIES:
            self.strategy_box.addItem(strategy_label(name), name)
        self.strategy_box.setCurrentIndex(self.strategy_box.findData("head"))
        t.set(self.strategy_box.setToolTip,
              lambda: self.tr("What to do with a document longer than the context"))  # fmt: skip
        bar.addWidget(_buddy(t, lambda: self.tr(" &Strategy "), self.strategy_box))
        bar.addWidget(self.strategy_box)

        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 8192)
        self.max_tokens.setValue(256)
        t.set(self.max_tokens.setToolTip,
              lambda: self.tr("Longest reply, in tokens (kept free in the context)"))  # fmt: skip
        bar.addWidget(_buddy(t, lambda: self.tr(" Rep&ly "), self.max_tokens))
        bar.addWidget(self.max_tokens)

        self.run_action = QAction(window)
        t.set(self.run_action.setText, lambda: self.tr("&Run"))
        self.run_action.setShortcut(QKeySequence("Ctrl+R"))
        bar.addAction(self.run_action)
        self.cancel_action = QAction(window)  # beside Run: the last to go to the toolbar's »
        t.set(self.cancel_action.setText, lambda: self.tr("&Cancel"))
        self.cancel_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.cancel_action.setEnabled(False)
        bar.addAction(self.cancel_action)
        bar.addSeparator()

        self.compare_button = QToolButton()
        t.set(self.compare_button.setText, lambda: self.tr("Com&pare"))
        self.compare_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        menu = ChecklistMenu("", window)  # stays open while ticking
        t.set(menu.setTitle, lambda: self.tr("&Compare"))
        window.menuBar().addMenu(menu)
        self.compare_choices: dict[str, QAction] = {}
        for name in STRATEGIES:
            choice = QAction(strategy_label(name), window, checkable=True)
            choice.setChecked(name in ("head", "entropy", "map-reduce"))
            menu.addAction(choice)
            self.compare_choices[name] = choice
        self.compare_button.setMenu(menu)
        bar.addWidget(self.compare_button)

        self.needles = QLineEdit()
        t.set(self.needles.setPlaceholderText, lambda: self.tr("Needles: a | b"))
        t.set(self.needles.setToolTip, lambda: self.tr(
            "Needles: facts to track, texts from the document separated by |; Compare shows "
            "the share that reaches the model"))  # fmt: skip
        self.needles.setMinimumWidth(NEEDLES_MIN_WIDTH)  # its placeholder whole, never "Nee…"
        self.needles.setMaximumWidth(220)
        bar.addWidget(self.needles)

    def _job_menu(self) -> None:
        """Run and Cancel (Esc; the status bar has a Cancel too), the audit and the lanes."""
        window, t = self._window, self._texts
        job_menu = window.menuBar().addMenu("")
        t.set(job_menu.setTitle, lambda: self.tr("&Job"))
        job_menu.addAction(self.run_action)
        job_menu.addAction(self.cancel_action)
        job_menu.addSeparator()
        self.audit_action = QAction(window, checkable=True)
        t.set(self.audit_action.setText, lambda: self.tr("&Audit Each Run Against llama.cpp"))
        t.set(self.audit_action.setToolTip, lambda: self.tr(
            "Check after each model call that llama.cpp holds exactly the plan shown"))  # fmt: skip
        self.audit_action.setChecked(bool(self._settings.value("audit", False, type=bool)))
        self.audit_action.toggled.connect(lambda on: self._settings.setValue("audit", on))
        job_menu.addAction(self.audit_action)
        self._lanes_menu(job_menu)
        self.cancel_button = QPushButton()
        t.set(self.cancel_button.setText, lambda: self.tr("Cancel"))
        self.cancel_button.hide()
        window.statusBar().addPermanentWidget(self.cancel_button)

    def _lanes_menu(self, job_menu: QMenu) -> None:
        """How many of a map phase's replies are generated together, as parallel sequences."""
        t = self._texts
        menu = job_menu.addMenu("")
        t.set(menu.setTitle, lambda: self.tr("Map Phase in Parallel &Lanes"))
        menu.setToolTipsVisible(True)
        group = QActionGroup(self)
        chosen = self._settings.value("lanes", DEFAULT_LANES, type=int)
        self.lanes_actions: dict[int, QAction] = {}
        for n in (0, 2, 4, 8):
            action = QAction(self._window, checkable=True)

            def lanes_text(n: int = n) -> str:
                return (self.tr("&One Window at a Time") if n == 0
                        else self.tr("&{0} Lanes").format(n))  # fmt: skip

            t.set(action.setText, lanes_text)
            t.set(action.setToolTip, lambda: self.tr(
                "Generate the replies of a map phase this many at a time; each lane holds a "
                "context of its own"))  # fmt: skip
            action.setChecked(n == chosen)
            action.triggered.connect(lambda _on, n=n: self._settings.setValue("lanes", n))
            group.addAction(action)
            menu.addAction(action)
            self.lanes_actions[n] = action

    def _view_menu(self, docks: list[QDockWidget], go_to: tuple[GoTo, ...]) -> None:
        """The docks, the keyboard's way into each part of the window, theme and language."""
        window, t = self._window, self._texts
        view_menu = window.menuBar().addMenu("")
        t.set(view_menu.setTitle, lambda: self.tr("&View"))
        for docked in docks:
            view_menu.addAction(docked.toggleViewAction())
        view_menu.addSeparator()
        for text, keys, target, dock in go_to:
            go = QAction(window)
            t.set(go.setText, text)
            go.setShortcut(QKeySequence(keys))
            go.triggered.connect(lambda _c=False, t=target, d=dock: self._go_to(t, d))
            view_menu.addAction(go)
        view_menu.addSeparator()
        theme_menu = view_menu.addMenu("")
        t.set(theme_menu.setTitle, lambda: self.tr("Th&eme"))
        themes = QActionGroup(window)
        self.theme_actions: dict[str, QAction] = {}  # by name: "system", "light", "dark"
        current = current_theme(_application(), str(self._settings.value("theme", "system")))
        for name, text in (("system", lambda: self.tr("&System")),
                           ("light", lambda: self.tr("&Light")),
                           ("dark", lambda: self.tr("&Dark"))):  # fmt: skip
            choice = QAction(window, checkable=True)
            t.set(choice.setText, text)
            choice.setData(name)
            choice.setChecked(name == current)
            self.theme_actions[name] = choice
            themes.addAction(choice)
            theme_menu.addAction(choice)
        themes.triggered.connect(self._set_theme)
        self.language_menu = LanguageMenu(window, self._settings)
        view_menu.addMenu(self.language_menu)

    def _go_to(self, target: QWidget, dock: QDockWidget | None) -> None:
        """Focus ``target``, first bringing its tab of the stages to the front if it is one."""
        for i in range(self._stages.count()):
            page = self._stages.widget(i)
            assert page is not None  # i is below count()
            if page is target or page.isAncestorOf(target):
                self._stages.setCurrentIndex(i)
        _focus_into(target, dock)

    def _set_theme(self, choice: QAction) -> None:
        name = str(choice.data())
        self._settings.setValue("theme", name)
        apply_theme(_application(), name)

    def _on_task_changed(self, _index: int) -> None:
        self.question.setEnabled(self.task_box.currentData() != "summarize")
        self.several_button.setEnabled(self.task_box.currentData() == "ask")

    def ask_several(self) -> SeveralQuestions:
        """The dialog that takes several questions, one per line (opened, not waited for):
        taken, they fill the question box (one per line) and the plans follow."""
        dialog = SeveralQuestions(self.question.text(), self._window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.set_questions(dialog.questions()))
        dialog.open()
        return dialog

    def set_questions(self, questions: Sequence[str]) -> None:
        """The question box asks ``questions``, one per line (an ask)."""
        self.task_box.setCurrentIndex(self.task_box.findData("ask"))
        self.question.setText("\n".join(q.strip() for q in questions if q.strip()))
        self.question.setFocus()

    # ----- what the controls hold -----

    def lanes(self) -> int | None:
        """The lanes chosen for a map phase (None: one window at a time)."""
        n = next((n for n, a in self.lanes_actions.items() if a.isChecked()), DEFAULT_LANES)
        return n or None

    def compared(self) -> list[str]:
        """The strategies ticked in the Compare menu."""
        return [n for n, a in self.compare_choices.items() if a.isChecked()]

    def choices(self, sampling: SamplingSettings) -> JobChoices:
        """What the toolbar and the Job menu hold now, with ``sampling`` (the Sampling box's)."""
        needles = tuple(n.strip() for n in self.needles.text().split("|") if n.strip())
        return JobChoices(self.task_box.currentData(), self.question.text().strip(),
                          self.strategy_box.currentData(), self.max_tokens.value(),
                          audit=self.audit_action.isChecked(), lanes=self.lanes(),
                          sampling=sampling, needles=needles)  # fmt: skip

    # ----- recent files -----

    def remember(self, path: Path | None) -> None:
        """``path`` first in File ▸ Open Recent, and its folder the next Open's."""
        if path is None:
            return
        recent = [str(path)] + [p for p in self.recent() if p != str(path)]
        self._settings.setValue("recent", recent[:MAX_RECENT])
        self._settings.setValue("last_folder", str(path.parent))
        self._fill_recent()

    def recent(self) -> list[str]:
        """The files opened lately, newest first."""
        value = self._settings.value("recent", [])
        if isinstance(value, str):
            return [value]
        return list(value) if isinstance(value, Iterable) else []  # None: none yet

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for entry in self.recent():
            action = self.recent_menu.addAction(entry)
            action.triggered.connect(lambda _c=False, p=entry: self.open_recent.emit(Path(p)))
        self.recent_menu.setEnabled(bool(self.recent()))
        self.recent_changed.emit(self.recent())


def _application() -> QApplication:
    app = QApplication.instance()
    assert isinstance(app, QApplication)  # the window runs in a widgets application
    return app


def _buddy(texts: Retranslated, text: Callable[[], str], widget: QWidget) -> QLabel:
    """A label whose mnemonic (Alt + the underlined letter) puts the focus on ``widget``."""
    label = QLabel()
    texts.set(label.setText, text)
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
        following = candidate.nextInFocusChain()
        assert following is not None  # a ring has no end
        candidate = following
        if candidate is widget:
            return
