"""The model panel: choose a GGUF file, see what it is, and decide how to load it.

A context size is a memory decision, so the panel shows the model card and what the chosen
n_ctx, KV cache type and GPU layers will cost *before* anything is loaded, following the person
as they type. The file is checked by the pure-Python GGUF reader off the GUI thread: a bad file
costs one plain sentence and a disabled Load button, never a crash inside llama.cpp.

The panel is a composition of its parts, each a module of its own:

- :mod:`app.ui.model_chooser`: the list of models by source, Browse…, Add Folder…, downloads;
- :mod:`app.ui.model_card`: what the selected file is;
- :mod:`app.ui.model_options`: the load options, checked as they change;
- :mod:`app.ui.model_fit`: the memory they take, computed off the GUI thread once the changes
  pause;
- :mod:`app.ui.model_status`: Load and Unload, and the window's answers.

What a person changes most comes first, under the list: the context size (with its offer to
reload at a new size), what it takes, and Load; the card and the other options follow, so that on
a laptop's screen the fit and Load show without scrolling the panel.

The panel only asks (``load_requested``, ``unload_requested``); the window owns the engine and
answers with :meth:`ModelPanel.show_loaded`, :meth:`ModelPanel.show_unloaded` or
:meth:`ModelPanel.show_error`. The panel reads the selected file, and ties the parts together.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from PySide6.QtCore import QSettings, Signal, SignalInstance
from PySide6.QtWidgets import QMenu, QVBoxLayout, QWidget
from shiboken6 import isValid

from app.core.calibrate import Calibration
from app.core.engine.gguf import ModelInfo, inspect_model
from app.core.engine.remote import ServerInfo
from app.core.engine.types import EngineCapabilities, LoadedModel, LoadSettings
from app.core.memory_fit import Fit
from app.ui.background import run_in_background
from app.ui.i18n import FollowsLanguage
from app.ui.model_card import ModelCard
from app.ui.model_chooser import ModelChooser
from app.ui.model_fit import FitInputs, estimate
from app.ui.model_options import MAX_CTX, MIN_CTX, LoadOptions, within_limits
from app.ui.model_status import ModelStatus, sentence
from app.ui.server_box import ServerBox
from app.ui.tuned_settings import TunedSettingsBox
from app.ui.widgets import MessageLine

__all__ = ["MAX_CTX", "MIN_CTX", "ModelPanel"]

Read = tuple[ModelInfo, FitInputs, Fit | str]  # a file's card, and what it takes as chosen


def read_model(path: Path, settings: LoadSettings, gpu_offload: bool | None) -> Read:
    """On a pool thread: ``path``'s card, and the memory it takes at ``settings`` (as the
    options will show them for it), so that the card and its fit are shown together."""
    info = inspect_model(path)
    inputs = FitInputs(info, within_limits(settings, info), gpu_offload)
    return info, inputs, estimate(inputs)


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
        self._info: ModelInfo | None = None
        self._reading = 0  # generation of the newest read; older answers are ignored
        self._calibrations: dict[Path, Calibration] = {}  # per model file, as the engine told
        self._file_problem: tuple[Path, str] | None = None  # the selected file and its fault

        self.chooser = ModelChooser(self._models_dir)
        self.chooser.picked.connect(self._on_picked)
        self.chooser.searched.connect(self._on_searched)
        self.chooser.fetched.connect(self.model_fetched)
        self.chooser.failed.connect(self._on_folder_failed)
        self.models = self.chooser.models
        self.browse_button = self.chooser.browse_button
        self.add_folder_button = self.chooser.add_folder_button
        self.models_note = self.chooser.models_note
        self.get_default_button = self.chooser.get_default_button

        self.file_error = MessageLine()
        self.card = ModelCard()

        self.options = LoadOptions()
        self.options.changed.connect(self._show_state)
        self.options.reload_requested.connect(self._request_load)
        self.n_ctx = self.options.n_ctx
        self.reload_button = self.options.reload_button
        self.context_note = self.options.context_note
        self.memory = self.options.memory
        self.gpu_layers = self.options.gpu_layers
        self.gpu_layers_value = self.options.gpu_layers_value
        self.gpu_reason = self.options.gpu_reason
        self.backend = self.options.backend
        self.kv_type = self.options.kv_type
        self.flash_attn = self.options.flash_attn
        self.threads = self.options.threads
        self.batch = self.options.batch
        self.ubatch = self.options.ubatch
        self.settings_note = self.options.settings_note

        self.tuning = TunedSettingsBox()
        self.tuning.calibrate_requested.connect(self._request_calibration)
        self.tuning.cancel_requested.connect(self.calibration_cancel_requested)
        self.tuning.use_requested.connect(self._request_load)  # loads with the tuned settings
        self.tuning.use_tuned.toggled.connect(self._show_state)

        # a server instead of a file (its address is kept in these settings)
        self.server = ServerBox(settings if settings is not None else QSettings())
        self.replies = ModelStatus(self.server)
        self.load_button = self.replies.load_button
        self.load_button.clicked.connect(self._request_load)
        self.unload_button = self.replies.unload_button
        self.unload_button.clicked.connect(self.unload_requested)
        self.status = self.replies.status
        self.engine_error = self.replies.engine_error

        layout = QVBoxLayout(self)
        layout.addWidget(self.chooser, 1)
        layout.addWidget(self.file_error)
        layout.addWidget(self.options.context)
        layout.addWidget(self.replies)
        layout.addWidget(self.card)
        layout.addWidget(self.options)
        layout.addWidget(self.tuning)
        layout.addWidget(self.server)

        self.show_unloaded()
        self.refresh_models()

    def retranslate(self) -> None:
        """The selected file's fault in the language in effect (each part says its own)."""
        if self._file_problem is not None:
            self.file_error.show_message(self._file_problem_text(*self._file_problem))

    # ----- the list of models (app/ui/model_chooser.py) -----

    def refresh_models(self) -> None:
        """List the models again (files chosen by hand stay); the search answers later."""
        self.chooser.refresh()

    def stop_search(self) -> None:
        """The search for models under way, if any, ends at its next entry."""
        self.chooser.stop_search()

    def selected_model(self) -> Path | None:
        return self.chooser.selected_model()

    def select_model(self, path: Path | str) -> None:
        """Select ``path`` (listing it when it is not) and read its card."""
        self.chooser.select_model(path)

    def model_count(self) -> int:
        """How many models the list offers (the window's no-model banner says so)."""
        return self.chooser.model_count()

    def list_menu(self, row: int) -> QMenu | None:
        """The menu of a model's row (None for a source's title)."""
        return self.chooser.list_menu(row)

    def get_default_model(self) -> None:
        """Offer to download the default model into the models folder (asks first)."""
        self.chooser.get_default_model()

    def get_hub_model(self) -> None:
        """Get a model from Hugging Face by name (into its cache, where the list finds it)."""
        self.chooser.get_hub_model()

    def _on_searched(self, count: int) -> None:
        """The search answered: a selected split found with parts missing cannot be used."""
        chosen = self.selected_model()
        missing = self.chooser.parts_missing(chosen) if chosen is not None else ""
        if missing and self._info is not None and chosen is not None:
            self._set_info(None)
            self._on_file_failed(chosen, missing)
        self.models_listed.emit(count)

    def _on_folder_failed(self, message: str) -> None:
        self.file_error.show_message(message)

    # ----- reading the selected file -----

    def _on_picked(self, path: Path | None) -> None:
        if path is None:
            self._reading += 1
            self._set_info(None)
            return
        self._read(path)

    def _read(self, path: Path) -> None:
        self._reading += 1
        self._set_info(None)
        self._file_problem = None
        self.file_error.clear()
        self.replies.say(lambda: self.tr("Reading {0}…").format(path.name))
        # The callbacks hold the panel weakly and the work not at all: a widget must never be
        # freed on the pool thread, and a closed panel need not wait for the read to finish.
        panel = weakref.ref(self)
        generation = self._reading
        settings, offload = self.options.settings(), self.options.gpu_offload()

        def done(read: Read) -> None:
            if (p := panel()) is not None and isValid(p) and generation == p._reading:
                p._on_read(read)

        def failed(message: str) -> None:
            if (p := panel()) is not None and isValid(p) and generation == p._reading:
                p._on_file_failed(path, message)

        run_in_background(lambda: read_model(path, settings, offload), done, failed)

    def _on_read(self, read: Read) -> None:
        info, inputs, fit = read
        missing = self.chooser.parts_missing(Path(info.path))
        if missing:  # a split with parts missing: llama.cpp would refuse it at load
            self._on_file_failed(Path(info.path), missing)
            return
        self._set_info(info)
        self.memory.offer(inputs, fit)  # computed with the read, unless the options changed
        self.tuning.show_calibration(self._calibrations.get(Path(info.path)))
        self.replies.say_loaded()
        self.info_ready.emit(info)

    def _on_file_failed(self, path: Path, message: str) -> None:
        self._file_problem = (path, message)
        text = self._file_problem_text(path, message)
        self.file_error.show_message(text)
        self.replies.say_loaded()
        self._update()
        self.file_failed.emit(text)

    def _file_problem_text(self, path: Path, message: str) -> str:
        return self.tr("{0} cannot be used: {1}").format(path.name, sentence(message))

    def _set_info(self, info: ModelInfo | None) -> None:
        self._info = info
        if info is None:
            self.card.clear()
        self.options.set_model(info)
        self._show_state()

    # ----- the options (app/ui/model_options.py) -----

    def set_capabilities(self, caps: EngineCapabilities | None) -> None:
        """What the engine build can do; None while that is not known yet."""
        self.options.set_capabilities(caps)
        self._show_state()

    def settings(self) -> LoadSettings:
        """The load settings as chosen (not validated: see :meth:`settings_error`)."""
        return self.options.settings()

    def settings_error(self) -> str:
        """Why the chosen settings cannot be loaded, or "" when they can."""
        return self.options.settings_error()

    def use_tuned(self) -> bool:
        """Whether the tuned speed settings replace the panel's own at load."""
        return self.tuning.use_tuned.isChecked()

    def _update(self) -> None:
        """The options checked again, and what follows from them and the engine's state."""
        self.options.check()
        self._show_state()

    def _show_state(self) -> None:
        """The card (its KV figure follows the cache type), and which buttons may be used."""
        info = self._info
        if info is not None:
            self.card.show_info(info, self.options.settings().kv_cache_type)
        self.card.show_loaded(self.replies.loaded)
        can = info is not None and not self.options.settings_error()
        self.replies.enable(can)
        self.tuning.set_can_calibrate(can and not self.replies.busy)
        self.options.offer_reload(self._loaded_ctx())

    def _loaded_ctx(self) -> int | None:
        """The context size the engine holds the selected model at; None while it holds
        another model or none, or loads."""
        loaded, chosen = self.replies.loaded, self.selected_model()
        if loaded is None or chosen is None or self.replies.busy or self._info is None:
            return None
        return loaded.n_ctx if Path(loaded.path).resolve() == chosen.resolve() else None

    def _request_load(self) -> None:
        self._request(self.load_requested)

    def _request_calibration(self) -> None:
        self._request(self.calibrate_requested)

    def _request(self, signal: SignalInstance) -> None:
        path = self.selected_model()
        settings = self.settings()
        if path is None or self._info is None or self.settings_error():
            return
        self.engine_error.clear()
        self.set_busy(True)
        signal.emit(path, settings)

    # ----- answers from the window (app/ui/model_status.py) -----

    def set_busy(self, busy: bool) -> None:
        """While the engine loads or unloads: Load and Unload are disabled."""
        self.replies.set_busy(busy)
        self._update()

    def show_loaded(self, loaded: LoadedModel) -> None:
        self.replies.show_loaded(loaded)
        self._update()

    def show_unloaded(self) -> None:
        self.replies.show_unloaded()
        self._update()

    def show_server(self, info: ServerInfo) -> None:
        """Jobs run on the server ``info`` describes; no model is loaded here."""
        self.replies.show_server(info)
        self._update()

    def show_error(self, message: str) -> None:
        """An engine failure (refused load, crash), in plain words, under the buttons."""
        self.replies.show_error(message)
        self._update()

    def error_text(self) -> str:
        """The error shown now (the file's, else the engine's), or ""."""
        return self.file_error.text() or self.engine_error.text()

    def show_calibrating(self, done: int, total: int) -> None:
        """The engine measures candidate settings before loading: "calibrating: 3/8"."""
        self.tuning.show_progress(done, total)
        self.replies.show_calibrating(done, total)

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
