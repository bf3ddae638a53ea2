"""contextlens-cli run / compare: a job on a document, with every event as it happens.

``--json`` prints one JSON line per event (``type`` is the event's name in snake case) and a last
line of type ``done`` with the finish reason, token counts, ``kv_peak_cells`` (from llama.cpp),
``n_ctx``, ``ttft_s``, ``seconds``, ``outputs`` (each ``{text, source_spans}``) and
``recorded`` (``{session, versions, parent}``, null when the run was not recorded). ``compare``
prints a ``result`` line per strategy and a last ``done`` line with all of them.

Over a pool of servers (``--engine`` more than once, ``--engines FILE``), a server lost in the
middle of the job is said on stderr and, with ``--json``, as a line of type ``server`` (``event``
"lost", ``reason``, ``moved_to``); the job then runs again from its start on ``moved_to``, whose
events follow, and only its whole reply is the result.

A run's versions start a new history session, or with ``--session ID`` / ``--parent VERSION``
join that session's tree (same document) as children of its newest version / of VERSION: one
child per strategy of a ``compare``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import threading
from typing import TYPE_CHECKING, Any

from app.cli.common import (
    EXIT_AUDIT,
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_CONTEXT,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    add_task_options,
    add_thread_options,
    db_path,
    done_record,
    fail,
    load_settings,
    sentence,
    sigint_cancels,
    task_of,
    warn,
)
from app.cli.documents import model_path_or_default, read_document
from app.cli.engine import (
    LOCAL_N_CTX,
    add_engine_options,
    check_remote_args,
    open_engine,
)
from app.cli.sampling import add_sampling_options, sampling_from_args
from app.cli.snapshots import history
from app.services.errors import BadRequest, ServiceError

if TYPE_CHECKING:
    from app.services.jobs import JobSpec


def _type_name(event: object) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(event).__name__).lower()


def job_spec(args: argparse.Namespace, strategies: list[str]) -> JobSpec:
    """The job the flags ask for (run, compare, batch), checked: BadRequest in one sentence."""
    from app.services.jobs import JobSpec

    spec = JobSpec(task_of(args), tuple(strategies), questions=tuple(args.question or ()),
                   instruction=args.instruction or "", max_tokens=args.max_tokens,
                   lanes=args.lanes, sampling=sampling_from_args(args),
                   keep_kv=bool(getattr(args, "keep_kv", False)),
                   audit=bool(getattr(args, "audit", False)))  # fmt: skip
    spec.check()
    return spec


def cmd_run(args: argparse.Namespace) -> int:
    from app.core.engine.types import (
        EngineCrashedError,
        EngineError,
        InsufficientMemoryError,
    )
    from app.core.jobs.events import (
        JobFinished,
        PartialResult,
        ServerLost,
        StrategiesFinished,
        StrategyStarted,
        TokenBatch,
    )
    from app.core.planning.strategies import Planner

    try:
        strategies = args.strategies.split(",") if args.command == "compare" else [args.strategy]
        spec = job_spec(args, strategies)
        check_remote_args(args)
        settings = load_settings(args, n_ctx=args.n_ctx or LOCAL_N_CTX)
        settings.validate()
        doc = read_document(args.document)
        if args.model:
            model_path_or_default(args.model)  # a --model that is not there: said now
        from app.services import versions  # the store: only once the input is good

        versions.check_writable(db_path(args.db))  # now, not after a run it could not record
        target = _target(args, doc)
    except (BadRequest, ValueError) as exc:
        return fail(EXIT_BAD_INPUT, sentence(exc), args.json)

    stop = threading.Event()
    try:
        with (
            sigint_cancels(stop) as watch,
            open_engine(args, settings, n_ctx_given=args.n_ctx) as session,
        ):
            watch(session)
            assert session.loaded is not None and session.counter is not None
            for warning in session.loaded.warnings:  # past the training context, a template
                if args.json:
                    print(json.dumps({"type": "warning", "message": warning}), flush=True)
                warn(warning)
            if session.server is not None and args.json:
                print(json.dumps({"type": "server", **session.server.as_dict()}), flush=True)
            # the Document, with its structure: the chunks `plan` shows are the ones that run
            run = session.run(doc.text, spec, planner=Planner(doc, session.counter))
            in_lanes: dict[str, list[str]] = {}  # replies generated in lanes, by step
            lost = ""
            for ev in run:
                if run.outcome.lost_state != lost:  # the run stands; its KV state is lost
                    lost = run.outcome.lost_state
                    print(f"warning: the KV state was not kept: {lost}", file=sys.stderr,
                          flush=True)  # fmt: skip
                if isinstance(ev, ServerLost):  # the job runs again from its start elsewhere
                    in_lanes.clear()
                    _say_lost(ev, args.json)
                elif isinstance(ev, JobFinished):
                    if args.command == "compare" and args.json:
                        print(json.dumps({**done_record(ev.result), "type": "result"}), flush=True)
                elif isinstance(ev, StrategiesFinished) or (
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
            outcome = run.outcome
    except BadRequest as exc:
        return fail(EXIT_BAD_INPUT, sentence(exc), args.json)
    except InsufficientMemoryError as exc:
        return fail(EXIT_CONTEXT, f"does not fit: {exc}", args.json)
    except EngineCrashedError as exc:
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    except EngineError as exc:
        if stop.is_set():
            return fail(EXIT_CANCELLED, "cancelled", args.json)
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    except ValueError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)

    audit = outcome.audit
    recorded = None
    try:
        with history(args.db) as h:
            recorded = h.record_run(doc, outcome, target)  # an audit reads each run back
    except (ServiceError, ValueError, OSError) as exc:
        # the run itself succeeded: say so, keep its output
        print(f"warning: the run was not recorded in the history: {exc}", file=sys.stderr)
        if audit is not None:
            audit.fail("store", "store", f"the run was not recorded: {exc}")
    code = _report(args, outcome.results, recorded)
    if audit is None:
        return code
    _report_audit(audit, args.json)
    return EXIT_AUDIT if audit.findings else code


def _say_lost(ev: Any, as_json: bool) -> None:
    """A server of the pool was lost mid-job (a ServerLost event): said on stderr, and with
    ``--json`` as a ``server`` line, the same as ``batch`` says it."""
    if as_json:
        print(json.dumps({"type": "server", "server": ev.url, "event": "lost",
                          "reason": ev.reason, "moved_to": ev.moved_to}), flush=True)  # fmt: skip
    print(f"\nserver {ev.url} lost ({ev.reason}): running again on {ev.moved_to}",
          file=sys.stderr, flush=True)  # fmt: skip


def _target(args: argparse.Namespace, doc: Any) -> Any:
    """Where the run's versions go (``--session``, ``--parent``; neither: a new session),
    checked now against the history: BadRequest in one sentence before anything runs."""
    from app.services import versions

    target = versions.Target(args.session, args.parent)
    if target.session is not None or target.parent is not None:
        with history(args.db) as h:
            h.check_target(doc, target)
    return target


def _recorded(recorded: Any) -> dict[str, Any] | None:
    """Where a run was recorded, for ``--json`` (None: it was not)."""
    if recorded is None or not recorded.session:
        return None
    return {"session": recorded.session, "versions": list(recorded.versions),
            "parent": recorded.parent}  # fmt: skip


def _report_audit(audit: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"type": "audit", "passed": audit.ok, "counts": audit.counts.as_dict(),
                          "findings": [str(f) for f in audit.findings]}), flush=True)  # fmt: skip
    print(audit.summary(), file=sys.stderr, flush=True)
    for finding in audit.findings:
        print(f"  - {finding}", file=sys.stderr)


def _report(args: argparse.Namespace, results: list[Any], recorded: Any = None) -> int:
    """Print the last record of a run or compare (with where it was recorded: ``recorded``
    holds its session, versions and their parent); the exit code its results call for."""
    if args.command == "compare":
        return _report_compare(results, args.json, _recorded(recorded))
    result = results[-1]
    done = {**done_record(result), "recorded": _recorded(recorded)}
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


def _report_compare(results: list[Any], as_json: bool,
                    recorded: dict[str, Any] | None = None) -> int:  # fmt: skip
    from app.core.planning.plan import kept_of_document

    rows = [done_record(r) for r in results]
    if as_json:
        print(json.dumps({"type": "done", "results": rows, "recorded": recorded}), flush=True)
    else:
        print(f"\n{'strategy':12s} {'finish':9s} {'prompt':>8s} {'reply':>6s} {'kv peak':>8s} "
              f"{'seconds':>8s}  kept/total tokens")  # fmt: skip
        for r, row in zip(results, rows, strict=True):
            plan = row["plan"] or {}
            kept, total = kept_of_document(  # of the document's one total
                plan.get("kept_tokens", 0), plan.get("total_tokens", 0),
                plan.get("document_tokens", 0), dropped=r.truncated)  # fmt: skip
            print(f"{row['strategy']:12s} {row['finish_reason']:9s} {row['prompt_tokens']:>8,} "
                  f"{row['completion_tokens']:>6,} {row['kv_peak_cells']:>8,} "
                  f"{row['seconds']:>8.1f}  {kept:,}/{total:,}")  # fmt: skip
    if any(r.finish_reason == "cancelled" for r in results):
        return EXIT_CANCELLED
    return EXIT_OK


def _print_event(ev: object) -> None:
    from app.core.jobs.events import (
        ChunkEvaluated,
        KVShifted,
        LanesStarted,
        PartialResult,
        PlanReady,
        RingFallback,
        ThreadsSet,
    )

    if isinstance(ev, PlanReady):
        asked = f" for {ev.question!r}" if ev.question else ""
        kept, total = ev.of_document()  # of the total `count` and `plan` say
        print(f"plan {ev.strategy}{asked}: {kept:,} of {total:,} tokens "
              f"reach the model in {ev.passes} pass(es) of at most {ev.budget:,} tokens",
              file=sys.stderr)  # fmt: skip
    elif isinstance(ev, LanesStarted):
        print(f"--- {ev.windows} replies, {ev.lanes} at a time in parallel lanes ---",
              file=sys.stderr)  # fmt: skip
    elif isinstance(ev, ChunkEvaluated):
        pass  # too many to print; --json has them
    elif isinstance(ev, KVShifted):
        moved = f", {ev.moved:,} moved down" if ev.moved else ""
        print(f"\n[{ev.step}: KV positions {ev.start:,}..{ev.end - 1:,} evicted "
              f"({', '.join(dict.fromkeys(ev.kinds))}){moved}]", file=sys.stderr)  # fmt: skip
    elif isinstance(ev, RingFallback):
        print(f"note: {ev.strategy} re-prompts each window with the summary so far instead of "
              f"streaming through the KV ring: {ev.reason}", file=sys.stderr)  # fmt: skip
    elif isinstance(ev, PartialResult):
        print(f"\n--- {ev.step} done ---", file=sys.stderr)
    elif isinstance(ev, ThreadsSet):
        print(f"\nnote: {ev.describe()}", file=sys.stderr)


def add_commands(sub: Any) -> None:
    from app.core.jobs.options import DEFAULT_LANES
    from app.core.planning.strategies import STRATEGIES

    for name in ("run", "compare"):
        if name == "run":
            p = sub.add_parser("run", help="run a job on a document, streaming its events")
            p.add_argument("--strategy", required=True, help=", ".join(STRATEGIES))
        else:
            p = sub.add_parser("compare", help="the same job under several strategies")
            p.add_argument("--strategies", required=True, help="comma-separated, e.g. head,tail")
        p.add_argument("document")
        add_task_options(p)
        p.add_argument("--model", help="GGUF model (default: the default model)")
        p.add_argument("--n-ctx", type=int,
                       help=f"context size (default {LOCAL_N_CTX}; with --engine: the "
                            f"server's)")  # fmt: skip
        p.add_argument("--max-tokens", type=int, default=256, help="longest reply (default 256)")
        add_thread_options(p)
        p.add_argument("--db", help="history database (default: the user's)")
        p.add_argument("--session", type=int, metavar="ID",
                       help="add the new version(s) to this session of the same document, "
                            "under its newest version (default: a new session)")  # fmt: skip
        p.add_argument("--parent", type=int, metavar="VERSION",
                       help="make the new version(s) children of this version (in its "
                            "session)")  # fmt: skip
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
