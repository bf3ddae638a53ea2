"""The window must not slow the model: its CPU time during a long run against the engine's.

Run with ``make bench`` (or ``python tests/benchmarks/bench_window_cpu.py``); offscreen unless a
display is set. The real window with the default model runs ``rolling`` over a document many
times its context (windows, evictions, the KV map and plan redrawn, the gauges at 10 Hz, the
reply streamed at 4 updates a second), and the CPU time of the window's process (every thread of
it: the GUI thread, the engine thread, pyqtgraph) is compared with the engine child's over the
same run. On two cores every share the window takes is a share llama.cpp's threads do not get,
and a busy window costs the engine a thread (app/core/engine/threads.py).

Goal (issue: fast on a busy machine): the window's CPU time at most 5% of the engine's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("CONTEXTLENS_CALIBRATE", "0")  # a first load would calibrate for minutes
os.environ["CONTEXTLENS_CACHE"] = tempfile.mkdtemp(prefix="contextlens-bench-")

import psutil  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.core.default_model import default_model_path  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.ui.main_window import MainWindow  # noqa: E402
from app.ui.switch_interval import shorten_switch_interval  # noqa: E402
from tests.benchmarks.bench_gui_responsiveness import wait_for  # noqa: E402
from tests.benchmarks.report import parse_args, row, write_rows  # noqa: E402

GOAL = "<= 0.05"
WHY = (
    "The window redraws the gauges 10 times a second and the buffers as events arrive; offscreen "
    "Qt paints in software, as a display without GPU compositing does."
)


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=60_000, help="document size in characters")
    parser.add_argument("--n-ctx", type=int, default=1024, help="the window's context size")
    parser.add_argument("--max-tokens", type=int, default=64, help="each window's reply")
    args = parse_args(parser, {"chars": 12_000, "n_ctx": 512, "max_tokens": 16})
    app = QApplication.instance() or QApplication(sys.argv[:1])
    shorten_switch_interval()  # as the app's entry point does
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        doc = folder / "doc.txt"
        whole = sample_document().read_text(encoding="utf-8")
        doc.write_text(whole[100_000 : 100_000 + args.chars], encoding="utf-8")
        settings = QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat)
        window = MainWindow(default_model_path(), None, n_ctx=args.n_ctx,
                            db_path=folder / "h.db", settings=settings)  # fmt: skip
        window.resize(1366, 768)
        window.show()
        if not wait_for(window.ready, lambda: None, 120):
            print("error: the window did not load the model within 120 s", file=sys.stderr)
            return 1
        if not wait_for(window.plan_shown, lambda: window.open_document(doc), 300):
            print("error: the document was not planned within 300 s", file=sys.stderr)
            return 1
        window.max_tokens.setValue(args.max_tokens)
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("rolling"))
        app.processEvents()
        engine = psutil.Process(window.engine.driver.engine_pid)
        own = psutil.Process()
        redraws0 = window.gauges.redraw_count
        gui0, eng0, t0 = cpu_seconds(own), cpu_seconds(engine), time.perf_counter()
        finished = wait_for(window.job_finished, window.run_job, 1800)
        gui, eng = cpu_seconds(own) - gui0, cpu_seconds(engine) - eng0
        wall = time.perf_counter() - t0
        redraws = window.gauges.redraw_count - redraws0
        window.close()
    if not finished:
        print("error: the run did not finish within 1,800 s", file=sys.stderr)
        return 1
    share = gui / eng if eng > 0 else float("inf")
    print(f"rolling over {args.chars:,} characters at n_ctx {args.n_ctx:,}: {wall:.1f} s; "
          f"engine {eng:.1f} s of CPU, window {gui:.2f} s ({share:.1%} of the engine's, "
          f"{gui / wall:.1%} of one core); gauges redrawn {redraws / wall:.1f} times a second")
    write_rows(args.json, "bench_window_cpu", [
        row("the window's CPU time during a run", "the engine child's CPU time", gui, share,
            GOAL, unit="s", note=f"{wall:.0f} s run, {redraws / wall:.1f} redraws/s", why=WHY),
    ])  # fmt: skip
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
