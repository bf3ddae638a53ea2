"""Several questions asked at once, their plans side by side: which parts each keeps, which they
share.

Under `retrieve` each question has a plan of its own in the same budget (the job ranks the
document against each question apart). What the window shows of them is worked out here, as plain
values: the parts each question keeps (where they are in the document, their tokens, their
rank), which other questions keep the same part, how many parts each shares with each other
question, and the totals: the tokens each question keeps and the tokens kept by more than one.
A part is a kept span of a plan; plans made for the same document and budget cut it the same
way, so a part shared is the same character range in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.planning.plan import Plan


@dataclass(frozen=True)
class KeptPart:
    """A part of the document a question's plan keeps; ``shared_with``: the other questions
    (their indices) whose plans keep it too."""

    start: int  # characters, end exclusive
    end: int
    tokens: int
    rank: int | None  # its rank among the parts that match the question (None: none)
    next_to: int | None  # kept as context next to the match of this rank (None: not)
    shared_with: tuple[int, ...] = ()


@dataclass(frozen=True)
class QuestionPlan:
    """One question's plan: its kept parts in document order, and how many of them each other
    question keeps too (``shares[j]``: parts shared with question j; 0 for itself)."""

    question: str
    parts: tuple[KeptPart, ...]
    shares: tuple[int, ...]

    @property
    def kept_tokens(self) -> int:
        return sum(p.tokens for p in self.parts)

    @property
    def shared_tokens(self) -> int:
        """Its tokens that another question's plan keeps too."""
        return sum(p.tokens for p in self.parts if p.shared_with)


@dataclass(frozen=True)
class SideBySide:
    """The plans of several questions, one per question in the order asked."""

    strategy: str
    budget: int
    questions: tuple[QuestionPlan, ...]

    @property
    def shared_parts(self) -> tuple[tuple[int, int], ...]:
        """The (start, end) of every part kept by more than one question, in document order."""
        found = {(p.start, p.end) for q in self.questions for p in q.parts if p.shared_with}
        return tuple(sorted(found))

    @property
    def shared_tokens(self) -> int:
        """The tokens kept by more than one question, each part counted once."""
        tokens = {(p.start, p.end): p.tokens for q in self.questions for p in q.parts
                  if p.shared_with}  # fmt: skip
        return sum(tokens.values())

    def rows(self) -> list[tuple[tuple[int, int], tuple[KeptPart | None, ...]]]:
        """Every part kept by any question, in document order, with each question's part there
        (None: that question does not keep it): the grid the window draws."""
        where: dict[tuple[int, int], list[KeptPart | None]] = {}
        for i, q in enumerate(self.questions):
            for p in q.parts:
                where.setdefault((p.start, p.end), [None] * len(self.questions))[i] = p
        return [(span, tuple(where[span])) for span in sorted(where)]


def side_by_side(plans: Sequence[Plan]) -> SideBySide:
    """The plans made for several questions (one each, in the order asked) side by side: each
    kept part marked with the other questions that keep it too."""
    keys = [{(s.start, s.end) for s in plan.kept} for plan in plans]
    made = []
    for i, plan in enumerate(plans):
        parts = tuple(
            KeptPart(s.start, s.end, s.tokens, s.rank, s.next_to,
                     tuple(j for j, kept in enumerate(keys) if j != i and (s.start, s.end) in kept))
            for s in sorted(plan.kept, key=lambda s: s.start)
        )  # fmt: skip
        shares = tuple(0 if j == i else sum(j in p.shared_with for p in parts)
                       for j in range(len(plans)))  # fmt: skip
        made.append(QuestionPlan(plan.question, parts, shares))
    first = plans[0] if plans else None
    return SideBySide(first.strategy if first else "", first.budget if first else 0, tuple(made))
