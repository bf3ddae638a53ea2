"""contextlens-cli run: a job on a document, with every event as it happens.

``--json`` prints one JSON line per event (``type`` is the event's name in snake case) and a last
line of type ``done`` with the finish reason, token counts, ``kv_peak_cells`` (from llama.cpp),
``n_ctx``, ``ttft_s``, ``seconds`` and ``outputs`` (each ``{text, source_spans}``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from app.cli_input import EXIT_BAD_INPUT, EXIT_CONTEXT, EXIT_OK, BadInput, _fail, _load, _model_path

EXIT_ENGINE_CRASHED, EXIT_CANCELLED = 3, 130
TASKS = ("summarize",)


def _type_name(event: object) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(event).__name__).lower()


def cmd_run(args: argparse.Namespace) -> int:
    from app.core.engine.host import EngineHost
    from app.core.engine.protocol import EngineCrashedError, EngineError, LoadSettings
    from app.core.jobs import CancelToken, JobFinished, TokenBatch, summarize
    from app.core.strategies import STRATEGIES
    from app.core.tokens import exact_counter, host_tokenize

    try:
        if args.task not in TASKS:
            raise BadInput(
                f"the task {args.task!r} is not available yet (choose {', '.join(TASKS)})"
            )
        if args.strategy not in STRATEGIES:
            raise BadInput(f"unknown strategy {args.strategy!r} (choose one of "
                           f"{', '.join(STRATEGIES)})")  # fmt: skip
        if args.max_tokens < 1:
            raise BadInput("--max-tokens must be at least 1")
        settings = LoadSettings(n_ctx=args.n_ctx)
        settings.validate()
        doc = _load(args.document)
        model = _model_path(args.model)
        if model is None:
            raise BadInput("no model: pass --model or fetch the default one (`make`)")
    except (BadInput, ValueError) as exc:
        return _fail(EXIT_BAD_INPUT, str(exc), args.json)

    cancel = CancelToken()
    with EngineHost() as host:

        def on_sigint(_sig: int, _frame: FrameType | None) -> None:
            cancel.set()
            host.cancel()
            signal.signal(signal.SIGINT, signal.default_int_handler)

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            loaded = host.load(Path(model), settings)
            counter = exact_counter(model, host_tokenize(host))
            events = summarize(
                host, doc.text, counter, strategy=args.strategy, n_ctx=loaded.n_ctx,
                max_tokens=args.max_tokens, cancel=cancel,
            )  # fmt: skip
            result = None
            for ev in events:
                if isinstance(ev, JobFinished):
                    result = ev.result
                elif args.json:
                    print(
                        json.dumps({"type": _type_name(ev), **dataclasses.asdict(ev)}), flush=True
                    )
                elif isinstance(ev, TokenBatch):
                    print(ev.text, end="", flush=True)
                else:
                    _print_event(ev)
            assert result is not None
        except EngineCrashedError as exc:
            return _fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
        except EngineError as exc:
            if cancel.is_set():
                return _fail(EXIT_CANCELLED, "cancelled", args.json)
            return _fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
        except ValueError as exc:
            return _fail(EXIT_BAD_INPUT, str(exc), args.json)
        finally:
            signal.signal(signal.SIGINT, previous)
    done = _done(result)
    if args.json:
        print(json.dumps(done), flush=True)
    else:
        print(f"\n[{done['finish_reason']}] {done['prompt_tokens']:,} prompt tokens, "
              f"{done['completion_tokens']:,} generated, KV peak {done['kv_peak_cells']:,} of "
              f"{done['n_ctx']:,} cells, {done['seconds']:.1f} s", file=sys.stderr)  # fmt: skip
    if result.refused:
        print(f"error: refused: {result.refused}", file=sys.stderr)
        return EXIT_CONTEXT
    if result.finish_reason == "cancelled":
        return EXIT_CANCELLED
    return EXIT_OK


def _done(result: Any) -> dict[str, Any]:
    data = result.as_dict()
    return {
        "type": "done",
        "task": data["task"],
        "strategy": data["strategy"],
        "finish_reason": data["finish_reason"],
        "prompt_tokens": data["prompt_tokens"],
        "completion_tokens": data["completion_tokens"],
        "kv_peak_cells": data["kv_peak_cells"],
        "n_ctx": data["n_ctx"],
        "ttft_s": [round(t, 4) for t in data["ttft_s"]],
        "seconds": round(data["seconds"], 3),
        "truncated": data["truncated"],
        "refused": data["refused"],
        "plan": data["plan"],
        "outputs": [
            {"text": o["text"], "source_spans": o["source_spans"], "step": o["step"]}
            for o in data["outputs"]
        ],
    }


def _print_event(ev: object) -> None:
    from app.core.jobs import ChunkEvaluated, PartialResult, PlanReady

    if isinstance(ev, PlanReady):
        print(f"plan {ev.strategy}: {ev.kept_tokens:,} of {ev.total_tokens:,} tokens reach the "
              f"model in {ev.passes} pass(es) of at most {ev.budget:,} tokens",
              file=sys.stderr)  # fmt: skip
    elif isinstance(ev, ChunkEvaluated):
        pass  # too many to print; --json has them
    elif isinstance(ev, PartialResult):
        print(f"\n--- {ev.step} done ---", file=sys.stderr)


def add_commands(sub: Any) -> None:
    from app.core.strategies import STRATEGIES

    p = sub.add_parser("run", help="run a job (summarize) on a document, streaming events")
    p.add_argument("document")
    p.add_argument("--task", default="summarize", help="summarize")
    p.add_argument("--strategy", required=True, help=", ".join(STRATEGIES))
    p.add_argument("--model", help="GGUF model (default: the default model)")
    p.add_argument("--n-ctx", type=int, default=2048, help="context size (default 2048)")
    p.add_argument("--max-tokens", type=int, default=256, help="longest reply (default 256)")
    p.add_argument("--json", action="store_true", help="print JSON lines, one per event")
    p.set_defaults(func=cmd_run)
