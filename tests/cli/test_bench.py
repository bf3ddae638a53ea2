"""`contextlens-cli bench`: runs the benchmarks, reports ratios, survives a crash and a Ctrl+C."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from app.cli.common import EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_ENGINE_CRASHED, EXIT_OK

CLI = [sys.executable, "-m", "app.cli", "bench"]

OK_BENCH = """
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
row = {"figure": "speed", "baseline": "the old way", "value": 2.0, "ratio": 1.5,
       "goal": ">= 1.25", "met": True, "unit": "x"}
json.dump({"bench": "bench_ok", "rows": [row]}, open(path, "w"))
print("fine")
"""
MISS_BENCH = """
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
rows = [
    {"figure": "speed-up", "baseline": "one at a time", "value": 9.0, "ratio": 1.19,
     "goal": ">= 1.25", "met": False, "why": "prompts gain nothing from lanes"},
    {"figure": "worst gap", "baseline": "the timer", "value": 247.0, "ratio": 24.7,
     "goal": "< 10", "met": False},
    {"figure": "p99 gap", "baseline": "the timer", "value": 16.8, "ratio": 1.68,
     "goal": "<= 1.6", "met": False, "why": "the machine was busy"},
]
json.dump({"bench": "bench_miss", "rows": rows}, open(path, "w"))
"""
BOOM_BENCH = """
import sys
print("starting", flush=True)
print("boom: the benchmark broke", file=sys.stderr)
sys.exit(1)
"""
ZERO_BASELINE_BENCH = """
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
row = {"figure": "supported share", "baseline": "the old way (none)", "value": 0.4,
       "ratio": float("inf"), "goal": ">= 2.0", "met": True}
json.dump({"bench": "bench_zero", "rows": [row]}, open(path, "w"))
"""
SLOW_BENCH = """
import time
time.sleep(60)
"""


def _bench(*args: str, timeout: float = 120, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=cwd)  # fmt: skip


def _benches(folder: Path, **sources: str) -> Path:
    folder.mkdir()
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return folder


def _csv(out: Path) -> list[dict[str, str]]:
    with (out / "report.csv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_real_benchmark_quick_gives_a_report_of_ratios(tmp_path: Path, model_path: Path) -> None:
    out = tmp_path / "report"
    done = _bench("--only", "tokens", "--quick", "--out", str(out), timeout=300)
    assert done.returncode == EXIT_OK, done.stderr
    assert "bench 1/1: bench_tokens …" in done.stderr
    rows = _csv(out)
    assert [r["figure"] for r in rows] == ["exact count, whole corpus"]
    row = rows[0]
    assert row["benchmark"] == "bench_tokens" and row["status"] == "ok"
    assert float(row["ratio"]) > 0 and row["goal"] == ">= 8" and row["met"] in ("yes", "no")
    assert row["unit"] == "MB/s" and float(row["value"]) > 0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| benchmark | figure | baseline | value | ratio | goal | met |" in report
    assert "| bench_tokens | exact count, whole corpus | llama-cpp-python tokenize |" in report
    assert "--quick" in report and "goals met" in report
    assert (out / "logs" / "bench_tokens.log").read_text(encoding="utf-8").strip()
    assert (out / "ratios.png").stat().st_size > 1000


def test_a_failing_benchmark_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    folder = _benches(tmp_path / "b", bench_boom=BOOM_BENCH, bench_ok=OK_BENCH)
    out = tmp_path / "report"  # given relative to the working folder, not the benchmarks'
    done = _bench("--bench-dir", str(folder), "--out", "report", "--no-plot", cwd=tmp_path)
    assert done.returncode == EXIT_ENGINE_CRASHED, done.stderr
    assert "bench_boom" in done.stderr.splitlines()[-1]
    rows = {r["benchmark"]: r for r in _csv(out)}
    assert rows["bench_boom"]["status"] == "failed"
    assert rows["bench_boom"]["note"] == "boom: the benchmark broke"
    assert rows["bench_ok"]["status"] == "ok" and rows["bench_ok"]["ratio"] == "1.5"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**failed**: boom: the benchmark broke" in report
    assert "| bench_ok | speed | the old way | 2 x | 1.5 | >= 1.25 | yes |" in report


def test_a_missed_goal_is_reported_with_by_how_much_and_why(tmp_path: Path) -> None:
    folder = _benches(tmp_path / "b", bench_miss=MISS_BENCH, bench_ok=OK_BENCH)
    out = tmp_path / "report"
    done = _bench("--bench-dir", str(folder), "--out", str(out), "--no-plot")
    assert done.returncode == EXIT_OK, done.stderr  # a missed goal is a finding, not a failure
    report = (out / "report.md").read_text(encoding="utf-8")
    missed = report.split("## Goals missed, by how much and why\n", 1)[1].strip().splitlines()
    assert missed == [
        "- bench_miss, speed-up: ratio 1.19, 4.8 % short of >= 1.25. "
        "prompts gain nothing from lanes",
        "- bench_miss, worst gap: ratio 24.7, 2.5x the limit < 10. the benchmark gives no reason",
        "- bench_miss, p99 gap: ratio 1.68, 5.0 % over <= 1.6. the machine was busy",
    ]
    assert "1 of 4 goals met" in report and "bench_ok" not in "\n".join(missed)
    whys = {r["figure"]: r["why"] for r in _csv(out)}
    assert whys["speed-up"] == "prompts gain nothing from lanes" and whys["speed"] == ""


def test_a_ratio_against_a_baseline_of_zero_is_reported_and_plotted(tmp_path: Path) -> None:
    """bench_demo's supported share against an old demo that had none is infinite."""
    folder = _benches(tmp_path / "b", bench_zero=ZERO_BASELINE_BENCH, bench_ok=OK_BENCH)
    out = tmp_path / "report"
    done = _bench("--bench-dir", str(folder), "--out", str(out))
    assert done.returncode == EXIT_OK, done.stderr
    assert "no plot" not in done.stderr, done.stderr
    report = (out / "report.md").read_text(encoding="utf-8")
    row = "| bench_zero | supported share | the old way (none) | 0.4 | inf | >= 2.0 | yes |"
    assert row in report
    assert (out / "ratios.png").stat().st_size > 1000


def test_ctrl_c_cancels_and_still_writes_the_report(tmp_path: Path) -> None:
    folder = _benches(tmp_path / "b", bench_a=OK_BENCH, bench_b=SLOW_BENCH, bench_c=OK_BENCH)
    out = tmp_path / "report"
    proc = subprocess.Popen([*CLI, "--bench-dir", str(folder), "--out", str(out)],
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("bench 2/3: bench_b …"):
            break
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=30) == EXIT_CANCELLED, "".join(lines) + proc.stderr.read()
    status = {r["benchmark"]: r["status"] for r in _csv(out)}
    assert status == {"bench_a": "ok", "bench_b": "cancelled", "bench_c": "not run"}


def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    unknown = _bench("--only", "nope", "--out", str(tmp_path / "r"))
    assert unknown.returncode == EXIT_BAD_INPUT
    assert unknown.stderr.startswith("error: no benchmark named 'nope'; there are: bench_tokens")
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    unwritable = _bench("--only", "tokens", "--out", str(blocker / "report"))
    assert unwritable.returncode == EXIT_BAD_INPUT
    assert unwritable.stderr.startswith(f"error: cannot write the report to {blocker / 'report'}")
    empty = _bench("--bench-dir", str(_benches(tmp_path / "empty")))
    assert empty.returncode == EXIT_BAD_INPUT
    assert "runs from a source checkout, not an installed copy" in empty.stderr
    for done in (unknown, unwritable, empty):
        assert len(done.stderr.strip().splitlines()) == 1
