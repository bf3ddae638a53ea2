"""The window never freezes: a 10 ms timer on the GUI thread, and the gaps between its ticks.

Run with ``make bench`` (or ``python tests/benchmarks/bench_gui_responsiveness.py``); offscreen
unless a display is set. A precise 10 ms QTimer records when each tick arrives while the window
(1) opens a ~50 MB document (read, decode, show, count, plan) and (2) streams a generation from
the default model, and (3) under load: a generation streams at full speed while the ~50 MB
document is opened and counted. A tick late by more than the interval means the GUI thread was
busy: the worst gap and the 99th percentile are the figures. Goals: (1) and (2) p99 < 50 ms
(issue: the desktop app); (3) p99 <= 16 ms and the worst gap < 100 ms, the gauges redrawn about
10 times a second (issue: speed on long documents).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# A first load would calibrate the engine settings for minutes; bench_calibration measures that.
os.environ.setdefault("CONTEXTLENS_CALIBRATE", "0")
# A cache of its own: plans cached by an earlier run would leave nothing to count under load.
os.environ["CONTEXTLENS_CACHE"] = tempfile.mkdtemp(prefix="contextlens-bench-")

from PySide6.QtCore import QEventLoop, QObject, QSettings, Qt, QTimer, SignalInstance  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.core.default_model import default_model_path  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.ui.main_window import MainWindow  # noqa: E402
from app.ui.switch_interval import shorten_switch_interval  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402

INTERVAL_MS = 10
GOAL_MS = 50
LOAD_P99_MS, LOAD_WORST_MS = 16, 100  # under load: a generation and a document being counted
# What bounds the figures under load, printed by the report beside a missed goal.
LOAD_LIMIT = (
    "On 2 cores, llama.cpp's threads and the planning process leave the GUI thread waiting for a "
    "core; quick sizes (2 MB, a few seconds) are short and noisy, the full size is the figure."
)
WORST_LIMIT = (
    "The document's decoded slices are joined into the one str the window holds: one copy of the "
    "whole text with the GIL held (~30 ms for 50 MB on a quiet machine, ~220 ms while llama.cpp "
    "uses the memory bandwidth). Removing it means not holding the text as one str in the "
    "window's process, a larger change that is not made."
)


class GapMeter(QObject):
    """Ticks every ``INTERVAL_MS`` on the GUI thread and keeps the time between ticks."""

    def __init__(self) -> None:
        super().__init__()
        self.gaps_ms: list[float] = []
        self._last = 0.0
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        if self._last:
            self.gaps_ms.append((now - self._last) * 1000)
        self._last = now

    def start(self) -> None:
        self.gaps_ms, self._last = [], 0.0
        self._timer.start()

    def stop(self) -> list[float]:
        self._timer.stop()
        return self.gaps_ms


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


def wait_for(signal: SignalInstance, start: Callable[[], None], timeout_s: float) -> bool:
    """Run ``start`` and spin the event loop until ``signal`` fires; False on the timeout."""
    loop = QEventLoop()
    fired: list[bool] = []

    def done() -> None:
        fired.append(True)
        loop.quit()

    signal.connect(done)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    start()
    if not fired:  # ``start`` may have emitted it already
        loop.exec()
    signal.disconnect(done)
    return bool(fired)


def report(name: str, gaps: list[float], goal_ms: float = GOAL_MS) -> float:
    p99 = percentile(gaps, 99)
    print(f"{name}: {len(gaps):,} ticks, median {statistics.median(gaps):.1f} ms, "
          f"p99 {p99:.1f} ms, worst {max(gaps):.1f} ms "
          f"(goal p99 < {goal_ms:g} ms: {'PASS' if p99 < goal_ms else 'FAIL'})")  # fmt: skip
    return p99


def big_document(folder: Path, megabytes: int, *, name: str = "big") -> Path:
    text = sample_document().read_text(encoding="utf-8")
    if name != "big":  # other bytes: nothing of the first document's counts and plans applies
        text = text.replace("e", "E")
    path = folder / f"{name}-{megabytes}mb.txt"
    with path.open("w", encoding="utf-8") as out:
        written = 0
        while written < megabytes * 2**20:
            out.write(text)
            written += len(text)
    return path


def measure(window: object, doc: Path, max_tokens: int) -> tuple[list[float], list[float]]:
    """Gaps while opening ``doc``, and while a generation streams."""
    meter = GapMeter()
    meter.start()
    wait_for(window.plan_shown, lambda: window.open_document(doc), 600)
    opening = meter.stop()
    window.max_tokens.setValue(max_tokens)
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))
    meter.start()
    wait_for(window.job_finished, window.run_job, 600)
    generating = meter.stop()
    return opening, generating


def measure_under_load(window: object, doc: Path, max_tokens: int) -> tuple[list[float], float]:
    """Gaps, and gauge redraws per second, while a generation streams and ``doc`` (another
    file of the same size) is opened and counted as the first tokens arrive."""
    meter = GapMeter()
    window.max_tokens.setValue(max_tokens)
    redraws0, t0 = window.gauges.redraw_count, time.perf_counter()
    opened: list[bool] = []

    def open_once(_events: object) -> None:
        if not opened:
            opened.append(True)
            window.open_document(doc)

    window.job_events.connect(open_once)
    meter.start()
    wait_for(window.job_finished, window.run_job, 600)
    window.job_events.disconnect(open_once)
    if window.waiting_for:  # the document is still being opened or counted
        wait_for(window.plan_shown, lambda: None, 600)
    gaps = meter.stop()
    rate = (window.gauges.redraw_count - redraws0) / (time.perf_counter() - t0)
    return gaps, rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--n-ctx", type=int, default=2048, help="the window's context size")
    parser.add_argument("--load-tokens", type=int, default=1024,
                        help="the generation that runs while the document is counted")  # fmt: skip
    args = parse_args(parser, {"megabytes": 2, "max_tokens": 16, "n_ctx": 512, "load_tokens": 96})
    app = QApplication.instance() or QApplication(sys.argv[:1])
    shorten_switch_interval()  # as the app's entry point does
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        doc = big_document(folder, args.megabytes)
        settings = QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat)
        window = MainWindow(default_model_path(), None, n_ctx=args.n_ctx, db_path=folder / "h.db",
                            settings=settings)  # fmt: skip
        window.show()
        if not wait_for(window.ready, lambda: None, 120):
            print("error: the window did not load the model within 120 s", file=sys.stderr)
            return 1
        opening, generating = measure(window, doc, args.max_tokens)
        other = big_document(folder, args.megabytes, name="other")
        loaded, gauge_hz = measure_under_load(window, other, args.load_tokens)
        window.close()
    print(f"document {args.megabytes} MB, generation of {args.max_tokens} tokens, "
          f"timer {INTERVAL_MS} ms")  # fmt: skip
    rows = [stall_row(f"GUI p99 tick gap, opening {args.megabytes} MB", report(
                "opening the document", opening), len(opening)),
            stall_row(f"GUI p99 tick gap, generating {args.max_tokens} tokens", report(
                "generating", generating), len(generating))]  # fmt: skip
    p99 = report("generating while the document is counted", loaded, goal_ms=LOAD_P99_MS)
    worst = max(loaded, default=0.0)
    print(f"gauges redrawn {gauge_hz:.1f} times a second (goal about 10)")
    rows += [
        row(f"GUI p99 tick gap, generating while {args.megabytes} MB is counted",
            f"the {INTERVAL_MS} ms timer interval", p99, p99 / INTERVAL_MS,
            f"<= {LOAD_P99_MS / INTERVAL_MS:g}", unit="ms", note=f"{len(loaded):,} ticks",
            why=LOAD_LIMIT),
        row("GUI worst tick gap, the same", f"the {INTERVAL_MS} ms timer interval", worst,
            worst / INTERVAL_MS, f"< {LOAD_WORST_MS / INTERVAL_MS:g}", unit="ms",
            why=WORST_LIMIT),
        row("gauge redraws per second, the same", "10 per second (REDRAW_MS 100)", gauge_hz,
            gauge_hz / 10, ">= 0.8", unit="Hz", why=LOAD_LIMIT),
    ]  # fmt: skip
    write_rows(args.json, "bench_gui_responsiveness", rows)
    del app
    return 0


def stall_row(figure: str, p99: float, ticks: int) -> Row:
    """The goal (p99 < 50 ms) as a ratio to the timer's own interval: < 5 ticks' worth."""
    return row(figure, f"the {INTERVAL_MS} ms timer interval", p99, p99 / INTERVAL_MS,
               f"< {GOAL_MS / INTERVAL_MS:g}", unit="ms", note=f"{ticks:,} ticks")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
