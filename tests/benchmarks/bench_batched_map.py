"""Batched map-reduce: the map phase's replies in parallel lanes against one window at a time.

Run with ``python tests/benchmarks/bench_batched_map.py`` (part of ``contextlens-cli bench``).
A ``summarize`` job with the ``map-reduce`` strategy runs on the start of the sample document cut
to ``--windows`` windows at ``--n-ctx`` (768: windows of about 600 tokens, partial summaries of
up to 128 tokens), through the engine host, once one window at a time (``lanes=None``) and once
per lane count in ``--lanes``, interleaved over ``--rounds`` rounds on the same loaded model and
settings. Reported: the map phase's wall time (the job's start to its last partial summary) and
the whole job's, and the speed-up of each lane count against one at a time; first, the speed of
generation alone (tokens/s of the decode steps with each lane count), which bounds the gain.
Goal (issue: speed on long documents): the map phase >= 1.25x faster with lanes on a 2-core CPU.

Greedy replies in lanes may differ from one at a time by floating-point rounding (one lane gives
identical replies: ``tests/core/test_lanes.py``), so each run's reply tokens are printed too: a
speed-up bought with shorter replies would show there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import default_model_path  # noqa: E402
from app.core.engine.host import EngineHost  # noqa: E402
from app.core.engine.types import (  # noqa: E402
    LaneFinished,
    LaneStarted,
    LoadSettings,
    default_threads,
)
from app.core.jobs.tasks import JobFinished, JobResult, PartialResult, planning, summarize  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.core.planning.frame import document_messages, split_at_document  # noqa: E402
from app.core.planning.strategies import Planner  # noqa: E402
from app.core.tokens import exact_counter, host_tokenize  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402

GOAL = ">= 1.25"
# What bounds the figures, printed by the report beside a missed goal.
MAP_LIMIT = (
    "Lanes speed up generation only: each window's prompt (about half of the map phase on a CPU) "
    "is evaluated at the same speed with or without lanes, and a CPU's decode step is close to "
    "compute-bound, so four lanes generate only about 1.4x as fast as one; quick sizes (short "
    "replies) leave even less to share."
)
GEN_LIMIT = (
    "A CPU decode step is close to compute-bound: lanes share the weights' pass, not the "
    "arithmetic, and short replies leave little to share."
)


def document(host: EngineHost, counter: object, n_ctx: int, windows: int, reply: int) -> str:
    """The start of the sample document that a map-reduce plan cuts into ``windows`` windows."""
    text = sample_document().read_text(encoding="utf-8")
    instruction, reserve = planning("summarize", "map-reduce", counter, max_tokens=reply)  # type: ignore[arg-type]
    before, after = split_at_document(host.apply_chat_template(document_messages(instruction)))
    frame = len(host.tokenize(before, add_special=True, parse_special=True))
    frame += len(host.tokenize(after, add_special=False, parse_special=True))
    budget = n_ctx - frame - reserve  # as the job plans it
    cut = len(text) // 4
    for _ in range(4):  # the plan of a shorter text may end a window sooner: converge
        plan = Planner(text[:cut], counter).plan("map-reduce", budget)  # type: ignore[arg-type]
        if len(plan.windows) == windows:
            return text[:cut]
        if len(plan.windows) > windows:
            cut = plan.windows[windows - 1].end
        else:
            cut = min(len(text), cut * 2)
    raise SystemExit(f"could not cut the sample document into {windows} windows")


def generation_rate(host: EngineHost, text: str, lanes: int, args: argparse.Namespace) -> float:
    """Tokens per second of ``lanes`` replies generated together, each after its own copy of a
    window as long as a map call's (the same prompt in every lane, so the replies end together):
    the speed of the decode steps alone, from the last prompt in the cache to the end."""
    tokens = args.reply
    prefix = host.tokenize("Summarize this part of a longer document.\n\n", add_special=True)
    room = args.n_ctx - len(prefix) - tokens - 32  # about a window: the context less the reply
    window = host.tokenize(text, add_special=False)[:room]
    started = 0.0
    done = 0
    for ev in host.generate_lanes(prefix, [window] * lanes, lanes=lanes, max_tokens=tokens):
        if isinstance(ev, LaneStarted):
            started = time.perf_counter()
        elif isinstance(ev, LaneFinished):
            done += ev.stats.completion_tokens
    return done / (time.perf_counter() - started)


def run(host: EngineHost, counter: object, text: str, args: argparse.Namespace,
        lanes: int | None) -> tuple[float, float, JobResult]:  # fmt: skip
    """(map phase seconds, job seconds, result) of one summarize job."""
    t0 = time.perf_counter()
    map_done = t0
    result = None
    for ev in summarize(host, text, counter, strategy="map-reduce", n_ctx=args.n_ctx,  # type: ignore[arg-type]
                        max_tokens=args.reply, lanes=lanes):  # fmt: skip
        if isinstance(ev, PartialResult) and ev.step.startswith("part "):
            map_done = time.perf_counter()
        elif isinstance(ev, JobFinished):
            result = ev.result
    assert result is not None
    if result.finish_reason not in ("stop", "length"):
        raise SystemExit(f"the job ended with {result.finish_reason}: {result.error}")
    return map_done - t0, time.perf_counter() - t0, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model_path())
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--reply", type=int, default=128, help="longest partial summary")
    parser.add_argument("--n-ctx", type=int, default=768)
    parser.add_argument("--lanes", default="4,8", help="comma-separated lane counts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="0: all cores")
    args = parse_args(parser, {"windows": 6, "reply": 48, "n_ctx": 512, "lanes": "4"})
    lane_counts = [int(n) for n in args.lanes.split(",")]
    threads = args.threads or default_threads()
    settings = LoadSettings(n_ctx=args.n_ctx, n_threads=threads)
    with EngineHost() as host:
        host.load(args.model, settings)
        counter = exact_counter(args.model, host_tokenize(host))
        text = document(host, counter, args.n_ctx, args.windows, args.reply)
        print(f"{args.windows} windows ({len(text):,} characters) at n_ctx {args.n_ctx}, "
              f"partial summaries up to {args.reply} tokens, {threads} threads, "
              f"{args.rounds} round(s)")  # fmt: skip
        rates = {n: generation_rate(host, text, n, args) for n in (1, *lane_counts)}
        print("generation alone, tokens/s: " + ", ".join(
            f"{n} lane(s) {r:.0f}" for n, r in rates.items()))  # fmt: skip
        times: dict[int | None, list[tuple[float, float]]] = {}
        replies: dict[int | None, list[int]] = {}
        for r in range(args.rounds):
            for lanes in (None, *lane_counts):
                map_s, job_s, result = run(host, counter, text, args, lanes)
                times.setdefault(lanes, []).append((map_s, job_s))
                replies.setdefault(lanes, []).append(result.completion_tokens)
                name = "one at a time" if lanes is None else f"{lanes} lanes"
                print(f"  round {r + 1}, {name:>13}: map {map_s:6.1f} s, job {job_s:6.1f} s, "
                      f"{result.completion_tokens:,} reply tokens")  # fmt: skip
    base_map = statistics.median(t[0] for t in times[None])
    base_job = statistics.median(t[1] for t in times[None])
    rows: list[Row] = []
    print(f"\n{'':>13} {'map s':>7} {'job s':>7} {'map x':>6} {'job x':>6} {'reply tok':>9}")
    print(f"{'one at a time':>13} {base_map:7.1f} {base_job:7.1f} {1:6.2f} {1:6.2f} "
          f"{statistics.median(replies[None]):9,.0f}")  # fmt: skip
    for lanes in lane_counts:
        m = statistics.median(t[0] for t in times[lanes])
        j = statistics.median(t[1] for t in times[lanes])
        print(f"{f'{lanes} lanes':>13} {m:7.1f} {j:7.1f} {base_map / m:6.2f} {base_job / j:6.2f} "
              f"{statistics.median(replies[lanes]):9,.0f}")  # fmt: skip
        rows.append(row(f"map phase, {args.windows} windows, {lanes} lanes (speed-up)",
                        "one window at a time", m, base_map / m, GOAL, unit="s",
                        why=MAP_LIMIT))  # fmt: skip
        rows.append(row(f"generation alone, {lanes} lanes (tokens/s)", "one lane",
                        rates[lanes], rates[lanes] / rates[1], "> 1.0", unit="tok/s",
                        why=GEN_LIMIT))  # fmt: skip
        rows.append(row(f"whole map-reduce job, {lanes} lanes (speed-up)",
                        "one window at a time", j, base_job / j, "> 1.0", unit="s"))  # fmt: skip
    best = max(base_map / statistics.median(t[0] for t in times[n]) for n in lane_counts)
    print(f"\nmap phase speed-up with lanes: {best:.2f}x (goal {GOAL})")
    write_rows(args.json, "bench_batched_map", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
