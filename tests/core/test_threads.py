"""The thread policy (app/core/engine/threads.py) on a scripted machine: what other programs use
is measured, a core they take costs a thread, a quiet machine gives it back, a decode far slower
than the ones before it drops a thread for a while; and the pilot applies the count to llama.cpp.
The same policy against a real busy process and the real engine: test_thread_contention.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from app.core.engine import threads
from app.core.engine.decoding import ThreadPilot
from app.core.engine.threads import (
    BUSY_AT,
    HOLD_S,
    QUIET_AT,
    SLOW_FACTOR,
    Change,
    CpuMeter,
    ThreadGovernor,
)

pytestmark = pytest.mark.unit


class Machine:
    """A scripted machine: ``busy`` CPU seconds of all programs, ``own`` of this one."""

    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 0.0
        self.own = 0.0

    def run(self, seconds: float, *, others: float, ours: float = 0.0) -> None:
        self.now += seconds
        self.busy += (others + ours) * seconds
        self.own += ours * seconds


def meter_on(machine: Machine) -> CpuMeter:
    return CpuMeter(sample=lambda: machine.busy, own=lambda: machine.own,
                    clock=lambda: machine.now)  # fmt: skip


def settle(machine: Machine, meter: CpuMeter, *, others: float, ours: float = 2.0) -> None:
    """A second and a half of the machine as described, sampled as the meter's thread would."""
    for _ in range(6):
        machine.run(0.25, others=others, ours=ours)
        meter.tick()


def test_the_meter_counts_what_is_busy_and_not_ours() -> None:
    m = Machine()
    meter = meter_on(m)
    assert meter.others() == 0.0  # one sample: nothing to compare yet
    settle(m, meter, others=1.0, ours=1.0)
    assert meter.others() == pytest.approx(1.0)
    settle(m, meter, others=0.0, ours=2.0)  # only the last half second counts
    assert meter.others() == pytest.approx(0.0, abs=1e-9)


def test_a_program_that_has_just_stopped_is_not_counted() -> None:
    m = Machine()
    meter = meter_on(m)
    settle(m, meter, others=1.0, ours=1.0)
    for _ in range(2):  # it stopped 0.2 s ago
        m.run(0.1, others=0.0, ours=2.0)
        meter.tick()
    assert meter.others() == pytest.approx(0.25 / 0.45)  # the half second still holds it
    assert meter.sustained() == pytest.approx(0.0, abs=1e-9)


def test_the_meter_thread_samples_the_real_machine() -> None:
    meter = CpuMeter(period_s=0.01).start()
    try:
        import time  # noqa: PLC0415

        time.sleep(0.3)
        assert len(meter._samples) >= 3
        # /proc/stat counts hundredths of a second per CPU: over 0.3 s that is a few per cent
        assert 0.0 <= meter.others() <= threads.usable_cores() * 1.2
    finally:
        meter.close()
    assert meter._thread is None


def test_the_meter_counts_only_the_cpus_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine pinned to one CPU (a worker of the parallel suite, a person's `taskset`) does
    not give up threads because a program runs on a CPU it never uses."""
    per_cpu = [SimpleNamespace(user=10.0 * (i + 1), nice=0.0, system=1.0, idle=99.0, irq=0.0,
                               softirq=0.0, steal=0.0) for i in range(4)]  # fmt: skip
    monkeypatch.setattr(threads.psutil, "cpu_times", lambda percpu=False: per_cpu)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {1, 3}, raising=False)
    assert threads._busy_seconds() == pytest.approx(20.0 + 1.0 + 40.0 + 1.0)


def governor(machine: Machine, **kw: Any) -> tuple[ThreadGovernor, CpuMeter]:
    meter = meter_on(machine)
    return ThreadGovernor(2, meter, cores=2, clock=lambda: machine.now, **kw), meter


def test_a_busy_core_costs_a_thread_and_a_quiet_machine_gives_it_back() -> None:
    m = Machine()
    gov, meter = governor(m)
    settle(m, meter, others=0.1)
    assert gov.before_decode() is None and gov.current == 2  # a light program: keep both

    settle(m, meter, others=1.0, ours=1.0)  # another program takes a core
    change = gov.before_decode()
    assert change == Change(2, 1, "busy", 1.0)
    assert change.describe() == "2 → 1 threads: another program is using a core"
    assert gov.current == 1

    settle(m, meter, others=(BUSY_AT + QUIET_AT) / 2, ours=1.0)  # between the lines: stay
    assert gov.before_decode() is None and gov.current == 1

    settle(m, meter, others=0.05, ours=1.0)
    change = gov.before_decode()
    assert change is not None and (change.after, change.cause) == (2, "quiet")
    assert [c.after for c in gov.changes] == [1, 2]


def test_never_below_one_thread_nor_above_the_ceiling() -> None:
    m = Machine()
    meter = meter_on(m)
    gov = ThreadGovernor(4, meter, cores=16, clock=lambda: m.now)
    settle(m, meter, others=3.0)  # a 16-CPU machine with 3 busy: 13 free, the ceiling is 4
    assert gov.before_decode() is None and gov.current == 4
    settle(m, meter, others=15.9)
    assert gov.before_decode() == Change(4, 1, "busy", 15.9)


def test_fixed_threads_never_move() -> None:
    m = Machine()
    gov, meter = governor(m, adaptive=False)
    settle(m, meter, others=2.0)
    assert gov.before_decode() is None
    assert gov.after_decode(1, 100.0) is None and gov.after_decode(1, 1000.0) is None
    assert gov.current == 2 and not gov.changes


def test_a_collapsed_decode_drops_a_thread_for_a_while() -> None:
    m = Machine()
    gov, meter = governor(m)
    settle(m, meter, others=0.0)
    assert gov.after_decode(1, 0.02) is None  # the first token sets the pace
    assert gov.after_decode(1, 0.02 * (SLOW_FACTOR - 0.5)) is None  # slow, not a collapse
    assert gov.after_decode(512, 2.0) is None  # prompt slices keep a pace of their own
    change = gov.after_decode(1, 0.5)  # 20x the pace: another program's burst
    assert change is not None and (change.before, change.after, change.cause) == (2, 1, "slow")
    # the meter sees a quiet machine, but the hold keeps the thread away...
    m.run(HOLD_S / 2, others=0.0)
    meter.tick()
    assert gov.before_decode() is None and gov.current == 1
    # ...until it ends
    m.run(HOLD_S, others=0.0)
    meter.tick()
    back = gov.before_decode()
    assert back is not None and (back.after, back.cause) == (2, "quiet")
    # a second collapse soon after holds twice as long
    assert gov.after_decode(1, 0.5) is not None
    m.run(HOLD_S * 1.5, others=0.0)
    meter.tick()
    assert gov.before_decode() is None
    m.run(HOLD_S, others=0.0)
    meter.tick()
    assert gov.before_decode() is not None and gov.current == 2


def test_one_thread_has_nothing_to_drop() -> None:
    m = Machine()
    meter = meter_on(m)
    gov = ThreadGovernor(1, meter, cores=1, clock=lambda: m.now)
    gov.after_decode(1, 0.01)
    assert gov.after_decode(1, 10.0) is None and gov.current == 1


def test_default_threads_are_the_physical_cores_this_process_may_use(monkeypatch: Any) -> None:
    monkeypatch.setattr(threads.psutil, "cpu_count", lambda logical=True: 16 if logical else 8)
    monkeypatch.setattr(threads, "usable_cores", lambda: 16)
    assert threads.default_threads() == 8  # 8 cores, 16 hyper-threads
    monkeypatch.setattr(threads, "usable_cores", lambda: 3)
    assert threads.default_threads() == 3  # pinned to 3 CPUs
    monkeypatch.setattr(threads.psutil, "cpu_count", lambda logical=True: None)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: None)
    assert threads.default_threads() == 1


class _Llama:
    """Records llama_set_n_threads as llama.cpp would take it."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, int, int]] = []

    def llama_set_n_threads(self, ctx: object, n: int, n_batch: int) -> None:
        self.calls.append((ctx, n, n_batch))


def test_the_pilot_sets_a_context_s_threads_only_when_they_change() -> None:
    m = Machine()
    gov, meter = governor(m)
    lc = _Llama()
    pilot = ThreadPilot(lc, gov, n_threads=2, n_threads_batch=2)
    seen: list[Change] = []
    pilot.on_change = seen.append
    ctx, lanes_ctx = object(), object()
    settle(m, meter, others=0.0)
    started = pilot.before(ctx)
    pilot.after(ctx, 1, started)
    pilot.before(ctx)
    assert lc.calls == [(ctx, 2, 2)]  # once, not per decode
    pilot.before(lanes_ctx)  # another context (the lanes') gets the count too
    assert lc.calls[-1] == (lanes_ctx, 2, 2)
    settle(m, meter, others=1.0, ours=1.0)
    pilot.before(ctx)
    assert lc.calls[-1] == (ctx, 1, 1)
    assert [(c.before, c.after) for c in seen] == [(2, 1)]


def _quiet_rolling_job(gov: ThreadGovernor, m: Machine, meter: CpuMeter) -> None:
    """The decodes of a rolling summary on a quiet machine, as a machine with many cores times
    them: 128-token slices whose cost per token grows with the positions already in the cache,
    the prompt's last short slice (a few tokens cost almost what a full slice does on many
    threads: 6x per token here), and single-token replies as the cache fills and is cut back."""

    def decode(tokens: int, n_past: int) -> None:
        per = 0.0008 * (1 + n_past / 1024)  # attention's share grows with the cache
        if tokens < 32:  # a short batch uses the threads badly
            per *= 6 if tokens > 1 else 8
        m.run(per * tokens, others=0.0)
        meter.tick()
        gov.before_decode()
        gov.after_decode(tokens, per * tokens, n_past)

    for _ in range(10):  # ten windows: the document ten times the context
        n_past = 0
        for _ in range(15):
            decode(128, n_past)
            n_past += 128
        decode(7, n_past)  # the prompt's short last slice
        n_past += 7
        for _ in range(64):
            decode(1, n_past)
            n_past += 1


def test_a_quiet_machine_keeps_every_thread_through_a_job_of_mixed_decodes() -> None:
    """No thread is taken without cause: slices deep in a full cache and a prompt's short last
    slice are slower per token for their own reasons, and are compared with the same work."""
    m = Machine()
    gov, meter = governor(m)
    settle(m, meter, others=0.0)
    _quiet_rolling_job(gov, m, meter)
    assert not gov.changes and gov.current == 2


def test_against_every_slice_alike_the_same_job_lost_threads() -> None:
    """The same job against one pace for every prompt slice (the rule before): the short last
    slice reads as a collapse. What the test above guards against, shown on the old key."""
    m = Machine()
    gov, meter = governor(m)
    settle(m, meter, others=0.0)
    old = gov.after_decode

    def one_pace(tokens: int, seconds: float, n_past: int = 0) -> Change | None:
        return old(2 if tokens > 1 else 1, seconds * 2 / tokens if tokens > 1 else seconds, 0)

    gov.after_decode = one_pace  # type: ignore[method-assign]
    _quiet_rolling_job(gov, m, meter)
    assert [c.cause for c in gov.changes][:1] == ["slow"]


def test_a_slow_decode_says_its_time_against_the_time_expected() -> None:
    m = Machine()
    gov, meter = governor(m)
    settle(m, meter, others=0.0)
    assert gov.after_decode(128, 0.10, 512) is None
    change = gov.after_decode(128, 0.50, 600)  # the same work, 5x slower: a collapse
    assert change is not None and change.cause == "slow"
    assert (change.took_s, change.expected_s) == (0.5, 0.1)
    assert change.figure() == "a decode took 0.500 s where 0.100 s was expected"
    busy = Change(2, 1, "busy", 1.02)
    assert busy.figure() == "other programs used 1.02 cores"


def test_a_change_made_between_requests_is_kept_for_the_next_one() -> None:
    """A chunk evaluated on its own (no request listening) can cost a thread; the change waits
    and the next request reports it first, so the record has every change, down and up."""
    m = Machine()
    gov, meter = governor(m)
    pilot = ThreadPilot(_Llama(), gov, n_threads=2, n_threads_batch=2)
    ctx = object()
    settle(m, meter, others=1.0)  # another program took a core before the request
    started = pilot.before(ctx)
    pilot.after(ctx, 128, started, 0)
    assert [(c.before, c.after, c.cause) for c in pilot.pending] == [(2, 1, "busy")]
    seen: list[Change] = []
    for change in pilot.take_pending():  # what a request does first (llama_base._reporting)
        seen.append(change)
    pilot.on_change = seen.append
    settle(m, meter, others=0.0)
    pilot.before(ctx)
    assert [(c.before, c.after, c.cause) for c in seen] == [(2, 1, "busy"), (1, 2, "quiet")]
    assert not pilot.pending
