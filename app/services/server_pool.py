"""Several inference servers used as one: a pool of OpenAI-compatible servers running the same
model in the same context.

Each member has its own :class:`JobEngine` session (its own connection, counter and in-flight
gate), so a batch keeps every server's slots full from one queue and a job moves whole from a
server that failed to one that is up. At connect every server is asked, in parallel, what it
runs: the pool is refused in one sentence when they serve different models (their ids differ, or
their tokenizers disagree on a probe text: a plan counted on one server must hold on any other)
or different context sizes (unless the smallest is used for all, which any server can run). A
server that does not answer, at connect or later, is "lost": it is probed in a thread of its
own, waiting longer after each failed probe (a dead server is never hammered, and never retried
forever in the caller's path), and taken back when it answers and still agrees with the others.
What grows with the number of servers is one probe thread per lost server and one session per
server; nothing grows with the documents' length.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from app.core.engine.api import Engine
from app.core.engine.remote import ServerInfo
from app.core.engine.remote_http import (
    Client,
    Connection,
    ServerError,
    normalize_url,
    same_server,
)
from app.core.engine.types import EngineError, LoadedModel
from app.core.jobs.tasks import CancelToken
from app.core.planning.strategies import Planner
from app.core.tokens import TokenCounter, probe_text
from app.services.errors import BadRequest
from app.services.jobs import EngineFacts, JobRun, JobSpec
from app.services.server_spec import ServerSpec

UP, LOST = "up", "lost"
ANSWER_TIMEOUT_S = 10.0  # a quick probe waits at most this (or the connection's timeout)
# the face's words for "use the smallest context", named in the refusal
SMALLEST_CONTEXT_HINT = "--smallest-context, or “Use the smallest context” in the window"


class PoolSession(Protocol):
    """What the pool needs of a member's session: a JobEngine (app/services/job_engine.py),
    which builds on this module and so is handed in (``new_session``), never imported here."""

    def connect(self, spec: ServerSpec) -> LoadedModel: ...

    def close(self) -> None: ...

    def cancel(self) -> None: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def server(self) -> ServerInfo | None: ...

    @property
    def counter(self) -> TokenCounter | None: ...

    @property
    def loaded(self) -> LoadedModel | None: ...

    @property
    def n_ctx(self) -> int: ...

    def count(self, text: str) -> int: ...

    def model_sha256(self, path: Path | None = None) -> str: ...

    def facts(self) -> EngineFacts: ...

    def run(self, text: str, spec: JobSpec, *, planner: Planner | None = None,
            cancel: CancelToken | None = None) -> JobRun: ...  # fmt: skip


@dataclass(eq=False)
class PoolMember:
    """One server of the pool, and what it did (compared by identity: one object a server)."""

    spec: ServerSpec
    session: PoolSession | None  # connected while state == "up"
    state: str  # "up" | "lost"
    slots: int  # requests it serves at once (1 when it does not say)
    reason: str = ""  # why it was lost
    documents: int = 0  # results it produced that were recorded (the caller counts them)
    lost: int = 0  # times it was lost
    moved: int = 0  # jobs moved away from it (the caller counts them)

    @property
    def url(self) -> str:
        """The server's address as the history records it (normalized)."""
        try:
            return normalize_url(self.spec.url)
        except ValueError:
            return self.spec.url


@dataclass(frozen=True)
class _Identity:
    """What every member must share: the model, its tokens for the probe text, the context."""

    model: str
    probe_ids: tuple[int, ...]
    n_ctx: int


class ServerPool:
    """Servers running the same model, each up or lost (see the module's docstring).

    Thread-safe: batch workers call :meth:`lost` and :meth:`answers` from their threads;
    ``on_change(member)`` is called (from the thread that saw it) whenever a member is lost or
    answers again."""

    def __init__(self, specs: Sequence[ServerSpec], *, new_session: Callable[[], PoolSession],
                 smallest_context: bool = False,
                 on_change: Callable[[PoolMember], None] | None = None,
                 probe_backoff_s: tuple[float, float] = (1.0, 30.0)) -> None:  # fmt: skip
        """``new_session()``: an unconnected session for one member (``JobEngine``)."""
        if not specs:
            raise BadRequest("a pool needs at least one server")
        for i, spec in enumerate(specs):
            for other in specs[:i]:
                if same_server(spec.url, other.url):
                    raise BadRequest(f"{spec.url} is named twice in the pool")
        first, most = probe_backoff_s
        if first <= 0 or most < first:
            raise BadRequest("the probe backoff must be positive, its longest wait the longer")
        self.members = [PoolMember(spec, None, LOST, 1) for spec in specs]
        self.new_session = new_session
        self.smallest_context = smallest_context
        self.on_change = on_change
        self.probe_backoff_s = probe_backoff_s
        self._identity: _Identity | None = None
        self._model_sha256 = ""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._probing: set[int] = set()  # members (by index) a probe thread looks after

    # ----- connecting -------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        """The pool's context: every member runs jobs in this many tokens (0 before connect)."""
        return self._identity.n_ctx if self._identity is not None else 0

    @property
    def model(self) -> str:
        """The model id every member serves ("" before connect)."""
        return self._identity.model if self._identity is not None else ""

    def connect(self, cancelled: Callable[[], bool] | None = None) -> list[str]:
        """Connect every member at once; the warnings to show (each server's own, and each that
        does not answer and starts lost). BadRequest (one sentence) when the servers disagree
        or one cannot be used as given; the EngineError of the first when none answers."""
        stop = cancelled or (lambda: False)
        with ThreadPoolExecutor(max_workers=min(16, len(self.members))) as pool:
            tried = list(pool.map(lambda m: self._attempt(m.spec, stop), self.members))
        warnings: list[str] = []
        failures: list[EngineError] = []
        try:
            for member, (session, error) in zip(self.members, tried, strict=True):
                if session is not None:
                    member.session, member.state = session, UP
                    member.slots = _slots(session)
                    continue
                assert error is not None
                if not isinstance(error, ServerError) or _refused_key(error) or stop():
                    raise _as_request(error, member)
                failures.append(error)
                member.reason = str(error)
                warnings.append(f"{member.url} does not answer ({error}); it is left out and "
                                "tried again now and then")  # fmt: skip
            up = self.up()
            if not up:
                raise failures[0]
            self._identity = self._agree(up)
            first = up[0].session
            # the GGUF given for the server's model (--model), read once: every member's runs
            # are recorded with it
            self._model_sha256 = first.model_sha256() if first is not None else ""
            for member in up:
                loaded = member.session.loaded if member.session is not None else None
                if loaded is not None:
                    warnings.extend(f"{member.url}: {w}" if len(self.members) > 1 else w
                                    for w in loaded.warnings)  # fmt: skip
        except BaseException:
            self.close()
            raise
        for member in self.members:
            if member.state == LOST:
                member.lost += 1
                self._probe(member)
        return warnings

    def _agree(self, up: list[PoolMember]) -> _Identity:
        """What the members share, or BadRequest naming what differs (with the smallest
        context, members with a larger one are connected again to use the smallest)."""
        models = {m.url: m.session.server.model for m in up if m.session and m.session.server}
        if len(set(models.values())) > 1:
            listed = ", ".join(f"{url} serves {model!r}" for url, model in models.items())
            raise BadRequest(f"the servers serve different models ({listed}); a pool needs the "
                             "same model on every server")  # fmt: skip
        ids = {m.url: _probe_ids(m) for m in up}
        reference = next(iter(ids.values()))
        other = next((url for url, found in ids.items() if found != reference), None)
        if other is not None:
            first, theirs = next(iter(ids)), ids[other]
            how = (f"{first} counts the same text as {len(reference):,} tokens, {other} as "
                   f"{len(theirs):,}" if len(theirs) != len(reference) else
                   f"{first} and {other} split the same text into other tokens")  # fmt: skip
            raise BadRequest(f"the servers' tokenizers disagree ({how}); a pool needs the same "
                             "model on every server")  # fmt: skip
        sizes = {m.url: m.session.n_ctx for m in up if m.session is not None}
        smallest = min(sizes.values())
        if len(set(sizes.values())) > 1:
            if not self.smallest_context:
                listed = ", ".join(f"{url}: {n:,}" for url, n in sizes.items())
                raise BadRequest(f"the servers' context sizes differ ({listed} tokens); use the "
                                 f"smallest, {smallest:,}, on all of them "
                                 f"({SMALLEST_CONTEXT_HINT})")  # fmt: skip
            for member in up:
                if member.session is not None and member.session.n_ctx != smallest:
                    member.spec = replace(member.spec, n_ctx=smallest)
                    member.session.close()
                    member.session = None
                    member.session = self._connected(member.spec)
        if self.smallest_context:  # a member that comes back later runs at this size too
            for member in self.members:
                member.spec = replace(member.spec, n_ctx=smallest)
        return _Identity(next(iter(models.values()), ""), reference, smallest)

    # ----- state ------------------------------------------------------------------------------

    def up(self) -> list[PoolMember]:
        """The members that answer now, in the order given."""
        with self._lock:
            return [m for m in self.members if m.state == UP]

    def facts(self, member: PoolMember) -> EngineFacts:
        """The engine as the history records a result of ``member`` (up or lost): its address
        and the pool's model."""
        return EngineFacts(f"{member.url} {self.model}", self._model_sha256, member.url, None)

    def lost(self, member: PoolMember, reason: str) -> None:
        """``member`` failed (``reason``, one sentence): its session is closed, it is probed
        with a backoff in a thread of its own and taken back when it answers and agrees."""
        with self._lock:
            if member.state == LOST or self._closed.is_set():
                return
            member.state, member.reason = LOST, reason
            member.lost += 1
            session, member.session = member.session, None
        if session is not None:
            session.close()  # its replies still streaming end now
        self._notify(member)
        self._probe(member)

    def answers(self, member: PoolMember) -> bool:
        """Whether ``member``'s server answers a quick request now (within the connection's
        timeout, at most :data:`ANSWER_TIMEOUT_S`): a dead server refuses the connection, a
        hung one lets it time out."""
        return _answers(member.spec)

    def close(self) -> None:
        """Close every session; the probes stop."""
        self._closed.set()
        with self._lock:
            sessions = [m.session for m in self.members if m.session is not None]
            for member in self.members:
                member.session = None
        for session in sessions:
            session.close()

    # ----- probing ----------------------------------------------------------------------------

    def _probe(self, member: PoolMember) -> None:
        index = next(i for i, m in enumerate(self.members) if m is member)
        with self._lock:
            if index in self._probing or self._closed.is_set():
                return
            self._probing.add(index)
        threading.Thread(target=self._probing_loop, args=(index,), daemon=True,
                         name=f"pool-probe-{index}").start()  # fmt: skip

    def _probing_loop(self, index: int) -> None:
        member = self.members[index]
        wait, most = self.probe_backoff_s
        try:
            while not self._closed.wait(wait):
                wait = min(wait * 2, most)
                if not _answers(member.spec):
                    continue
                try:
                    session = self._connected(member.spec, self._closed.is_set)
                except (EngineError, ValueError) as exc:
                    member.reason = str(exc)
                    continue
                problem = self._differs(member, session)
                if problem:
                    session.close()
                    member.reason = problem
                    continue
                with self._lock:
                    if self._closed.is_set():
                        session.close()
                        return
                    member.session, member.state, member.reason = session, UP, ""
                    member.slots = _slots(session)
                self._notify(member)
                return
        finally:
            with self._lock:
                self._probing.discard(index)

    def _differs(self, member: PoolMember, session: PoolSession) -> str:
        """Why a server that answers again cannot rejoin the pool, or ""."""
        identity = self._identity
        if identity is None:
            return ""
        server = session.server
        model = server.model if server is not None else ""
        if model != identity.model:
            return f"it serves {model!r} now, the pool {identity.model!r}"
        if session.n_ctx != identity.n_ctx:
            return f"its context is {session.n_ctx:,} tokens now, the pool's {identity.n_ctx:,}"
        try:
            probe = _probe_ids(PoolMember(member.spec, session, UP, 1))
        except (EngineError, ValueError) as exc:
            return str(exc)
        if probe != identity.probe_ids:
            return "it tokenizes otherwise now: another model"
        return ""

    def _connected(self, spec: ServerSpec, cancelled: Callable[[], bool] | None = None
                   ) -> PoolSession:  # fmt: skip
        """A session of its own connected to ``spec``'s server (closed again if it cannot be)."""
        session = self.new_session()
        try:
            if cancelled is not None and cancelled():
                raise ServerError(f"connecting to {spec.url} was cancelled")
            session.connect(spec)
        except BaseException:
            session.close()
            raise
        return session

    def _attempt(self, spec: ServerSpec, cancelled: Callable[[], bool]
                 ) -> tuple[PoolSession | None, Exception | None]:  # fmt: skip
        try:
            return self._connected(spec, cancelled), None
        except (EngineError, ValueError) as exc:
            return None, exc

    def _notify(self, member: PoolMember) -> None:
        if self.on_change is not None:
            self.on_change(member)


# ----- one server -----------------------------------------------------------------------------


def _slots(session: PoolSession) -> int:
    server = session.server
    return server.slots if server is not None and server.slots else 1


def _probe_ids(member: PoolMember) -> tuple[int, ...]:
    """The probe text's tokens as ``member``'s counter makes them (the server's tokenizer, the
    local GGUF's or the estimate)."""
    session = member.session
    counter = session.counter if session is not None else None
    if counter is None:
        raise EngineError(f"{member.url} is not connected")
    return tuple(counter.encode(probe_text()))


def _answers(spec: ServerSpec) -> bool:
    timeout = min(spec.timeout_s, ANSWER_TIMEOUT_S)
    connection = Connection(spec.url, api_key=spec.api_key, timeout_s=timeout,
                            connect_timeout_s=timeout, retries=1, backoff_s=0.2)  # fmt: skip
    client = Client(connection)
    try:
        client.get("/v1/models", timeout=timeout)
    except ServerError:
        return False
    finally:
        client.close()
    return True


def _refused_key(error: ServerError) -> bool:
    return error.status in (401, 403)


def _as_request(error: Exception, member: PoolMember) -> Exception:
    """A member that answered but cannot be used as given: the whole pool is refused."""
    if isinstance(error, ValueError):
        return BadRequest(f"{member.url}: {error}")
    return error
