"""Axes of counts: whole-number ticks only.

pyqtgraph picks "nice" tick spacings for any range, so an axis of 0–2 chunks was marked 0.5,
1.0, 1.5. Counts get a spacing of 1, 2, 5, 10, 20, 50 … that leaves about four labels.
"""

from __future__ import annotations

import pyqtgraph as pg

LABELS = 4  # about this many labelled ticks on the axis


def count_step(top: float) -> int:
    """The whole-number spacing (1, 2 or 5 times a power of ten) that marks 0..``top`` with
    about LABELS ticks."""
    step = 1
    while top / step > LABELS:
        for factor in (2, 5 / 2, 2):  # 1 → 2 → 5 → 10 → 20 …
            step = int(step * factor)
            if top / step <= LABELS:
                break
    return step


def count_axis(axis: pg.AxisItem, top: float) -> None:
    """Label ``axis`` (showing 0..``top``) at whole numbers only."""
    step = count_step(top)
    axis.setTickSpacing(major=step, minor=step)
