"""A :class:`Plan` as a few numpy arrays, to cross a pipe without stalling the receiver.

Unpickling a plan of a 50 MB document (~90k ``Chunk`` dataclasses) is one C call of ~300 ms that
holds the GIL, so every other thread of the receiving process (the GUI thread) waits. Arrays
unpickle as a copy; the dataclasses are then rebuilt in Python, slice by slice, and Python
bytecode lets the GIL change hands every few milliseconds. The rebuilt plan ``==`` the original.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from app.core.planning.chunking import Boundary, Chunk
from app.core.planning.plan import Plan, PlanWindow, Span

_SLICE = 4096  # rows turned into Python ints at a time
_BOUNDARIES = {int(b): b for b in Boundary}


def pack_plan(plan: Plan) -> dict[str, Any]:
    """Plain values and int64 arrays; reasons as a table of distinct strings and indices."""
    reasons: dict[str, int] = {}
    packed: dict[str, Any] = {
        "strategy": plan.strategy,
        "budget": plan.budget,
        "total_tokens": plan.total_tokens,
        "refused": plan.refused,
        "boundary_integrity": plan.boundary_integrity,
        "seconds": plan.seconds,
        "chunks": _array([(c.index, c.start, c.end, c.tokens, c.boundary) for c in plan.chunks]),
        "windows": _array([(w.start, w.end, w.tokens, w.first, w.last) for w in plan.windows]),
    }
    for name, spans in (("kept", plan.kept), ("dropped", plan.dropped)):
        rows = [
            (s.start, s.end, s.tokens, reasons.setdefault(s.reason, len(reasons))) for s in spans
        ]
        packed[name] = _array(rows, width=4)
    packed["reasons"] = list(reasons)
    return packed


def unpack_plan(packed: dict[str, Any]) -> Plan:
    reasons: list[str] = packed["reasons"]
    boundary = _BOUNDARIES
    chunks = tuple(Chunk(i, s, e, t, boundary[b]) for i, s, e, t, b in _rows(packed["chunks"]))
    windows = tuple(PlanWindow(*row) for row in _rows(packed["windows"]))
    kept, dropped = (
        tuple(Span(s, e, t, reasons[r]) for s, e, t, r in _rows(packed[name]))
        for name in ("kept", "dropped")
    )
    return Plan(
        strategy=packed["strategy"],
        budget=packed["budget"],
        total_tokens=packed["total_tokens"],
        kept=kept,
        dropped=dropped,
        windows=windows,
        refused=packed["refused"],
        boundary_integrity=packed["boundary_integrity"],
        seconds=packed["seconds"],
        chunks=chunks,
    )


def _array(rows: Sequence[tuple[int, ...]], width: int = 5) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


def _rows(array: np.ndarray) -> Iterator[list[int]]:
    for at in range(0, len(array), _SLICE):
        yield from array[at : at + _SLICE].tolist()
