"""The model card: what a GGUF file is (name, architecture, size, quantization, trained
context, layers, attention, kind, KV bytes per token) and what is loaded, before a person
chooses a context size. Filled from :class:`~app.core.engine.gguf.ModelInfo`, read off the GUI
thread by the panel, and said again in another language from what it was given. Each row is one
line, cut with "…" to the dock's width and whole in its tooltip: a card whose rows wrap to two or
three lines in a 300 px dock pushed the load options two scrolls down.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QWidget

from app.core.engine.gguf import ModelInfo
from app.core.engine.types import LoadedModel
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import ElidedLabel


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


class ModelCard(FollowsLanguage, QGroupBox):
    """The GGUF metadata a person needs before choosing a context size."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self._fields: dict[str, ElidedLabel] = {}
        self._names: dict[str, QLabel] = {}
        # what the card shows, to say it again in another language
        self._info: ModelInfo | None = None
        self._cache_type = ""
        self._loaded: LoadedModel | None = None
        self._loaded_shown = False  # show_loaded was called since the last clear
        for key in self._row_names():
            value = ElidedLabel("–")  # plain text, one line
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
            "kv": self.tr("KV per token:"),
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
            "kv": self.tr("{0:,} bytes ({1})").format(per_token, cache_type)
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
