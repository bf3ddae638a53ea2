"""The GUI process's thread switch interval: 0.5 ms instead of the interpreter's 5 ms.

The GUI thread needs the GIL for every Python slot and every Python-overridden paint or
bounding-rect call, and while a background thread runs Python it waits up to one interval for
each: with the default, one repaint of the gauges took 60–100 ms while a plan ran; with 0.5 ms
the p99 gap of a 10 ms GUI timer fell from 53 to 33 ms
(tests/benchmarks/bench_gui_responsiveness.py). Set by the window's entry point (and the tests'
and benchmarks' application), never as a side effect of an import: the switch is process-wide.
"""

from __future__ import annotations

import sys

GUI_SWITCH_INTERVAL_S = 0.0005


def shorten_switch_interval() -> None:
    """Let the GUI thread take the GIL back within 0.5 ms (never lengthens a shorter one)."""
    if sys.getswitchinterval() > GUI_SWITCH_INTERVAL_S:
        sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
