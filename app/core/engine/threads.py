"""How many threads llama.cpp computes with: the cores this process may use, fewer while another
program is busy.

llama.cpp's workers meet at a barrier after every graph node. Under group scheduling (Linux's
autogroups, a desktop's per-app cgroups) the engine's threads share one fair share of the CPU
against each other program that wants it: with two threads on two cores and a busy loop beside
them, the engine's group got one core, each thread half of it, and every barrier waited for a
descheduled thread: a 1,500-token prompt and a 32-token reply took 27x as long. One thread took
the time one core takes. So the engine measures, between decodes, how much CPU the rest of the
machine uses (:class:`CpuMeter`) and computes on the cores left free; and a decode far slower
than the ones before it at the same thread count (bursts the meter averages away) drops a
thread for a while (:class:`ThreadGovernor`). The spin of OpenMP's barrier is bounded too
(:data:`GOMP_SPINCOUNT`), so a decode that meets contention before the next check is slowed, not
stalled.

Qt-free and llama.cpp-free: the engine child owns one governor and applies its answers with
``llama_set_n_threads``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import psutil

# libgomp's barrier spins this many times before it sleeps (its default is 300,000). Measured on
# two cores with a busy loop in another session: 2 threads took 13.8 s for a 1,500-token prompt
# and 64 tokens at 0, 18.6 s at 3,000 and 62 s at 30,000 (one thread: 13.8 s); on a quiet machine
# 3,000 was as fast as the default, 0 made each generated token 3x slower.
GOMP_SPINCOUNT = "3000"

# Another program's use above this share of a core takes a thread away; below the lower figure
# the thread comes back (the gap keeps a program near the line from flipping it every check).
BUSY_AT = 0.5
QUIET_AT = 0.3
# The meter samples the machine this often and reports the last half second: a program that
# used the cores a second ago (the planning process, a previous job) is not taken for one that
# uses them now, and one that starts is seen by the next slice.
METER_PERIOD_S = 0.1
METER_WINDOW_S = 0.5
SUSTAINED_S = 0.2
# A decode this many times slower per token than the recent ones that did the same work (as many
# tokens, give or take a factor of two, after about as many positions in the cache, at the same
# thread count) is a collapse (another program's bursts); the thread count then stays lower for
# HOLD_S, doubled at each repeat up to HOLD_MAX_S. Measured against every prompt slice alike, the
# last short slice of a prompt and a slice deep in a full cache cost more per token for their own
# reasons: the likely cause of a quiet machine of another CPU losing its second thread four or
# five times a job.
SLOW_FACTOR = 3.0
HOLD_S, HOLD_MAX_S = 4.0, 64.0

Cause = Literal["busy", "quiet", "slow"]
REASONS: dict[Cause, str] = {
    "busy": "another program is using a core",
    "quiet": "the machine is quiet again",
    "slow": "decoding became much slower than before",
}


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """Physical cores, within the CPUs this process may use.

    Hyper-threads share a core's arithmetic units: llama.cpp's matrix products gain little from
    a core's second thread and lose much when a busy sibling slows one worker that every barrier
    waits for (an 8-core/16-thread laptop gets 8). psutil reads the physical count; where it
    cannot, the logical count stands in.
    """
    physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return max(1, min(physical, usable_cores()))


def describe_change(before: int, after: int, reason: str) -> str:
    """A change of the thread count in words: "2 → 1 threads: another program is using a
    core" (the CLI's notes and the events' ``describe``)."""
    return f"{before} → {after} threads: {reason}"


@dataclass(frozen=True)
class Change:
    """The thread count moved from ``before`` to ``after`` because of ``cause``; ``others`` is
    the CPU the rest of the machine used then, in cores; for "slow", ``took_s`` is the decode's
    time and ``expected_s`` the time of the same work at the recent pace."""

    before: int
    after: int
    cause: Cause
    others: float
    took_s: float = 0.0
    expected_s: float = 0.0

    @property
    def reason(self) -> str:
        return REASONS[self.cause]

    def describe(self) -> str:
        return describe_change(self.before, self.after, self.reason)

    def figure(self) -> str:
        """The measurement behind it, in words: others' cores, or the slow decode's time."""
        return change_figure(self.cause, self.others, self.took_s, self.expected_s)


def change_figure(cause: str, others: float, took_s: float = 0.0, expected_s: float = 0.0) -> str:
    """"other programs used 1.02 cores" or "a decode took 0.420 s where 0.120 s was expected"."""
    if cause == "slow":
        return f"a decode took {took_s:.3f} s where {expected_s:.3f} s was expected"
    return f"other programs used {others:.2f} cores"


_BUSY = ("user", "nice", "system", "irq", "softirq", "steal")


def _busy_seconds() -> float:
    """CPU seconds the CPUs this process may run on spent busy since boot (steal counts as
    busy: another virtual machine had the core). A program on a CPU outside the affinity
    (another engine pinned beside this one) does not compete with it, so it is not counted."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # macOS, Windows: every CPU
        mine = set()
    per_cpu = psutil.cpu_times(percpu=True)  # one read of /proc/stat, each CPU's line
    if mine and max(mine) < len(per_cpu):
        per_cpu = [per_cpu[i] for i in mine]
    return sum(getattr(t, name, 0.0) for t in per_cpu for name in _BUSY)


def _app_seconds() -> float:
    """CPU seconds of this process and of the one that started it (the app: the window or the
    command line), which waits for the engine while it decodes: what it did just before a
    decode (planning a document, the benchmark's own loop) is the job's work, not another
    program's."""
    own = time.process_time()
    with contextlib.suppress(psutil.Error):
        t = psutil.Process(os.getppid()).cpu_times()
        own += t.user + t.system
    return own


class CpuMeter:
    """The CPU the rest of the machine uses, in cores, over about the last half second.

    A thread samples the busy time of the CPUs the app may use and the app's own CPU time (this
    process and its parent) ten times a second (``/proc/stat`` counts hundredths of a second);
    what is busy and not the app's is another program's. ``sample`` and ``own`` are
    replaceable so tests can script a machine.
    """

    def __init__(
        self,
        *,
        sample: Callable[[], float] = _busy_seconds,
        own: Callable[[], float] = _app_seconds,
        clock: Callable[[], float] = time.monotonic,
        period_s: float = METER_PERIOD_S,
        window_s: float = METER_WINDOW_S,
    ) -> None:
        self._sample, self._own, self._clock = sample, own, clock
        self.period_s, self.window_s = period_s, window_s
        self._samples: deque[tuple[float, float, float]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tick()

    def tick(self) -> None:
        """Take one sample (the thread calls this; a test may too)."""
        now = self._clock()
        entry = (now, self._sample(), self._own())
        with self._lock:
            self._samples.append(entry)
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()

    def others(self, window_s: float | None = None) -> float:
        """Cores' worth of CPU used by other programs over the last ``window_s`` (the meter's
        window by default; at least the last two samples), 0.0 until there are two."""
        with self._lock:
            if len(self._samples) < 2:
                return 0.0
            t1, busy1, own1 = self._samples[-1]
            since = t1 - (self.window_s if window_s is None else window_s)
            first = len(self._samples) - 2
            while first > 0 and self._samples[first - 1][0] >= since:
                first -= 1
            t0, busy0, own0 = self._samples[first]
        if t1 - t0 <= 0:
            return 0.0
        return max(0.0, ((busy1 - busy0) - (own1 - own0)) / (t1 - t0))

    def sustained(self) -> float:
        """What other programs use both over the window and over its last SUSTAINED_S: a
        program that has just stopped (a previous job, a planning process) is not counted."""
        return min(self.others(), self.others(SUSTAINED_S))

    def start(self) -> CpuMeter:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.tick()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None


class ThreadGovernor:
    """The thread count for the next decode, between 1 and ``ceiling``.

    ``before_decode`` answers from the meter: the CPUs free of other programs' work, rounded
    down past :data:`BUSY_AT` (and up again only under :data:`QUIET_AT`), and lower still while
    a slow decode's hold lasts. ``after_decode`` keeps the recent time per token of single-token
    decodes and of prompt slices apart, per thread count, and starts a hold when a decode was
    :data:`SLOW_FACTOR` times slower than those. ``adaptive=False`` always answers ``ceiling``.
    """

    def __init__(
        self,
        ceiling: int,
        meter: CpuMeter | None,
        *,
        adaptive: bool = True,
        cores: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.meter = meter
        self.adaptive = adaptive and meter is not None
        self.cores = cores or usable_cores()
        self.current = self.ceiling
        self._clock = clock
        # (tokens' size class, cache fill class, threads) -> recent seconds per token
        self._pace: dict[tuple[int, int, int], float] = {}
        self._hold_until = 0.0
        self._hold_s = HOLD_S
        self.changes: deque[Change] = deque(maxlen=100)  # the latest changes, oldest first

    def _by_load(self, others: float) -> int:
        """The CPUs free of other programs' work, as a thread count with hysteresis: a thread
        leaves once they take more than BUSY_AT of a core, and comes back under QUIET_AT."""
        down = int(self.cores - others + BUSY_AT)
        up = int(self.cores - others + QUIET_AT)
        if down < self.current:
            return down
        return max(up, self.current)

    def before_decode(self) -> Change | None:
        """The count to decode with now (``self.current``); a Change when it moved."""
        if not self.adaptive:
            return None
        assert self.meter is not None
        others = self.meter.sustained()
        target = min(self.ceiling, max(1, self._by_load(others)))
        if target > self.current and self._clock() < self._hold_until:
            return None  # a slow decode's hold: not back up yet
        if target == self.current:
            return None
        cause: Cause = "busy" if target < self.current else "quiet"
        change = Change(self.current, target, cause, round(others, 2))
        self.current = target
        self.changes.append(change)
        return change

    def after_decode(self, tokens: int, seconds: float, n_past: int = 0) -> Change | None:
        """A decode of ``tokens`` after ``n_past`` positions in the cache took ``seconds`` at
        ``self.current`` threads; a Change when it was slow enough against the recent pace of
        the same work to take a thread away now."""
        if not self.adaptive or tokens < 1 or seconds <= 0:
            return None
        key = (tokens.bit_length(), max(0, n_past).bit_length(), self.current)
        per = seconds / tokens
        pace = self._pace.get(key)
        if pace is None:
            self._pace[key] = per
            return None
        if per > SLOW_FACTOR * pace and self.current > 1:
            now = self._clock()
            again = self._hold_until and now < self._hold_until + self._hold_s
            self._hold_s = min(HOLD_MAX_S, self._hold_s * 2) if again else HOLD_S
            self._hold_until = now + self._hold_s
            assert self.meter is not None
            change = Change(self.current, self.current - 1, "slow", round(self.meter.others(), 2),
                            round(seconds, 4), round(pace * tokens, 4))  # fmt: skip
            self.current -= 1
            self.changes.append(change)
            return change
        self._pace[key] = 0.7 * pace + 0.3 * per
        return None
