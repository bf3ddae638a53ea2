"""Sentence-precise `retrieve` in the document view: a kept sentence is tinted inside its line,
the sentences around it dimmed, and each says why (real plans over the sample, cl100k)."""

from __future__ import annotations

import pytest

from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner, PlanOptions
from app.core.tokens import cl100k
from app.ui.document_view import DROPPED, KEPT_A, DocumentView
from tests.ui.text_probes import block_at, make_view

# One paragraph on one line, planted in the sample: four sentences, one about the question's
# subject (a name it writes), one that goes on about it, two about something else.
PARAGRAPH = ("The boats of the survey were hired in the spring from the ferrymen. The Vellmoor "
             "tarn was sounded by Dr. Ilse Varga with a weighted silk line. It reached 2,964 "
             "metres at the deepest point. The party went home before the first snow.")
FACT = "The Vellmoor tarn was sounded"
FOLLOWS = "It reached 2,964"


@pytest.fixture(scope="module")
def planted(sample_text: str) -> tuple[str, Plan]:
    at = sample_text.index("\n\n", 30_000) + 2
    text = f"{sample_text[:at]}{PARAGRAPH}\n\n{sample_text[at:80_000]}"
    plan = Planner(text, cl100k()).plan(
        "retrieve", 600, PlanOptions(question="Who measured the depth of the Vellmoor tarn?"))
    return text, plan


def _tinted(view: DocumentView, offset: int) -> list[tuple[int, int, int]]:
    """The highlighted ranges of the line holding ``offset``: (kind, start, end) as document
    offsets."""
    block = block_at(view, offset)
    formats = view._formats
    out = []
    for r in block.layout().formats():
        for kind, fmt in enumerate(formats):
            if r.format == fmt:
                start = view.offset_at(block.position() + r.start)
                out.append((kind, start, view.offset_at(block.position() + r.start + r.length)))
    return sorted(out, key=lambda k: k[1])


def test_the_kept_sentences_are_tinted_inside_their_line_and_say_why(qtbot, planted) -> None:
    text, plan = planted
    view = make_view(qtbot, text)
    view.show_plan(plan)
    fact = text.index(FACT)
    view.reveal(fact)
    ranges = _tinted(view, fact)
    kinds = [k for k, _, _ in ranges]
    assert KEPT_A in kinds and DROPPED in kinds, "kept and dropped in one line"
    kept = [(a, b) for k, a, b in ranges if k == KEPT_A]
    # the subject's sentence and the one that goes on about it, neither the first nor the last
    said = [text[a:b] for a, b in kept]
    assert any(FACT in s for s in said) and any(FOLLOWS in s for s in said)
    assert not any("boats" in s or "first snow" in s for s in said)
    for k, a, b in ranges:
        if k == DROPPED:
            assert FACT not in text[a:b] and FOLLOWS not in text[a:b]

    why = view.describe(fact + 5)
    assert why.startswith("Kept: sentence ") and "the question asks about 'vellmoor'" in why
    assert "'vellmoor'" in why
    follows = view.describe(text.index(FOLLOWS) + 3)
    assert follows.startswith("Kept: the sentence after, for the part ranked ")
    assert "it starts with 'It'" in follows
    other = view.describe(text.index("first snow"))
    assert other.startswith("Dropped: the rest of the part ranked ")
