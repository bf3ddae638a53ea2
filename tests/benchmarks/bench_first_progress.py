"""How soon a long job says how far it is: a map-reduce over the whole sample text in lanes.

Run with ``python tests/benchmarks/bench_first_progress.py`` (part of ``contextlens-cli bench``).
A ``summarize`` job with the ``map-reduce`` strategy over the app's sample text (1.6 million
characters, hundreds of windows at ``--n-ctx``) in ``--lanes`` lanes, planned before it starts as
the window plans it (its Planner is handed in). Reported, from the job's start: its first prompt
progress above zero (the status bar's first move) against its first window done (what the bar
waited for before: 35 s in the window); and the map phase's chunks tokenized in one call to the
engine against one call a chunk (what delayed the first prompt by about 2 s). The job is
cancelled once its first window is done. ``--busy``: another program keeps a core busy meanwhile.
Goal (issue 49): progress within 2 s of the start; as a ratio, at most a quarter of the wait
for the first window.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import default_model_path  # noqa: E402
from app.core.engine.host import EngineHost  # noqa: E402
from app.core.engine.types import LoadSettings, default_threads  # noqa: E402
from app.core.jobs.audit import chunk_tokens, chunks_tokens  # noqa: E402
from app.core.jobs.tasks import EvalProgress, PartialResult, planning, summarize  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.core.planning.frame import document_messages, split_at_document  # noqa: E402
from app.core.planning.strategies import Planner  # noqa: E402
from app.core.token_counter import TokenCounter  # noqa: E402
from app.core.tokens import exact_counter, host_tokenize  # noqa: E402
from tests.benchmarks.busy import busy_core  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402


def budget(host: EngineHost, counter: TokenCounter, args: argparse.Namespace) -> int:
    """The map-reduce job's budget for the document, as the job works it out (the window plans
    with it, so the job is handed a plan already made)."""
    instruction, reserve = planning("summarize", "map-reduce", counter, max_tokens=args.reply)
    before, after = split_at_document(host.apply_chat_template(document_messages(instruction)))
    frame = len(host.tokenize(before, add_special=True, parse_special=True))
    frame += len(host.tokenize(after, add_special=False, parse_special=True))
    return int(args.n_ctx - frame - reserve)


def first_progress(host: EngineHost, planner: Planner, counter: TokenCounter, text: str,
                   args: argparse.Namespace) -> tuple[float, float]:  # fmt: skip
    """(seconds to the first prompt progress above zero, seconds to the first window done)."""
    t0 = time.perf_counter()
    moved = 0.0
    events = summarize(host, text, counter, strategy="map-reduce", n_ctx=args.n_ctx,
                       max_tokens=args.reply, lanes=args.lanes, planner=planner)  # fmt: skip
    for ev in events:
        if isinstance(ev, EvalProgress) and ev.evaluated > 0 and not moved:
            moved = time.perf_counter() - t0
        elif isinstance(ev, PartialResult):
            first = time.perf_counter() - t0
            host.cancel()  # the job ends as a cancelled one: its events are read to the end
            for _ in events:
                pass
            return moved, first
    raise SystemExit("the job ended before its first window was done")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model_path())
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--reply", type=int, default=64, help="longest partial summary")
    parser.add_argument("--chars", type=int, default=0, help="the sample's first N (0: all)")
    parser.add_argument("--busy", action="store_true", help="a busy loop on one core meanwhile")
    args = parse_args(parser, {"n_ctx": 1024, "chars": 200_000})
    text = sample_document().read_text(encoding="utf-8")
    text = text[: args.chars] if args.chars else text
    settings = LoadSettings(n_ctx=args.n_ctx, n_threads=default_threads())
    with EngineHost() as host:
        host.load(args.model, settings)
        counter = exact_counter(args.model, host_tokenize(host))
        planner = Planner(text, counter)
        plan = planner.plan("map-reduce", budget(host, counter, args))  # the job's own: reused
        windows = plan.windows
        print(f"{len(text):,} characters, {len(windows)} windows at n_ctx {args.n_ctx}, "
              f"{args.lanes} lanes{', a core kept busy' if args.busy else ''}")  # fmt: skip
        with busy_core() if args.busy else contextlib.nullcontext():
            moved, first = first_progress(host, planner, counter, text, args)
        texts = [text[c.start:c.end] for c in plan.chunks]
        t0 = time.perf_counter()
        one_by_one = [chunk_tokens(host, t) for t in texts]
        each_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        at_once = chunks_tokens(host, texts)
        once_s = time.perf_counter() - t0
        assert at_once == one_by_one, "tokenized at once, the chunks' tokens differ"
    print(f"first progress {moved:.2f} s, first window done {first:.1f} s "
          f"({moved / first:.2f}x)")  # fmt: skip
    print(f"{len(texts):,} chunks tokenized: one call {once_s:.2f} s, a call each {each_s:.2f} s "
          f"({once_s / each_s:.2f}x)")  # fmt: skip
    rows: list[Row] = [
        row("first prompt progress of a map-reduce in lanes", "its first window done", moved,
            moved / first, "<= 0.25", unit="s",
            note=f"{len(windows)} windows at n_ctx {args.n_ctx}; goal: within 2 s"),
        row("a map phase's chunks tokenized in one call", "one call a chunk", once_s,
            once_s / each_s, "< 1", unit="s", note=f"{len(texts):,} chunks"),
    ]  # fmt: skip
    write_rows(args.json, "first_progress", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
