"""Planning and counting a document in a child process, so this process's GIL stays free.

Chunking and counting a 50 MB document is tens of seconds of mostly pure Python plus regex
scans that hold the GIL for hundreds of milliseconds; on a thread of the GUI process that
freezes the window. :class:`PlanProcess` sends the work to one long-lived child instead, started
lazily as ``python -P -m app.core.planning.process`` (the GUI process has threads, so it never
forks; and unlike ``multiprocessing``'s spawn, which runs ``python -c`` and so puts the working
directory first on the child's path, nothing in the folder the app was started from can stand in
for the app or the standard library: see child_process.py). The child reads the
document from its file itself (pickling 50 MB and ~400k blocks would hold the GIL too) and checks
that it is the same file by its sha256; it keeps the latest document and a :class:`Planner` per
counter, so chunkings are shared between requests. Its :class:`~app.core.planning.cache.PlanCache`
(memory and disk) outlives both: a document opened again, here or after a restart, is neither
read nor counted for work already done. Plans come back as arrays (see plan_codec).

Calls block and may come from any thread; one request is in the child at a time. A request
given a ticket older than the newest ticket is skipped (:class:`Superseded`) if it has not
started. A child that dies costs the call in flight one clear error; the next call starts
another. Requests and replies travel as pickles over a socket pair, as the engine host's do.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from app.core import config
from app.core.child_process import child_env, module_command
from app.core.documents import Document, DocumentError
from app.core.documents.isolated import read_document
from app.core.documents.model import ContentChanged
from app.core.gc_pause import gc_paused
from app.core.planning.cache import BoundedLru, doc_id, on_disk
from app.core.planning.codec import pack_plan, unpack_plan
from app.core.planning.frame import FrameSource, ServerTemplate
from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner, plan_for, question_for
from app.core.tokens import counter_for_key

CLOSE_TIMEOUT_S = 5.0
POLL_S = 0.05  # how often a wait looks at the child, where the system gives no handle on its end


class Superseded(Exception):
    """A newer request replaced this one before it started; its caller drops it silently."""


class PlanProcessError(RuntimeError):
    """The planning process stopped, or failed in a way that has no better name."""


class DocumentChanged(DocumentError):
    """The file on disk is no longer the document that was opened."""


_ERRORS: dict[str, type[Exception]] = {
    "changed": DocumentChanged,
    "document": DocumentError,
    "value": ValueError,
    "os": OSError,
}


ANSWERS_KEPT = 8  # plans and counts this process keeps, to answer again without the child
ANSWER_ROWS = 600_000  # chunks and spans in those plans, ~150 bytes each


@dataclass
class AnswerStats:
    """Requests made of :class:`PlanProcess`, and how many it answered without the child."""

    asked: int = 0
    answered_here: int = 0


class PlanProcess:
    """The handle on the planning child; blocking calls, safe from any thread.

    Answers are kept (a few, by document sha256 and every parameter of the request): asking
    again, after a switch of strategy and back or for the same bytes opened again, returns
    the plan already made without a trip to the child.
    """

    def __init__(self) -> None:
        self.stats = AnswerStats()
        self._answers = BoundedLru(ANSWERS_KEPT, ANSWER_ROWS)
        self._lock = threading.Lock()  # one request in the child at a time
        self._tickets = threading.Lock()
        self._newest = 0
        self._closed = False
        self._cancelling = False  # cancel() was called for the request in flight
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._ended: int | None = None  # a descriptor readable once the child has ended
        _open.add(self)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def ticket(self) -> int:
        """A new generation: requests holding an older ticket are skipped until they start."""
        with self._tickets:
            self._newest += 1
            return self._newest

    def plan(
        self,
        doc: Document,
        counter_key: str,
        strategy: str,
        *,
        model: FrameSource,
        n_ctx: int,
        reserve: int,
        instruction: str,
        question: str = "",
        ticket: int | None = None,
    ) -> Plan:
        """``plan_for`` on the child's copy of ``doc``; equal to the plan made in this process.
        ``model`` frames the document: a GGUF's path, a server's template, or None. ``question``:
        what `retrieve` ranks the document against (ignored by the other strategies)."""
        if model is not None and not isinstance(model, ServerTemplate):
            model = os.fspath(model)
        args = {"strategy": strategy, "model": model, "n_ctx": n_ctx, "reserve": reserve,
                "instruction": instruction,
                "question": question_for(strategy, question)}  # fmt: skip
        key = ("plan", doc.sha256, doc.format, counter_key, *args.values())
        found: Plan | None = self._answered(key, ticket)  # a "plan" key holds a Plan
        if found is not None:
            return found
        packed = self._call("plan", doc, counter_key, ticket, **args)
        plan = unpack_plan(packed)  # outside the lock: Python that lets the GIL change hands
        self._keep(key, plan, len(plan.chunks) + len(plan.kept) + len(plan.dropped))
        return plan

    def count(self, doc: Document, counter_key: str, ticket: int | None = None) -> int:
        """The tokens of the whole document by the counter ``counter_key`` names."""
        key = ("count", doc.sha256, doc.format, counter_key)
        found: int | None = self._answered(key, ticket)  # a "count" key holds an int
        if found is not None:
            return found
        n = int(self._call("count", doc, counter_key, ticket))
        self._keep(key, n, 1)
        return n

    def child_stats(self) -> dict[str, int]:
        """The child's figures: chunkings, plans and counts made and reused (see
        :class:`~app.core.planning.cache.CacheStats`), and ``documents_read``. Starts a child if
        none runs (its figures are then all zero)."""
        return dict(self._request("stats", {}, None))

    def _answered(self, key: tuple[object, ...], ticket: int | None) -> Any | None:
        """An answer kept for ``key``, unless the request is superseded or the process closed."""
        with self._tickets:
            self.stats.asked += 1
            if self._closed or (ticket is not None and ticket < self._newest):
                return None  # _call says why
            found = self._answers.get(key)
            if found is not None:
                self.stats.answered_here += 1
            return found

    def _keep(self, key: tuple[object, ...], answer: object, rows: int) -> None:
        with self._tickets:
            self._answers.put(key, answer, rows)

    def cancel(self) -> bool:
        """Stop the request in flight, if any: its child is killed and the call ends as
        :class:`Superseded`; the next request starts a new child (which reads the document
        again). An idle child is left alone, with its caches. True when there was one."""
        if not self._lock.locked():
            return False
        self._cancelling = True
        with contextlib.suppress(ValueError, AttributeError):  # not started, or reaped meanwhile
            self._proc.kill()  # type: ignore[union-attr]
        return True

    def close(self) -> None:
        """End the child; safe to call more than once, and at exit. Final: later requests, and
        one in flight (its child is killed rather than waited for), end as :class:`Superseded`."""
        self._closed = True
        if not self._lock.acquire(blocking=False):
            with contextlib.suppress(ValueError, AttributeError):  # reaped meanwhile
                self._proc.kill()  # type: ignore[union-attr]
            self._lock.acquire()
        try:
            conn, proc = self._conn, self._proc
            if conn is not None and proc is not None and proc.poll() is None:
                try:
                    conn.send(("close", {}))
                    if conn.poll(CLOSE_TIMEOUT_S):
                        conn.recv()
                except (OSError, EOFError):
                    pass
            self._reap()
        finally:
            self._lock.release()

    # ----- plumbing -----

    def _call(self, op: str, doc: Document, counter_key: str, ticket: int | None,
              **kwargs: Any) -> Any:  # fmt: skip
        if doc.path is None:
            raise ValueError(f"{doc.name} has no file for the planning process to read")
        request = {"path": os.fspath(doc.path), "sha256": doc.sha256, "format": doc.format,
                   "key": counter_key, **kwargs}  # fmt: skip
        return self._request(op, request, ticket)

    def _request(self, op: str, request: dict[str, Any], ticket: int | None) -> Any:
        with self._lock:
            if self._closed:
                raise Superseded("the planning process is closed")
            if ticket is not None and ticket < self._newest:
                raise Superseded()
            self._cancelling = False
            try:
                reply = self._exchange(op, request)
            except (PlanProcessError, Superseded):
                raise
            except BaseException:  # interrupted: its answer must not reach the next request
                self._reap(wait_s=0)
                raise
        tag, *rest = reply
        if tag == "ok":
            return rest[0]
        kind, message = rest
        raise _ERRORS.get(kind, PlanProcessError)(message)

    def _exchange(self, op: str, request: dict[str, Any]) -> Any:
        """Send one request and wait for its reply, or for the child's end (lock held)."""
        conn, proc = self._start()
        if self._cancelling:  # cancelled while its child was starting
            self._reap(wait_s=0)
            raise Superseded("cancelled")
        try:
            conn.send((op, request))
        except OSError:
            raise self._died() from None
        while True:
            handles: list[Any] = [conn] if self._ended is None else [conn, self._ended]
            ready = wait(handles, timeout=None if self._ended is not None else POLL_S)
            if conn in ready:
                break
            if proc.poll() is not None:
                raise self._died()
        try:
            return conn.recv()  # an answer first, even from a child that then died
        except (EOFError, OSError):
            raise self._died() from None

    def _start(self) -> tuple[Connection, subprocess.Popen[bytes]]:
        """The running child's pipe and process, starting one if there is none (lock held)."""
        if self._proc is not None and self._conn is not None and self._proc.poll() is None:
            return self._conn, self._proc
        self._reap()
        ours, theirs = socket.socketpair()
        with theirs:
            proc = subprocess.Popen(
                module_command("app.core.planning.process", "--fd", str(theirs.fileno())),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=child_env(),
                start_new_session=True,  # a Ctrl+C in the terminal is this process's to handle
            )  # fmt: skip
        self._conn, self._proc = Connection(ours.detach()), proc
        with contextlib.suppress(AttributeError, OSError):  # Linux 5.3+; elsewhere, polled
            self._ended = os.pidfd_open(proc.pid)
        return self._conn, proc

    def _died(self) -> Exception:
        """The child is gone: reap it and say so in one sentence (lock held)."""
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(1)
        self._reap(wait_s=0)
        if self._closed:
            return Superseded("the planning process is closed")
        if self._cancelling:
            return Superseded("cancelled")
        return PlanProcessError(f"The planning process stopped ({_describe(code)}); "
                                "the next plan starts a new one.")  # fmt: skip

    def _reap(self, wait_s: float = CLOSE_TIMEOUT_S) -> None:
        conn, proc, ended = self._conn, self._proc, self._ended
        self._conn = self._proc = self._ended = None
        if conn is not None:
            conn.close()
        if ended is not None:
            os.close(ended)
        if proc is not None:
            try:
                proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(CLOSE_TIMEOUT_S)


def _describe(exitcode: int | None) -> str:
    if exitcode is None:
        return "it stopped answering"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


_open: weakref.WeakSet[PlanProcess] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for process in list(_open):
        process.close()


# ----- the child -------------------------------------------------------------------------------


class _Child:
    """The child's state: the latest document, a planner per counter for it, and the cache
    (memory and disk) that outlives both."""

    def __init__(self) -> None:
        self.cache = on_disk()
        self.doc: Document | None = None
        self.planners: dict[tuple[str, str], Planner] = {}
        self.changed: set[tuple[str, str]] = set()  # (path, sha256) found changed on disk
        self.request: dict[str, Any] = {}
        self.documents_read = 0

    def document(self, request: dict[str, Any]) -> Document:
        path, sha = request["path"], request["sha256"]
        doc = self.doc
        if doc is not None and doc.sha256 == sha and doc.format == request["format"]:
            return doc  # the same bytes read the same way, wherever the file is now
        if (path, sha) not in self.changed:
            self.doc = None  # free the old one first
            try:  # text is hashed before it is decoded; HTML, PDF and DOCX are parsed in the
                # reader's capped child, as when the file was opened (never here, uncapped)
                with gc_paused():  # ~400k blocks, none of them garbage
                    doc = self.doc = read_document(path, format=request["format"],
                                                   expect_sha256=sha)  # fmt: skip
                self.documents_read += 1
                return doc
            except ContentChanged:
                self.changed.add((path, sha))
        raise DocumentChanged(f"{os.path.basename(path)} changed on disk since it was opened; "
                              "open it again to plan it.")  # fmt: skip

    def planner(self, request: dict[str, Any]) -> Planner:
        """The planner of the requested document, which reads its file only for work the
        cache has not seen done."""
        name, key = doc_id(request["sha256"], request["format"]), request["key"]
        if (name, key) not in self.planners:
            self.planners = {k: p for k, p in self.planners.items() if k[0] == name}
            self.planners[name, key] = Planner(lambda: self.document(self.request),
                                               counter_for_key(key), cache=self.cache,
                                               doc_id=name)  # fmt: skip
        self.request = request  # where the planner reads its document, should it need to
        return self.planners[name, key]

    def plan(self, request: dict[str, Any]) -> dict[str, Any]:
        plan = plan_for(self.planner(request), request["strategy"], request["model"],
                        n_ctx=request["n_ctx"], reserve=request["reserve"],
                        instruction=request["instruction"],
                        question=request.get("question", ""))  # fmt: skip
        return pack_plan(plan)

    def count(self, request: dict[str, Any]) -> int:
        return self.planner(request).count()

    def stats(self, _request: dict[str, Any]) -> dict[str, int]:
        return self.cache.stats.as_dict() | {"documents_read": self.documents_read}


def _kind(exc: Exception) -> str:
    for kind, cls in _ERRORS.items():
        if isinstance(exc, cls):
            return kind
    return "other"


def _serve(conn: Connection) -> None:
    """The child's loop: one request, one reply, until told to close or the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the parent's
    child = _Child()
    handlers = {"plan": child.plan, "count": child.count, "stats": child.stats}
    while True:
        try:
            op, request = conn.recv()
        except (EOFError, OSError):
            return
        if op == "close":
            conn.send(("ok", None))
            return
        try:
            reply: tuple[Any, ...] = ("ok", handlers[op](request))
        except Exception as exc:  # sent back: the caller raises it with the child's words
            reply = ("err", _kind(exc), str(exc) or type(exc).__name__)
        conn.send(reply)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the child: ``python -P -m app.core.planning.process --fd N``."""
    parser = argparse.ArgumentParser(prog="contextlens-planner")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket for messages")
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    try:
        _serve(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    with config.using():  # the environment, read once (app/core/config.py)
        main()
