"""The JSON every benchmark writes with ``--json PATH``, read by ``contextlens-cli bench``.

A file holds ``{"bench": NAME, "rows": [ROW, ...]}``; each ROW is
``{"figure": str, "baseline": str, "value": float, "ratio": float, "goal": str, "met": bool}``
plus, optionally, ``"unit": str``, ``"note": str`` and ``"why": str`` (what limits the figure, which
the report prints when the goal is missed). ``value`` is the measured figure in its
unit, ``ratio`` that figure against its baseline measured in the same run, ``goal`` a comparison
on the ratio (``"<= 0.10"``, ``">= 1.25"``, ``"< 5"``) and ``met`` whether the ratio meets it.

Every benchmark also takes ``--quick``: sizes small enough that the whole suite runs in minutes
(options given explicitly still win), so the report can be made often and the figures stay ratios.
"""

from __future__ import annotations

import argparse
import json
import operator
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}


class Row(TypedDict):
    figure: str
    baseline: str
    value: float
    ratio: float
    goal: str
    met: bool
    unit: NotRequired[str]
    note: NotRequired[str]
    why: NotRequired[str]


def goal_met(ratio: float, goal: str) -> bool:
    """Whether ``ratio`` meets ``goal`` (an operator, a space, a number: ``"<= 0.10"``)."""
    op, _, threshold = goal.strip().partition(" ")
    if op not in _COMPARE:
        raise ValueError(f"goal {goal!r} does not start with one of {', '.join(_COMPARE)}")
    return _COMPARE[op](ratio, float(threshold))


def row(figure: str, baseline: str, value: float, ratio: float, goal: str, *,
        unit: str = "", note: str = "", why: str = "") -> Row:  # fmt: skip
    """One row, ``met`` decided from the ratio and the goal so that no benchmark judges twice.
    ``why`` says what limits the figure; the report shows it beside a missed goal."""
    out = Row(figure=figure, baseline=baseline, value=float(value), ratio=float(ratio), goal=goal,
              met=goal_met(ratio, goal))  # fmt: skip
    if unit:
        out["unit"] = unit
    if note:
        out["note"] = note
    if why:
        out["why"] = why
    return out


def print_goals(rows: Iterable[Row], digits: int = 2) -> None:
    """One line per row: its figure against its baseline, the ratio, the goal, met or not."""
    for r in rows:
        mark = "met" if r["met"] else "NOT met"
        print(f"goal {r['figure']} / {r['baseline']}: {r['ratio']:.{digits}f} ({r['goal']}): "
              f"{mark}")  # fmt: skip


def write_rows(path: str | Path | None, bench: str, rows: Iterable[Row]) -> None:
    """Write the benchmark's rows to ``path`` (nothing when ``path`` is None: no ``--json``)."""
    if path is None:
        return
    Path(path).write_text(json.dumps({"bench": bench, "rows": list(rows)}, indent=2) + "\n",
                          encoding="utf-8")  # fmt: skip


def parse_args(parser: argparse.ArgumentParser, quick: Mapping[str, Any]) -> argparse.Namespace:
    """Add ``--json`` and ``--quick`` and parse; ``--quick`` replaces the defaults by ``quick``."""
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON rows")
    parser.add_argument("--quick", action="store_true", help="small sizes: a run of seconds")
    args = parser.parse_args()
    if args.quick:
        for name, value in quick.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    return args
