"""The load options: context size, GPU layers, KV cache type, flash attention, threads and batch
sizes, checked as the person changes them, with what they will cost (:mod:`app.ui.model_fit`)
under the context size and which backends the llama.cpp build runs on.

The context size, its warnings, its offer to reload and the fit are a part of their own
(:attr:`LoadOptions.context`) that the panel shows next to Load, above the rest: they are what a
person changes most. A size past the model's trained context is allowed with a warning (llama.cpp
loads it, and warns again), never cut to the digits that fit; past ``MAX_CTX`` it is refused in
one sentence.

The speed knobs (threads, batch sizes, flash attention) are the person's; the tuned values
measured on this machine replace them at load unless "Use tuned settings" is off
(app/ui/tuned_settings.py shows them).
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QWidget,
)

from app.core.engine.gguf import ModelInfo
from app.core.engine.types import KV_CACHE_TYPE_NAMES, EngineCapabilities, LoadSettings
from app.ui.i18n import FollowsLanguage
from app.ui.model_fit import FitInputs, MemoryFit
from app.ui.model_status import sentence
from app.ui.widgets import MessageLine, WrappingCheckBox, plain_label

MAX_CTX = 1_048_576  # the largest context size loaded; beyond it, one sentence
MIN_CTX = 16  # llama.cpp's own floor
TYPED_CTX = 2**31 - 1  # what the field takes, so that a size typed past MAX_CTX is refused whole
UNQUANTIZED_KV = ("f16", "f32", "bf16")  # the cache types that work without flash attention
MAX_THREADS = 512
MAX_BATCH = 65_536


def layer_limit(info: ModelInfo | None) -> int:
    """The most GPU layers ``info`` allows (the output layer is one more than its blocks)."""
    layers = info.n_layers if info and info.n_layers else 0
    return layers + 1 if layers else 0


def within_limits(settings: LoadSettings, info: ModelInfo) -> LoadSettings:
    """``settings`` as the options show them once ``info`` sets their limits (the context size
    is the person's: a model bounds only the GPU layers)."""
    return replace(settings, n_gpu_layers=min(settings.n_gpu_layers, layer_limit(info)))


class LoadOptions(FollowsLanguage, QGroupBox):
    """The options a model loads with; ``changed`` after each change the person makes."""

    changed = Signal()
    reload_requested = Signal()  # "Reload with 16,384": load the model again at the size shown

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        defaults = LoadSettings()
        self._defaults = defaults
        self._info: ModelInfo | None = None
        self._caps: EngineCapabilities | None = None
        self._error = ""  # why the settings cannot be loaded, or ""
        self._loaded_ctx: int | None = None  # the loaded engine's n_ctx, when it is this model's

        self.n_ctx = QSpinBox()
        self.n_ctx.setObjectName("model-context-size")  # the real-display tests find it so
        self.n_ctx.setRange(MIN_CTX, TYPED_CTX)
        self.n_ctx.setSingleStep(1024)
        self.n_ctx.setGroupSeparatorShown(True)
        self.n_ctx.setKeyboardTracking(True)  # the memory line follows every keystroke
        self.n_ctx.setValue(defaults.n_ctx)
        self.reload_button = QPushButton()
        self.reload_button.setObjectName("model-context-reload")
        self.reload_button.hide()
        self.reload_button.clicked.connect(self.reload_requested)
        self.context_note = MessageLine()  # past the trained context (a warning) or MAX_CTX
        self.memory = MemoryFit()
        self.context = QWidget()  # the size, its note and reload, the fit: placed by the panel

        self.gpu_layers = QSlider(Qt.Orientation.Horizontal)
        self.gpu_layers.setRange(0, 0)
        self.gpu_layers.setPageStep(4)
        self.gpu_layers_value = QLabel()
        self.gpu_reason = plain_label()
        self.gpu_reason.setWordWrap(True)
        self.gpu_reason.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.backend = plain_label()
        self.backend.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

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
        self.settings_note = MessageLine()

        self._layout()
        self.n_ctx.valueChanged.connect(self._on_changed)
        self.gpu_layers.valueChanged.connect(self._on_changed)
        self.kv_type.currentIndexChanged.connect(self._on_kv_type_changed)
        self.flash_attn.toggled.connect(self._on_changed)
        self.threads.valueChanged.connect(self._on_changed)
        self.batch.valueChanged.connect(self._on_changed)
        self.ubatch.valueChanged.connect(self._on_changed)
        self.set_capabilities(None)
        self.retranslate()

    def _layout(self) -> None:
        top = QFormLayout(self.context)
        top.setContentsMargins(0, 0, 0, 0)
        top.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: fields go under
        ctx_row = QHBoxLayout()
        ctx_row.addWidget(self.n_ctx, 1)
        ctx_row.addWidget(self.reload_button)
        self._ctx_label = QLabel()
        self._ctx_label.setBuddy(self.n_ctx)
        top.addRow(self._ctx_label, ctx_row)
        top.addRow(self.context_note)
        top.addRow(self.memory)

        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: fields go under

        def row(field: QWidget | QHBoxLayout, buddy: QWidget) -> QLabel:
            label = QLabel()
            label.setBuddy(buddy)
            form.addRow(label, field)
            return label

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

    def retranslate(self) -> None:
        """Every text of the options, and the build's backends and the GPU layers chosen, in
        the language in effect (the fit line says itself again)."""
        self.setTitle(self.tr("Load options"))
        self.n_ctx.setToolTip(self.tr("Tokens the model can hold at once (n_ctx)"))
        self.kv_type.setToolTip(
            self.tr("Quantized types (q8_0 … iq4_nl) take less memory and need flash attention")
        )
        self.flash_attn.setText(self.tr("Flash attention"))
        self.batch.setToolTip(self.tr("Prompt tokens handed to llama.cpp at once (n_batch)"))
        self.ubatch.setToolTip(self.tr("Tokens computed in one step (n_ubatch)"))
        self._ctx_label.setText(self.tr("Co&ntext size:"))
        self._gpu_label.setText(self.tr("&GPU layers:"))
        self._backend_label.setText(self.tr("Backend:"))
        self._kv_label.setText(self.tr("KV cache type:"))
        self._threads_label.setText(self.tr("Threads:"))
        self.threads.setToolTip(self.tr(
            "The most CPU threads llama.cpp computes with (the physical cores by default); it "
            "uses fewer while other programs keep cores busy"))  # fmt: skip
        self._batch_label.setText(self.tr("Batch, micro-batch:"))
        self.reload_button.setToolTip(self.tr("Load the model again with this context size"))
        self._show_capabilities()
        self._show_layers()
        self._show_context()

    # ----- what the options are for -----

    def set_model(self, info: ModelInfo | None) -> None:
        """The model the options are for (None: none chosen): its layers bound the GPU layers;
        a context size past its trained context is warned of."""
        self._info = info
        self.gpu_layers.setMaximum(layer_limit(info))
        self.check()

    def offer_reload(self, loaded_ctx: int | None) -> None:
        """The context size the engine holds the chosen model at (None: it is not loaded, or
        the engine is busy): a different size shown offers "Reload with …" beside the field."""
        self._loaded_ctx = loaded_ctx
        self._show_context()

    def set_capabilities(self, caps: EngineCapabilities | None) -> None:
        """What the engine build can do; None while that is not known yet."""
        self._caps = caps
        can = caps is not None and caps.gpu_offload_supported
        if not can:
            self.gpu_layers.setValue(0)
        self.gpu_layers.setEnabled(can)
        self._show_capabilities()
        self.check()

    def gpu_offload(self) -> bool | None:
        """Whether the build can put layers on a GPU; None while that is not known yet."""
        return None if self._caps is None else self._caps.gpu_offload_supported

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
        return self._error

    # ----- checking them -----

    def check(self) -> None:
        """Check the settings (saying why they cannot be loaded), show the GPU layers chosen,
        and ask for the memory they take (computed off the GUI thread once the changes
        pause)."""
        settings = self.settings()
        try:
            settings.validate()
        except ValueError as exc:
            self._error = sentence(str(exc))
            self.settings_note.show_message(self._error)
        else:
            if self._error or str(settings.kv_cache_type) in UNQUANTIZED_KV:
                self.settings_note.clear()
            self._error = ""
            if settings.n_ctx > MAX_CTX:  # said beside the field (_show_context)
                self._error = self._too_large()
        self._show_context()
        self._show_layers()
        info = self._info
        self.memory.request(None if info is None else FitInputs(info, settings, self.gpu_offload()))

    def _on_changed(self) -> None:
        self.check()
        self.changed.emit()

    def _on_kv_type_changed(self) -> None:
        cache = str(self.kv_type.currentData())
        if cache not in UNQUANTIZED_KV and not self.flash_attn.isChecked():
            self.flash_attn.setChecked(True)  # emits toggled → _on_changed
            note = self.tr("A quantized KV cache ({0}) needs flash attention, so it was turned on.")
            self.settings_note.show_message(note.format(cache), error=False)
            return
        self._on_changed()

    def _too_large(self) -> str:
        return self.tr("A context size can be at most {0:,} tokens.").format(MAX_CTX)

    def _show_context(self) -> None:
        """Beside the context size: why it is refused, or that it is past the model's trained
        context; and "Reload with …" while the loaded model holds another size."""
        n_ctx = self.n_ctx.value()
        trained = self._info.n_ctx_train if self._info is not None else None
        if n_ctx > MAX_CTX:
            self.context_note.show_message(self._too_large())
        elif trained and n_ctx > trained:
            self.context_note.show_message(
                self.tr(
                    "Above the model's trained context of {0:,} tokens: answers may degrade."
                ).format(trained)
            )
        else:
            self.context_note.clear()
        loaded = self._loaded_ctx
        offer = loaded is not None and n_ctx != loaded and not self._error
        self.reload_button.setText(self.tr("Reload with {0:,}").format(n_ctx))
        self.reload_button.setVisible(offer)

    def _show_layers(self) -> None:
        layers = self.gpu_layers.maximum()
        value = self.gpu_layers.value()
        self.gpu_layers_value.setText(
            self.tr("all {0}").format(layers)
            if layers and value == layers
            else self.tr("{0} of {1}").format(value, layers)
        )

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
