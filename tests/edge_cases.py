"""The context edge cases the edge suites tried, by kind and outcome, for the closing summary.

Each case in ``tests/core/test_context_edges.py`` and ``tests/cli/test_edges.py`` records one
outcome: it ``worked`` within the limit, was ``refused`` with the numbers, was ``rejected`` as bad
input, or (for plans only) was ``planned`` within the budget.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

OUTCOMES = ("worked", "planned", "refused", "rejected")


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


EDGE_KEY = pytest.StashKey[EdgeTally]()


def edge_tally(config: pytest.Config) -> EdgeTally:
    tally = config.stash.get(EDGE_KEY, None)
    if tally is None:
        tally = config.stash[EDGE_KEY] = EdgeTally()
    return tally
