"""The llama.cpp context as a ring of segments: which text occupies which KV positions.

The engine keeps one sequence whose positions are always contiguous from 0: when a segment
leaves, the KV cells after it are shifted down by its length (``llama_memory_seq_rm`` +
``llama_memory_seq_add``). The ring is the app's model of that layout, kept in the parent
process: every operation returns the KV position range the engine must remove, so the two can be
driven together and compared (``agrees_with``). Pure Python: no engine, no Qt.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any


class SegmentKind(StrEnum):
    SYSTEM = "system"  # the chat template's opening, system prompt and task
    CHUNK = "chunk"  # a span of the document
    QUESTION = "question"  # the question and the template's turn markers
    OUTPUT = "output"  # generated text
    NOTES = "notes"  # an earlier reply kept resident: the running notes of a streamed pass


class RingError(ValueError):
    """An operation the ring cannot perform; the ring is left unchanged."""


@dataclass(frozen=True, slots=True)
class Segment:
    id: int
    kind: SegmentKind
    tokens: int  # tokens resident now (a shift may have trimmed the front)
    pos: int  # first KV position
    pinned: bool = False
    source: tuple[int, int] | None = None  # character span of the document, for chunks
    trimmed: int = 0  # tokens removed from the front by a shift

    @property
    def end(self) -> int:
        """One past the last KV position."""
        return self.pos + self.tokens


@dataclass(frozen=True, slots=True)
class Removal:
    """KV positions ``[start, end)`` to remove; everything after moves down by ``end - start``."""

    start: int
    end: int
    segment: int  # the segment they belonged to
    whole: bool  # the whole segment left (else its front was trimmed)

    @property
    def tokens(self) -> int:
        return self.end - self.start


class Ring:
    """Segments in KV order, positions contiguous from 0, total at most ``capacity``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise RingError("the ring needs a capacity of at least one token")
        self.capacity = capacity
        self.version = 0
        self._segments: list[Segment] = []
        self._next_id = 0

    # ----- reading -----

    def __iter__(self) -> Iterator[Segment]:
        return iter(self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def used(self) -> int:
        return self._segments[-1].end if self._segments else 0

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def get(self, segment_id: int) -> Segment:
        for s in self._segments:
            if s.id == segment_id:
                return s
        raise RingError(f"no segment {segment_id} in the context")

    def resident_sources(self) -> list[tuple[int, int]]:
        """The document spans in the context now, in KV order (for aligning output to source)."""
        return [s.source for s in self._segments if s.source is not None]

    # ----- mutations (each bumps the version) -----

    def append(
        self,
        kind: SegmentKind,
        tokens: int,
        *,
        pinned: bool = False,
        source: tuple[int, int] | None = None,
    ) -> Segment:
        if tokens < 1:
            raise RingError("a segment holds at least one token")
        if tokens > self.free:
            raise RingError(
                f"a {kind} segment of {tokens:,} tokens does not fit: {self.free:,} of "
                f"{self.capacity:,} positions are free"
            )
        seg = Segment(self._next_id, kind, tokens, self.used, pinned, source)
        self._next_id += 1
        self._segments.append(seg)
        self.version += 1
        return seg

    def grow(self, segment_id: int, tokens: int) -> Segment:
        """Add tokens to the last segment (generated output arrives a token at a time)."""
        if not self._segments or self._segments[-1].id != segment_id:
            raise RingError("only the last segment can grow")
        if tokens < 1 or tokens > self.free:
            raise RingError(f"{tokens:,} more tokens do not fit ({self.free:,} free)")
        seg = replace(self._segments[-1], tokens=self._segments[-1].tokens + tokens)
        self._segments[-1] = seg
        self.version += 1
        return seg

    def retag(
        self, segment_id: int, kind: SegmentKind, *, source: tuple[int, int] | None = None
    ) -> Segment:
        """The same positions under another kind (a reply kept as notes, with the document span
        it stands for); only the ring's description changes, not the cache."""
        seg = self.get(segment_id)
        new = replace(seg, kind=kind, source=source)
        self._segments[self._segments.index(seg)] = new
        self.version += 1
        return new

    def evict(self, segment_id: int | None = None) -> Removal:
        """Remove a named segment, or the oldest unpinned one; later segments move down."""
        if segment_id is None:
            victim = next((s for s in self._segments if not s.pinned), None)
            if victim is None:
                raise RingError("every segment in the context is pinned; nothing can be evicted")
        else:
            victim = self.get(segment_id)
            if victim.pinned:
                raise RingError(f"segment {segment_id} is pinned and cannot be evicted")
        i = self._segments.index(victim)
        self._close_gap(i, victim.tokens)
        del self._segments[i]
        self.version += 1
        return Removal(victim.pos, victim.end, victim.id, whole=True)

    def shift(self, tokens: int) -> list[Removal]:
        """Free ``tokens`` positions from the oldest unpinned text (llama.cpp's context shift).

        Whole segments leave while they fit in the amount; the last one may lose only its front.
        """
        if tokens < 1:
            raise RingError("a shift removes at least one token")
        movable = sum(s.tokens for s in self._segments if not s.pinned)
        if tokens > movable:
            raise RingError(f"cannot free {tokens:,} tokens: only {movable:,} are not pinned")
        removals: list[Removal] = []
        left = tokens
        while left:
            i, victim = next((i, s) for i, s in enumerate(self._segments) if not s.pinned)
            if victim.tokens <= left:
                self._close_gap(i, victim.tokens)
                del self._segments[i]
                removals.append(Removal(victim.pos, victim.end, victim.id, whole=True))
                left -= victim.tokens
            else:
                self._segments[i] = replace(
                    victim, tokens=victim.tokens - left, trimmed=victim.trimmed + left
                )
                self._close_gap(i + 1, left)
                removals.append(Removal(victim.pos, victim.pos + left, victim.id, whole=False))
                left = 0
        self.version += 1
        return removals

    def cut(self, used: int) -> None:
        """Keep only positions ``[0, used)``: llama.cpp holds no more than that (a cancelled
        prompt stops between batches; the last sampled token of a reply is never evaluated)."""
        if not 0 <= used <= self.used:
            raise RingError(f"cannot cut to {used:,} positions: {self.used:,} are in use")
        if used == self.used:
            return
        kept = []
        for s in self._segments:
            if s.end <= used:
                kept.append(s)
            elif s.pos < used:
                kept.append(replace(s, tokens=used - s.pos))
        self._segments = kept
        self.version += 1

    def clear(self) -> None:
        self._segments.clear()
        self.version += 1

    def _close_gap(self, after: int, amount: int) -> None:
        """Move the segments from index ``after`` on down by ``amount`` positions."""
        for j in range(after, len(self._segments)):
            s = self._segments[j]
            self._segments[j] = replace(s, pos=s.pos - amount)

    # ----- saving with a KV state -----

    def to_dict(self) -> dict[str, object]:
        """Plain data to store next to a saved KV state (see ``from_dict``)."""
        return {
            "capacity": self.capacity,
            "version": self.version,
            "next_id": self._next_id,
            "segments": [
                {"id": s.id, "kind": s.kind.value, "tokens": s.tokens, "pos": s.pos,
                 "pinned": s.pinned, "source": list(s.source) if s.source else None,
                 "trimmed": s.trimmed}
                for s in self._segments
            ],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ring:
        """The ring ``to_dict`` saved; RingError when the data breaks an invariant."""
        try:
            ring = cls(int(data["capacity"]))
            ring.version = int(data["version"])
            ring._next_id = int(data["next_id"])
            for d in data["segments"]:
                source = (int(d["source"][0]), int(d["source"][1])) if d["source"] else None
                seg = Segment(
                    id=int(d["id"]), kind=SegmentKind(d["kind"]), tokens=int(d["tokens"]),
                    pos=int(d["pos"]), pinned=bool(d["pinned"]), source=source,
                    trimmed=int(d["trimmed"]),
                )  # fmt: skip
                ring._segments.append(seg)
            ring.check()
        except (KeyError, TypeError, ValueError, AssertionError) as exc:
            raise RingError(f"the saved ring is not valid ({exc})") from None
        return ring

    # ----- checks -----

    def check(self) -> None:
        """Raise AssertionError when an invariant does not hold (tests call it after each step)."""
        pos = 0
        ids = set()
        for s in self._segments:
            assert s.pos == pos, f"segment {s.id} starts at {s.pos}, expected {pos}"
            assert s.tokens >= 1, f"segment {s.id} is empty"
            assert s.id not in ids, f"segment {s.id} appears twice"
            ids.add(s.id)
            pos = s.end
        assert 0 <= pos <= self.capacity, f"{pos} positions used of {self.capacity}"

    def agrees_with(self, cells_used: int, pos_min: int, pos_max: int) -> str | None:
        """Compare with llama.cpp's own figures for the sequence; a description of any mismatch."""
        expect_min, expect_max = (0, self.used - 1) if self.used else (-1, -1)
        if (cells_used, pos_min, pos_max) != (self.used, expect_min, expect_max):
            return (
                f"llama.cpp holds {cells_used} cells at positions {pos_min}..{pos_max}; the ring "
                f"expects {self.used} at {expect_min}..{expect_max}"
            )
        return None
