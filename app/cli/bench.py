"""contextlens-cli bench: every benchmark in tests/benchmarks/, one report of ratios.

Each ``bench_*.py`` runs as its own process (this Python, ``--json PATH``, ``--quick`` when
asked), one at a time, so a crash or a hang in one cannot take the others down. Each writes
``{"bench": NAME, "rows": [{"figure", "baseline", "value", "ratio", "goal", "met"}, ...]}``
(tests/benchmarks/report.py); this command gathers the rows into DIR/report.md and
DIR/report.csv, plus DIR/ratios.png when pyqtgraph can draw offscreen, and keeps each
benchmark's output in DIR/logs/. Exit 0 when every benchmark ran (a missed goal is in the report),
3 when one crashed, 2 for bad input, 130 on Ctrl+C (the partial report is still written).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_ENGINE_CRASHED, EXIT_OK, fail
from app.core import config
from app.core.child_process import child_env, module_command

BENCH_DIR_ENV = config.BENCH_DIR_ENV
# The order of the issue: counting, chunking, engine overhead and a busy machine, prefix reuse and
# state restore, batched map-reduce, GUI stall and CPU; benchmarks not named here run after these.
ORDER = ("bench_tokens", "bench_chunking", "bench_engine_host", "bench_contention",
         "bench_calibration", "bench_kv", "bench_rollback", "bench_batched_map",
         "bench_gui_responsiveness", "bench_window_cpu", "bench_memory_fit", "bench_needles",
         "bench_demo",
         "bench_peers")  # fmt: skip
EXIT_BENCH_FAILED = EXIT_ENGINE_CRASHED  # a benchmark crashed: the code the CLI uses for a crash
STOP_GRACE_S = 10.0  # after Ctrl+C, how long a benchmark gets to end before it is killed
ROW_KEYS: dict[str, type | tuple[type, ...]] = {
    "figure": str,
    "baseline": str,
    "value": (int, float),
    "ratio": (int, float),
    "goal": str,
    "met": bool,
}
COLUMNS = ("benchmark", "status", "figure", "baseline", "value", "unit", "ratio", "goal", "met",
           "note", "why")  # fmt: skip


@dataclass
class Outcome:
    """One benchmark's run: ``status`` is ok, failed, cancelled or not run."""

    name: str
    status: str = "not run"
    seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""


def default_bench_dir() -> Path:
    """tests/benchmarks of the checkout this package was imported from (absent when installed)."""
    return Path(__file__).resolve().parents[2] / "tests" / "benchmarks"


def discover(folder: Path) -> list[Path]:
    rank = {name: i for i, name in enumerate(ORDER)}
    found = sorted(folder.glob("bench_*.py"))
    return sorted(found, key=lambda p: (rank.get(p.stem, len(ORDER)), p.stem))


def select(found: list[Path], only: list[str] | None) -> list[Path]:
    """The benchmarks named by ``--only`` (``bench_kv``, ``kv`` or ``bench_kv.py``), in order."""
    if not only:
        return found
    by_name = {p.stem: p for p in found}
    wanted: set[str] = set()
    for raw in only:
        name = raw.removesuffix(".py")
        name = name if name.startswith("bench_") else f"bench_{name}"
        if name not in by_name:
            raise ValueError(f"no benchmark named {raw!r}; there are: {', '.join(by_name)}")
        wanted.add(name)
    return [p for p in found if p.stem in wanted]


def check_writable(out: Path) -> None:
    """Fail before minutes of benchmarks, not after them, when the report cannot be written."""
    try:
        (out / "logs").mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"cannot write the report to {out}: {exc.strerror or exc}") from None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of one ``--json`` file, checked against the contract (ValueError if not)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError("it wrote no --json file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"its --json file is not JSON: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError('its --json file has no "rows" list')
    for r in rows:
        bad = [k for k, kind in ROW_KEYS.items() if not isinstance(r.get(k), kind)]
        if bad:
            raise ValueError(f"a row of its --json file lacks or mistypes {', '.join(bad)}")
    return rows


def last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


class Runner:
    """Runs benchmarks one at a time; Ctrl+C stops the one running and those after it."""

    def __init__(self, out: Path, quick: bool, cwd: Path) -> None:
        self.out, self.quick, self.cwd = out, quick, cwd
        self.cancelled = False

    def on_sigint(self, _sig: int, _frame: FrameType | None) -> None:
        self.cancelled = True

    def run(self, path: Path) -> Outcome:
        name = path.stem
        outcome = Outcome(name)
        json_path = self.out / "logs" / f"{name}.json"
        json_path.unlink(missing_ok=True)
        err_path = self.out / "logs" / f"{name}.err"
        command = [sys.executable, str(path), "--json", str(json_path)]
        command += ["--quick"] if self.quick else []
        t0 = time.perf_counter()
        with (self.out / "logs" / f"{name}.log").open("wb") as log, err_path.open("wb") as err:
            # Its own session: Ctrl+C reaches this process only, which stops the whole group.
            proc = subprocess.Popen(command, cwd=self.cwd, stdout=log, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            code = self._wait(proc)
        outcome.seconds = time.perf_counter() - t0
        if self.cancelled:
            outcome.status, outcome.reason = "cancelled", "cancelled (Ctrl+C)"
            return outcome
        try:
            outcome.rows = read_rows(json_path)
        except ValueError as exc:
            outcome.reason = str(exc)
        if code != 0:
            outcome.status = "failed"
            outcome.reason = last_line(err_path) or f"exit code {code}"
        elif outcome.reason or not outcome.rows:
            outcome.status = "failed"
            outcome.reason = outcome.reason or "it wrote no rows"
        else:
            outcome.status = "ok"
        return outcome

    def _wait(self, proc: subprocess.Popen[bytes]) -> int:
        while True:
            try:
                return proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                if self.cancelled:
                    break
        _signal_group(proc.pid, signal.SIGINT)
        try:
            return proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            return proc.wait()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


# ----- the report ------------------------------------------------------------------------------


def _number(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def shortfall(ratio: float, goal: str) -> str:
    """By how much ``ratio`` misses ``goal``: "4.8 % short of >= 1.25", "2.5x the limit < 10"."""
    op, _, text = goal.strip().partition(" ")
    threshold = float(text)
    if op in (">=", ">"):
        if threshold <= 0 or ratio <= 0:
            return f"{ratio:.3g} against {goal}"
        return f"{(1 - ratio / threshold) * 100:.1f} % short of {goal}"
    if threshold <= 0:
        return f"{ratio:.3g} against {goal}"
    factor = ratio / threshold
    if factor >= 2:
        return f"{factor:.2g}x the limit {goal}"
    return f"{(factor - 1) * 100:.1f} % over {goal}"


def table_rows(outcomes: list[Outcome]) -> list[dict[str, str]]:
    """One dict per report line (CSV columns); a benchmark without rows still gets one line."""
    lines = []
    for o in outcomes:
        status = o.status if o.status != "ok" else ""
        for r in o.rows:
            lines.append({"benchmark": o.name, "status": o.status, "figure": r["figure"],
                          "baseline": r["baseline"], "value": f"{r['value']:.6g}",
                          "unit": r.get("unit", ""), "ratio": f"{r['ratio']:.6g}",
                          "goal": r["goal"], "met": "yes" if r["met"] else "no",
                          "note": r.get("note", "") or o.reason,
                          "why": r.get("why", "")})  # fmt: skip
        if not o.rows or status:
            lines.append(dict.fromkeys(COLUMNS, "") | {"benchmark": o.name, "status": o.status,
                                                        "note": o.reason})  # fmt: skip
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(outcomes: list[Outcome], header: str) -> str:
    rows = [r for o in outcomes for r in o.rows]
    met = sum(r["met"] for r in rows)
    failed = [o.name for o in outcomes if o.status == "failed"]
    out = [
        "# Benchmark report",
        "",
        header,
        "",
        "Every ratio is the figure against its baseline, both measured in the same run; the goal "
        "is on the ratio.",
        "",
        "| benchmark | figure | baseline | value | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        for r in o.rows:
            value = f"{_number(r['value'])} {r.get('unit', '')}".strip()
            out.append(f"| {o.name} | {_cell(r['figure'])} | {_cell(r['baseline'])} | {value} | "
                       f"{r['ratio']:.3g} | {_cell(r['goal'])} | "
                       f"{'yes' if r['met'] else '**no**'} |")  # fmt: skip
        if o.status != "ok":
            why = f": {o.reason}" if o.reason else ""
            out.append(f"| {o.name} | | | | | | **{o.status}**{_cell(why)} |")
    out += ["", f"{met} of {len(rows)} goals met; "
            + (f"failed: {', '.join(failed)}." if failed else "no benchmark failed.")]  # fmt: skip
    missed = [(o.name, r) for o in outcomes for r in o.rows if not r["met"]]
    if missed:
        out += ["", "## Goals missed, by how much and why", ""]
        for name, r in missed:
            why = r.get("why") or "the benchmark gives no reason"
            out.append(f"- {name}, {r['figure']}: ratio {r['ratio']:.3g}, "
                       f"{shortfall(r['ratio'], r['goal'])}. {why}")  # fmt: skip
    return "\n".join(out) + "\n"


def write_report(out: Path, outcomes: list[Outcome], header: str) -> None:
    (out / "report.md").write_text(markdown(outcomes, header), encoding="utf-8")
    with (out / "report.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(table_rows(outcomes))


def plot_ratios(csv_path: Path, png_path: Path) -> None:
    """A bar per figure, the ratio on a log scale, green when its goal is met; the goal marked."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    from pyqtgraph.exporters import ImageExporter
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QApplication

    with csv_path.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["ratio"] and not math.isnan(float(r["ratio"]))]
    if not rows:
        return
    _app = QApplication.instance() or QApplication([])
    pg.setConfigOptions(background="w", foreground="k", antialias=True)
    plot = pg.PlotWidget()
    ratios = [float(r["ratio"]) for r in rows]
    ys = list(range(len(rows)))[::-1]
    goal_at = [(float(r["goal"].split()[-1]), y) for r, y in zip(rows, ys, strict=True)]
    marks = [(math.log10(g), y) for g, y in goal_at if g > 0]  # "> 0" has no place on a log scale
    goals = [g for g, _ in marks]
    finite = [math.log10(max(v, 1e-9)) for v in ratios if math.isfinite(v)]
    lo, hi = math.floor(min(*finite, *goals, 0)), math.ceil(max(*finite, *goals, 0))
    # a ratio against a baseline of zero is infinite: its bar runs to the right edge
    logs = [math.log10(max(v, 1e-9)) if math.isfinite(v) else float(hi) for v in ratios]
    colours = [pg.mkBrush("#2e7d32" if r["met"] == "yes" else "#c62828") for r in rows]
    plot.addItem(pg.BarGraphItem(x0=[min(0.0, v) for v in logs], width=[abs(v) for v in logs],
                                 y=ys, height=0.6, brushes=colours))  # fmt: skip
    plot.addItem(pg.ScatterPlotItem(x=goals, y=[y for _, y in marks], symbol="|", size=22,
                                    pen=pg.mkPen("k", width=2)))  # fmt: skip
    for x, y, v in zip(logs, ys, ratios, strict=True):
        text = f"{v:.3g}" if math.isfinite(v) else "infinite (baseline 0)"
        label = pg.TextItem(text, color="k", anchor=(0 if x < hi else 1, 0.5))
        label.setPos(max(x, 0.0), y)
        plot.addItem(label)
    plot.setXRange(lo, hi, padding=0.02)
    plot.getAxis("bottom").setTicks([[(k, f"{10**k:g}") for k in range(lo, hi + 1)]])
    left = plot.getAxis("left")
    label_px = 560
    left.setWidth(label_px)
    # the axis drops a label wider than itself: elide the long ones instead (less the tick's room)
    metrics = QFontMetrics(left.style["tickFont"] or plot.font())
    names = [metrics.elidedText(f"{r['benchmark']}: {r['figure']}", Qt.TextElideMode.ElideMiddle,
                                label_px - 20) for r in rows]  # fmt: skip
    left.setTicks([list(zip(ys, names, strict=True))])
    plot.setLabel("bottom", "ratio against the baseline (log scale); | marks the goal")
    plot.resize(1340, 90 + 34 * len(rows))
    plot.show()  # laid out (offscreen), so that the axis labels get their room
    _app.processEvents()
    ImageExporter(plot.plotItem).export(str(png_path))


def _plot(out: Path) -> None:
    """Draw in a child: a Qt platform that cannot start aborts its process, not this one."""
    try:
        # never with the working directory on its path (see app/core/child_process.py)
        done = subprocess.run(module_command("app.cli.bench", "--plot", str(out)),
                              env=child_env(), capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"no plot: {exc}", file=sys.stderr)
        return
    if done.returncode != 0 or not (out / "ratios.png").exists():
        why = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        print(f"no plot (report.md and report.csv are written): {why[0]}", file=sys.stderr)


# ----- the command -----------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    folder = Path(args.bench_dir or config.current().bench_dir or default_bench_dir()).resolve()
    out = Path(args.out).expanduser().absolute()  # the benchmarks run in another folder
    try:
        found = discover(folder) if folder.is_dir() else []
        if not found:
            raise ValueError(f"no benchmarks (bench_*.py) in {folder}: `contextlens-cli bench` "
                             "runs from a source checkout, not an installed copy")  # fmt: skip
        chosen = select(found, args.only)
        check_writable(out)
    except ValueError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), False)
    root = folder.parents[1] if folder == default_bench_dir() else folder
    runner = Runner(out, args.quick, root)
    outcomes = [Outcome(p.stem) for p in chosen]
    header = (f"`contextlens-cli bench{' --quick' if args.quick else ''}` on "
              f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, {platform.machine()} "
              f"Linux, {os.cpu_count()} CPU cores, Python {platform.python_version()}; "
              f"{'quick' if args.quick else 'full'} sizes.")  # fmt: skip
    previous = signal.signal(signal.SIGINT, runner.on_sigint)
    try:
        for i, path in enumerate(chosen, 1):
            if runner.cancelled:
                break
            print(f"bench {i}/{len(chosen)}: {path.stem} …", file=sys.stderr, flush=True)
            outcomes[i - 1] = done = runner.run(path)
            met = sum(r["met"] for r in done.rows)
            summary = (f"{len(done.rows)} figures, {met} goals met" if done.status == "ok"
                       else f"{done.status.upper()}: {done.reason}")  # fmt: skip
            print(f"bench {i}/{len(chosen)}: {path.stem} {done.seconds:.1f} s, {summary}",
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
        write_report(out, outcomes, header)
    if not runner.cancelled and not args.no_plot:
        _plot(out)
    print(f"report: {out / 'report.md'} and {out / 'report.csv'}", file=sys.stderr)
    if runner.cancelled:
        return fail(EXIT_CANCELLED, "cancelled; the report holds what ran", False)
    if any(o.status == "failed" for o in outcomes):
        failed = ", ".join(o.name for o in outcomes if o.status == "failed")
        return fail(EXIT_BENCH_FAILED, f"benchmarks failed: {failed} (see the report)", False)
    return EXIT_OK


def add_commands(sub: Any) -> None:
    p = sub.add_parser("bench", help="run the benchmarks and write a report of ratios")
    p.add_argument("--quick", action="store_true", help="small sizes: the suite in minutes")
    p.add_argument("--out", default="bench-report", help="report folder (default ./bench-report)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these (e.g. bench_kv)")
    p.add_argument("--bench-dir", help=f"benchmark folder (default: the checkout's "
                   f"tests/benchmarks, or ${BENCH_DIR_ENV})")  # fmt: skip
    p.add_argument("--no-plot", action="store_true", help="skip ratios.png")
    p.set_defaults(func=cmd_bench)


if __name__ == "__main__":  # ``python -m app.cli.bench --plot DIR``: the plot, in its own process
    if sys.argv[1:2] == ["--plot"] and len(sys.argv) == 3:
        plot_ratios(Path(sys.argv[2]) / "report.csv", Path(sys.argv[2]) / "ratios.png")
    else:
        sys.exit("usage: python -m app.cli.bench --plot DIR")
