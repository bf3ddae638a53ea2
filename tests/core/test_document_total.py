"""One token total for a document (issue 49, row 8): a plan says its kept tokens of the whole
text's count, the number the document's header and `count` say, although the sum of its chunks
differs from that count where a cut splits or joins what the whole text's tokenizer does not.
On the real counter of the default model: the sample text (ASCII art, cut inside runs of spaces)
and a text cut inside long words, multibyte characters and emoji."""

from __future__ import annotations

import pytest

from app.core.planning.plan import kept_of_document
from app.core.planning.strategies import STRATEGIES, Planner, PlanOptions
from app.core.tokens import TiktokenCounter
from tests.cut_texts import CUT_INSIDE

pytestmark = pytest.mark.unit

# the budgets the window's plans have at n_ctx 2,048 and 4,096 (context less frame and reply)
SAMPLE_BUDGETS = (1_900, 3_900)


def _check(planner: Planner, strategy: str, budget: int, whole: int) -> bool:
    """The plan's total is ``whole`` and its kept and dropped parts add up to it; True when
    the chunks' sum differs from it (what the plan line used to say)."""
    plan = planner.plan(strategy, budget, PlanOptions(question="What is a kluge?"))
    kept, total = plan.of_document()
    assert plan.document_tokens == total == whole, (strategy, budget)
    assert plan.as_dict()["document_tokens"] == whole
    assert 0 <= kept <= total
    if plan.dropped:  # the kept tokens are those the model evaluates, within the budget
        assert kept == min(plan.kept_tokens, whole) and kept <= plan.peak_tokens <= budget
    else:
        assert kept == total
    return plan.total_tokens != whole


def test_every_plan_of_the_sample_says_the_whole_texts_count(
    gguf_counter: TiktokenCounter, sample_text: str
) -> None:
    planner = Planner(sample_text, gguf_counter)
    whole = gguf_counter.count(sample_text)
    assert planner.count() == whole
    differs = [_check(planner, s, b, whole) for b in SAMPLE_BUDGETS
               for s in ("head", "entropy")]  # fmt: skip
    assert any(differs), "the sample's chunks add up to its count: the test shows nothing"


def test_cuts_inside_words_and_characters_keep_one_total(gguf_counter: TiktokenCounter) -> None:
    planner = Planner(CUT_INSIDE, gguf_counter)
    whole = gguf_counter.count(CUT_INSIDE)
    differs = [_check(planner, s, b, whole) for b in (12, 40, 460) for s in STRATEGIES]
    assert any(differs), "no cut changed the count: the test shows nothing"


def test_the_boundary_difference_goes_to_the_dropped_part() -> None:
    assert kept_of_document(900, 1_003, 1_000, dropped=True) == (900, 1_000)
    assert kept_of_document(1_003, 1_003, 1_000, dropped=False) == (1_000, 1_000)
    assert kept_of_document(997, 997, 1_000, dropped=False) == (1_000, 1_000)
    assert kept_of_document(1_000, 1_001, 999, dropped=True) == (999, 999)  # never above it
    assert kept_of_document(5, 7, 0, dropped=True) == (5, 7)  # not known: the chunks' sum
