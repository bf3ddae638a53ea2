"""contextlens-cli batch DIR: one job over every document in a folder, several at a time.

``--concurrency N`` keeps N documents in flight (a server's parallel slots; the local engine runs
one). A server that says how many requests it serves at once is never sent more: N is lowered to
its slots, said once on stderr (llama-cpp-python's server serves one and, by default, cuts a reply
short when another request arrives). Each finished document is recorded in the history as it
completes, by this thread alone (the one writer), so a batch stopped by Ctrl+C, a crash or a server
that went away is resumed by running the same command again: documents already done the same way
are skipped. ``--json``
prints a ``document`` line per document and a last ``done`` line with the summary.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    BadInput,
    add_task_options,
    db_path,
    fail,
    sentence,
    sigint_cancels,
    warn,
)
from app.cli.documents import model_path_or_default, read_document
from app.cli.engine import (
    LOCAL_N_CTX,
    add_engine_options,
    check_remote_args,
    open_engine,
)
from app.cli.jobs import job_spec
from app.cli.sampling import add_sampling_options
from app.cli.snapshots import open_history
from app.services.errors import BadRequest

if TYPE_CHECKING:
    from app.services.job_engine import JobEngine
    from app.services.jobs import JobSpec

MAX_CONCURRENCY = 64


@dataclass
class _Outcome:
    """One document's end: done (with its result), skipped, unreadable or failed."""

    path: Path
    status: str  # "done", "skipped", "unreadable", "failed", "cancelled"
    result: Any = None
    doc: Any = None
    message: str = ""
    version: int | None = None
    seconds: float = 0.0


def documents_in(folder: Path, pattern: str, recursive: bool) -> list[Path]:
    """The files of ``folder`` matching ``pattern``, in name order; hidden ones left out."""
    if not folder.is_dir():
        raise BadInput(f"{folder} is not a folder")
    found = folder.rglob(pattern) if recursive else folder.glob(pattern)
    files = sorted(p for p in found if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))  # fmt: skip
    if not files:
        raise BadInput(f"no documents matching {pattern!r} in {folder}")
    return files


def _check(args: argparse.Namespace) -> JobSpec:
    spec = job_spec(args, [args.strategy])
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise BadInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
    if args.concurrency > 1 and not args.engine:
        raise BadInput("--concurrency above 1 needs --engine URL: the local engine runs one "
                       "request at a time")  # fmt: skip
    check_remote_args(args)
    return spec


class _Progress:
    """One line on stderr: redrawn in place on a terminal, a line per document otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.counts = {"done": 0, "skipped": 0, "unreadable": 0, "failed": 0, "cancelled": 0}
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def rate(self) -> float:
        minutes = (time.perf_counter() - self.t0) / 60
        return self.counts["done"] / minutes if minutes > 0 else 0.0

    def add(self, outcome: _Outcome) -> None:
        self.counts[outcome.status] += 1
        width = 24
        filled = width * self.finished // max(1, self.total)
        bar = "#" * filled + "-" * (width - filled)
        c = self.counts
        line = (f"batch [{bar}] {self.finished}/{self.total}: {c['done']} done, "
                f"{c['skipped']} skipped, {c['failed']} failed, {c['unreadable']} unreadable, "
                f"{self.rate():.1f} documents/min")  # fmt: skip
        if self.tty:
            print(f"\r{line}", end="", file=sys.stderr, flush=True)
        else:
            note = f" ({outcome.message})" if outcome.message else ""
            print(f"{line} — {outcome.path.name}: {outcome.status}{note}", file=sys.stderr,
                  flush=True)  # fmt: skip

    def end(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def cmd_batch(args: argparse.Namespace) -> int:
    from app.core.engine.types import EngineError, LoadSettings

    try:
        spec = _check(args)
        paths = documents_in(Path(args.folder).expanduser(), args.glob, args.recursive)
        settings = LoadSettings(n_ctx=args.n_ctx or LOCAL_N_CTX)
        settings.validate()
        if args.model:
            model_path_or_default(args.model)
        from app.services import versions  # the store: only once the input is good

        versions.check_writable(db_path(args.db))
    except (BadRequest, ValueError) as exc:
        return fail(EXIT_BAD_INPUT, sentence(exc), args.json)

    stop = threading.Event()
    try:
        with (
            sigint_cancels(stop) as watch,
            open_engine(args, settings, n_ctx_given=args.n_ctx) as session,
        ):
            watch(session)
            assert session.loaded is not None
            for warning in session.loaded.warnings:
                warn(warning)
            args.concurrency = _in_flight(args.concurrency, session.server)
            return _run(args, spec, paths, session, stop)
    except BadRequest as exc:
        return fail(EXIT_BAD_INPUT, sentence(exc), args.json)
    except EngineError as exc:
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    except ValueError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)


def _in_flight(concurrency: int, server: Any) -> int:
    """The documents to keep in flight: ``--concurrency``, but never more than the requests the
    server serves at once, when it says (said once, on stderr)."""
    slots = getattr(server, "slots", None)
    if not slots or concurrency <= slots:
        return concurrency
    what = "request" if slots == 1 else "requests"
    docs = "document" if slots == 1 else "documents"
    print(f"warning: {server.url} ({server.kind}) serves {slots} {what} at a time: "
          f"{slots} {docs} in flight, not the {concurrency} of --concurrency", file=sys.stderr,
          flush=True)  # fmt: skip
    return slots


def _run(args: argparse.Namespace, spec: JobSpec, paths: list[Path], session: JobEngine,
         stop: threading.Event) -> int:  # fmt: skip
    """Every document through ``spec``, ``args.concurrency`` at a time; each result recorded
    by this thread as it comes (the store's one writer)."""
    from app.core.jobs.events import JobFinished
    from app.core.jobs.options import CancelToken
    from app.core.planning.strategies import Planner

    facts = session.facts()
    progress = _Progress(len(paths))
    todo: queue.Queue[Path] = queue.Queue()
    for path in paths:
        todo.put(path)
    done_q: queue.Queue[_Outcome | None] = queue.Queue()
    engine_gone = threading.Event()
    cancel = CancelToken()  # one for every document in flight
    h = open_history(args.db)

    def one(path: Path) -> _Outcome:
        t0 = time.perf_counter()
        try:
            doc = read_document(str(path))
        except BadInput as exc:
            return _Outcome(path, "unreadable", message=str(exc))
        found = h.done_before(doc, spec, session.n_ctx, facts)
        if found is not None:
            return _Outcome(path, "skipped", message=f"done before as version #{found}",
                            version=found)  # fmt: skip
        counter = session.counter
        result = None
        assert counter is not None
        for ev in session.run(doc.text, spec, planner=Planner(doc, counter), cancel=cancel):
            if isinstance(ev, JobFinished):
                result = ev.result
        seconds = time.perf_counter() - t0
        if result is None or result.finish_reason == "cancelled":
            return _Outcome(path, "cancelled", result, doc, "cancelled", seconds=seconds)
        problem = result.error or result.refused
        if problem:
            return _Outcome(path, "failed", result, doc, problem, seconds=seconds)
        return _Outcome(path, "done", result, doc, seconds=seconds)

    def worker() -> None:
        while not (stop.is_set() or engine_gone.is_set()):
            try:
                path = todo.get_nowait()
            except queue.Empty:
                break
            try:
                done_q.put(one(path))
            except Exception as exc:  # reported for this document; the others go on
                done_q.put(_Outcome(path, "failed", message=f"{type(exc).__name__}: {exc}"))
        done_q.put(None)

    threads = [threading.Thread(target=worker, name=f"batch-{i}", daemon=True)
               for i in range(min(args.concurrency, len(paths)))]  # fmt: skip
    for t in threads:
        t.start()
    running = len(threads)
    try:
        while running:
            outcome = done_q.get()
            if outcome is None:
                running -= 1
                continue
            if stop.is_set():
                cancel.set()
            if outcome.result is not None and outcome.status in ("done", "failed"):
                # the one writer: results are recorded here, as each document ends
                recorded = h.record_result(outcome.doc, spec, outcome.result, facts)
                outcome.version = recorded.versions[0]
            if (
                outcome.status == "failed"
                and outcome.result is not None
                and not (outcome.result.refused or _engine_answers(session))
            ):
                engine_gone.set()  # the engine itself is gone: stop, keep what is done
                cancel.set()
            progress.add(outcome)
            if args.json:
                print(json.dumps(_document_line(outcome)), flush=True)
    finally:
        for t in threads:
            t.join(timeout=60)
        progress.end()
        h.close()
    return _summary(args, progress, len(paths), stop.is_set() and not engine_gone.is_set(),
                    engine_gone.is_set())  # fmt: skip


def _engine_answers(session: JobEngine) -> bool:
    """After a failed document: is the engine still there for the next one?"""
    check = getattr(session.engine, "reachable", None)
    if check is not None:
        return bool(check())
    return bool(getattr(session.engine, "alive", True))


def _document_line(o: _Outcome) -> dict[str, Any]:
    line: dict[str, Any] = {"type": "document", "path": str(o.path), "status": o.status,
                            "version": o.version, "seconds": round(o.seconds, 3)}  # fmt: skip
    if o.message:
        line["message"] = o.message
    if o.result is not None:
        r = o.result
        line.update(finish_reason=r.finish_reason, prompt_tokens=r.prompt_tokens,
                    completion_tokens=r.completion_tokens, kv_peak_cells=r.kv_peak_cells,
                    truncated=r.truncated,
                    output="\n\n".join(out.text for out in r.outputs))  # fmt: skip
    return line


def _summary(args: argparse.Namespace, progress: _Progress, total: int, cancelled: bool,
             engine_gone: bool) -> int:  # fmt: skip
    c = progress.counts
    seconds = time.perf_counter() - progress.t0
    not_run = total - progress.finished
    summary = {"type": "done", "documents": total, **c, "not_run": not_run,
               "seconds": round(seconds, 3),
               "documents_per_minute": round(progress.rate(), 3)}  # fmt: skip
    if args.json:
        print(json.dumps(summary), flush=True)
    print(f"{total} documents: {c['done']} done, {c['skipped']} skipped (done before), "
          f"{c['failed']} failed, {c['unreadable']} unreadable, {not_run + c['cancelled']} not "
          f"run, in {seconds:.1f} s ({progress.rate():.2f} documents/min)",
          file=sys.stderr)  # fmt: skip
    if engine_gone:
        print("error: the engine stopped answering; run the same command again to go on "
              "where it stopped", file=sys.stderr)  # fmt: skip
        return EXIT_ENGINE_CRASHED
    if cancelled:
        print("error: cancelled; run the same command again to go on where it stopped",
              file=sys.stderr)  # fmt: skip
        return EXIT_CANCELLED
    if c["failed"]:
        return EXIT_ENGINE_CRASHED
    if c["unreadable"]:
        return EXIT_BAD_INPUT
    return EXIT_OK


def add_commands(sub: Any) -> None:
    from app.core.jobs.options import DEFAULT_LANES
    from app.core.planning.strategies import STRATEGIES

    p = sub.add_parser("batch", help="run a job over every document in a folder (resumable)")
    p.add_argument("folder", metavar="DIR")
    p.add_argument("--strategy", required=True, help=", ".join(STRATEGIES))
    add_task_options(p)
    p.add_argument("--concurrency", type=int, default=1,
                   help="documents in flight at once (default 1; more needs --engine: set it "
                        "to the server's parallel slots, which it is lowered to when the "
                        "server says them)")  # fmt: skip
    p.add_argument("--glob", default="*", help="which files (default: all; e.g. '*.pdf')")
    p.add_argument("--recursive", action="store_true", help="also the folders inside DIR")
    p.add_argument("--model", help="GGUF model (default: the default model)")
    p.add_argument(
        "--n-ctx",
        type=int,
        help=f"context size (default {LOCAL_N_CTX}; with --engine: the server's)",
    )
    p.add_argument("--max-tokens", type=int, default=256, help="longest reply (default 256)")
    p.add_argument(
        "--lanes",
        type=int,
        default=DEFAULT_LANES,
        help="a map phase's replies in parallel (0: one at a time)",
    )
    p.add_argument("--db", help="history database (default: the user's)")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    add_sampling_options(p)
    add_engine_options(p)
    p.set_defaults(func=cmd_batch, keep_kv=False, audit=False)
