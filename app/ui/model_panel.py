"""The model panel: choose a GGUF file, see what it is, and decide how to load it.

A context size is a memory decision, so the panel shows the model card and what the chosen
n_ctx, KV cache type and GPU layers will cost *before* anything is loaded, updating as the
person types. The file is checked by the pure-Python GGUF reader off the GUI thread: a bad file
costs one plain sentence and a disabled Load button, never a crash inside llama.cpp.

The panel only asks (``load_requested``, ``unload_requested``); the window owns the engine and
answers with :meth:`ModelPanel.show_loaded`, :meth:`ModelPanel.show_unloaded` or
:meth:`ModelPanel.show_error`. The speed knobs (threads, batch sizes, flash attention) are the
person's; the tuned values measured on this machine replace them at load unless "Use tuned
settings" is off (app/ui/tuned_settings.py shows them).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QPoint, QSettings, Qt, Signal
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.core.calibrate import Calibration
from app.core.default_model import default_model_path
from app.core.engine.gguf import ModelInfo, inspect_model
from app.core.engine.remote import ServerInfo
from app.core.engine.types import (
    KV_CACHE_TYPE_NAMES,
    EngineCapabilities,
    LoadedModel,
    LoadSettings,
)
from app.core.memory_fit import Fit, gib
from app.core.paths import list_models
from app.core.telemetry import memory_fit
from app.core.textutil import clip_message
from app.services import model_library
from app.services.errors import BadRequest
from app.services.model_library import Discovery, FoundModel, Source
from app.ui.background import run_in_background
from app.ui.i18n import FollowsLanguage
from app.ui.model_fetch_dialog import HubFetchDialog, ModelFetchDialog
from app.ui.model_list import DETAILS_ROLE, PATH_ROLE, SOURCE_ROLE, ModelRowDelegate
from app.ui.model_search import ModelSearch
from app.ui.server_box import ServerBox
from app.ui.tuned_settings import TunedSettingsBox
from app.ui.widgets import MessageLine, WrappingCheckBox, plain_label

D = TypeVar("D", ModelFetchDialog, HubFetchDialog)  # the dialogs that fetch a model

MAX_CTX = 1_048_576  # the n_ctx ceiling when the model does not say what it was trained on
MIN_CTX = 16  # llama.cpp's own floor
UNQUANTIZED_KV = ("f16", "f32", "bf16")  # the cache types that work without flash attention
MAX_THREADS = 512
MAX_BATCH = 65_536
_PATH_ROLE = PATH_ROLE
OWN = str(Source.CONTEXTLENS)  # the list's group of the models folder's own files
CHOSEN = "chosen"  # the list's group of files chosen by hand that no source lists


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def _count(n: int) -> str:
    return f"{n / 1e9:,.1f} B" if n >= 1e9 else f"{n / 1e6:,.0f} M"


def _short_name(name: str, limit: int = 40) -> str:
    """A file name short enough for the card: an Ollama blob's ``sha256-<64 hex>`` is one word
    that cannot wrap, and would widen the whole panel."""
    if len(name) <= limit:
        return name
    keep = (limit - 1) // 2
    return f"{name[:keep]}…{name[-keep:]}"


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


class ModelCard(FollowsLanguage, QGroupBox):
    """The GGUF metadata a person needs before choosing a context size."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: fields go under
        self._fields: dict[str, QLabel] = {}
        self._names: dict[str, QLabel] = {}
        # what the card shows, to say it again in another language
        self._info: ModelInfo | None = None
        self._cache_type = ""
        self._loaded: LoadedModel | None = None
        self._loaded_shown = False  # show_loaded was called since the last clear
        for key in self._row_names():
            value = plain_label("–")
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            name = QLabel()
            name.setBuddy(value)
            self._fields[key] = value
            self._names[key] = name
            form.addRow(name, value)
        self.retranslate()

    def _row_names(self) -> dict[str, str]:
        """Each row's key and name, top to bottom."""
        return {
            "name": self.tr("Name:"),
            "file": self.tr("File:"),
            "arch": self.tr("Architecture:"),
            "params": self.tr("Parameters:"),
            "quant": self.tr("Quantization:"),
            "ctx_train": self.tr("Context trained:"),
            "layers": self.tr("Layers:"),
            "attention": self.tr("Attention:"),
            "kind": self.tr("Kind:"),
            "kv": self.tr("KV bytes per token:"),
            "loaded": self.tr("Loaded:"),
        }

    def retranslate(self) -> None:
        """The title, the row names and the values shown, in the language in effect."""
        self.setTitle(self.tr("Model"))
        for key, text in self._row_names().items():
            self._names[key].setText(text)
        if self._info is not None:
            self.show_info(self._info, self._cache_type)
        if self._loaded_shown:
            self.show_loaded(self._loaded)

    def value(self, key: str) -> str:
        """The text shown for one field (name, file, arch, params, quant, ctx_train, layers, kv,
        loaded)."""
        return self._fields[key].text()

    def clear(self) -> None:
        self._info = None
        self._loaded_shown = False
        for value in self._fields.values():
            value.setText("–")
        self._fields["file"].setToolTip("")

    def show_info(self, info: ModelInfo, cache_type: str) -> None:
        self._info, self._cache_type = info, cache_type
        per_token = info.kv_bytes_per_token(cache_type)
        values = {
            "name": info.name or Path(info.path).name,
            "file": self.tr("{0} ({1} MiB, GGUF v{2})").format(
                _short_name(Path(info.path).name), _mib(info.file_size), info.gguf_version
            ),
            "arch": info.architecture,
            "params": _count(info.parameters),
            "quant": info.quantization,
            "ctx_train": f"{info.n_ctx_train:,}" if info.n_ctx_train else "–",
            "layers": str(info.n_layers) if info.n_layers else "–",
            "attention": self._attention(info),
            # a base model is named so before it is loaded (and again at load, as a warning)
            "kind": self.tr("base model: replies continue the text; instructions may be ignored")
            if info.is_base_model
            else self.tr("chat model (it has a chat template)"),
            "kv": self.tr("{0:,} ({1})").format(per_token, cache_type)
            if per_token is not None
            else self.tr("unknown"),
        }
        for key, text in values.items():
            self._fields[key].setText(text)
        self._fields["file"].setToolTip(info.path)

    def _attention(self, info: ModelInfo) -> str:
        """Full attention, or the sliding window and on how many layers (the KV cache keeps
        every position of those layers too: see ModelInfo.kv_bytes_per_token)."""
        n = info.n_layers or len(info.kv_heads_per_layer)
        if info.sliding_window and info.swa_layers:
            return self.tr("sliding window of {0:,} tokens on {1} of {2} layers").format(
                info.sliding_window, len(info.swa_layers), n
            )
        return self.tr("full attention on all {0} layers").format(n) if n else "–"

    def show_loaded(self, loaded: LoadedModel | None) -> None:
        self._loaded, self._loaded_shown = loaded, True
        if loaded is None:
            self._fields["loaded"].setText(self.tr("no"))
            return
        self._fields["loaded"].setText(
            self.tr("context {0:,}, KV {1}, {2} GPU layers, in {3:.2f} s").format(
                loaded.n_ctx, loaded.kv_cache_type, loaded.n_gpu_layers, loaded.load_seconds
            )
        )


class ModelPanel(FollowsLanguage, QWidget):
    """Models on disk, the chosen one's card, the load options and what they will cost."""

    load_requested = Signal(object, object)  # Path, LoadSettings
    unload_requested = Signal()
    info_ready = Signal(object)  # ModelInfo of the selected file, once read
    file_failed = Signal(str)  # the selected file is not a usable model; one sentence
    model_fetched = Signal(object)  # Path of a model just downloaded (from the panel or banner)
    models_listed = Signal(int)  # the search for models answered: how many the list offers
    calibrate_requested = Signal(object, object)  # Path, LoadSettings: measure again, then load
    calibration_cancel_requested = Signal()

    def __init__(self, models_dir: Path, parent: QWidget | None = None, *,
                 settings: QSettings | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._models_dir = Path(models_dir)
        # a server instead of a file here (its address is kept in these settings)
        self.server = ServerBox(settings if settings is not None else QSettings())
        self._info: ModelInfo | None = None
        self._caps: EngineCapabilities | None = None
        self._loaded: LoadedModel | None = None
        self._busy = False
        self._reading = 0  # generation of the newest read; older answers are ignored
        self._settings_error = ""
        self._calibrations: dict[Path, Calibration] = {}  # per model file, as the engine told
        self._file_problem: tuple[Path, str] | None = None  # the selected file and its fault
        self._status_text: Callable[[], str] = self._loaded_text  # says the status line
        defaults = LoadSettings()

        self.models = QListWidget()
        self.models.setAlternatingRowColors(True)
        self.models.setItemDelegate(ModelRowDelegate(self._hover_text, self.models))
        self.models.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.models.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.models.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.models.customContextMenuRequested.connect(self._show_list_menu)
        self.models.currentItemChanged.connect(self._on_current_changed)
        self._models_label = QLabel()
        self._models_label.setBuddy(self.models)
        self.browse_button = QPushButton()
        self.browse_button.clicked.connect(self._browse)
        self.add_folder_button = QPushButton()
        self.add_folder_button.clicked.connect(self._add_folder)
        self.models_note = plain_label()  # the files skipped while looking for models
        self.models_note.setWordWrap(True)
        self.models_note.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.models_note.hide()
        self._library: Discovery | None = None  # what the last search found
        self._chosen: list[Path] = []  # files chosen by hand (Browse…, a drop, --model)
        self._search = ModelSearch(self._models_dir, self)
        self._search.found.connect(self._on_found)
        self.get_default_button = QPushButton()
        self.get_default_button.clicked.connect(self.get_default_model)
        self._fetch_dialog: ModelFetchDialog | None = None
        self._hub_dialog: HubFetchDialog | None = None

        self.card = ModelCard()
        self.file_error = MessageLine()

        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(MIN_CTX, MAX_CTX)
        self.n_ctx.setSingleStep(1024)
        self.n_ctx.setGroupSeparatorShown(True)
        self.n_ctx.setKeyboardTracking(True)  # the memory line follows every keystroke
        self.n_ctx.setValue(defaults.n_ctx)
        self.memory = plain_label()
        self.memory.setWordWrap(True)

        self.gpu_layers = QSlider(Qt.Orientation.Horizontal)
        self.gpu_layers.setRange(0, 0)
        self.gpu_layers.setPageStep(4)
        self.gpu_layers_value = QLabel()
        self.gpu_reason = plain_label()
        self.gpu_reason.setWordWrap(True)
        self.backend = plain_label()
        self.backend.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.gpu_reason.setForegroundRole(QPalette.ColorRole.PlaceholderText)

        self.kv_type = QComboBox()
        for name in KV_CACHE_TYPE_NAMES:
            self.kv_type.addItem(name, name)
        self.kv_type.setCurrentIndex(KV_CACHE_TYPE_NAMES.index(defaults.kv_cache_type))
        self.flash_attn = WrappingCheckBox()
        self.flash_attn.setChecked(defaults.flash_attn)
        self.threads = QSpinBox()
        self.threads.setRange(1, max(MAX_THREADS, defaults.n_threads))
        self.threads.setValue(defaults.n_threads)
        self.batch = QSpinBox()
        self.batch.setRange(1, MAX_BATCH)
        self.batch.setSingleStep(64)
        self.batch.setValue(defaults.n_batch)
        self.ubatch = QSpinBox()
        self.ubatch.setRange(1, MAX_BATCH)
        self.ubatch.setSingleStep(64)
        self.ubatch.setValue(defaults.n_ubatch)
        self._defaults = defaults
        self.tuning = TunedSettingsBox()
        self.tuning.calibrate_requested.connect(self._request_calibration)
        self.tuning.cancel_requested.connect(self.calibration_cancel_requested)
        self.tuning.use_requested.connect(self._request_load)  # loads with the tuned settings
        self.tuning.use_tuned.toggled.connect(self._update)
        self.settings_note = MessageLine()

        self.load_button = QPushButton()
        self.load_button.setDefault(True)
        self.load_button.clicked.connect(self._request_load)
        self.unload_button = QPushButton()
        self.unload_button.clicked.connect(self.unload_requested)
        self.status = plain_label()
        self.status.setWordWrap(True)
        self.engine_error = MessageLine()

        self._layout()
        self.n_ctx.valueChanged.connect(self._update)
        self.gpu_layers.valueChanged.connect(self._update)
        self.kv_type.currentIndexChanged.connect(self._on_kv_type_changed)
        self.flash_attn.toggled.connect(self._update)
        self.threads.valueChanged.connect(self._update)
        self.batch.valueChanged.connect(self._update)
        self.ubatch.valueChanged.connect(self._update)

        self.set_capabilities(None)
        self.show_unloaded()
        self.refresh_models()
        self.retranslate()

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self._models_label)
        top.addStretch(1)
        top.addWidget(self.browse_button)
        folders = QHBoxLayout()  # under the list: the dock is too narrow for both beside it
        folders.addWidget(self.add_folder_button)
        folders.addStretch(1)

        self._options = QGroupBox()
        form = QFormLayout(self._options)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: fields go under

        def row(field: QWidget | QHBoxLayout, buddy: QWidget) -> QLabel:
            label = QLabel()
            label.setBuddy(buddy)
            form.addRow(label, field)
            return label

        self._ctx_label = row(self.n_ctx, self.n_ctx)
        form.addRow("", self.memory)
        gpu_row = QHBoxLayout()
        gpu_row.addWidget(self.gpu_layers, 1)
        gpu_row.addWidget(self.gpu_layers_value)
        self._gpu_label = row(gpu_row, self.gpu_layers)
        form.addRow("", self.gpu_reason)
        self._backend_label = row(self.backend, self.backend)
        self._kv_label = row(self.kv_type, self.kv_type)
        form.addRow("", self.flash_attn)
        self._threads_label = row(self.threads, self.threads)
        batch_row = QHBoxLayout()
        batch_row.addWidget(self.batch, 1)
        batch_row.addWidget(self.ubatch, 1)
        self._batch_label = row(batch_row, self.batch)
        form.addRow(self.settings_note)

        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.load_button)
        buttons.addWidget(self.unload_button)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.models, 1)
        layout.addLayout(folders)
        layout.addWidget(self.models_note)
        layout.addWidget(self.get_default_button)
        layout.addWidget(self.file_error)
        layout.addWidget(self.card)
        layout.addWidget(self._options)
        layout.addWidget(self.tuning)
        layout.addLayout(buttons)
        layout.addWidget(self.server)
        layout.addWidget(self.engine_error)
        layout.addWidget(self.status)

    def retranslate(self) -> None:
        """Every text of the panel, and what it shows now (the options' cost, the engine's
        build, the selected file's fault, the status line), in the language in effect."""
        self._models_label.setText(self.tr("&Models:"))
        self.browse_button.setText(self.tr("Bro&wse…"))
        self.browse_button.setToolTip(self.tr("Choose a GGUF file anywhere on disk"))
        self.add_folder_button.setText(self.tr("Add Folder…"))
        self.add_folder_button.setToolTip(
            self.tr("List the GGUF models in a folder of yours too (they stay where they are)"))
        self._retitle()
        self._show_problems()
        self.get_default_button.setText(self.tr("Get the Default Model…"))
        self.get_default_button.setToolTip(
            self.tr("Download the default model (about 98 MB) and check it against its checksum")
        )
        self.n_ctx.setToolTip(self.tr("Tokens the model can hold at once (n_ctx)"))
        self.memory.setToolTip(
            self.tr(
                "Estimated before loading from the model's shape (weights, KV cache, compute "
                "buffers: within a few percent of what llama.cpp allocates) against the memory "
                "free now. Live figures come from llama.cpp once loaded."
            )
        )
        self.kv_type.setToolTip(
            self.tr("Quantized types (q8_0 … iq4_nl) take less memory and need flash attention")
        )
        self.flash_attn.setText(self.tr("Flash attention"))
        self.batch.setToolTip(self.tr("Prompt tokens handed to llama.cpp at once (n_batch)"))
        self.ubatch.setToolTip(self.tr("Tokens computed in one step (n_ubatch)"))
        self.load_button.setText(self.tr("L&oad"))
        self.unload_button.setText(self.tr("&Unload"))
        self._options.setTitle(self.tr("Load options"))
        self._ctx_label.setText(self.tr("Co&ntext size:"))
        self._gpu_label.setText(self.tr("&GPU layers:"))
        self._backend_label.setText(self.tr("Backend:"))
        self._kv_label.setText(self.tr("KV cache type:"))
        self._threads_label.setText(self.tr("Threads:"))
        self.threads.setToolTip(self.tr(
            "The most CPU threads llama.cpp computes with (the physical cores by default); it "
            "uses fewer while other programs keep cores busy"))  # fmt: skip
        self._batch_label.setText(self.tr("Batch, micro-batch:"))
        self._show_capabilities()
        self._show_estimate(self.settings())
        if self._file_problem is not None:
            self.file_error.show_message(self._file_problem_text(*self._file_problem))
        self.status.setText(self._status_text())

    # ----- the list of models -----

    def refresh_models(self) -> None:
        """List the models again: the models folder's files at once, every other place when
        the search off the GUI thread answers (files chosen by hand stay)."""
        chosen = self.selected_model()
        self._show_rows()
        if chosen is not None:
            self.select_model(chosen)
        elif (row := self._first_model_row()) is not None:
            self.models.setCurrentRow(row)
        self.get_default_button.setVisible(not default_model_path(self._models_dir).exists())
        self._search.search()

    def stop_search(self) -> None:
        """The search for models under way, if any, ends at its next entry (the window closes:
        a walk of thousands of entries must not hold the process)."""
        self._search.stop()

    def _on_found(self, discovery: Discovery) -> None:
        """The search answered (at start, or after a watched folder changed): the list shows
        what it found, the selection kept where it still is."""
        self._library = discovery
        chosen = self.selected_model()
        self._show_rows()
        if chosen is None or self._row_of(chosen) is None:
            row = self._first_model_row()
            if row is not None:
                self.models.setCurrentRow(row)
            elif chosen is not None:
                self._on_current_changed(None, None)
        self._show_problems()
        chosen = self.selected_model()
        missing = self._parts_missing(chosen) if chosen is not None else ""
        if missing and self._info is not None and chosen is not None:
            self._set_info(None)
            self._on_file_failed(chosen, missing)
        self.models_listed.emit(self.model_count())

    def _parts_missing(self, path: Path) -> str:
        """Why ``path`` cannot be loaded when the search found it a split with parts missing;
        "" otherwise."""
        library = self._library
        model = next((m for m in library.models if m.path == path), None) if library else None
        if model is None or model.loadable:
            return ""
        return self.tr("only {0} of its {1} parts are here, and llama.cpp needs them all").format(
            model.parts_present, model.parts)  # fmt: skip

    def get_default_model(self) -> None:
        """Offer to download the default model into the models folder (asks first)."""
        self._fetch_dialog = self._open_fetch(
            self._fetch_dialog, lambda: ModelFetchDialog(self._models_dir, self))

    def get_hub_model(self) -> None:
        """Get a model from Hugging Face by name (into its cache, where the list finds it)."""
        self._hub_dialog = self._open_fetch(self._hub_dialog, lambda: HubFetchDialog(parent=self))

    def _open_fetch(self, dialog: D | None, make: Callable[[], D]) -> D:
        """``dialog`` raised when it is open, else a new one (the old one deleted), opened;
        the model it fetches is selected."""
        if dialog is not None and dialog.isVisible():
            dialog.raise_()
            dialog.activateWindow()
            return dialog
        if dialog is not None:
            dialog.deleteLater()
        dialog = make()
        dialog.fetched.connect(self._on_default_model_fetched)
        dialog.open()
        return dialog

    def _on_default_model_fetched(self, path: Path) -> None:
        self.refresh_models()
        self.select_model(path)
        self.model_fetched.emit(path)

    def model_count(self) -> int:
        """How many models the list offers (the window's no-model banner says so)."""
        return len(self._listed())

    def _listed(self) -> list[Path]:
        """The models listed, in order (not the sources' titles)."""
        items = (self.models.item(i).data(_PATH_ROLE) for i in range(self.models.count()))
        return [Path(path) for path in items if path]

    def _add_item(self, path: Path, text: str | None = None, details: str = "") -> QListWidgetItem:
        """A row for ``path`` at the end of the list, named ``text`` (default: the file's name,
        and its folder when that is not the models folder)."""
        if text is None:
            in_own = path.parent.absolute() == self._models_dir.absolute()
            text = path.name if in_own else f"{path.name} ({path.parent})"
        item = QListWidgetItem(text)
        item.setData(_PATH_ROLE, str(path))
        item.setData(DETAILS_ROLE, details)
        item.setToolTip(str(path))
        self.models.addItem(item)
        return item

    def _add_title(self, group: str) -> None:
        """A source's title: a row that cannot be selected or focused."""
        item = QListWidgetItem(self._source_titles().get(group, group))
        item.setFlags(Qt.ItemFlag.NoItemFlags)
        item.setData(SOURCE_ROLE, group)
        self.models.addItem(item)

    def _source_titles(self) -> dict[str, str]:
        return {
            str(Source.CONTEXTLENS): self.tr("ContextLens models folder"),
            str(Source.LM_STUDIO): self.tr("LM Studio"),
            str(Source.OLLAMA): self.tr("Ollama"),
            str(Source.HF_CACHE): self.tr("Hugging Face cache"),
            str(Source.LLAMA_CPP_CACHE): self.tr("llama.cpp cache"),
            str(Source.GPT4ALL): self.tr("GPT4All"),
            str(Source.JAN): self.tr("Jan"),
            str(Source.ADDED): self.tr("Added folders"),
            CHOSEN: self.tr("Chosen files"),
        }

    def _retitle(self) -> None:
        titles = self._source_titles()
        for i in range(self.models.count()):
            item = self.models.item(i)
            group = item.data(SOURCE_ROLE)
            if group:
                item.setText(titles.get(group, group))

    def _groups(self) -> list[tuple[str, list[tuple[Path, str | None, str]]]]:
        """The rows to show, source by source: (path, name or None for the file's, details)."""
        library = self._library
        found = {m.path: m for m in library.models} if library is not None else {}
        problems = {p.path for p in library.problems} if library is not None else set()
        own = list_models(self._models_dir)
        groups = [(OWN, [(p, None, self._details(found.get(p), p in problems)) for p in own])]
        listed = {p.absolute() for p in own}
        if library is not None:
            for source, models in library.by_source().items():
                fresh = [m for m in models if m.path.absolute() not in listed]
                listed.update(m.path.absolute() for m in fresh)
                groups.append((str(source), [(m.path, m.name, self._details(m)) for m in fresh]))
        chosen = [p for p in self._chosen if p not in listed]
        groups.append((CHOSEN, [(p, None, self._details(found.get(p))) for p in chosen]))
        return [(group, rows) for group, rows in groups if rows]

    def _details(self, model: FoundModel | None, unreadable: bool = False) -> str:
        """A model's second line: parameters, quantization, size (and a split's parts)."""
        if model is None:
            return self.tr("not a GGUF model llama.cpp can read") if unreadable else ""
        parts = [model_library.count_text(model.parameters), model.quantization,
                 model_library.size_text(model.file_size)]
        if not model.loadable:
            parts.append(self.tr("{0} of {1} parts present").format(
                model.parts_present, model.parts))  # fmt: skip
        return " · ".join(p for p in parts if p)

    def _show_rows(self) -> None:
        """Lay the list out again, keeping the selected model selected without reading it
        again; when the rows are the same, only their second lines change."""
        groups = self._groups()
        titled = any(group != OWN for group, _rows in groups)  # the models folder alone: none
        wanted: list[tuple[str, str]] = []
        for group, rows in groups:
            if titled:
                wanted.append((group, ""))
            wanted += [("", str(path)) for path, _name, _details in rows]
        shown = [(self.models.item(i).data(SOURCE_ROLE) or "",
                  self.models.item(i).data(_PATH_ROLE) or "")
                 for i in range(self.models.count())]  # fmt: skip
        if wanted == shown:
            details = {str(path): d for _g, rows in groups for path, _n, d in rows}
            for i in range(self.models.count()):
                item = self.models.item(i)
                if item.data(_PATH_ROLE):
                    item.setData(DETAILS_ROLE, details.get(item.data(_PATH_ROLE), ""))
            self.models.doItemsLayout()
            return
        chosen = self.selected_model()
        self.models.blockSignals(True)
        self.models.clear()
        for group, rows in groups:
            if titled:
                self._add_title(group)
            for path, name, details in rows:
                self._add_item(path, name, details)
        row = self._row_of(chosen) if chosen is not None else None
        if row is not None:
            self.models.setCurrentRow(row)
        self.models.blockSignals(False)

    def _row_of(self, path: Path) -> int | None:
        path = path.absolute()
        for i in range(self.models.count()):
            listed = self.models.item(i).data(_PATH_ROLE)
            if listed and Path(listed).absolute() == path:
                return i
        return None

    def _first_model_row(self) -> int | None:
        for i in range(self.models.count()):
            if self.models.item(i).data(_PATH_ROLE):
                return i
        return None

    def _hover_text(self, path: str) -> str | None:
        """What resting on a model shows: its path, trained context and what else is known."""
        library = self._library
        if library is None:
            return None
        model = next((m for m in library.models if str(m.path) == path), None)
        if model is None:
            problem = next((p for p in library.problems if str(p.path) == path), None)
            return f"{path}\n{problem.sentence}" if problem is not None else None
        lines = [path]
        if model.n_ctx_train:
            lines.append(self.tr("Trained context: {0:,} tokens").format(model.n_ctx_train))
        if model.family:
            lines.append(self.tr("Family: {0}").format(model.family))
        if not model.loadable:
            lines.append(self.tr("{0} of {1} parts present: it cannot be loaded").format(
                model.parts_present, model.parts))  # fmt: skip
        if model.also_named:
            lines.append(self.tr("Also found as: {0}").format(", ".join(model.also_named)))
        return "\n".join(lines)

    def _show_problems(self) -> None:
        """How many files were skipped outside the models folder (its own are listed, and
        say why when chosen), and why, on hover."""
        library = self._library
        skipped = [p for p in library.problems if p.source != Source.CONTEXTLENS] if library else []
        self.models_note.setVisible(bool(skipped))
        if skipped:
            self.models_note.setText(self.tr(
                "Skipped %n file(s) that are not GGUF models llama.cpp can read; hover to see "
                "why.", "", len(skipped)))  # fmt: skip
            self.models_note.setToolTip("\n".join(p.sentence for p in skipped))

    def list_menu(self, row: int) -> QMenu | None:
        """The menu of a model's row: copy its path; for a folder the person added, stop
        listing that folder (nothing in it is touched)."""
        item = self.models.item(row)
        path = item.data(_PATH_ROLE) if item is not None else None
        if not path:
            return None
        menu = QMenu(self.models)
        copy = menu.addAction(self.tr("Copy Path"))
        copy.triggered.connect(lambda: QGuiApplication.clipboard().setText(path))
        library = self._library
        model = next((m for m in library.models if str(m.path) == path), None) if library else None
        if model is not None and model.source == Source.ADDED and model.folder is not None:
            folder = model.folder
            forget = menu.addAction(self.tr("Stop Listing {0}").format(folder))
            forget.triggered.connect(lambda: self._forget_folder(folder))
        return menu

    def _show_list_menu(self, pos: QPoint) -> None:
        menu = self.list_menu(self.models.indexAt(pos).row())
        if menu is not None:
            menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            menu.popup(self.models.viewport().mapToGlobal(pos))

    def _forget_folder(self, folder: Path) -> None:
        model_library.remove_folder(folder)
        self._search.search()

    def _add_folder(self) -> None:
        """Add a folder of the person's to the list, remembered for the command line too."""
        name = QFileDialog.getExistingDirectory(self, self.tr("Add a Folder of Models"),
                                                str(Path.home()))  # fmt: skip
        if not name:
            return
        try:
            model_library.add_folder(Path(name))
        except BadRequest as exc:
            self.file_error.show_message(_sentence(str(exc)))
            return
        self._search.search()

    def _browse(self) -> None:
        name, _ = QFileDialog.getOpenFileName(
            self,
            self.tr("Choose a Model"),
            str(self._models_dir),
            self.tr("GGUF models (*.gguf);;All files (*)"),
        )
        if name:
            self.select_model(Path(name))

    def selected_model(self) -> Path | None:
        item = self.models.currentItem()
        path = item.data(_PATH_ROLE) if item is not None else None
        return Path(path) if path else None

    def select_model(self, path: Path | str) -> None:
        """Select ``path`` (adding it to the list when it is not there) and read its card. A
        relative path (``--model models/x.gguf``) is the listed file it names, not a second
        entry."""
        path = Path(path).expanduser().absolute()
        row = self._row_of(path)
        if row is None:  # chosen by hand: listed from now on, under "Chosen files"
            self._chosen.append(path)
            self._show_rows()
            row = self._row_of(path)
            assert row is not None
        if self.models.currentRow() == row:
            self._read(path)  # selected already: read again (the file may have changed)
        else:
            self.models.setCurrentRow(row)

    def _on_current_changed(self, current: QListWidgetItem | None, _previous: object) -> None:
        path = current.data(_PATH_ROLE) if current is not None else None
        if not path:
            self._reading += 1
            self._set_info(None)
            return
        self._read(Path(path))

    def _read(self, path: Path) -> None:
        self._reading += 1
        self._set_info(None)
        self._file_problem = None
        self.file_error.clear()
        self._say(lambda: self.tr("Reading {0}…").format(path.name))
        # The callbacks hold the panel weakly and the work not at all: a widget must never be
        # freed on the pool thread, and a closed panel need not wait for the read to finish.
        panel = weakref.ref(self)
        generation = self._reading

        def done(info: ModelInfo) -> None:
            if (p := panel()) is not None and isValid(p) and generation == p._reading:
                p._on_info(info)

        def failed(message: str) -> None:
            if (p := panel()) is not None and isValid(p) and generation == p._reading:
                p._on_file_failed(path, message)

        run_in_background(lambda: inspect_model(path), done, failed)

    def _on_info(self, info: ModelInfo) -> None:
        missing = self._parts_missing(Path(info.path))
        if missing:  # a split with parts missing: llama.cpp would refuse it at load
            self._on_file_failed(Path(info.path), missing)
            return
        self._set_info(info)
        self.tuning.show_calibration(self._calibrations.get(Path(info.path)))
        self._say(self._loaded_text)
        self.info_ready.emit(info)

    def _on_file_failed(self, path: Path, message: str) -> None:
        self._file_problem = (path, message)
        text = self._file_problem_text(path, message)
        self.file_error.show_message(text)
        self._say(self._loaded_text)
        self._update()
        self.file_failed.emit(text)

    def _file_problem_text(self, path: Path, message: str) -> str:
        return self.tr("{0} cannot be used: {1}").format(path.name, _sentence(message))

    def _set_info(self, info: ModelInfo | None) -> None:
        self._info = info
        if info is None:
            self.card.clear()
            self.card.show_loaded(self._loaded)
        top = (info.n_ctx_train if info and info.n_ctx_train else None) or MAX_CTX
        self.n_ctx.setMaximum(top)
        layers = info.n_layers if info and info.n_layers else 0
        self.gpu_layers.setMaximum(layers + 1 if layers else 0)  # +1: the output layer
        self._update()

    # ----- the options and what they cost -----

    def set_capabilities(self, caps: EngineCapabilities | None) -> None:
        """What the engine build can do; None while that is not known yet."""
        self._caps = caps
        can = caps is not None and caps.gpu_offload_supported
        if not can:
            self.gpu_layers.setValue(0)
        self.gpu_layers.setEnabled(can)
        self._show_capabilities()
        self._update()

    def _show_capabilities(self) -> None:
        """Whether layers can go to a GPU, and why not, for the capabilities known."""
        caps = self._caps
        if caps is None:
            reason = self.tr("Checking whether this build can use a GPU…")
        elif not caps.gpu_offload_supported:
            reason = self.tr(
                "This llama.cpp build runs on the CPU only: it cannot offload layers to a GPU."
            )
        else:
            reason = ""
        self.gpu_layers.setToolTip(reason or self.tr("Layers to run on the GPU"))
        self.gpu_reason.setText(reason)
        self.gpu_reason.setVisible(bool(reason))
        self._show_backend(caps)

    def _show_backend(self, caps: EngineCapabilities | None) -> None:
        """Which ggml backends this llama.cpp build runs on: the answer to "is my GPU used?"."""
        if caps is None:
            self.backend.setText(self.tr("checking…"))
            self.backend.setToolTip("")
            return
        gpus = [name for name in caps.backends if name != "CPU"]
        if not gpus:
            text = self.tr("CPU only")
        elif caps.gpu_offload_supported:
            text = self.tr("%1 + CPU (GPU offload available)").replace("%1", " + ".join(gpus))
        else:
            text = self.tr("%1 + CPU (no GPU offload)").replace("%1", " + ".join(gpus))
        self.backend.setText(text)
        self.backend.setToolTip(
            self.tr("llama.cpp %1 — %2")
            .replace("%1", caps.llama_cpp_python_version)
            .replace("%2", caps.system_info)
        )

    def settings(self) -> LoadSettings:
        """The load settings as chosen (not validated: see :meth:`settings_error`)."""
        return LoadSettings(
            n_ctx=self.n_ctx.value(),
            n_threads=self.threads.value(),
            n_threads_batch=self._defaults.n_threads_batch,
            n_batch=self.batch.value(),
            n_ubatch=self.ubatch.value(),
            n_gpu_layers=self.gpu_layers.value() if self.gpu_layers.isEnabled() else 0,
            kv_cache_type=str(self.kv_type.currentData()),
            flash_attn=self.flash_attn.isChecked(),
            seed=self._defaults.seed,
        )

    def settings_error(self) -> str:
        """Why the chosen settings cannot be loaded, or "" when they can."""
        return self._settings_error

    def _on_kv_type_changed(self) -> None:
        cache = str(self.kv_type.currentData())
        if cache not in UNQUANTIZED_KV and not self.flash_attn.isChecked():
            self.flash_attn.setChecked(True)  # emits toggled → _update
            note = self.tr("A quantized KV cache ({0}) needs flash attention, so it was turned on.")
            self.settings_note.show_message(note.format(cache), error=False)
            return
        self._update()

    def _update(self) -> None:
        settings = self.settings()
        try:
            settings.validate()
        except ValueError as exc:
            self._settings_error = _sentence(str(exc))
            self.settings_note.show_message(self._settings_error)
        else:
            if self._settings_error or str(settings.kv_cache_type) in UNQUANTIZED_KV:
                self.settings_note.clear()
            self._settings_error = ""
        self._show_estimate(settings)
        info = self._info
        self.load_button.setEnabled(
            info is not None and not self._busy and not self._settings_error
        )
        self.unload_button.setEnabled(self._loaded is not None and not self._busy)
        self.tuning.set_can_calibrate(info is not None and not self._busy
                                      and not self._settings_error)  # fmt: skip

    def _show_estimate(self, settings: LoadSettings) -> None:
        """The GPU layers chosen, the card and the memory ``settings`` take."""
        layers = self.gpu_layers.maximum()
        value = self.gpu_layers.value()
        self.gpu_layers_value.setText(
            self.tr("all {0}").format(layers)
            if layers and value == layers
            else self.tr("{0} of {1}").format(value, layers)
        )

        info = self._info
        if info is None:
            self.memory.setText(self.tr("KV cache: choose a model to see the memory it takes."))
        else:
            self.card.show_info(info, settings.kv_cache_type)
            offload = None if self._caps is None else self._caps.gpu_offload_supported
            self.memory.setText(self._fit_text(memory_fit(info, settings, gpu_offload=offload)))
        self.card.show_loaded(self._loaded)

    def _fit_text(self, fit: Fit) -> str:
        """Will it fit, before loading: "Fits: 0.87 GiB of 23.1 GiB free at n_ctx 8,192, f16 KV
        cache (weights 235 MiB, KV cache 144 MiB, compute 0.50 GiB)"."""
        est = fit.estimate
        text = (self.tr("Fits: {0} of {1} free at n_ctx {2:,}, {3} KV cache") if fit.fits
                else self.tr("Does not fit: {0} needed, {1} free at n_ctx {2:,}, {3} KV cache")
                ).format(gib(est.ram), gib(fit.ram_free), fit.n_ctx, fit.kv_cache_type)  # fmt: skip
        if fit.vram_free is not None and est.vram:
            text += self.tr("; {0} of {1} free on the GPU").format(
                gib(est.vram), gib(fit.vram_free))  # fmt: skip
        parts = self.tr("weights {0}, KV cache {1}, compute {2}").format(
            gib(est.weights_bytes), gib(est.kv_bytes), gib(est.compute_bytes))  # fmt: skip
        return f"{text} ({parts})."

    def use_tuned(self) -> bool:
        """Whether the tuned speed settings replace the panel's own at load."""
        return self.tuning.use_tuned.isChecked()

    def _request_load(self) -> None:
        self._request(self.load_requested)

    def _request_calibration(self) -> None:
        self._request(self.calibrate_requested)

    def _request(self, signal: Signal) -> None:
        path = self.selected_model()
        settings = self.settings()
        if path is None or self._info is None or self._settings_error:
            return
        self.engine_error.clear()
        self.set_busy(True)
        signal.emit(path, settings)

    # ----- answers from the window -----

    def set_busy(self, busy: bool) -> None:
        """While the engine loads or unloads: Load and Unload are disabled."""
        self._busy = busy
        if busy:
            self._say(lambda: self.tr("Loading…"))
        self._update()

    def show_loaded(self, loaded: LoadedModel) -> None:
        self._loaded = loaded
        self._busy = False
        self.engine_error.clear()
        self._say(self._loaded_text)
        self._update()

    def show_unloaded(self) -> None:
        self._loaded = None
        self._busy = False
        self.server.show_disconnected()
        self._say(self._loaded_text)
        self._update()

    def show_server(self, info: ServerInfo) -> None:
        """Jobs run on the server ``info`` describes; no model is loaded here."""
        self._loaded = None
        self._busy = False
        self.engine_error.clear()
        self.server.show_connected(info)
        self._say(lambda: self.tr("Connected to {0}: model {1}, context {2:,} tokens.").format(
            info.url, info.model, info.n_ctx))  # fmt: skip
        self._update()

    def show_error(self, message: str) -> None:
        """An engine failure (refused load, crash), in plain words, under the buttons."""
        self._busy = False
        self.engine_error.show_message(_sentence(message))
        self._say(self._loaded_text)
        self._update()

    def show_calibrating(self, done: int, total: int) -> None:
        """The engine measures candidate settings before loading: "calibrating: 3/8"."""
        self.tuning.show_progress(done, total)
        self._say(lambda: self.tr("Calibrating: {0}/{1} settings tried…").format(done, total))

    def show_calibration(self, path: Path, calibration: Calibration, measured_now: bool) -> None:
        """The calibration applied to ``path`` (measured now, or found in the cache)."""
        self._calibrations[Path(path)] = calibration
        if self.selected_model() == Path(path):
            note = (lambda: self.tr("Measured now")) if measured_now else ""
            self.tuning.show_calibration(calibration, note)

    def show_background_calibration(self, done: int, total: int) -> None:
        """The loaded model's first calibration runs in the background: "3/8 tried"."""
        self.tuning.show_background_progress(done, total)

    def offer_calibration(self, path: Path, calibration: Calibration) -> None:
        """The background calibration of ``path`` is done (and cached): offer it."""
        self._calibrations[Path(path)] = calibration
        if self.selected_model() == Path(path):
            self.tuning.offer(calibration)

    def show_background_stopped(self, message: str) -> None:
        """The background calibration was cancelled or failed; the model keeps its settings."""
        self.tuning.show_stopped(message)

    def show_calibration_stopped(self, message: str) -> None:
        """Cancelled or failed: the model loads with the panel's own values."""
        self.tuning.show_stopped(
            lambda: self.tr("{0}: loading with the values above").format(message)
        )

    def tuned_text(self) -> str:
        """The tuned-settings line as shown."""
        return self.tuning.line.text()

    def error_text(self) -> str:
        """The error shown now (the file's, else the engine's), or ""."""
        return self.file_error.text() or self.engine_error.text()

    def _say(self, text: Callable[[], str]) -> None:
        """Show a status line; ``text`` is kept to say it again when the language changes."""
        self._status_text = text
        self.status.setText(text())

    def _loaded_text(self) -> str:
        if self._loaded is None:
            return self.tr("No model loaded.")
        text = self.tr("Loaded {0}: context {1:,} tokens.").format(
            Path(self._loaded.path).name, self._loaded.n_ctx
        )
        return " ".join([text, *(clip_message(w) for w in self._loaded.warnings)])
