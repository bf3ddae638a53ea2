"""The PySide6 desktop app. It observes core events and drives core calls; no engine code here.

Importing it shortens the interpreter's thread switch interval from 5 ms to 0.5 ms. The GUI
thread needs the GIL for every Python slot and every Python-overridden paint or bounding-rect
call, and while a background thread runs Python it waits up to one interval for each: with the
default, one repaint of the gauges took 60–100 ms while a plan ran; with 0.5 ms the p99 gap of a
10 ms GUI timer fell from 53 to 33 ms (tests/benchmarks/bench_gui_responsiveness.py).
"""

import sys

GUI_SWITCH_INTERVAL_S = 0.0005

if sys.getswitchinterval() > GUI_SWITCH_INTERVAL_S:
    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
