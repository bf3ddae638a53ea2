"""The main window. For now: the model card, the document and how it compares to the context.

It observes the engine worker's signals and never blocks: loading the model and counting the
document's tokens run on the engine thread.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QFont, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app import __version__
from app.core.engine.gguf import ModelInfo
from app.core.engine.protocol import LoadedModel, LoadSettings
from app.ui.engine_worker import EngineThread


class ModelCard(QGroupBox):
    """The GGUF metadata a person needs before choosing a context size."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(self.tr("Model"), parent)
        self._form = QFormLayout(self)
        self._fields: dict[str, QLabel] = {}
        for key, label in (
            ("name", self.tr("Name")),
            ("arch", self.tr("Architecture")),
            ("params", self.tr("Parameters")),
            ("quant", self.tr("Quantization")),
            ("layers", self.tr("Layers")),
            ("ctx_train", self.tr("Context trained")),
            ("n_ctx", self.tr("Context loaded")),
            ("kv", self.tr("KV cache")),
        ):
            value = QLabel("–")
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self._fields[key] = value
            self._form.addRow(label + ":", value)

    def show_model(self, info: ModelInfo, loaded: LoadedModel) -> None:
        per_token = info.kv_bytes_per_token(loaded.kv_cache_type) or 0
        values = {
            "name": info.name or Path(info.path).name,
            "arch": info.architecture,
            "params": f"{info.parameters / 1e6:,.0f} M",
            "quant": info.quantization,
            "layers": str(info.n_layers or "–"),
            "ctx_train": f"{info.n_ctx_train:,}" if info.n_ctx_train else "–",
            "n_ctx": f"{loaded.n_ctx:,}",
            "kv": self.tr("{0:,} bytes/token, {1:,.0f} MiB at {2:,} tokens").format(
                per_token, per_token * loaded.n_ctx / 2**20, loaded.n_ctx
            ),
        }
        for key, text in values.items():
            self._fields[key].setText(text)


class MainWindow(QMainWindow):
    ready = Signal()  # the model is loaded and the document's tokens are counted
    failed = Signal(str)  # something the person was told about went wrong

    def __init__(self, model: Path | None, document: Path | None, n_ctx: int = 8192) -> None:
        super().__init__()
        self.setWindowTitle("ContextLens")
        self.resize(1100, 720)
        self._n_ctx = n_ctx
        self._loaded: LoadedModel | None = None
        self._doc_text = ""
        self._doc_tokens: int | None = None
        self.last_error = ""

        self.card = ModelCard()
        self.ratio = QLabel(self.tr("No document"))
        self.ratio.setWordWrap(True)
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.addWidget(self.card)
        side_layout.addWidget(self.ratio)
        side_layout.addStretch(1)

        self.document_view = QPlainTextEdit()
        self.document_view.setReadOnly(True)
        self.document_view.setFont(QFont("monospace"))
        self.document_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)

        splitter = QSplitter()
        splitter.addWidget(side)
        splitter.addWidget(self.document_view)
        splitter.setStretchFactor(1, 1)
        self.setCentralWidget(splitter)
        self._build_menus()

        self.engine = EngineThread(self)
        self.engine.worker.model_loaded.connect(self._on_model_loaded)
        self.engine.worker.tokens_counted.connect(self._on_tokens_counted)
        self.engine.worker.failed.connect(self._on_failed)
        self.engine.worker.status.connect(self.statusBar().showMessage)

        if document is not None:
            self.open_document(document)
        if model is not None:
            self.engine.request_load.emit(str(model), LoadSettings(n_ctx=n_ctx))

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu(self.tr("&File"))
        open_action = QAction(self.tr("&Open Document…"), self)
        open_action.setShortcut(QKeySequence.StandardKey.Open)
        open_action.triggered.connect(self._choose_document)
        file_menu.addAction(open_action)
        quit_action = QAction(self.tr("&Quit"), self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)
        help_menu = self.menuBar().addMenu(self.tr("&Help"))
        about = QAction(self.tr("&About ContextLens"), self)
        about.triggered.connect(self._about)
        help_menu.addAction(about)

    def _choose_document(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, self.tr("Open Document"))
        if path:
            self.open_document(Path(path))

    def open_document(self, path: Path) -> None:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            self._on_failed(self.tr("Cannot open {0}: {1}").format(path, exc.strerror or exc))
            return
        text = raw.decode("utf-8", errors="replace")
        self._doc_text = text
        self._doc_tokens = None
        self.setWindowTitle(f"ContextLens — {path.name}")
        self.document_view.setPlainText(text)
        self.ratio.setText(self.tr("{0:,} characters; counting tokens…").format(len(text)))
        if self._loaded is not None:
            self.engine.request_count.emit(text)

    def _on_model_loaded(self, info: ModelInfo, loaded: LoadedModel) -> None:
        self._loaded = loaded
        self.card.show_model(info, loaded)
        self.statusBar().showMessage(
            self.tr("Model loaded in {0:.2f} s").format(loaded.load_seconds), 5000
        )
        for warning in loaded.warnings:
            self.statusBar().showMessage(warning)
        if self._doc_text:
            self.engine.request_count.emit(self._doc_text)
        else:
            self.ready.emit()

    def _on_tokens_counted(self, tokens: int, chars: int) -> None:
        self._doc_tokens = tokens
        n_ctx = self._loaded.n_ctx if self._loaded else self._n_ctx
        self.ratio.setText(
            self.tr(
                "Document: {0:,} characters, {1:,} tokens — {2:.1f}× the {3:,}-token context. "
                "Only part of it can reach the model at once."
            ).format(chars, tokens, tokens / n_ctx, n_ctx)
            if tokens > n_ctx
            else self.tr(
                "Document: {0:,} characters, {1:,} tokens — fits the {2:,}-token context."
            ).format(chars, tokens, n_ctx)
        )
        self.statusBar().showMessage(self.tr("Ready"))
        self.ready.emit()

    def _on_failed(self, message: str) -> None:
        self.last_error = message
        self.statusBar().showMessage(message)
        # open(), not exec(): the message is window-modal but never blocks the event loop.
        box = QMessageBox(QMessageBox.Icon.Warning, self.tr("ContextLens"), message,
                          QMessageBox.StandardButton.Ok, self)  # fmt: skip
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.failed.emit(message)

    def _about(self) -> None:
        import llama_cpp
        from PySide6 import __version__ as pyside_version

        QMessageBox.about(
            self,
            self.tr("About ContextLens"),
            self.tr("ContextLens {0}\nllama-cpp-python {1}\nQt (PySide6) {2}").format(
                __version__, llama_cpp.__version__, pyside_version
            ),
        )

    def closeEvent(self, event: QCloseEvent) -> None:
        self.engine.stop()
        super().closeEvent(event)
