"""Issue 49 row 2: a long job's time left, from the rate its done share is measured to grow at
(app/core/jobs/time_left.py): nothing before a rate, then the share left over the rate,
smoothed, and measured afresh for another piece of work."""

from __future__ import annotations

import pytest

from app.core.jobs.time_left import TimeLeft

pytestmark = pytest.mark.unit


def test_no_estimate_until_a_span_with_progress_was_measured() -> None:
    left = TimeLeft(min_span_s=1.0)
    assert left.seconds_left() is None
    left.update(0.0, 10.0)
    left.update(0.0, 20.0)  # a wait before the first step (planning, a first prompt slice)
    assert left.seconds_left() is None
    left.update(0.1, 21.0)  # the first step: the rate counts from here
    left.update(0.12, 21.5)  # half a span: not yet a rate
    assert left.seconds_left() is None
    left.update(0.2, 22.0)
    assert left.seconds_left() == pytest.approx(0.8 / 0.1)  # 0.8 left at 0.1 a second


def test_the_rate_is_smoothed_and_a_stall_lengthens_the_estimate() -> None:
    left = TimeLeft(min_span_s=1.0, smoothing=0.5)
    left.update(0.1, 0.0)
    left.update(0.2, 1.0)  # 0.1 a second
    left.update(0.5, 2.0)  # one quick span (0.3 a second) moves the rate halfway
    assert left.seconds_left() == pytest.approx(0.5 / 0.2)
    left.update(0.5, 3.0)  # nothing done for a second: the rate halves
    assert left.seconds_left() == pytest.approx(0.5 / 0.1)


def test_another_piece_of_work_is_measured_afresh() -> None:
    left = TimeLeft(min_span_s=1.0)
    left.update(0.1, 0.0)
    left.update(0.5, 1.0)
    assert left.seconds_left() is not None
    left.update(0.2, 2.0)  # the share went back: another bar
    assert left.seconds_left() is None
    left.update(0.3, 3.0)
    assert left.seconds_left() == pytest.approx(0.7 / 0.1)
    left.reset()
    assert left.seconds_left() is None


def test_a_share_outside_0_to_1_is_refused_in_one_sentence() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        TimeLeft().update(1.5, 0.0)
