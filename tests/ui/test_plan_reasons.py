"""Every reason the planner gives has a shape the window translates, figures kept."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QCoreApplication, QTranslator

from app.core.planning.strategies import STRATEGIES, Planner, PlanOptions
from app.core.tokens import cl100k
from app.ui.plan_reasons import reason_label, shape_of
from tests.conftest import DATA


@pytest.mark.parametrize("name", ["sample.md", "mixed.md", "latin-mixed.txt"])
def test_every_reason_of_every_strategy_has_a_shape(name: str) -> None:
    text = (DATA / name).read_text(encoding="utf-8", errors="replace")
    planner = Planner(text, cl100k())
    reasons = set()
    asked = PlanOptions(question="What does it say about the model and its chunks?")
    for strategy in STRATEGIES:
        for budget in (1, 40, 10**6):
            for opts in (PlanOptions(), asked):  # retrieve ranks by the question, or refuses
                plan = planner.plan(strategy, budget, opts)
                reasons |= {s.reason for s in (*plan.kept, *plan.dropped)}
    assert reasons
    assert [r for r in reasons if shape_of(r) is None] == []


class Upper(QTranslator):
    """A stand-in translation: each plan reason's template in capitals, placeholders kept."""

    def translate(self, context, source, disambiguation=None, n=-1):
        if context != "PlanReason":
            return None
        return source.upper()  # "{0}" and "{1}" have no letters to change


def test_the_figures_survive_the_translation(qapp) -> None:
    translator = Upper()
    QCoreApplication.installTranslator(translator)
    try:
        assert reason_label("after the first 1,755 tokens (head)") == (
            "AFTER THE FIRST 1,755 TOKENS (HEAD)")
        assert reason_label("low information: 12% new after compression") == (
            "LOW INFORMATION: 12% NEW AFTER COMPRESSION")
        assert reason_label("rank 3 of 41 matching parts (score 12.41; terms: river, bank)") == (
            "RANK 3 OF 41 MATCHING PARTS (SCORE 12.41; TERMS: river, bank)")
        assert reason_label("a reason of another shape") == "a reason of another shape"
    finally:
        QCoreApplication.removeTranslator(translator)
