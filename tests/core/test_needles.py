"""The needle benchmark's own pieces (tests/benchmarks/bench_needles.py): needles planted whole at
their depths with values the Jargon File does not hold, retention computed from a plan as the ask
job lays it out, and questions that say their facts in other words rather than copy them."""

from __future__ import annotations

import random

import pytest

from app.core.planning.chunking import Boundary, Chunk
from app.core.planning.plan import Plan, PlanWindow, Span
from app.core.planning.terms import terms
from app.core.tokens import TiktokenCounter
from tests.benchmarks.bench_needles import (
    DEEP,
    MULTI_SETS,
    NEEDLES,
    Base,
    FactSet,
    Needle,
    Planted,
    absent_values,
    base_document,
    measure,
    needle_depths,
    plant,
    reaches,
    retained,
    shared_run,
    shared_terms,
)

pytestmark = pytest.mark.unit

TOKENS = 8_000  # the small document's size


@pytest.fixture(scope="module")
def base(gguf_counter: TiktokenCounter, sample_text: str) -> Base:
    return base_document(gguf_counter, TOKENS, source=sample_text[300_000:360_000])


@pytest.fixture(scope="module")
def planted_needles(base: Base, gguf_counter: TiktokenCounter) -> tuple[Planted, list[int]]:
    rng = random.Random(7)
    needles = rng.sample(NEEDLES, 6)
    depths = needle_depths(base.tokens, len(needles), rng)
    return plant(base, needles, depths, gguf_counter), depths


# ----- the document --------------------------------------------------------------------------


def test_the_base_is_cut_at_a_paragraph_end_within_the_size(
    base: Base, gguf_counter: TiktokenCounter, sample_text: str
) -> None:
    assert TOKENS - 1_000 < base.tokens <= TOKENS
    assert gguf_counter.count(base.text) == base.tokens  # the pieces' counts add up exactly
    assert sample_text[300_000:].startswith(base.text) and not base.text[-1].isspace()
    for cut, before in list(zip(base.cuts, base.tokens_at, strict=True))[::40]:
        assert base.text[cut : cut + 2] == "\n\n" and gguf_counter.count(base.text[:cut]) == before
    # a source shorter than asked is repeated
    twice = base_document(gguf_counter, 2 * TOKENS, source=sample_text[300_000:360_000])
    assert 2 * TOKENS - 1_000 < twice.tokens <= 2 * TOKENS and len(twice.text) > 60_000


def test_needles_lie_whole_at_their_depths(
    planted_needles: tuple[Planted, list[int]], base: Base, gguf_counter: TiktokenCounter
) -> None:
    doc, targets = planted_needles
    assert doc.base_tokens == base.tokens
    # the base text is all there, in order, with the needles between its paragraphs
    rest = doc.text
    for n in doc.needles:
        assert rest.count(n.fact) == 1
        rest = rest.replace(f"\n\n{n.fact}", "")
    assert rest == base.text
    gaps = [b - a for a, b in zip(base.tokens_at, base.tokens_at[1:], strict=False)]
    for i, (n, (start, end)) in enumerate(zip(doc.needles, doc.spans, strict=True)):
        assert doc.text[start:end] == n.fact
        assert doc.text[start - 2 : start] == "\n\n" and doc.text[end : end + 2] == "\n\n"
        assert gguf_counter.count(doc.text[: start - 2]) == doc.depths[i]  # the depth it reports
        earlier = sum(gguf_counter.count(f"\n\n{m.fact}") for m, (s, _) in
                      zip(doc.needles, doc.spans, strict=True) if s < start)  # fmt: skip
        # at the paragraph end nearest the depth asked (or the next one free)
        assert abs(doc.depths[i] - earlier - targets[i]) <= max(gaps) * 2
    assert len(set(doc.spans)) == len(doc.needles)


def test_inside_plants_each_fact_as_a_sentence_within_a_paragraph(
    base: Base, gguf_counter: TiktokenCounter
) -> None:
    """``--inside``: each fact between two sentences of a paragraph (or after its last one),
    never a paragraph of its own, and its span is the fact."""
    rng = random.Random(7)
    needles = rng.sample(NEEDLES, 6)
    doc = plant(base, needles, needle_depths(base.tokens, len(needles), rng), gguf_counter,
                inside=True)  # fmt: skip
    for needle, (start, end) in zip(doc.needles, doc.spans, strict=True):
        assert doc.text[start:end] == needle.fact
        before, after = doc.text[start - 2 : start], doc.text[end : end + 2]
        assert before[-1] == " " and before != "\n\n"  # after a sentence of its paragraph
        assert after[:1] == " " or after == "\n\n"  # before the next, or the paragraph's end
    assert len(doc.text) == len(base.text) + sum(len(n.fact) + 1 for n in needles)


def test_depths_are_seeded_and_reach_300k_tokens() -> None:
    a = needle_depths(400_000, 20, random.Random(3))
    assert a == needle_depths(400_000, 20, random.Random(3)) != needle_depths(
        400_000, 20, random.Random(4))  # fmt: skip
    assert a[0] == DEEP and abs(a[1] - DEEP) <= 15_000
    assert all(8_000 <= d <= 392_000 for d in a[2:])
    small = needle_depths(40_000, 5, random.Random(3))
    assert small[0] == 30_000 and all(0 < d < 40_000 for d in small)


def test_values_are_absent_from_the_jargon_file(
    sample_text: str, base: Base, gguf_counter: TiktokenCounter
) -> None:
    assert absent_values(sample_text, NEEDLES) == []
    assert absent_values(sample_text, [f for s in MULTI_SETS for f in s.facts]) == []
    # and a document that holds one is refused
    needle = NEEDLES[0]
    spoilt = measure(f"{base.text}\n\nIt was kept in a {needle.answers[0].upper()}.", gguf_counter)
    with pytest.raises(ValueError, match="holds these needles' values"):
        plant(spoilt, [needle], [100], gguf_counter)


# ----- retention -----------------------------------------------------------------------------


def _plan(kept: list[tuple[int, int]], total: int = 1_000, **kw: object) -> Plan:
    spans = [Span(a, b, b - a, "kept") for a, b in kept]
    return Plan(str(kw.pop("strategy", "head")), 500, total, tuple(spans), (), **kw)  # type: ignore[arg-type]


def test_retention_of_a_one_pass_plan() -> None:
    plan = _plan([(0, 100), (100, 200), (400, 500)])
    needles = [
        (10, 50),  # inside one kept span
        (90, 130),  # across two adjacent kept spans: the model reads them in a row
        (180, 220),  # its end dropped
        (300, 350),  # dropped
        (400, 500),  # a kept span exactly
        (499, 520),  # its end dropped
    ]
    assert retained(plan, needles) == [True, True, False, False, True, False]
    assert reaches(plan) == [(0, 200), (400, 500)]
    assert retained(_plan([]), needles) == [False] * 6  # refused: nothing reaches the model


def test_retention_of_multi_pass_plans() -> None:
    chunks = tuple(Chunk(i, 100 * i, 100 * (i + 1), 10, Boundary.PARAGRAPH) for i in range(6))
    windows = (PlanWindow(0, 300, 30, 0, 2), PlanWindow(200, 500, 30, 2, 4),
               PlanWindow(400, 600, 20, 4, 5))  # fmt: skip
    semantic = _plan([(0, 600)], strategy="semantic", windows=windows, chunks=chunks)
    needles = [(250, 280), (190, 220), (450, 480), (150, 450), (280, 320)]
    # overlapping windows: a needle across one window's end lies whole in the next
    assert retained(semantic, needles) == [True, True, True, False, True]
    # rolling asks over consecutive windows that fill the budget, without overlap (the job's
    # passes), not the plan's overlapping windows
    rolling = _plan([(0, 600)], strategy="rolling", windows=windows, chunks=chunks)
    rolling = Plan("rolling", 20, 60, rolling.kept, (), windows, chunks=chunks)
    assert reaches(rolling) == [(0, 200), (200, 400), (400, 600)]
    assert retained(rolling, needles) == [True, False, True, False, True]


# ----- the questions -------------------------------------------------------------------------


@pytest.mark.parametrize("facts", MULTI_SETS, ids=lambda s: s.topic)
def test_a_multi_fact_question_asks_for_every_fact_in_other_words(facts: FactSet) -> None:
    """The question of a set names what it is about and asks for three things, without copying
    a fact or giving away an answer: retrieve must find each fact by what it means."""
    assert len(facts.facts) == 3
    for fact in facts.facts:
        assert shared_terms(fact.fact, facts.question) <= 0.5, fact.fact
        assert shared_run(fact.fact, facts.question) == "", fact.fact
        assert len(set(terms(facts.question)) & set(terms(fact.fact))) >= 1  # the same thing
        assert not any(v.lower() in facts.question.lower() for v in fact.answers), fact.fact


@pytest.mark.parametrize("needle", NEEDLES, ids=lambda n: n.answers[0])
def test_each_question_says_its_fact_in_other_words(needle: Needle) -> None:
    q = set(terms(needle.question))
    assert len(q) >= 3
    assert shared_terms(needle.fact, needle.question) <= 0.5
    assert shared_run(needle.fact, needle.question) == ""
    assert len(q & set(terms(needle.fact))) >= 1  # it is about the fact all the same
    assert needle.answers[0].lower() in needle.fact.lower()  # the others: other spellings
    for value in needle.answers:
        assert value.lower() not in needle.question.lower()
        assert needle.answered(f"I think: {value.upper()}.") and not needle.answered("no idea")


def test_the_paraphrase_measures() -> None:
    fact = "The night porter keeps the cellar key in a green tin."
    assert shared_terms(fact, "Where does the night porter keep the cellar key?") == 1.0
    assert shared_run(fact, "Where does the night porter keep it?") == "the night porter"
    assert shared_run(fact, "Did a night porter lose it?") == ""  # two words in a row only
    assert shared_run(fact, "Where is the overnight doorkeeper's key?") == ""
    # every needle's fact and values are its own
    values = [v.lower() for n in NEEDLES for v in n.answers]
    assert len(set(values)) == len(values)
    for n in NEEDLES:
        others = [m for m in NEEDLES if m is not n]
        assert not any(v.lower() in m.fact.lower() for v in n.answers for m in others)
