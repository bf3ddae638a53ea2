"""The memory fit: what the chosen model takes at the chosen context and options (weights, KV
cache, compute buffers) against the RAM, and the VRAM, free now; before anything is loaded.

The estimate itself is arithmetic, but the memory free is asked of the system (psutil, and NVML
where layers go to a GPU: it starts and stops NVML each time), too slow for every keystroke in
the context size on the GUI thread. So :class:`MemoryFit` waits until the inputs pause
(``DEBOUNCE_MS``), computes on a pool thread, and shows an answer only when it is for the
inputs asked last: each request moves a generation counter on, and an answer of an older
generation is dropped. Meanwhile the label keeps the last figure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QWidget

from app.core.engine.gguf import ModelInfo
from app.core.engine.types import LoadSettings
from app.core.memory_fit import Fit, gib
from app.core.telemetry import memory_fit
from app.ui.background import run_for
from app.ui.i18n import FollowsLanguage

log = logging.getLogger(__name__)

DEBOUNCE_MS = 150  # quiet time after the last change of an input before the fit is computed


@dataclass(frozen=True)
class FitInputs:
    """What a fit is computed from: plain values, safe to hand to a pool thread."""

    info: ModelInfo
    settings: LoadSettings
    gpu_offload: bool | None  # None: whether the build can offload is not known yet


def fit_of(inputs: FitInputs) -> Fit:
    """The fit for ``inputs``; runs on a pool thread (never the GUI thread)."""
    return memory_fit(inputs.info, inputs.settings, gpu_offload=inputs.gpu_offload)


def estimate(inputs: FitInputs) -> Fit | str:
    """:func:`fit_of`, or why it failed in one sentence (logged with its traceback)."""
    try:
        return fit_of(inputs)
    except Exception as exc:  # said on the label, never swallowed
        log.exception("estimating the memory fit failed")
        return str(exc) or type(exc).__name__


class MemoryFit(FollowsLanguage, QLabel):
    """The fit line under the context size: "Fits: 0.87 GiB of 23.1 GiB free at n_ctx 8,192,
    f16 KV cache (weights 235 MiB, KV cache 144 MiB, compute 0.50 GiB)"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)  # a failure may quote outside text
        self.setWordWrap(True)
        self._asked: FitInputs | None = None  # the inputs of the newest request
        self._fit: Fit | str | None = None  # the answer shown: a fit, or why there is none
        self._generation = 0  # moves on with each request; older answers are dropped
        self._computing: int | None = None  # the generation of the computation under way
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._compute)
        self.retranslate()

    def retranslate(self) -> None:
        self.setToolTip(
            self.tr(
                "Estimated before loading from the model's shape (weights, KV cache, compute "
                "buffers: within a few percent of what llama.cpp allocates) against the memory "
                "free now. Live figures come from llama.cpp once loaded."
            )
        )
        self._show()

    def request(self, inputs: FitInputs | None) -> None:
        """The fit for ``inputs`` (None: no model chosen, said at once), computed once the
        requests pause; the figure shown stays until then. The same inputs again: nothing."""
        if inputs == self._asked:
            return
        self._asked = inputs
        self._generation += 1  # an answer under way is for older inputs now
        if inputs is None:
            self._timer.stop()
            self._fit = None
            self._show()
            return
        self._timer.start()  # restarts: computes DEBOUNCE_MS after the last request

    def offer(self, inputs: FitInputs, answer: Fit | str) -> None:
        """An answer computed elsewhere (with the model file's read): shown when it is for the
        inputs asked last, in place of computing them again."""
        if inputs != self._asked:
            return
        self._timer.stop()
        self._generation += 1
        self._computing = None
        self._fit = answer
        self._show()

    def pending(self) -> bool:
        """Whether the fit of the inputs asked last is still to come."""
        return self._timer.isActive() or self._computing == self._generation

    def shown(self) -> Fit | None:
        """The fit shown (perhaps of inputs older than the last asked), or None."""
        return self._fit if isinstance(self._fit, Fit) else None

    def _compute(self) -> None:
        inputs = self._asked
        if inputs is None:
            return
        self._computing = self._generation
        run_for(self, lambda: estimate(inputs), self._answer, self._generation,
                on_error=self._failed)  # fmt: skip

    def _answer(self, generation: int, answer: Fit | str) -> None:
        if generation != self._generation:
            return  # for inputs changed since: the newer answer is coming
        self._computing = None
        self._fit = answer
        self._show()

    def _failed(self, message: str) -> None:
        """Only when the pool thread could not run :func:`estimate` at all (it answers its
        own failures)."""
        log.warning("estimating the memory fit failed: %s", message)

    def _show(self) -> None:
        answer = self._fit
        if isinstance(answer, Fit):
            self.setText(self._fit_text(answer))
        elif answer:
            self.setText(self.tr("The memory it takes could not be estimated: {0}").format(
                answer.rstrip(".") + "."))  # fmt: skip
        elif self._asked is not None:
            self.setText(self.tr("Estimating the memory it takes…"))
        else:
            self.setText(self.tr("KV cache: choose a model to see the memory it takes."))

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
