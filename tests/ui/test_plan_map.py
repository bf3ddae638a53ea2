"""The plan map: the whole plan in a strip beside the text, on real plans of the sample text."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from app.core.planning.strategies import Planner
from app.ui.plan_index import DROPPED, KEPT_A, KEPT_B, index_plan
from app.ui.plan_map import NOTHING, row_kinds
from tests.ui.text_probes import make_view

BUDGET = 4096


def test_rows_follow_the_stretches_and_a_short_kept_span_still_shows() -> None:
    # 1,000 characters: kept 0-100, dropped 100-500, a 3-character kept span, dropped to 990
    stretches = ([0, 100, 500, 503], [100, 500, 503, 990], [KEPT_A, DROPPED, KEPT_B, DROPPED])
    rows = row_kinds(1000, stretches, 10)
    assert rows[0] == KEPT_A
    assert list(rows[1:5]) == [DROPPED] * 4
    assert rows[5] == KEPT_B  # 3 characters of 100 in that row, and still drawn kept
    assert list(rows[6:]) == [DROPPED] * 4  # the last row's 10 characters outside: still dropped
    assert list(row_kinds(1000, ([0, 995], [5, 1000], [DROPPED, KEPT_A]), 2)) == [DROPPED, KEPT_A]
    assert list(row_kinds(1000, ([], [], []), 4)) == [NOTHING] * 4
    assert row_kinds(1000, stretches, 0).size == 0


@pytest.mark.parametrize(("strategy", "ends"), [
    ("head", (KEPT_A, DROPPED)), ("tail", (DROPPED, KEPT_A)),
])  # fmt: skip
def test_the_map_of_a_real_plan_shows_where_the_kept_text_is(
    qtbot, sample_text: str, sample_planner: Planner, strategy: str, ends: tuple[int, int]
) -> None:
    view = make_view(qtbot, sample_text)
    plan = sample_planner.plan(strategy, BUDGET)
    view.show_plan(plan, index_plan(plan))
    rows = view.map.rows()
    assert rows.size == view.map.height() > 100
    assert (rows[0], rows[-1]) == ends
    kept_share = np.isin(rows, [KEPT_A, KEPT_B]).mean()
    # a 4,096-token budget of a ~400k-token text: a thin band, as thin as the plan keeps
    assert 0 < kept_share < 0.05
    assert kept_share == pytest.approx(plan.kept_tokens / plan.total_tokens, abs=0.02)


def test_a_click_on_the_map_brings_that_place_on_screen(qtbot, sample_text: str) -> None:
    view = make_view(qtbot, sample_text)
    y = int(view.map.height() * 0.75)
    target = view.map.offset_at(y)
    assert target == pytest.approx(len(sample_text) * 0.75, rel=0.02)
    qtbot.mouseClick(view.map, Qt.MouseButton.LeftButton, pos=QPoint(5, y))
    top, bottom = view._screen()
    assert top <= target <= bottom
    assert view.map._screen == (top, bottom)  # the marker moved with the text
