"""No work twice: a cached re-plan against the first plan of a large document, in one run.

Run with ``python tests/benchmarks/bench_plan_cache.py [--mb 6] [--json PATH]``. The sample text
(resources/samples) is repeated to ``--mb`` MB and planned the way the window plans it: through
:class:`PlanProcess`, with the default model's exact tokenizer and chat template, strategy A
then B. Then, each against the first plans (the same strategies, same run):

- switching back: A -> B -> A, A asked again in the same window;
- reopening: the same bytes opened from another path, both strategies asked again;
- after a restart: a new planning process (empty memory, the disk cache of this run) plans the
  reopened document and counts it.

The planning child is started, its tokenizer built and the model's template read before any
timing, on both sides, so the figures are the planning alone. The cache goes to a temporary
folder (``CONTEXTLENS_CACHE``).
Work found done must really be skipped: a cached answer that reads or counts the document again,
or differs from the first plan, is a correctness failure and exits non-zero.

Goal (issue: no work twice): every cached re-plan <= 0.05 of the first plan.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import default_model_path  # noqa: E402
from app.core.documents import Document, load_document  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.core.planning.plan import Plan  # noqa: E402
from app.core.planning.process import PlanProcess  # noqa: E402
from app.core.tokens import counter_key, gguf_encoding  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402

GOAL = "<= 0.05"
TASK = "Summarize the document."
MB = 1_000_000


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def write_document(folder: Path, name: str, mb: float) -> Path:
    text = sample_document().read_text(encoding="utf-8")
    size = int(mb * MB)
    path = folder / name
    path.write_text((text * (size // len(text) + 1))[:size], encoding="utf-8")
    return path


def warm(process: PlanProcess, folder: Path, key: str, options: dict[str, Any]) -> None:
    """Start the child, build its tokenizer and read the model's chat template (a tiny
    document of its own)."""
    tiny = folder / "warm-up.txt"
    tiny.write_text("A few words to start the planning process.\n", encoding="utf-8")
    process.plan(load_document(tiny), key, "head", **options)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=6.0, help="document size in MB")
    parser.add_argument("--strategies", default="head,semantic", help="A,B")
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parse_args(parser, {"mb": 1.0})
    first_strategy, second_strategy = args.strategies.split(",")
    folder = Path(tempfile.mkdtemp(prefix="bench-plan-cache-"))
    os.environ["CONTEXTLENS_CACHE"] = str(folder / "cache")  # children inherit it
    model = default_model_path()
    key = counter_key(gguf_encoding(model))
    assert key is not None
    options = {"model": model, "n_ctx": args.n_ctx, "reserve": 512, "instruction": TASK}

    def plan(process: PlanProcess, doc: Document, strategy: str) -> tuple[float, Plan]:
        return timed(lambda: process.plan(doc, key, strategy, **options))

    doc = load_document(write_document(folder, "large.txt", args.mb))
    (folder / "moved").mkdir()
    moved = folder / "moved" / "large.txt"
    moved.write_bytes(Path(doc.path or "").read_bytes())
    print(f"model {model.name}, document {args.mb:g} MB, strategies {args.strategies}")

    failures: list[str] = []
    window = PlanProcess()
    warm(window, folder, key, options)
    first_a, plan_a = plan(window, doc, first_strategy)
    first_b, plan_b = plan(window, doc, second_strategy)
    first_count, total = timed(lambda: window.count(doc, key))
    first = first_a + first_b
    made = window.child_stats()
    print(
        f"first plans: {first_strategy} {first_a:.3f} s ({len(plan_a.chunks):,} chunks), "
        f"{second_strategy} {first_b:.3f} s; count {first_count:.3f} s ({total:,} tokens)"
    )

    back, again = plan(window, doc, first_strategy)
    if again != plan_a:
        failures.append("switching back gave another plan")
    reopened = load_document(moved)
    reopen = sum(plan(window, reopened, s)[0] for s in (first_strategy, second_strategy))
    if window.child_stats() != made:
        failures.append("switching back or reopening did work in the child")
    window.close()

    restarted = PlanProcess()
    warm(restarted, folder, key, options)
    before = restarted.child_stats()
    restart_a, from_disk_a = plan(restarted, reopened, first_strategy)
    restart_b, from_disk_b = plan(restarted, reopened, second_strategy)
    restart_count, recount = timed(lambda: restarted.count(reopened, key))
    stats = restarted.child_stats()
    restarted.close()
    if (from_disk_a, from_disk_b, recount) != (plan_a, plan_b, total):
        failures.append("after a restart the plans or the count differ from the first")
    redone = {k: stats[k] - before[k] for k in ("documents_read", "chunkings_made", "plans_made",
                                                 "counts_made")}  # fmt: skip
    if any(redone.values()):
        failures.append(f"after a restart the child did work again: {redone}")

    note = f"{args.mb:g} MB, {model.name}, n_ctx {args.n_ctx}"
    rows: list[Row] = [
        row(f"re-plan after switching back ({first_strategy} -> {second_strategy} -> "
            f"{first_strategy})", f"first plan of {first_strategy}", back, back / first_a, GOAL,
            unit="s", note=note),
        row("re-plan of the same bytes reopened at another path (both strategies)",
            "first plans of both", reopen, reopen / first, GOAL, unit="s", note=note),
        row("re-plan after a restart: new planning process, disk cache (both strategies)",
            "first plans of both", restart_a + restart_b, (restart_a + restart_b) / first, GOAL,
            unit="s", note=note),
        row("count after a restart (whole document)", "first count", restart_count,
            restart_count / first_count, GOAL, unit="s", note=note),
    ]  # fmt: skip
    print()
    print(f"{'figure':78s} {'seconds':>9s} {'ratio':>8s}  goal")
    for r in rows:
        verdict = "PASS" if r["met"] else "FAIL"
        print(f"{r['figure']:78s} {r['value']:9.4f} {r['ratio']:8.4f}  {r['goal']} {verdict}")
    print(f"child after the restart: {stats}")
    write_rows(args.json, "plan_cache", rows)
    if failures:
        print()
        print("CACHE FAILURES (correctness, not timing):")
        for line in failures:
            print(f"  {line}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
