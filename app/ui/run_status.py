"""What a run is doing, said in the status bar: its phase and progress ("Window 3 of 9 · prompt
1,200 of 3,700 tokens · 14 s left", "reply: 45 tokens · 12 tokens/s") and a bar that fills with
it. "Running…" for minutes tells a person nothing, and the busy bar it replaces animated at about
60 frames a second: a third of the window's CPU time during a run, taken from llama.cpp.

Events only store numbers; a 4 Hz timer says them (as the gauges do, never once per token).
The bar: each pass of a multi-pass job is an equal share, within a pass the prompt fills the
first half and the reply (of its most tokens) the second. A call after the passes (a map phase's
"summary", a combining round) says its step and fills a bar of its own.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.jobs.events import (
    ChunkQueued,
    EvalProgress,
    PassStarted,
    StrategyStarted,
    TokenBatch,
)
from app.ui.gauges import duration
from app.ui.i18n import strategy_label

SHOW_MS = 250  # four updates a second
STEPS = 100  # the bar's steps per pass
MIN_RATE_S = 0.5  # a reply rate is said once it has run this long


class RunStatus(QObject):
    """The status line and bar of the job that runs now (see the module's docstring)."""

    # the line, the bar's value and its maximum: sent only when one of them changed
    changed = Signal(str, int, int)

    # what the events have said of the run (reset by _clear, and by _new_call for one call)
    _strategy: str | None
    _pass: PassStarted | None
    _pass_steps: set[str]
    _step: str | None  # the step of the call running (lanes: of none)
    _eval: EvalProgress | None
    _reply_tokens: int
    _reply_started: float | None

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(SHOW_MS)
        self._timer.timeout.connect(self._show)
        self._max_tokens = 1
        self._shown: tuple[str, int, int] | None = None
        self._clear()

    def start(self, max_tokens: int) -> None:
        """A run begins; each model call's reply is at most ``max_tokens`` tokens."""
        self._clear()
        self._max_tokens = max(1, max_tokens)
        self._shown = None
        self._timer.start()
        self._show()

    def stop(self) -> None:
        self._timer.stop()

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def on_event(self, ev: object) -> None:
        """Store what ``ev`` says about the run; the timer says it."""
        match ev:
            case StrategyStarted():
                self._clear()
                self._strategy = ev.strategy
            case PassStarted():
                self._pass = ev
                self._pass_steps.add(ev.step)
                self._new_call()
            case EvalProgress():
                before = self._eval
                if before is not None and (ev.step != before.step
                                           or ev.evaluated < before.evaluated):  # fmt: skip
                    self._new_call()
                self._eval, self._step = ev, ev.step
            case ChunkQueued() if self._reply_tokens:  # the next call's prompt is being built
                self._new_call()
            case TokenBatch():
                if self._reply_started is None:
                    self._reply_started = time.monotonic()
                self._reply_tokens += ev.tokens
                if ev.lane is None:  # lanes interleave their steps: the passes say where it is
                    self._step = ev.step

    def line(self) -> str:
        """The phase and its progress, in the person's language ("" before any figure)."""
        parts = []
        if self._strategy:
            parts.append(strategy_label(self._strategy))
        p = self._pass
        if self._after_passes():
            parts.append(str(self._step))  # as the output stage heads its text
        elif p is not None and p.count > 1:
            parts.append(self.tr("Window {0} of {1}").format(p.index, p.count))
        ev = self._eval
        if self._reply_tokens:
            seconds = time.monotonic() - (self._reply_started or 0.0)
            if seconds >= MIN_RATE_S:
                parts.append(self.tr("reply: {0:,} tokens · {1:,.0f} tokens/s").format(
                    self._reply_tokens, self._reply_tokens / seconds))  # fmt: skip
            else:
                parts.append(self.tr("reply: {0:,} tokens").format(self._reply_tokens))
        elif ev is not None:
            rate = ev.tokens_per_s
            if rate > 0 and ev.evaluated < ev.total:
                left = duration((ev.total - ev.evaluated) / rate)
                parts.append(self.tr("prompt {0:,} of {1:,} tokens · {2} left").format(
                    ev.evaluated, ev.total, left))  # fmt: skip
            else:
                parts.append(self.tr("prompt {0:,} of {1:,} tokens").format(ev.evaluated,
                                                                             ev.total))  # fmt: skip
        return " · ".join(parts)

    def bar(self) -> tuple[int, int]:
        """The bar's value and maximum: passes done, and the share of this one."""
        p = self._pass
        count, done = (1, 0) if p is None or self._after_passes() else (max(1, p.count),
                                                                         max(0, p.index - 1))
        ev = self._eval
        prompt = 1.0 if self._reply_tokens else (
            ev.evaluated / ev.total if ev is not None and ev.total > 0 else 0.0)  # fmt: skip
        reply = min(1.0, self._reply_tokens / self._max_tokens)
        share = round(STEPS * (prompt + reply) / 2)
        return min(count * STEPS, done * STEPS + share), count * STEPS

    @property
    def shown(self) -> tuple[str, int, int]:
        """The line, the bar's value and its maximum now."""
        return (self.line(), *self.bar())

    def _show(self) -> None:
        shown = self.shown
        if shown != self._shown:
            self._shown = shown
            self.changed.emit(*shown)

    def _after_passes(self) -> bool:
        """The call running is none of the passes (a map phase's summary)."""
        return self._pass is not None and self._step is not None and (
            self._step not in self._pass_steps)

    def _new_call(self) -> None:
        self._eval = None
        self._reply_tokens, self._reply_started = 0, None

    def _clear(self) -> None:
        self._strategy = None
        self._pass = None
        self._pass_steps = set()
        self._step = None
        self._new_call()
