"""What a run is doing, said in the status bar: its phase and progress ("Window 3 of 9 · prompt
1,200 of 3,700 tokens · about 2 min left", "reply: 45 tokens · 12 tokens/s") and a bar that fills
with it. "Running…" for minutes tells a person nothing, and the busy bar it replaces animated at
about 60 frames a second: a third of the window's CPU time during a run, taken from llama.cpp.

Events only store numbers; a 4 Hz timer says them (as the gauges do, never once per token).
The bar: each pass of a multi-pass job is an equal share, filled by the work its call has done:
the prompt's tokens evaluated and the reply's generated (of its most), a generated token weighing
REPLY_WEIGHT evaluated ones; a batched map phase's windows in flight each fill their own share,
so the bar moves from the first prompt's first slice. A call after
the passes (a map phase's "summary", a combining round) says its step and fills a bar of its
own. The time left is the bar's, from the rate it has filled at (app/core/jobs/time_left.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.jobs.events import (
    ChunkQueued,
    EvalProgress,
    PartialResult,
    PassStarted,
    StrategyStarted,
    TokenBatch,
)
from app.core.jobs.time_left import TimeLeft
from app.ui.i18n import strategy_label

SHOW_MS = 250  # four updates a second
STEPS = 100  # the bar's steps per pass
MIN_RATE_S = 0.5  # a reply rate is said once it has run this long
# A generated token takes about as long as two evaluated ones (the default model here: prompts at
# 110-140 tokens/s, replies at 35-68 alone and about 100 in four lanes together).
REPLY_WEIGHT = 2


@dataclass
class _Call:
    """What the events have said of one model call."""

    eval: EvalProgress | None = None
    reply_tokens: int = 0
    reply_started: float | None = None

    def share(self, max_tokens: int) -> float:
        """How far the call is: its prompt's tokens and its reply's (of ``max_tokens``)."""
        total = self.eval.total if self.eval is not None else 0
        evaluated = total if self.reply_tokens or self.eval is None else self.eval.evaluated
        work = total + REPLY_WEIGHT * max_tokens
        return (evaluated + REPLY_WEIGHT * min(self.reply_tokens, max_tokens)) / work


class RunStatus(QObject):
    """The status line and bar of the job that runs now (see the module's docstring)."""

    # the line, the bar's value and its maximum: sent only when one of them changed
    changed = Signal(str, int, int)

    # what the events have said of the run (reset by _clear)
    _strategy: str | None
    _pass: PassStarted | None
    _pass_steps: set[str]  # the steps of every pass so far (a call of none is after the passes)
    _phase: set[str]  # the steps of the passes since the last first one (index 1)
    _finished: set[str]  # the steps whose reply is over
    _calls: dict[str, _Call]
    _step: str | None  # the call the line speaks of (None: the next one's prompt is being built)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(SHOW_MS)
        self._timer.timeout.connect(self._show)
        self._max_tokens = 1
        self._shown: tuple[str, int, int] | None = None
        self._time_left = TimeLeft()
        self._bar_max = 0  # the passes of the bar the time left was measured on
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
                if ev.index == 1:
                    self._phase = set()
                self._pass, self._step = ev, ev.step
                self._pass_steps.add(ev.step)
                self._phase.add(ev.step)
                self._calls[ev.step] = _Call()
            case EvalProgress():
                call = self._calls.get(ev.step)
                if call is None or call.reply_tokens or (
                        call.eval is not None and ev.evaluated < call.eval.evaluated):
                    call = self._calls[ev.step] = _Call()  # another call of that step
                call.eval, self._step = ev, ev.step
            case ChunkQueued():  # after a reply: the next call's prompt is being built
                call = self._calls.get(self._step) if self._step is not None else None
                if call is not None and call.reply_tokens:
                    self._step = None
            case TokenBatch():
                call = self._calls.setdefault(ev.step, _Call())
                if call.reply_started is None:
                    call.reply_started = time.monotonic()
                call.reply_tokens += ev.tokens
                if ev.lane is None:  # lanes interleave their steps: the passes say where it is
                    self._step = ev.step
            case PartialResult():
                self._finished.add(ev.step)
                if ev.step == self._step:  # its figures are over: none said until the next
                    self._step = None

    def line(self) -> str:
        """The phase, its progress and the time left, in the person's language ("" before
        any figure)."""
        parts = []
        if self._strategy:
            parts.append(strategy_label(self._strategy))
        p = self._pass
        if self._after_passes():
            parts.append(str(self._step))  # as the output stage heads its text
        elif p is not None and p.count > 1:
            parts.append(self.tr("Window {0} of {1}").format(p.index, p.count))
        call = self._calls.get(self._step) if self._step is not None else None
        if call is not None and call.reply_tokens:
            seconds = time.monotonic() - (call.reply_started or 0.0)
            if seconds >= MIN_RATE_S:
                parts.append(self.tr("reply: {0:,} tokens · {1:,.0f} tokens/s").format(
                    call.reply_tokens, call.reply_tokens / seconds))  # fmt: skip
            else:
                parts.append(self.tr("reply: {0:,} tokens").format(call.reply_tokens))
        elif call is not None and (ev := call.eval) is not None:
            parts.append(self.tr("prompt {0:,} of {1:,} tokens").format(ev.evaluated, ev.total))
        left = self._time_left.seconds_left()
        if left is not None:
            parts.append(self._left(left))
        return " · ".join(parts)

    def bar(self) -> tuple[int, int]:
        """The bar's value and maximum: the passes done, and the share of those in flight."""
        done, count = self._progress()
        return min(count * STEPS, round(STEPS * done)), count * STEPS

    def _progress(self) -> tuple[float, int]:
        """The passes done (with the shares of those in flight) and the bar's passes."""
        p = self._pass
        if p is None or self._after_passes():
            call = self._calls.get(self._step) if self._step is not None else None
            return (call.share(self._max_tokens) if call else 0.0), 1
        # the passes start in order: those up to this one are done but those still in flight
        in_flight = [self._calls[s] for s in self._phase if s not in self._finished]
        done = max(0, p.index - len(in_flight)) + sum(c.share(self._max_tokens)
                                                      for c in in_flight)  # fmt: skip
        return done, max(1, p.count)

    @property
    def shown(self) -> tuple[str, int, int]:
        """The line, the bar's value and its maximum now."""
        return (self.line(), *self.bar())

    def _show(self) -> None:
        done, count = self._progress()
        if count != self._bar_max:  # another bar: its time left is measured afresh
            self._time_left.reset()
            self._bar_max = count
        self._time_left.update(min(1.0, done / count), time.monotonic())
        shown = self.shown
        if shown != self._shown:
            self._shown = shown
            self.changed.emit(*shown)

    def _after_passes(self) -> bool:
        """The call running is none of the passes (a map phase's summary)."""
        return self._pass is not None and self._step is not None and (
            self._step not in self._pass_steps)

    def _left(self, seconds: float) -> str:
        """The time left said as the estimate it is: "about 40 s left", "about 3 min left"."""
        if seconds < 60:
            return self.tr("about {0} s left").format(max(5, 5 * round(seconds / 5)))
        minutes = round(seconds / 60)
        if minutes < 60:
            return self.tr("about {0} min left").format(minutes)
        return self.tr("about {0} h {1} min left").format(minutes // 60, minutes % 60)

    def _clear(self) -> None:
        self._strategy = None
        self._pass = None
        self._pass_steps, self._phase, self._finished = set(), set(), set()
        self._calls = {}
        self._step = None
        self._time_left.reset()
