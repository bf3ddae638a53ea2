"""contextlens-cli run / compare: a job on a document, with every event as it happens.

``--json`` prints one JSON line per event (``type`` is the event's name in snake case) and a last
line of type ``done`` with the finish reason, token counts, ``kv_peak_cells`` (from llama.cpp),
``n_ctx``, ``ttft_s``, ``seconds`` and ``outputs`` (each ``{text, source_spans}``). ``compare``
prints a ``result`` line per strategy and a last ``done`` line with all of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from typing import Any

from app.cli.common import (
    EXIT_AUDIT,
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_CONTEXT,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    BadInput,
    done_record,
    fail,
)
from app.cli.documents import model_path_or_default, read_document
from app.cli.engine import (
    LOCAL_N_CTX,
    add_engine_options,
    check_remote_args,
    open_engine,
    sigint_cancels,
)
from app.cli.sampling import add_sampling_options, sampling_from_args
from app.cli.snapshots import check_writable, record_runs, stored_runs

TASKS = ("summarize", "ask", "extract")


def _type_name(event: object) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(event).__name__).lower()


def cmd_run(args: argparse.Namespace) -> int:
    from app.core.engine.types import (
        EngineCrashedError,
        EngineError,
        InsufficientMemoryError,
        LoadSettings,
    )
    from app.core.jobs.audit import Audit
    from app.core.jobs.tasks import (
        CancelToken,
        CompareFinished,
        JobFinished,
        PartialResult,
        StrategyStarted,
        TokenBatch,
        compare,
        state_after,
    )
    from app.core.planning.strategies import STRATEGIES, Planner

    try:
        strategies = args.strategies.split(",") if args.command == "compare" else [args.strategy]
        check_job_args(args, strategies, STRATEGIES)
        check_remote_args(args)
        settings = LoadSettings(n_ctx=args.n_ctx or LOCAL_N_CTX)
        settings.validate()
        doc = read_document(args.document)
        if args.model:
            model_path_or_default(args.model)  # a --model that is not there: said now
        check_writable(args.db)  # now, not after a long run that could not be recorded
    except (BadInput, ValueError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)

    cancel = CancelToken()
    audit: Audit | None = None
    try:
        with (
            sigint_cancels(cancel) as watch,
            open_engine(args, settings, n_ctx_given=args.n_ctx) as opened,
        ):
            engine = opened.engine
            watch(engine)
            for warning in opened.warnings:  # past the training context, an unusable template
                if args.json:
                    print(json.dumps({"type": "warning", "message": warning}), flush=True)
                print(f"warning: {warning}", file=sys.stderr, flush=True)
            if opened.server is not None and args.json:
                print(json.dumps({"type": "server", **opened.server.as_dict()}), flush=True)
            options = job_options(args, opened.n_ctx, cancel)
            if args.audit:  # the counter is this model's own tokenizer: counts must match too
                audit = options["audit"] = Audit(engine, exact_counts=True)
            # the Document, with its structure: the chunks `plan` shows are the ones that run
            counter = opened.counter
            events = compare(engine, doc.text, counter, task=args.task, strategies=strategies,
                             planner=Planner(doc, counter), **options)  # fmt: skip
            results = []
            states: dict[int, Any] = {}  # results' index -> the KV state right after its job
            in_lanes: dict[str, list[str]] = {}  # replies generated in lanes, by step
            for ev in events:
                if isinstance(ev, JobFinished):
                    results.append(ev.result)
                    if args.keep_kv:
                        try:
                            state = state_after(engine, ev.result)
                        except EngineCrashedError as exc:  # the run stands; its state is lost
                            state = None
                            print(f"warning: the KV state was not kept: {exc}", file=sys.stderr,
                                  flush=True)  # fmt: skip
                        if state is not None:
                            states[len(results) - 1] = state
                    if args.command == "compare" and args.json:
                        print(json.dumps({**done_record(ev.result), "type": "result"}), flush=True)
                elif isinstance(ev, CompareFinished) or (
                    isinstance(ev, StrategyStarted) and args.command == "run"
                ):
                    pass  # one strategy: the plan_ready event says which
                elif args.json:
                    print(
                        json.dumps({"type": _type_name(ev), **dataclasses.asdict(ev)}), flush=True
                    )
                elif isinstance(ev, TokenBatch) and ev.lane is None:
                    print(ev.text, end="", flush=True)
                elif isinstance(ev, TokenBatch):  # lanes interleave: each reply whole, once done
                    in_lanes.setdefault(ev.step, []).append(ev.text)
                elif isinstance(ev, PartialResult) and ev.step in in_lanes:
                    print("".join(in_lanes.pop(ev.step)), end="", flush=True)
                    _print_event(ev)
                else:
                    _print_event(ev)
            model_label, model_sha = opened.model_label, opened.model_sha256
    except BadInput as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    except InsufficientMemoryError as exc:
        return fail(EXIT_CONTEXT, f"does not fit: {exc}", args.json)
    except EngineCrashedError as exc:
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    except EngineError as exc:
        if cancel.is_set():
            return fail(EXIT_CANCELLED, "cancelled", args.json)
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    except ValueError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    from app.store.db import StoreError

    try:
        versions = record_runs(args.db, doc, args, results, model=model_label,
                               model_sha256=model_sha, states=states)  # fmt: skip
        if audit is not None:
            for result, run in zip(results, stored_runs(args.db, versions), strict=True):
                audit.check_stored(result, run)
    except (BadInput, ValueError, StoreError, OSError) as exc:
        # the run itself succeeded: say so, keep its output
        print(f"warning: the run was not recorded in the history: {exc}", file=sys.stderr)
        if audit is not None:
            audit.fail("store", "store", f"the run was not recorded: {exc}")
    code = _report(args, results)
    if audit is None:
        return code
    _report_audit(audit, args.json)
    return EXIT_AUDIT if audit.findings else code


def _report_audit(audit: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"type": "audit", "passed": audit.ok, "counts": audit.counts.as_dict(),
                          "findings": [str(f) for f in audit.findings]}), flush=True)  # fmt: skip
    print(audit.summary(), file=sys.stderr, flush=True)
    for finding in audit.findings:
        print(f"  - {finding}", file=sys.stderr)


def _report(args: argparse.Namespace, results: list[Any]) -> int:
    """Print the last record of a run or compare; the exit code its results call for."""
    if args.command == "compare":
        return _report_compare(results, args.json)
    result = results[-1]
    done = done_record(result)
    if args.json:
        print(json.dumps(done), flush=True)
    else:
        print(f"\n[{done['finish_reason']}] {done['prompt_tokens']:,} prompt tokens, "
              f"{done['completion_tokens']:,} generated, KV peak {done['kv_peak_cells']:,} of "
              f"{done['n_ctx']:,} cells, {done['seconds']:.1f} s", file=sys.stderr)  # fmt: skip
    if result.refused:
        print(f"error: refused: {result.refused}", file=sys.stderr)
        return EXIT_CONTEXT
    if result.error:
        print(f"error: {result.error}", file=sys.stderr)
        return EXIT_ENGINE_CRASHED
    if result.finish_reason == "cancelled":
        return EXIT_CANCELLED
    return EXIT_OK


def job_options(args: argparse.Namespace, n_ctx: int, cancel: Any) -> dict[str, Any]:
    """The keyword arguments of a job the command line asks for (run, compare, batch)."""
    options: dict[str, Any] = {"n_ctx": n_ctx, "max_tokens": args.max_tokens, "cancel": cancel,
                               "lanes": args.lanes or None,
                               "sampling": sampling_from_args(args)}  # fmt: skip
    if args.task == "ask":
        options["questions"] = args.question
    if args.task == "extract":
        options["instruction"] = args.instruction
    return options


def check_job_args(args: argparse.Namespace, strategies: list[str], known: Any) -> None:
    from app.core.jobs.tasks import MAX_LANES

    if args.task not in TASKS:
        raise BadInput(f"unknown task {args.task!r} (choose one of {', '.join(TASKS)})")
    for name in strategies:
        if name not in known:
            raise BadInput(f"unknown strategy {name!r} (choose from {', '.join(known)})")
    if args.max_tokens < 1:
        raise BadInput("--max-tokens must be at least 1")
    sampling_from_args(args)  # a bad sampling value: said now, before anything loads
    if not 0 <= args.lanes <= MAX_LANES:
        raise BadInput(f"--lanes must be between 0 (one call at a time) and {MAX_LANES}")
    if args.task == "ask" and not (args.question and all(q.strip() for q in args.question)):
        raise BadInput("--task ask needs at least one --question")
    if args.task == "extract" and not (args.instruction or "").strip():
        raise BadInput("--task extract needs an --instruction")


def _report_compare(results: list[Any], as_json: bool) -> int:
    rows = [done_record(r) for r in results]
    if as_json:
        print(json.dumps({"type": "done", "results": rows}), flush=True)
    else:
        print(f"\n{'strategy':12s} {'finish':9s} {'prompt':>8s} {'reply':>6s} {'kv peak':>8s} "
              f"{'seconds':>8s}  kept/total tokens")  # fmt: skip
        for row in rows:
            plan = row["plan"] or {}
            kept = f"{plan.get('kept_tokens', 0):,}/{plan.get('total_tokens', 0):,}"
            print(f"{row['strategy']:12s} {row['finish_reason']:9s} {row['prompt_tokens']:>8,} "
                  f"{row['completion_tokens']:>6,} {row['kv_peak_cells']:>8,} "
                  f"{row['seconds']:>8.1f}  {kept}")  # fmt: skip
    if any(r.finish_reason == "cancelled" for r in results):
        return EXIT_CANCELLED
    return EXIT_OK


def _print_event(ev: object) -> None:
    from app.core.jobs.tasks import ChunkEvaluated, LanesStarted, PartialResult, PlanReady

    if isinstance(ev, PlanReady):
        print(f"plan {ev.strategy}: {ev.kept_tokens:,} of {ev.total_tokens:,} tokens reach the "
              f"model in {ev.passes} pass(es) of at most {ev.budget:,} tokens",
              file=sys.stderr)  # fmt: skip
    elif isinstance(ev, LanesStarted):
        print(f"--- {ev.windows} replies, {ev.lanes} at a time in parallel lanes ---",
              file=sys.stderr)  # fmt: skip
    elif isinstance(ev, ChunkEvaluated):
        pass  # too many to print; --json has them
    elif isinstance(ev, PartialResult):
        print(f"\n--- {ev.step} done ---", file=sys.stderr)


def add_commands(sub: Any) -> None:
    from app.core.jobs.tasks import DEFAULT_LANES
    from app.core.planning.strategies import STRATEGIES

    for name in ("run", "compare"):
        if name == "run":
            p = sub.add_parser("run", help="run a job on a document, streaming its events")
            p.add_argument("--strategy", required=True, help=", ".join(STRATEGIES))
        else:
            p = sub.add_parser("compare", help="the same job under several strategies")
            p.add_argument("--strategies", required=True, help="comma-separated, e.g. head,tail")
        p.add_argument("document")
        p.add_argument("--task", default="summarize", help=", ".join(TASKS))
        p.add_argument("--question", action="append", help="for ask (repeatable)")
        p.add_argument("--instruction", help="for extract: what to do with each part")
        p.add_argument("--model", help="GGUF model (default: the default model)")
        p.add_argument("--n-ctx", type=int,
                       help=f"context size (default {LOCAL_N_CTX}; with --engine: the "
                            f"server's)")  # fmt: skip
        p.add_argument("--max-tokens", type=int, default=256, help="longest reply (default 256)")
        p.add_argument("--db", help="history database (default: the user's)")
        p.add_argument("--keep-kv", action="store_true",
                       help="save the KV state with the run, so a rollback resumes instantly "
                            "(tens of MB per run)")  # fmt: skip
        p.add_argument("--json", action="store_true", help="print JSON lines, one per event")
        lanes_help = (f"the map phase's replies generated this many at a time, as parallel "
                      f"sequences (default {DEFAULT_LANES}; 0: one at a time)")  # fmt: skip
        p.add_argument("--lanes", type=int, default=DEFAULT_LANES, help=lanes_help)
        p.add_argument("--audit", action="store_true",
                       help="check against llama.cpp that the model saw exactly the plan shown; "
                            "exit 5 on any mismatch")  # fmt: skip
        add_sampling_options(p)
        add_engine_options(p)
        p.set_defaults(func=cmd_run)
