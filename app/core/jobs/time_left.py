"""How long a job has left, from the rate its done share has grown at.

A person waiting on a long job wants "about 3 min left", and only a measured rate can say it:
the machine's speed and its other programs' load decide it, never a figure set in advance. The
rate is measured over spans of at least MIN_SPAN_S, then smoothed (each new span weighs
SMOOTHING), so one quick or slow step does not throw the estimate around; until a span with
progress has been measured there is no estimate at all.
"""

from __future__ import annotations

MIN_SPAN_S = 1.0  # a rate is measured over at least this long
SMOOTHING = 0.25  # the weight of the newest span's rate in the smoothed one


class TimeLeft:
    """Seconds left of one piece of work whose done share (0 to 1) it is told now and then."""

    def __init__(self, *, min_span_s: float = MIN_SPAN_S, smoothing: float = SMOOTHING) -> None:
        if min_span_s <= 0 or not 0 < smoothing <= 1:
            raise ValueError("the span must be positive and the smoothing within (0, 1]")
        self._min_span_s, self._smoothing = min_span_s, smoothing
        self.reset()

    def reset(self) -> None:
        """Another piece of work begins: nothing measured yet."""
        self._mark: tuple[float, float] | None = None  # (done, time) where the span began
        self._done = 0.0
        self._rate: float | None = None  # done share per second, smoothed

    def update(self, done: float, now: float) -> None:
        """The work is ``done`` (a share from 0 to 1) at ``now`` (seconds, monotonic)."""
        if not 0.0 <= done <= 1.0:
            raise ValueError(f"the done share must be between 0 and 1, not {done}")
        mark = self._mark
        if mark is None or done < mark[0] or now < mark[1]:
            self.reset()  # the first figure, or another piece of work: measure afresh
            self._mark = (done, now) if done > 0 else None  # the rate counts from the first step
            self._done = done
            return
        self._done = done
        span = now - mark[1]
        if span < self._min_span_s:
            return
        rate = (done - mark[0]) / span
        if self._rate is not None:
            rate = self._rate + self._smoothing * (rate - self._rate)
        self._rate, self._mark = rate, (done, now)

    def seconds_left(self) -> float | None:
        """The share still to do over the smoothed rate; None until a rate was measured (or
        while it stands at nothing)."""
        if self._rate is None or self._rate <= 0:
            return None
        return (1.0 - self._done) / self._rate
