"""A :class:`Plan` as a few numpy arrays, to cross a pipe without stalling the receiver.

Unpickling a plan of a 50 MB document (~90k ``Chunk`` dataclasses) is one C call of ~300 ms that
holds the GIL, so every other thread of the receiving process (the GUI thread) waits. Arrays
unpickle as a copy; the dataclasses are then rebuilt in Python, slice by slice, and Python
bytecode lets the GIL change hands every few milliseconds. The rebuilt plan ``==`` the original.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from app.core.planning.chunking import Boundary, Chunk
from app.core.planning.plan import Plan, PlanWindow, Span

_SLICE = 4096  # rows turned into Python ints at a time
_BOUNDARIES = {int(b): b for b in Boundary}


def pack_plan(plan: Plan) -> dict[str, Any]:
    """Plain values and int64 arrays; reasons as a table of distinct strings and indices. The
    figures of scored spans (`retrieve`), when there are any, as a float64 array beside them
    (score, rank, next_to, terms; -1 for none) with their terms as a table too."""
    reasons: dict[str, int] = {}
    packed: dict[str, Any] = {
        "strategy": plan.strategy,
        "question": plan.question,
        "budget": plan.budget,
        "total_tokens": plan.total_tokens,
        "document_tokens": plan.document_tokens,
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
    if any(s.scored for s in (*plan.kept, *plan.dropped)):
        terms: dict[str, int] = {}
        for name, spans in (("kept", plan.kept), ("dropped", plan.dropped)):
            notes = [
                (_or(s.score, np.nan), _or(s.rank, -1), _or(s.next_to, -1),
                 terms.setdefault(" ".join(s.terms), len(terms)) if s.terms else -1)
                for s in spans
            ]  # fmt: skip
            packed[f"{name}_notes"] = np.array(notes, dtype=np.float64).reshape(len(notes), 4)
        packed["terms"] = list(terms)
    return packed


def _or(value: float | None, none: float) -> float:
    return none if value is None else value


def unpack_plan(packed: dict[str, Any]) -> Plan:
    reasons: list[str] = packed["reasons"]
    boundary = _BOUNDARIES
    chunks = tuple(Chunk(i, s, e, t, boundary[b]) for i, s, e, t, b in _rows(packed["chunks"]))
    windows = tuple(PlanWindow(*row) for row in _rows(packed["windows"]))
    kept, dropped = (
        tuple(Span(s, e, t, reasons[r]) for s, e, t, r in _rows(packed[name]))
        for name in ("kept", "dropped")
    )
    if "kept_notes" in packed:
        table: list[str] = packed["terms"]
        kept, dropped = (
            tuple(_noted(span, note, table) for span, note in
                  zip(spans, packed[f"{name}_notes"].tolist(), strict=True))
            for name, spans in (("kept", kept), ("dropped", dropped))
        )  # fmt: skip
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
        question=packed.get("question") or "",
        document_tokens=packed.get("document_tokens", 0),
    )


def _noted(span: Span, note: list[float], table: list[str]) -> Span:
    score, rank, next_to, terms = note
    return Span(span.start, span.end, span.tokens, span.reason,
                None if math.isnan(score) else score,
                None if rank < 0 else int(rank), tuple(table[int(terms)].split()) if terms >= 0
                else (), None if next_to < 0 else int(next_to))  # fmt: skip


def _array(rows: Sequence[tuple[int, ...]], width: int = 5) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


def _rows(array: np.ndarray) -> Iterator[list[int]]:
    for at in range(0, len(array), _SLICE):
        yield from array[at : at + _SLICE].tolist()
