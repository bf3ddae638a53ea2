"""contextlens-cli batch DIR: one job over every document in a folder, several at a time, on the
local engine, a server, or a pool of servers (``--engine`` more than once, ``--engines FILE``).

Each server keeps ``--concurrency`` documents in flight (default: the parallel slots it reports,
1 when it does not say), never more than its slots: a server told more is held to them, said once
on stderr (llama-cpp-python's server serves one and, by default, cuts a reply short when another
request arrives). The documents wait in one list, longest first, and each goes to the server with
the most room. Each finished document is recorded in the history as it completes, by this thread
alone (the one writer), so a batch stopped by Ctrl+C, a crash or servers that went away is resumed
by running the same command again: documents already done the same way, on any server of the
pool, are skipped.

When a document fails and its server no longer answers (killed: the connection is refused; hung:
nothing comes within ``--timeout``, and a probe times out too), the server is lost: its partial
reply is not recorded, the document goes back to the front of the list for another server, and
the pool probes the lost server until it answers again (then it gets documents again). The batch
ends when every document is done on the servers left; only when every server is lost (and, in a
pool, none comes back within ``--timeout``) does it stop with the rest left for the next run.
``--json`` prints a ``document`` line per document, a ``server`` line when a server is lost or
answers again, and a last ``done`` line with the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
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
    server_specs,
)
from app.cli.jobs import job_spec
from app.cli.sampling import add_sampling_options
from app.cli.snapshots import open_history
from app.services.errors import BadRequest

if TYPE_CHECKING:
    from app.core.jobs.options import CancelToken
    from app.services.job_engine import JobEngine
    from app.services.jobs import EngineFacts, JobSpec
    from app.services.server_pool import PoolMember, PoolSession, ServerPool

MAX_CONCURRENCY = 64
WAIT_STEP_S = 0.5  # how often a batch waiting for a lost server looks at Ctrl+C


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
    server: str | None = None  # where the result recorded ran (a server's URL)
    moved_from: list[str] = field(default_factory=list)  # servers lost while running it


@dataclass(eq=False)
class _Attempt:
    """One document sent to one server's session: its end counts only while it is still
    running (a document moved off a lost server is running there no more)."""

    path: Path
    member: PoolMember
    session: PoolSession


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


def longest_first(paths: list[Path]) -> list[Path]:
    """The documents by size, largest first (then by name). A batch ends when its last document
    does: started last, a long one would run alone while the other slots sit idle; started
    first, the short ones fill the slots around it at the end. The file's size is proxy enough
    for its tokens (reading every document to count it first would cost a pass over all)."""

    def size(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:
            return 0

    return sorted(paths, key=lambda p: (-size(p), p))


def _check(args: argparse.Namespace) -> JobSpec:
    check_remote_args(args)  # first: --engines adds its servers to --engine
    spec = job_spec(args, [args.strategy])
    if args.concurrency is not None and not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise BadInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
    if (args.concurrency or 1) > 1 and not args.engine:
        raise BadInput("--concurrency above 1 needs --engine URL: the local engine runs one "
                       "request at a time")  # fmt: skip
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

    def say(self, line: str) -> None:
        """A line of its own (a server lost or back), not overwritten by the progress line."""
        print(f"\n{line}" if self.tty else line, file=sys.stderr, flush=True)

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
        with sigint_cancels(stop) as watch:
            if args.engine:
                return _on_pool(args, spec, longest_first(paths), stop, watch)
            with open_engine(args, settings, n_ctx_given=args.n_ctx) as session:
                watch(session)
                assert session.loaded is not None
                for warning in session.loaded.warnings:
                    warn(warning)
                return _Batch(args, spec, longest_first(paths), stop, session=session).run()
    except BadRequest as exc:
        return fail(EXIT_BAD_INPUT, sentence(exc), args.json)
    except EngineError as exc:
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    except ValueError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)


def _on_pool(args: argparse.Namespace, spec: JobSpec, paths: list[Path], stop: threading.Event,
             watch: Any) -> int:  # fmt: skip
    """The batch on the servers of ``--engine`` (one or more): a pool, connected at once."""
    from app.services.job_engine import JobEngine
    from app.services.server_pool import ServerPool

    changes: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
    pool = ServerPool(server_specs(args, args.n_ctx), new_session=JobEngine,
                      smallest_context=args.smallest_context,
                      on_change=lambda m: changes.put(("change", m, m.state)))  # fmt: skip
    with contextlib.closing(pool):
        batch = _Batch(args, spec, paths, stop, pool=pool, events=changes)
        watch(batch)
        for warning in pool.connect(stop.is_set):
            warn(warning)
        return batch.run()


class _Batch:
    """Every document through ``spec`` on the pool's servers (or the local engine), each server
    kept at its own number in flight; each result recorded by the thread that calls :meth:`run`
    (the store's one writer), as it comes."""

    def __init__(self, args: argparse.Namespace, spec: JobSpec, paths: list[Path],
                 stop: threading.Event, *, pool: ServerPool | None = None,
                 session: JobEngine | None = None,
                 events: queue.Queue[tuple[str, Any, Any]] | None = None) -> None:  # fmt: skip
        from app.core.jobs.options import CancelToken
        from app.services.job_engine import ServerSpec
        from app.services.server_pool import PoolMember

        self.args, self.spec, self.stop, self.pool = args, spec, stop, pool
        self.total = len(paths)
        self.todo: deque[Path] = deque(paths)
        self.moved_from: dict[Path, list[str]] = {}
        self.events = events if events is not None else queue.Queue()
        self.cancel_token: CancelToken = CancelToken()  # one for every document in flight
        if pool is not None:
            self.members = pool.members
        else:  # the local engine, as a pool of one that cannot be waited for
            assert session is not None
            self.members = [PoolMember(ServerSpec("local"), session, "up", 1)]
        self.running: set[_Attempt] = set()
        self.gone = False  # every server lost with documents left
        self.progress = _Progress(self.total)

    # ----- Ctrl+C -------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop every document in flight, on every server (from the Ctrl+C handler)."""
        self.cancel_token.set()
        for member in self.members:
            session = member.session
            if session is not None:
                session.cancel()

    # ----- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        h = open_history(self.args.db)
        self.history = h
        self.capacity = {id(m): self._capacity(m, say=True) for m in self.members}
        for member in self.members:
            if member.state == "lost":  # did not answer at connect (said with the warnings)
                self._json_server(member, "lost", None)
        waiting_since: float | None = None
        try:
            while True:
                if self.stop.is_set():
                    self.cancel_token.set()
                else:
                    self._dispatch()
                if not self.running and (not self.todo or self.stop.is_set() or self.gone):
                    break
                if not self.running and not self._up():  # documents left, no server
                    waiting_since = waiting_since or self._start_waiting()
                    if waiting_since is None or (
                        time.monotonic() - waiting_since > self.args.timeout
                    ):
                        self.gone = True
                        break
                else:
                    waiting_since = None
                try:
                    kind, about, payload = self.events.get(timeout=WAIT_STEP_S)
                except queue.Empty:
                    continue
                if kind == "outcome":
                    self._finished(about, payload)
                elif kind == "change" and payload == "up":
                    member = about
                    self.capacity[id(member)] = self._capacity(member, say=False)
                    self._json_server(member, "back", None)
                    self.progress.say(f"server {member.url} answers again")
        finally:
            self.progress.end()
            h.close()
        return self._summary()

    def _start_waiting(self) -> float | None:
        """When every server is lost: the time the wait for one began, or None when there is
        nothing to wait for (the local engine, or a single server: run the command again)."""
        if self.pool is None or len(self.members) < 2:
            return None
        print(f"warning: every server of the pool is lost; waiting up to {self.args.timeout:g} s "
              "for one to answer again", file=sys.stderr, flush=True)  # fmt: skip
        return time.monotonic()

    def _up(self) -> list[PoolMember]:
        return [m for m in self.members if m.state == "up" and m.session is not None]

    def _capacity(self, member: PoolMember, *, say: bool) -> int:
        """Documents in flight on ``member``: --concurrency, or its slots, never more than the
        slots it reports (said once on stderr when --concurrency asked for more)."""
        asked = self.args.concurrency
        server = member.session.server if member.session is not None else None
        slots = server.slots if server is not None else None
        if not slots:
            return asked or 1
        if asked is None or asked <= slots:
            return asked or slots
        if say and server is not None:
            what = "request" if slots == 1 else "requests"
            docs = "document" if slots == 1 else "documents"
            print(f"warning: {server.url} ({server.kind}) serves {slots} {what} at a time: "
                  f"{slots} {docs} in flight, not the {asked} of --concurrency", file=sys.stderr,
                  flush=True)  # fmt: skip
        return slots

    def _dispatch(self) -> None:
        """Documents from the front of the list to the servers up with room, the emptiest
        first (in the order given on a tie)."""
        while self.todo:
            busy = {id(m): 0 for m in self.members}
            for attempt in self.running:
                busy[id(attempt.member)] += 1
            room = [(busy[id(m)] / self.capacity[id(m)], i, m)
                    for i, m in enumerate(self._up())
                    if busy[id(m)] < self.capacity[id(m)]]  # fmt: skip
            if not room:
                return
            member = min(room, key=lambda r: (r[0], r[1]))[2]
            assert member.session is not None
            attempt = _Attempt(self.todo.popleft(), member, member.session)
            self.running.add(attempt)
            threading.Thread(target=self._document, args=(attempt,), daemon=True,
                             name=f"batch-{attempt.path.name}").start()  # fmt: skip

    def _document(self, attempt: _Attempt) -> None:
        try:
            outcome = self._one(attempt.path, attempt.session)
        except Exception as exc:  # reported for this document; the others go on
            outcome = _Outcome(attempt.path, "failed", message=f"{type(exc).__name__}: {exc}")
        self.events.put(("outcome", attempt, outcome))

    def _facts(self, member: PoolMember) -> EngineFacts:
        if self.pool is not None:
            return self.pool.facts(member)
        assert member.session is not None
        return member.session.facts()

    def _n_ctx(self, session: PoolSession) -> int:
        return self.pool.n_ctx if self.pool is not None else session.n_ctx

    def _one(self, path: Path, session: PoolSession) -> _Outcome:
        from app.core.jobs.events import JobFinished
        from app.core.planning.strategies import Planner

        t0 = time.perf_counter()
        try:
            doc = read_document(str(path))
        except BadInput as exc:
            return _Outcome(path, "unreadable", message=str(exc))
        n_ctx = self._n_ctx(session)
        for where in self.members:  # done before on any server of the pool: skipped
            found = self.history.done_before(doc, self.spec, n_ctx, self._facts(where))
            if found is not None:
                return _Outcome(path, "skipped", message=f"done before as version #{found}",
                                version=found)  # fmt: skip
        counter = session.counter
        result = None
        assert counter is not None
        for ev in session.run(doc.text, self.spec, planner=Planner(doc, counter),
                              cancel=self.cancel_token):  # fmt: skip
            if isinstance(ev, JobFinished):
                result = ev.result
        seconds = time.perf_counter() - t0
        if result is None or result.finish_reason == "cancelled":
            return _Outcome(path, "cancelled", result, doc, "cancelled", seconds=seconds)
        problem = result.error or result.refused
        if problem:
            return _Outcome(path, "failed", result, doc, problem, seconds=seconds)
        return _Outcome(path, "done", result, doc, seconds=seconds)

    # ----- one document's end -------------------------------------------------------------------

    def _finished(self, attempt: _Attempt, outcome: _Outcome) -> None:
        if attempt not in self.running:  # moved off its lost server already: another runs it
            return
        self.running.discard(attempt)
        member = attempt.member
        if self.stop.is_set():
            self.cancel_token.set()
        if self._server_gone(member, outcome, attempt.session):
            self._move(attempt, outcome)
            return
        outcome.moved_from = self.moved_from.get(outcome.path, [])
        if outcome.result is not None and outcome.status in ("done", "failed"):
            # the one writer: results are recorded here, as each document ends
            recorded = self.history.record_result(outcome.doc, self.spec, outcome.result,
                                                  self._facts(member))  # fmt: skip
            outcome.version = recorded.versions[0]
            outcome.server = member.url if self.pool is not None else None
            member.documents += 1
        self.progress.add(outcome)
        if self.args.json:
            print(json.dumps(self._document_line(outcome)), flush=True)

    def _server_gone(self, member: PoolMember, outcome: _Outcome, session: PoolSession) -> bool:
        """Whether ``outcome`` failed because its server is gone (lost since ``session``, the
        one it ran on, was opened, or it does not answer now), rather than for a reason of its
        own (a refusal, an error the server answered with). A cancel by Ctrl+C is the
        person's, never the server's."""
        if outcome.status not in ("failed", "cancelled") or self.stop.is_set():
            return False
        if outcome.result is not None and outcome.result.refused:
            return False
        if member.state == "lost" or member.session is not session:
            return True
        if self.pool is not None:
            return not self.pool.answers(member)
        return not _engine_answers(member.session)

    def _move(self, attempt: _Attempt, outcome: _Outcome) -> None:
        """The document back to the front of the list, its partial reply not recorded; its
        server lost (probed by the pool until it answers again), and every other document
        running there moved too, at once: a hung server would hold each until its own reply
        timeout, and their ends, when they come, are left out."""
        member = attempt.member
        reason = member.reason if member.state == "lost" else outcome.message
        reason = reason or "it stopped answering"
        if self.pool is not None:
            self.pool.lost(member, reason)
        elif member.state != "lost":
            member.state, member.reason = "lost", reason
            member.lost += 1
        others = [a for a in self.running if a.member is member]
        self.running.difference_update(others)
        for moved in [*others, attempt]:  # the one that failed ends up first in the list
            member.moved += 1
            self.moved_from.setdefault(moved.path, []).append(member.url)
            self.todo.appendleft(moved.path)
            if self.pool is not None:
                where = "moved to another server" if len(self.members) > 1 else "not run"
                self.progress.say(f"server {member.url} lost ({member.reason or reason}): "
                                  f"{moved.path.name} {where}")  # fmt: skip
                self._json_server(member, "lost", moved.path)

    def _json_server(self, member: PoolMember, event: str, document: Path | None) -> None:
        if self.args.json and self.pool is not None:
            print(json.dumps({"type": "server", "server": member.url, "event": event,
                              "reason": member.reason if event == "lost" else "",
                              "document": str(document) if document is not None else None}),
                  flush=True)  # fmt: skip

    def _document_line(self, o: _Outcome) -> dict[str, Any]:
        line: dict[str, Any] = {"type": "document", "path": str(o.path), "status": o.status,
                                "version": o.version, "seconds": round(o.seconds, 3)}  # fmt: skip
        if self.pool is not None:
            line.update(server=o.server, moved_from=o.moved_from)
        if o.message:
            line["message"] = o.message
        if o.result is not None:
            r = o.result
            line.update(finish_reason=r.finish_reason, prompt_tokens=r.prompt_tokens,
                        completion_tokens=r.completion_tokens, kv_peak_cells=r.kv_peak_cells,
                        truncated=r.truncated,
                        output="\n\n".join(out.text for out in r.outputs))  # fmt: skip
        return line

    # ----- the end ------------------------------------------------------------------------------

    def _summary(self) -> int:
        progress, total = self.progress, self.total
        c = progress.counts
        seconds = time.perf_counter() - progress.t0
        not_run = total - progress.finished
        summary = {"type": "done", "documents": total, **c, "not_run": not_run,
                   "seconds": round(seconds, 3),
                   "documents_per_minute": round(progress.rate(), 3)}  # fmt: skip
        if self.pool is not None:
            summary["servers"] = {m.url: {"documents": m.documents, "lost": m.lost,
                                          "moved": m.moved, "state": m.state}
                                  for m in self.members}  # fmt: skip
        if self.args.json:
            print(json.dumps(summary), flush=True)
        print(f"{total} documents: {c['done']} done, {c['skipped']} skipped (done before), "
              f"{c['failed']} failed, {c['unreadable']} unreadable, {not_run + c['cancelled']} "
              f"not run, in {seconds:.1f} s ({progress.rate():.2f} documents/min)",
              file=sys.stderr)  # fmt: skip
        if self.pool is not None and len(self.members) > 1:
            for m in self.members:
                docs = "document" if m.documents == 1 else "documents"
                lost = {0: "never lost", 1: "lost once"}.get(m.lost, f"lost {m.lost} times")
                print(f"{m.url}: {m.documents} {docs}, {lost}", file=sys.stderr)
        cancelled = self.stop.is_set() and not self.gone
        if self.gone:
            what = ("every server of the pool stopped answering" if len(self.members) > 1
                    else "the engine stopped answering")  # fmt: skip
            print(f"error: {what}; run the same command again to go on where it stopped",
                  file=sys.stderr)  # fmt: skip
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


def _engine_answers(session: PoolSession | None) -> bool:
    """After a failed document: is the local engine still there for the next one?"""
    if session is None:
        return False
    check = getattr(session.engine, "reachable", None)
    if check is not None:
        return bool(check())
    return bool(getattr(session.engine, "alive", True))


def add_commands(sub: Any) -> None:
    from app.core.jobs.options import DEFAULT_LANES
    from app.core.planning.strategies import STRATEGIES

    p = sub.add_parser("batch", help="run a job over every document in a folder (resumable)")
    p.add_argument("folder", metavar="DIR")
    p.add_argument("--strategy", required=True, help=", ".join(STRATEGIES))
    add_task_options(p)
    p.add_argument("--concurrency", type=int, default=None,
                   help="documents in flight at once on each server (default: the parallel "
                        "slots it reports, 1 when it does not say; never more than its slots; "
                        "the local engine runs one)")  # fmt: skip
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
