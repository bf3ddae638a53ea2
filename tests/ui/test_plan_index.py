"""The plan index the document view installs: real plans of the sample (cl100k), no Qt."""

from __future__ import annotations

import pytest

from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner
from app.ui.plan_index import DROPPED, KEPT_A, KEPT_A_SHARED, KEPT_B, PlanIndex, index_plan

BUDGET = 4096


@pytest.mark.parametrize("strategy", ["head", "middle", "entropy", "map-reduce", "semantic"])
def test_the_index_answers_for_every_span_and_chunk(sample_planner: Planner, strategy: str) -> None:
    plan = sample_planner.plan(strategy, BUDGET)
    index = index_plan(plan)
    spans = sorted([(s, True) for s in plan.kept] + [(s, False) for s in plan.dropped],
                   key=lambda item: item[0].start)  # fmt: skip
    assert index.spans == spans
    for span, kept in spans:
        assert index.span_at(span.start) == (span, kept)
        assert index.span_at(span.end - 1) == (span, kept)
    assert index.chunk_starts == [c.start for c in plan.chunks]
    assert index.window_starts == [w.start for w in plan.windows]

    hist = index.histogram
    assert hist is not None and hist.top == max(c.tokens for c in plan.chunks)
    assert int(hist.kept.sum()) == len(plan.kept_chunks())  # each chunk binned once, by its span
    assert int(hist.kept.sum() + hist.dropped.sum()) == len(plan.chunks)


def test_stretches_tile_the_spans_and_tint_windows(sample_planner: Planner) -> None:
    for plan in (sample_planner.plan("middle", BUDGET), sample_planner.plan("map-reduce", BUDGET)):
        starts, ends, kinds = index_plan(plan).stretches
        assert starts == sorted(starts) and all(a < b for a, b in zip(starts, ends, strict=True))
        assert all(b <= a for b, a in zip(ends, starts[1:], strict=False))  # disjoint
        covered = sum(b - a for a, b in zip(starts, ends, strict=True))
        assert covered == sum(s.end - s.start for s in (*plan.kept, *plan.dropped))
        for a, kind in zip(starts, kinds, strict=True):
            _, kept = index_plan(plan).span_at(a) or (None, None)
            assert (kind == DROPPED) == (not kept)
    windowed = index_plan(sample_planner.plan("map-reduce", BUDGET)).stretches[2]
    assert {KEPT_A, KEPT_B} <= set(windowed)  # consecutive windows alternate their tint
    assert KEPT_A_SHARED not in index_plan(sample_planner.plan("head", BUDGET)).stretches[2]


def test_no_plan_is_an_empty_index(sample_planner: Planner) -> None:
    assert index_plan(None) == PlanIndex()
    assert PlanIndex().span_at(0) is None and PlanIndex().histogram is None
    empty = Plan("head", BUDGET, 0, (), ())
    assert index_plan(empty).histogram is None and index_plan(empty).stretches == ([], [], [])
