"""The side panel's Sampling box (a dock under the model panel): how the next Run chooses each
token.

A preset (Deterministic: greedy, the default; Balanced; Creative — app/core/sampling.py) sets
every field but the seed; editing a field makes the mix "Custom". The fields sit behind
"Details" so the panel stays short. The window reads :meth:`SamplingBox.settings` when a job
starts, records them with the version, and puts a rolled-back version's settings back here with
:meth:`SamplingBox.set_settings`. The last choice is kept in the window's settings.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

from PySide6.QtCore import QSettings, QSignalBlocker, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.engine.types import SamplingSettings
from app.core.sampling import BALANCED, CREATIVE, DETERMINISTIC, PRESETS, preset_of
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import WrappingCheckBox

SETTINGS_KEY = "sampling/settings"
CUSTOM = "custom"
MAX_WINDOW = 1 << 20
MAX_UI_SEED = 2**31 - 1  # QSpinBox holds a signed 32-bit int


class SamplingBox(FollowsLanguage, QWidget):
    """The box's widgets; the window shows it as its own dock under the model panel, so it stays
    in view however long the model card grows."""

    changed = Signal(object)  # SamplingSettings, after every edit

    def __init__(self, settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self._updating = False

        self.preset = QComboBox()
        for name in (DETERMINISTIC, BALANCED, CREATIVE, CUSTOM):
            self.preset.addItem("", name)  # named in retranslate
        self.preset.activated.connect(self._on_preset)

        def real(low: float, high: float, step: float) -> QDoubleSpinBox:
            box = QDoubleSpinBox()
            box.setRange(low, high)
            box.setDecimals(2)
            box.setSingleStep(step)
            box.valueChanged.connect(self._on_field)
            return box

        def whole(low: int, high: int) -> QSpinBox:
            box = QSpinBox()
            box.setRange(low, high)
            box.valueChanged.connect(self._on_field)
            return box

        self.temperature = real(0.0, 5.0, 0.05)
        self.top_k = whole(0, 100_000)
        self.top_p = real(0.01, 1.0, 0.01)
        self.min_p = real(0.0, 1.0, 0.01)
        self.repeat_penalty = real(0.5, 3.0, 0.01)
        self.repeat_last_n = whole(-1, MAX_WINDOW)
        self.dry_multiplier = real(0.0, 5.0, 0.05)
        self.dry_base = real(1.0, 4.0, 0.05)
        self.dry_allowed_length = whole(1, 100)
        self.dry_last_n = whole(-1, MAX_WINDOW)
        self.seed = whole(0, MAX_UI_SEED)
        self.stop_loops = WrappingCheckBox()
        self.stop_loops.toggled.connect(self._on_field)

        self.details = QWidget()
        form = QFormLayout(self.details)
        form.setContentsMargins(0, 0, 0, 0)
        self._labels: dict[QWidget, QLabel] = {}  # each field's row name

        def row(layout: QFormLayout, field: QWidget) -> None:
            label = self._labels[field] = QLabel()
            label.setBuddy(field)
            layout.addRow(label, field)

        for field in (self.temperature, self.top_k, self.top_p, self.min_p, self.repeat_penalty,
                      self.repeat_last_n, self.dry_multiplier, self.dry_base,
                      self.dry_allowed_length, self.dry_last_n):  # fmt: skip
            row(form, field)
        self.details.hide()
        self.more = QToolButton()
        self.more.setCheckable(True)
        self.more.toggled.connect(self.details.setVisible)

        top = QFormLayout()
        row(top, self.preset)
        row(top, self.seed)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.stop_loops)
        layout.addWidget(self.more)
        layout.addWidget(self.details)
        # no taller than its rows: the model panel above takes the rest of the side
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.set_settings(self._remembered())
        self.retranslate()

    def retranslate(self) -> None:
        """Every text of the box in the language in effect (the preset chosen stays)."""
        presets = {
            DETERMINISTIC: self.tr("Deterministic (greedy)"),
            BALANCED: self.tr("Balanced"),
            CREATIVE: self.tr("Creative"),
            CUSTOM: self.tr("Custom"),
        }
        with QSignalBlocker(self.preset):
            for i in range(self.preset.count()):
                self.preset.setItemText(i, presets[self.preset.itemData(i)])
        self.preset.setToolTip(self.tr(
            "Deterministic: always the likeliest token, the same reply every time. Balanced and "
            "Creative sample, with penalties that keep a small model out of loops; the same seed "
            "gives the same reply."))  # fmt: skip
        whole_context = self.tr("whole context")
        self.top_k.setSpecialValueText(self.tr("off"))
        self.repeat_last_n.setSpecialValueText(whole_context)
        self.dry_last_n.setSpecialValueText(whole_context)
        tips = {
            self.temperature: self.tr("0: greedy (deterministic); higher: more "
                                      "varied replies"),
            self.top_k: self.tr("Keep the k likeliest tokens (0: off)"),
            self.top_p: self.tr("Keep the likeliest tokens up to this share "
                                "of probability (1: off)"),
            self.min_p: self.tr("Drop tokens less likely than this share of "
                                "the likeliest one (0: off)"),
            self.repeat_penalty: self.tr("Make tokens already in the window "
                                         "less likely (1: off)"),
            self.repeat_last_n: self.tr("The repeat penalty's window, in "
                                        "tokens"),
            self.dry_multiplier: self.tr(
                "DRY: penalize continuing a sequence that already occurred (0: off)"),
            self.dry_base: self.tr("DRY: how fast the penalty grows with the "
                                   "length of the repeat"),
            self.dry_allowed_length: self.tr("DRY: repeats this long go unpenalized"),
            self.dry_last_n: self.tr("DRY: its window, in tokens"),
            self.seed: self.tr("The same seed and settings give the same "
                               "sampled reply"),
        }  # fmt: skip
        for field, tip in tips.items():
            field.setToolTip(tip)
        self.stop_loops.setText(self.tr("Stop a reply that loops"))
        self.stop_loops.setToolTip(self.tr("End a reply that repeats the same span over and over "
                                           "(finish reason: repetition)"))  # fmt: skip
        names = {
            self.temperature: self.tr("Temperature"),
            self.top_k: self.tr("Top-k"),
            self.top_p: self.tr("Top-p"),
            self.min_p: self.tr("Min-p"),
            self.repeat_penalty: self.tr("Repeat penalty"),
            self.repeat_last_n: self.tr("Repeat window"),
            self.dry_multiplier: self.tr("DRY multiplier"),
            self.dry_base: self.tr("DRY base"),
            self.dry_allowed_length: self.tr("DRY allowed length"),
            self.dry_last_n: self.tr("DRY window"),
            self.preset: self.tr("Preset"),
            self.seed: self.tr("Seed"),
        }
        for widget, name in names.items():
            self._labels[widget].setText(name)
        self.more.setText(self.tr("Details"))

    # ----- reading and writing -----

    def settings(self) -> SamplingSettings:
        """What the next Run uses."""
        return SamplingSettings(
            temperature=round(self.temperature.value(), 4),
            top_k=self.top_k.value(),
            top_p=round(self.top_p.value(), 4),
            min_p=round(self.min_p.value(), 4),
            repeat_penalty=round(self.repeat_penalty.value(), 4),
            repeat_last_n=self.repeat_last_n.value(),
            dry_multiplier=round(self.dry_multiplier.value(), 4),
            dry_base=round(self.dry_base.value(), 4),
            dry_allowed_length=self.dry_allowed_length.value(),
            dry_last_n=self.dry_last_n.value(),
            seed=self.seed.value(),
            stop_on_repetition=self.stop_loops.isChecked(),
        )

    def set_settings(self, s: SamplingSettings, *, remember: bool = True) -> None:
        """Show ``s`` (a rolled-back version's, the remembered one); the preset follows.
        ``remember=False``: for this window only (the demo's choice is not the person's)."""
        self._updating = True
        try:
            self.temperature.setValue(s.temperature)
            self.top_k.setValue(s.top_k)
            self.top_p.setValue(s.top_p)
            self.min_p.setValue(s.min_p)
            self.repeat_penalty.setValue(s.repeat_penalty)
            self.repeat_last_n.setValue(s.repeat_last_n)
            self.dry_multiplier.setValue(s.dry_multiplier)
            self.dry_base.setValue(s.dry_base)
            self.dry_allowed_length.setValue(s.dry_allowed_length)
            self.dry_last_n.setValue(s.dry_last_n)
            self.seed.setValue(min(s.seed, MAX_UI_SEED))
            self.stop_loops.setChecked(s.stop_on_repetition)
        finally:
            self._updating = False
        self._on_field(remember=remember)

    def choose_preset(self, name: str, *, remember: bool = True) -> None:
        """Apply preset ``name`` (the seed and the loop stop stay as they are)."""
        current = self.settings()
        self.set_settings(replace(PRESETS[name], seed=current.seed,
                                  stop_on_repetition=current.stop_on_repetition),
                          remember=remember)  # fmt: skip

    # ----- reactions -----

    def _on_preset(self, index: int) -> None:
        name = self.preset.itemData(index)
        if name in PRESETS:
            self.choose_preset(name)
        else:  # "Custom": show the fields to edit
            self.more.setChecked(True)

    def _on_field(self, *_args: object, remember: bool = True) -> None:
        if self._updating:
            return
        current = self.settings()
        name = preset_of(current) or CUSTOM
        self.preset.setCurrentIndex(self.preset.findData(name))
        if remember:
            self._remember(current)
        self.changed.emit(current)

    def _remembered(self) -> SamplingSettings:
        if self._settings is None:
            return SamplingSettings()
        with contextlib.suppress(TypeError, ValueError):
            stored = SamplingSettings.from_dict(json.loads(str(self._settings.value(
                SETTINGS_KEY, "{}"))))  # fmt: skip
            stored.validate()
            return stored
        return SamplingSettings()

    def _remember(self, s: SamplingSettings) -> None:
        if self._settings is not None:
            self._settings.setValue(SETTINGS_KEY, json.dumps(s.as_dict()))
