"""The context edge cases the edge suites tried, by kind and outcome, for the closing summary.

Each case in ``tests/core/test_context_edges.py`` and ``tests/cli/test_edges.py`` records one
outcome: it ``worked`` within the limit, was ``refused`` with the numbers, was ``rejected`` as bad
input, or (for plans only) was ``planned`` within the budget. A test records its cases on its
own report (``user_properties``), so a run on pytest-xdist workers sums them where it prints.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

OUTCOMES = ("worked", "planned", "refused", "rejected")
PROPERTY = "context_edge"  # a report's user property: (PROPERTY, (kind, outcome))


@dataclass
class EdgeTally:
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, kind: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.counts[(kind, outcome)] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self) -> str:
        kinds = sorted({k for k, _ in self.counts})
        by_outcome = Counter[str]()
        for (_, outcome), n in self.counts.items():
            by_outcome[outcome] += n
        head = f"{self.total} context edge cases: " + ", ".join(
            f"{by_outcome[o]} {o}" for o in OUTCOMES if by_outcome[o]
        )
        rows = [
            f"  {kind}: "
            + ", ".join(f"{self.counts[(kind, o)]} {o}" for o in OUTCOMES if self.counts[(kind, o)])
            for kind in kinds
        ]
        return "\n".join([head, *rows])


class Edges:
    """What one test hands its cases to (the ``edges`` fixture)."""

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def add(self, kind: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self._item.user_properties.append((PROPERTY, (kind, outcome)))


TALLY = EdgeTally()  # this process's sum, printed at the end of the run


def record(report: pytest.TestReport) -> None:
    """Add the cases a test's call recorded (in the process that prints the summary)."""
    if report.when == "call":
        for name, value in report.user_properties:
            if name == PROPERTY:
                TALLY.add(*value)
