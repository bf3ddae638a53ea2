"""The segment ring: a hypothesis state machine over thousands of random operation sequences."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from app.core.jobs.ring import Ring, RingError, SegmentKind

pytestmark = pytest.mark.unit

CAPACITY = 64
KINDS = st.sampled_from(list(SegmentKind))


class RingMachine(RuleBasedStateMachine):
    """Random appends, evictions, shifts and clears; the invariants hold after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.ring = Ring(CAPACITY)
        self.model: list[tuple[int, int, bool]] = []  # (id, tokens, pinned) in KV order
        self.version = 0

    def _bumped(self) -> None:
        self.version += 1
        assert self.ring.version == self.version

    @rule(kind=KINDS, tokens=st.integers(1, 40), pinned=st.booleans())
    def append(self, kind: SegmentKind, tokens: int, pinned: bool) -> None:
        if tokens > self.ring.free:
            with pytest.raises(RingError, match="does not fit"):
                self.ring.append(kind, tokens, pinned=pinned)
            return
        seg = self.ring.append(kind, tokens, pinned=pinned, source=(0, tokens))
        self.model.append((seg.id, tokens, pinned))
        self._bumped()

    @rule(tokens=st.integers(1, 10))
    def grow_last(self, tokens: int) -> None:
        if not self.model or tokens > self.ring.free:
            return
        sid, n, pinned = self.model[-1]
        self.ring.grow(sid, tokens)
        self.model[-1] = (sid, n + tokens, pinned)
        self._bumped()

    @rule(keep=st.integers(0, CAPACITY))
    def cut(self, keep: int) -> None:
        used = self.ring.used
        if keep > used:
            with pytest.raises(RingError, match="cannot cut"):
                self.ring.cut(keep)
            return
        self.ring.cut(keep)
        model, pos = [], 0
        for sid, n, pinned in self.model:
            if pos < keep:
                model.append((sid, min(n, keep - pos), pinned))
            pos += n
        self.model = model
        if keep < used:
            self._bumped()
        assert self.ring.used == keep

    @rule()
    def evict_oldest(self) -> None:
        unpinned = [m for m in self.model if not m[2]]
        if not unpinned:
            with pytest.raises(RingError, match="pinned"):
                self.ring.evict()
            return
        removal = self.ring.evict()
        assert removal.segment == unpinned[0][0] and removal.whole
        assert removal.tokens == unpinned[0][1]
        self.model.remove(unpinned[0])
        self._bumped()

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def evict_named(self, data: st.DataObject) -> None:
        sid, n, pinned = data.draw(st.sampled_from(self.model))
        if pinned:
            with pytest.raises(RingError, match="pinned"):
                self.ring.evict(sid)
            return
        removal = self.ring.evict(sid)
        assert removal.tokens == n
        self.model.remove((sid, n, pinned))
        self._bumped()

    @rule(tokens=st.integers(1, 50))
    def shift(self, tokens: int) -> None:
        movable = sum(n for _, n, pinned in self.model if not pinned)
        if tokens > movable:
            with pytest.raises(RingError, match="pinned"):
                self.ring.shift(tokens)
            return
        before = self.ring.used
        removals = self.ring.shift(tokens)
        assert sum(r.tokens for r in removals) == tokens
        assert self.ring.used == before - tokens
        left, model = tokens, []
        for sid, n, pinned in self.model:  # oldest unpinned first, the last one maybe in part
            take = 0 if pinned else min(n, left)
            left -= take
            if n - take:
                model.append((sid, n - take, pinned))
        self.model = model
        self._bumped()

    @rule()
    def clear(self) -> None:
        self.ring.clear()
        self.model = []
        self._bumped()

    @invariant()
    def matches_the_model_and_holds_its_invariants(self) -> None:
        self.ring.check()
        assert [(s.id, s.tokens, s.pinned) for s in self.ring] == self.model
        assert self.ring.used == sum(n for _, n, _ in self.model) <= CAPACITY
        for s in self.ring:
            assert 0 <= s.pos < CAPACITY and s.end <= CAPACITY


TestRingMachine = RingMachine.TestCase
# 500 random sequences of up to 40 operations each (2,000 with SLOW=1).
TestRingMachine.settings = settings(max_examples=2000 if os.environ.get("SLOW") == "1" else 500,
                                    stateful_step_count=40, deadline=None)  # fmt: skip


def test_pinned_segments_survive_every_eviction_and_shift() -> None:
    ring = Ring(100)
    system = ring.append(SegmentKind.SYSTEM, 20, pinned=True)
    for i in range(4):
        ring.append(SegmentKind.CHUNK, 20, source=(i * 100, i * 100 + 100))
    assert ring.free == 0
    removals = ring.shift(30)
    assert [(r.start, r.end, r.whole) for r in removals] == [(20, 40, True), (20, 30, False)]
    assert ring.get(system.id).pos == 0
    assert [s.pos for s in ring] == [0, 20, 30, 50]
    assert [s.trimmed for s in ring] == [0, 10, 0, 0]
    assert ring.resident_sources() == [(100, 200), (200, 300), (300, 400)]


def test_agreement_check_reports_a_mismatch() -> None:
    ring = Ring(50)
    ring.append(SegmentKind.CHUNK, 10)
    assert ring.agrees_with(10, 0, 9) is None
    assert "expects 10" in (ring.agrees_with(12, 0, 11) or "")
    ring.clear()
    assert ring.agrees_with(0, -1, -1) is None


def test_cut_keeps_what_llama_cpp_holds() -> None:
    """A reply's last sampled token is never evaluated; a cancelled prompt stops between batches."""
    ring = Ring(50)
    ring.append(SegmentKind.SYSTEM, 5, pinned=True)
    chunk = ring.append(SegmentKind.CHUNK, 20, source=(0, 80))
    ring.append(SegmentKind.OUTPUT, 8)
    ring.cut(32)  # the reply keeps 7 of its 8 tokens
    assert [s.tokens for s in ring] == [5, 20, 7]
    ring.cut(15)  # the prompt stopped inside the chunk: the reply and half the chunk are gone
    assert [(s.id, s.tokens) for s in ring] == [(0, 5), (chunk.id, 10)]
    version = ring.version
    ring.cut(15)
    assert ring.version == version  # nothing to cut: nothing changed
    ring.check()


def test_errors_leave_the_ring_unchanged() -> None:
    ring = Ring(10)
    ring.append(SegmentKind.SYSTEM, 8, pinned=True)
    version = ring.version
    for bad in (
        lambda: ring.append(SegmentKind.CHUNK, 3),
        ring.evict,
        lambda: ring.shift(1),
        lambda: ring.evict(99),
        lambda: ring.append(SegmentKind.CHUNK, 0),
        lambda: ring.cut(9),
    ):
        with pytest.raises(RingError):
            bad()
    assert ring.version == version and ring.used == 8
    with pytest.raises(RingError, match="capacity"):
        Ring(0)


def test_ring_round_trips_through_plain_data_and_rejects_broken_data() -> None:
    ring = Ring(100)
    ring.append(SegmentKind.SYSTEM, 10, pinned=True)
    ring.append(SegmentKind.CHUNK, 30, source=(0, 120))
    ring.shift(5)
    copy = Ring.from_dict(ring.to_dict())
    assert list(copy) == list(ring) and copy.version == ring.version
    assert copy.append(SegmentKind.QUESTION, 3).id == ring.append(SegmentKind.QUESTION, 3).id
    broken = ring.to_dict()
    broken["segments"][1]["pos"] = 42  # type: ignore[index]
    with pytest.raises(RingError, match="not valid"):
        Ring.from_dict(broken)
    with pytest.raises(RingError, match="not valid"):
        Ring.from_dict({"capacity": 10})
