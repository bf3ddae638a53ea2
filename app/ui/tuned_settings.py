"""The tuned speed settings: what the calibration chose on this machine, and the way to override.

Threads, batch sizes and flash attention decide how fast a model runs, and the best values depend
on the machine. After the first load of a model the candidates are measured in the background
(app/core/calibrate.py, app/ui/background_calibration.py) while the model is used with the
settings it loaded with; this box shows the progress while that runs (with a Cancel), then offers
the choice and its figures ("Use Them" reloads the model with them), the whole table on request,
a "Use tuned settings" switch (off: the panel's own values load) and a way to measure again. It
only shows and asks; the window runs the calibrations.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QGroupBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.calibrate import Calibration, Trial
from app.core.engine.types import LoadSettings
from app.ui.i18n import QT_TRANSLATE_NOOP, FollowsLanguage
from app.ui.widgets import WrappingCheckBox, plain_label

RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
# the table's headers; QT_TRANSLATE_NOOP lets lupdate see the texts tr() gets at run time
COLUMNS = (
    "",
    QT_TRANSLATE_NOOP("TunedSettingsBox", "Threads"),
    QT_TRANSLATE_NOOP("TunedSettingsBox", "Batch"),
    QT_TRANSLATE_NOOP("TunedSettingsBox", "Micro-batch"),
    QT_TRANSLATE_NOOP("TunedSettingsBox", "Flash"),
    QT_TRANSLATE_NOOP("TunedSettingsBox", "Prompt tok/s"),
    QT_TRANSLATE_NOOP("TunedSettingsBox", "Gen tok/s"),
)
# A note added to the line: a text, or a function that says it in the language in effect (said
# again when the language changes).
Note = str | Callable[[], str]


def describe(settings: LoadSettings) -> str:
    """ "2 threads, batch 256, flash on" (the micro-batch only when it differs)."""
    n = settings.n_threads
    threads = (
        QCoreApplication.translate("TunedSettingsBox", "{0} thread")
        if n == 1
        else QCoreApplication.translate("TunedSettingsBox", "{0} threads")
    ).format(n)
    batch = str(settings.n_batch)
    if settings.n_ubatch != settings.n_batch:
        batch += f"/{settings.n_ubatch}"
    text = (
        QCoreApplication.translate("TunedSettingsBox", "{0}, batch {1}, flash on")
        if settings.flash_attn
        else QCoreApplication.translate("TunedSettingsBox", "{0}, batch {1}, flash off")
    )
    return text.format(threads, batch)


def figures(trial: Trial) -> str:
    text = QCoreApplication.translate("TunedSettingsBox", "{0:,.0f} prompt / {1:,.0f} gen tok/s")
    return text.format(trial.prompt_tokens_per_s, trial.gen_tokens_per_s)


class TunedSettingsBox(FollowsLanguage, QGroupBox):
    """The calibration's choice for the selected model, its progress, and the override."""

    calibrate_requested = Signal()  # "Calibrate again"
    cancel_requested = Signal()  # stop the calibration running now
    use_requested = Signal()  # "Use Them": reload the model with the settings just measured

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.use_tuned = WrappingCheckBox()
        self.use_tuned.setChecked(True)
        self.line = plain_label()
        self.line.setWordWrap(True)
        self.line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._line_text: Callable[[], str] = str  # says the line; kept for a language change
        self.again_button = QPushButton()
        self.again_button.clicked.connect(self.calibrate_requested)
        self.table_button = QPushButton()
        self.table_button.setCheckable(True)
        self.table_button.toggled.connect(self._show_table)
        self.cancel_button = QPushButton()
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.cancel_button.hide()
        self.use_button = QPushButton()
        self.use_button.clicked.connect(self.use_requested)
        self.use_button.hide()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.hide()
        self._calibration: Calibration | None = None
        self._running = False

        # two by two, the two always shown in one column: four in a row widened the narrow
        # model panel past its dock, which then cut off the right of every row
        buttons = QGridLayout()
        for i, button in enumerate((self.again_button, self.table_button, self.use_button,
                                    self.cancel_button)):  # fmt: skip
            buttons.addWidget(button, i % 2, i // 2)
        buttons.setColumnStretch(2, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.use_tuned)
        layout.addWidget(self.line)
        layout.addLayout(buttons)
        layout.addWidget(self.table)
        self.use_tuned.toggled.connect(lambda _on: self._refresh())
        self.show_calibration(None)
        self.retranslate()

    def retranslate(self) -> None:
        """Every text of the box, the line and the table, in the language in effect."""
        self.setTitle(self.tr("Speed"))
        self.use_tuned.setText(self.tr("Use tuned settings"))
        self.use_tuned.setToolTip(
            self.tr(
                "On: threads, batch sizes and flash attention are the fastest measured on this "
                "machine (measured on a model's first load). Off: the values above are used."
            )
        )
        self.again_button.setText(self.tr("Calibrate again"))
        self.again_button.setToolTip(self.tr("Measure the candidates again and load the fastest"))
        self.table_button.setText(self.tr("Measurements"))
        self.table_button.setToolTip(self.tr("Show every setting tried and its speed"))
        self.cancel_button.setText(self.tr("Cancel"))
        self.cancel_button.setToolTip(self.tr("Stop calibrating and load with the values above"))
        self.use_button.setText(self.tr("Use Them"))
        self.use_button.setToolTip(self.tr("Load the model again with the tuned settings"))
        self.table.setHorizontalHeaderLabels([self.tr(c) if c else c for c in COLUMNS])
        self._fill_table()
        self.line.setText(self._line_text())

    def _say(self, text: Callable[[], str]) -> None:
        """Show the line; ``text`` is kept to say it again when the language changes."""
        self._line_text = text
        self.line.setText(text())

    @property
    def calibration(self) -> Calibration | None:
        return self._calibration

    @property
    def running(self) -> bool:
        return self._running

    def show_progress(self, done: int, total: int) -> None:
        """A calibration runs: "calibrating: 3/8 settings", and its Cancel."""
        self._running = True
        self.cancel_button.show()
        self.cancel_button.setEnabled(True)
        self._say(lambda: self.tr("calibrating: {0}/{1} settings").format(done, total))
        self.again_button.setEnabled(False)

    def show_background_progress(self, done: int, total: int) -> None:
        """The first calibration runs apart from the loaded model, which is usable meanwhile."""
        self.show_progress(done, total)
        self.use_button.hide()
        self._say(
            lambda: self.tr(
                "Measuring the fastest settings in the background: {0}/{1} tried. The model "
                "is ready to use meanwhile."
            ).format(done, total)
        )

    def offer(self, calibration: Calibration) -> None:
        """A calibration measured in the background: shown with "Use Them" (the model loaded
        keeps its settings until the person says so; later loads use the tuned ones)."""
        self.show_calibration(calibration)
        if not self.use_tuned.isChecked():  # the panel's own values are wanted
            return
        self.use_button.show()
        self._say(
            lambda: self.tr(
                "Tuned settings are ready: {0} — {1}. Use them? (Later loads do.)"
            ).format(describe(calibration.best), figures(calibration.best_trial))
        )

    def show_calibration(self, calibration: Calibration | None, note: Note = "") -> None:
        """The calibration known for the selected model (None: none yet); ``note`` is added."""
        self._running = False
        self.cancel_button.hide()
        self.use_button.hide()
        self._calibration = calibration
        self._fill_table()
        self._refresh(note)

    def show_stopped(self, message: Note) -> None:
        """The calibration was cancelled or failed; the model loads with the values above."""
        self.show_calibration(self._calibration, message)

    def set_can_calibrate(self, can: bool) -> None:
        self.again_button.setEnabled(can and not self._running and self.use_tuned.isChecked())

    def _refresh(self, note: Note = "") -> None:
        cal, tuned = self._calibration, self.use_tuned.isChecked()
        self._say(lambda: self._tuned_text(cal, tuned, note))
        self.table_button.setEnabled(cal is not None)

    def _tuned_text(self, cal: Calibration | None, tuned: bool, note: Note) -> str:
        """The line for calibration ``cal``, whether it is used, and ``note`` ahead of it."""
        if cal is None:
            text = self.tr(
                "Not calibrated yet: after the first load on this machine, the fastest threads, "
                "batch and flash attention are measured in the background."
            )
        else:
            text = self.tr("Tuned for this machine: {0} — {1}").format(
                describe(cal.best), figures(cal.best_trial)
            )
        if not tuned:
            text = self.tr("Tuned settings off: the values above are used.") + (
                " " + self.tr("(Tuned: {0}.)").format(describe(cal.best)) if cal else ""
            )
        said = note() if callable(note) else note
        return self.tr("{0}. {1}").format(said, text) if said else text

    def _fill_table(self) -> None:
        cal = self._calibration
        trials = sorted(cal.trials, key=lambda t: t.seconds_per_call) if cal else []
        self.table.setRowCount(len(trials))
        for row, t in enumerate(trials):
            s = t.settings
            chosen = cal is not None and s == cal.best
            cells = ("✓" if chosen else "", str(s.n_threads), str(s.n_batch), str(s.n_ubatch),
                     self.tr("on") if s.flash_attn else self.tr("off"),
                     f"{t.prompt_tokens_per_s:,.0f}", f"{t.gen_tokens_per_s:,.1f}")  # fmt: skip
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col:
                    item.setTextAlignment(RIGHT)
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()
        if cal is None:
            self.table_button.setChecked(False)

    def _show_table(self, shown: bool) -> None:
        self.table.setVisible(shown)
