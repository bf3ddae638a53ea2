"""The "Get the Default Model" dialog: ask first, then download with progress and a Cancel;
and its sibling, "Get a Model from Hugging Face", for any GGUF on the Hub by name.

Models are not bundled with the app. This dialog says what it will fetch, how large it is and
from where, and downloads only when the person agrees. Both dialogs share the transfer
(:class:`_FetchDialog`). The work (app/core/model_fetch.py) runs on
a pool thread and reports into a small lock-guarded object that a timer reads ten times a second,
so the worker never touches Qt. A failure stays in the dialog as one sentence with Try Again; a
cancel stops between chunks and leaves nothing behind.

:class:`HubFetchDialog` works the same way over app/core/hub_fetch.py: the person types
``org/repo:Q4_K_M``, ``org/repo:FILE.gguf`` or a link; the model goes into the Hugging Face cache
(where the model list finds it); a cancel keeps the partial download, so Try Again resumes it.
The default model's dialog opens it from its "From Hugging Face…" button.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.core.cancelled import Cancelled
from app.core.credentials import CredentialError
from app.core.default_model import DEFAULT_MODEL, ModelFetchError
from app.core.model_fetch import index_host
from app.services import models
from app.ui.background import Progress, run_in_background
from app.ui.widgets import MessageLine

POLL_MS = 100
MIN_WIDTH = 480  # wide enough that the wrapped sentences stay a few lines each


def _as_sentence_end(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


class _FetchDialog(QDialog):
    """What both dialogs share: the progress bar and its figures, Download and Cancel, the
    worker on a pool thread that reports into a lock-guarded :class:`Progress` a timer reads,
    and the end of a transfer (the model, a cancel or the error sentence with Try Again)."""

    fetched = Signal(object)  # Path of the verified model (a split's first file)
    failed = Signal(str)  # the sentence shown
    cancelled = Signal()

    def __init__(self, parent: QWidget | None) -> None:
        super().__init__(parent)
        self._transfer: Progress | None = None
        self.setMinimumWidth(MIN_WIDTH)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.amount = QLabel()
        self.error = MessageLine()
        self.buttons = QDialogButtonBox()
        self.download_button = QPushButton(self.tr("&Download"))
        self.download_button.setDefault(True)
        self.buttons.addButton(self.download_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.download_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.reject)
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._show_progress)

    def _lay_out(self, *rows: QWidget | QHBoxLayout) -> None:
        """``rows`` above the progress, the error line and the buttons."""
        layout = QVBoxLayout(self)
        for row in rows:
            if isinstance(row, QHBoxLayout):
                layout.addLayout(row)
            else:
                layout.addWidget(row)
        for widget in (self.bar, self.amount, self.error):
            layout.addWidget(widget)
        layout.addStretch(1)
        layout.addWidget(self.buttons)
        self._show_idle()

    def running(self) -> bool:
        return self._transfer is not None

    def start(self) -> None:
        raise NotImplementedError

    def _set_inputs_enabled(self, enabled: bool) -> None:
        """The controls besides Download and Cancel that a transfer must not change."""

    def _failure_text(self, message: str) -> str:
        raise NotImplementedError

    def _launch(self, fetch: Callable[[Progress], Path], asking: str,
                expected: tuple[type[Exception], ...]) -> None:  # fmt: skip
        """Run ``fetch`` on a pool thread with a new transfer; ``asking`` is what the dialog
        says until the first figures arrive; ``expected`` failures are one sentence, not logged."""
        transfer = self._transfer = Progress()
        self.error.clear()
        self._set_inputs_enabled(False)
        self.download_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.cancel_button.setText(self.tr("Cancel"))
        self.bar.setRange(0, 0)  # busy until the server says how large the file is
        self.bar.show()
        self.amount.setText(asking)
        self.amount.show()
        self.adjustSize()
        self._poll.start()
        # Quitting the app mid-download stops it too: the pool would otherwise hold the exit
        # until the last byte arrived.
        _app().aboutToQuit.connect(transfer.stop)

        def work() -> Path | str | None:  # plain values only: see run_in_background
            try:
                return fetch(transfer)
            except Cancelled:
                return None
            except expected as exc:  # a typo, offline, a bad mirror: said, not logged
                return str(exc)

        dialog = weakref.ref(self)

        def done(outcome: Path | str | None) -> None:
            if (d := dialog()) is not None and isValid(d):
                if isinstance(outcome, str):
                    d._failed(transfer, outcome)
                else:
                    d._finished(transfer, outcome)

        def failed(message: str) -> None:
            if (d := dialog()) is not None and isValid(d):
                d._failed(transfer, message)

        run_in_background(work, done, failed)

    def reject(self) -> None:
        """Cancel, Esc or the close box: while downloading, stop it first (the dialog closes
        once the worker has stopped); otherwise just close."""
        transfer = self._transfer
        if transfer is None:
            super().reject()
            return
        if not transfer.cancel.is_set():
            transfer.cancel.set()
            self.cancel_button.setEnabled(False)
            self.amount.setText(self.tr("Cancelling…"))

    def _show_progress(self) -> None:
        transfer = self._transfer
        if transfer is None or transfer.cancel.is_set():
            return
        done, total = transfer.progress()
        if total <= 0:
            return
        if self.bar.maximum() != total:
            self.bar.setRange(0, total)
        self.bar.setValue(done)
        if done >= total:
            self.amount.setText(self.tr("Checking the model…"))
        else:
            self.amount.setText(self.tr("{0:,.1f} of {1:,.1f} MB").format(done / 1e6, total / 1e6))

    def _end(self, transfer: Progress) -> bool:
        """Forget ``transfer``; False when it is not the current one (then ignore it)."""
        if self._transfer is not transfer:
            return False
        self._show_progress()
        self._poll.stop()
        self._transfer = None
        with suppress(RuntimeError, TypeError):
            _app().aboutToQuit.disconnect(transfer.stop)
        return True

    def _finished(self, transfer: Progress, path: Path | None) -> None:
        if not self._end(transfer):
            return
        if path is None:
            self._show_idle()
            self.cancelled.emit()
            super().reject()
            return
        self.fetched.emit(path)
        self.accept()

    def _failed(self, transfer: Progress, message: str) -> None:
        if not self._end(transfer):
            return
        text = self._failure_text(_as_sentence_end(message))
        self._show_idle()
        self.error.show_message(text)
        self.download_button.setText(self.tr("Try &Again"))
        self.cancel_button.setText(self.tr("Close"))
        self.adjustSize()
        self.failed.emit(text)

    def _show_idle(self) -> None:
        self.bar.hide()
        self.amount.hide()
        self._set_inputs_enabled(True)
        self.download_button.setEnabled(True)
        self.cancel_button.setEnabled(True)

    def error_text(self) -> str:
        return self.error.text()


class ModelFetchDialog(_FetchDialog):
    """Confirm, download and verify the default model into ``folder``."""

    def __init__(self, folder: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._folder = Path(folder)
        self.setWindowTitle(self.tr("Get the Default Model"))
        self.intro = QLabel(
            self.tr(
                "ContextLens will download {0} ({1:,.0f} MB) from {2} into {3}. The file is "
                "checked against its published SHA-256 checksum before it is used."
            ).format(DEFAULT_MODEL.filename, DEFAULT_MODEL.size / 1e6, index_host(), self._folder)
        )
        self.intro.setWordWrap(True)
        self.hub_button = QPushButton(self.tr("From &Hugging Face…"))
        self.hub_button.setToolTip(self.tr("Get another model by name from the Hugging Face Hub"))
        self.buttons.addButton(self.hub_button, QDialogButtonBox.ButtonRole.ResetRole)
        self.hub_button.clicked.connect(self.open_hub)
        self.hub_dialog: HubFetchDialog | None = None
        self._lay_out(self.intro)

    def open_hub(self) -> HubFetchDialog:
        """Open "Get a Model from Hugging Face" over this dialog; the model it fetches is this
        dialog's ``fetched`` (so whoever listens for the default model selects it)."""
        hub = self.hub_dialog
        if hub is None:
            hub = self.hub_dialog = HubFetchDialog(parent=self)
            hub.fetched.connect(self._hub_fetched)
        hub.open()
        return hub

    def _hub_fetched(self, path: Path) -> None:
        if self._transfer is None:
            self.fetched.emit(path)
            self.accept()

    def start(self) -> None:
        """Download now (the person agreed), on a pool thread."""
        if self._transfer is not None:
            return
        folder = self._folder
        self._launch(lambda t: models.fetch(DEFAULT_MODEL, folder, t.report, t.cancel),
                     self.tr("Asking {0} for the file…").format(index_host()),
                     (ModelFetchError,))  # fmt: skip

    def _set_inputs_enabled(self, enabled: bool) -> None:
        self.hub_button.setEnabled(enabled)

    def _failure_text(self, message: str) -> str:
        return self.tr("Could not get the default model: {0}").format(message)


class HubFetchDialog(_FetchDialog):
    """Get a GGUF from the Hugging Face Hub by name into the Hugging Face cache (or ``folder``),
    with progress, Cancel, and the error sentence with Try Again."""

    def __init__(self, folder: Path | None = None, parent: QWidget | None = None,
                 reference: str = "") -> None:  # fmt: skip
        super().__init__(parent)
        self._folder = Path(folder) if folder is not None else None
        self.setWindowTitle(self.tr("Get a Model from Hugging Face"))

        self.intro = QLabel(
            self.tr("Get a model from Hugging Face: org/repo:Q4_K_M or a link")
        )
        self.intro.setWordWrap(True)
        self.reference = QLineEdit(reference)
        self.reference.setPlaceholderText(self.tr("org/repo:Q4_K_M"))
        self.reference.setClearButtonEnabled(True)
        self.intro.setBuddy(self.reference)
        where = self.tr("the Hugging Face cache, where the model list finds it") \
            if self._folder is None else str(self._folder)
        self.note = QLabel(
            self.tr("The model comes from {0} into {1}. A quantization such as Q4_K_M picks the "
                    "matching .gguf file; an interrupted download resumes.").format(
                models.hub_host(), where)
        )
        self.note.setWordWrap(True)
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText(
            self.tr("only for a gated or private model; kept in the system keyring")
        )
        token_label = QLabel(self.tr("Hugging Face &token:"))
        token_label.setBuddy(self.token)
        token_row = QHBoxLayout()
        token_row.addWidget(token_label)
        token_row.addWidget(self.token, 1)
        self._lay_out(self.intro, self.reference, self.note, token_row)

    def start(self) -> None:
        """Download what the person typed, on a pool thread."""
        if self._transfer is not None:
            return
        text = self.reference.text().strip()
        if not text:
            self.error.show_message(self.tr("Type a model's name first, such as "
                                            "bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M."))
            self.reference.setFocus()
            return
        folder = self._folder
        token = self.token.text().strip()

        def fetch(transfer: Progress) -> Path:
            if token:
                models.keep_hub_token(token)
            return models.fetch_from_hub(text, folder, transfer.report, transfer.cancel)

        self._launch(fetch, self.tr("Asking {0} for the files…").format(models.hub_host()),
                     (ModelFetchError, CredentialError))  # fmt: skip

    def _set_inputs_enabled(self, enabled: bool) -> None:
        self.reference.setEnabled(enabled)
        self.token.setEnabled(enabled)

    def _failure_text(self, message: str) -> str:
        return self.tr("Could not get the model: {0}").format(message)


def _app() -> QCoreApplication:
    app = QCoreApplication.instance()
    assert app is not None  # a dialog is shown inside a running application
    return app
