"""One engine at a time — a model in the local llama.cpp child, or an inference server — and the
jobs run on it.

The window (from its engine thread) and the command line open, load, connect, run, resume and
recover through this one object, so neither face drives llama.cpp's host itself: loading a model
lets a server go and the other way round, a server never keeps KV states and is never audited,
and after llama.cpp dies a new child loads the same model again. Calls are serial: the owner
calls from one thread; only :meth:`cancel` may come from another.

A pool of servers (:meth:`JobEngine.connect_pool`) runs each job on one member that is up; when
that server is lost in the middle of a job, the job runs again from its start on the next member
up (a :class:`ServerLost` event says so), so a reply cut by a dead server never ends a job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from app.core.calibrate import Calibration, cached, calibrate, candidates, machine_key
from app.core.default_model import sha256_of
from app.core.documents import Document
from app.core.engine.api import Engine
from app.core.engine.gguf import ModelInfo
from app.core.engine.host import EngineHost
from app.core.engine.remote import NO_AUDIT, NO_KV_STATE, RemoteEngine, ServerInfo
from app.core.engine.remote_http import (
    Connection,
    ServerError,
)
from app.core.engine.types import (
    EngineCapabilities,
    EngineCrashedError,
    EngineError,
    KVState,
    LoadedModel,
    LoadSettings,
)
from app.core.jobs.audit import Audit
from app.core.jobs.events import ServerLost, StrategiesFinished
from app.core.jobs.streaming import ResidentState
from app.core.jobs.tasks import (
    CancelToken,
    JobError,
    JobFinished,
    JobResult,
    resume,
    run_strategies,
    state_after,
)
from app.core.planning.strategies import Planner
from app.core.tokens import LlamaCounter, TokenCounter, host_counter
from app.services.errors import BadRequest
from app.services.jobs import EngineFacts, JobOutcome, JobRun, JobSpec, ResumeSpec
from app.services.server_spec import ServerSpec

__all__ = ["JobEngine", "ServerSpec", "connect_remote"]  # ServerSpec: where it always was

if TYPE_CHECKING:  # the pool's members are sessions of this module's JobEngine
    from app.services.server_pool import PoolMember, PoolSession, ServerPool


def connect_remote(spec: ServerSpec, cancelled: Callable[[], bool] | None = None
                   ) -> RemoteEngine:  # fmt: skip
    """A RemoteEngine connected to the server ``spec`` names (closed again if it cannot be):
    what a session runs jobs on, or what ``generate`` and ``remote info`` talk to directly.
    ``cancelled()`` stops the connecting (ServerError)."""
    connection = Connection(spec.url, api_key=spec.api_key, timeout_s=spec.timeout_s,
                            retries=spec.retries)  # fmt: skip
    model_path = Path(spec.model_path).expanduser() if spec.model_path else None
    remote = RemoteEngine(connection, model=spec.model, n_ctx=spec.n_ctx, model_path=model_path)
    try:
        remote.connect(cancelled)
    except BaseException:
        remote.close()
        raise
    return remote


class JobEngine:
    """The engine jobs run on now, and what is known about it."""

    def __init__(self) -> None:
        self._host = EngineHost()
        self._remote: RemoteEngine | None = None
        self._model: tuple[Path, LoadSettings] | None = None  # loaded here: reloaded after a crash
        self._counter: TokenCounter | None = None
        self._loaded: LoadedModel | None = None
        self._server_gguf: Path | None = None  # the server's model as a GGUF here, when given
        self._sha: dict[Path, str] = {}
        self._cancel = CancelToken()
        # what the last job left resident in the cache (JobResult.resident), for a follow-up
        self._resident: ResidentState | None = None
        self._pool: ServerPool | None = None  # a pool of servers, instead of one
        self._member: PoolMember | None = None  # the pool's member jobs run on now

    def __enter__(self) -> JobEngine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()

    # ----- what is loaded -----

    @property
    def engine(self) -> Engine:
        """What the core jobs drive: the engine host, or the server's RemoteEngine (of a pool:
        the member's now in use)."""
        in_use = self._in_use()
        if in_use is not None:
            return in_use.engine
        return self._remote if self._remote is not None else self._host

    @property
    def counter(self) -> TokenCounter | None:
        """The loaded model's exact token counter (None: nothing loaded)."""
        in_use = self._in_use()
        return in_use.counter if in_use is not None else self._counter

    @property
    def loaded(self) -> LoadedModel | None:
        """The model loaded, or the server connected (of a pool: the member in use, in the
        pool's context, with the warnings said at connect)."""
        in_use = self._in_use()
        if in_use is not None and in_use.loaded is not None and self._loaded is not None:
            return replace(in_use.loaded, n_ctx=self._loaded.n_ctx,
                           warnings=self._loaded.warnings)  # fmt: skip
        return self._loaded

    @property
    def pool(self) -> ServerPool | None:
        """The pool of servers jobs run on, or None: one server or the local engine."""
        return self._pool

    @property
    def settings(self) -> LoadSettings | None:
        """What the local model was loaded with (None: no model here, or a server)."""
        return self._model[1] if self._model is not None else None

    @property
    def server(self) -> ServerInfo | None:
        """The server jobs run on (of a pool: the member in use), or None: the local engine."""
        in_use = self._in_use()
        if in_use is not None:
            return in_use.server
        return self._remote.info if self._remote is not None else None

    @property
    def model_info(self) -> ModelInfo | None:
        return self._host.model_info if self._on_host else None

    @property
    def capabilities(self) -> EngineCapabilities | None:
        return self._host.capabilities if self._on_host else None

    @property
    def engine_pid(self) -> int | None:
        return self._host.pid if self._on_host else None

    @property
    def _on_host(self) -> bool:
        """Jobs run on the local engine (not on a server, nor on a pool)."""
        return self._remote is None and self._pool is None

    @property
    def n_ctx(self) -> int:
        return self._loaded.n_ctx if self._loaded is not None else 0

    @property
    def counter_note(self) -> str:
        """Why counts come from llama.cpp itself (exact but slower), or "" when they do not."""
        counter = self._counter
        return counter.note if isinstance(counter, LlamaCounter) else ""

    def model_sha256(self, path: Path | None = None) -> str:
        """The sha256 of ``path`` (default: the model loaded here, or the GGUF a server's model
        was given as), read once per file (any thread: the window reads it in the background
        right after a load, so a job never waits for it); "" when there is no such file."""
        if path is None:
            in_use = self._in_use()
            if in_use is not None:
                return in_use.model_sha256()
            if self._model is not None:
                path = self._model[0]
            elif self._remote is not None and self._server_gguf is not None:
                path = self._server_gguf
            else:
                return ""
        if path not in self._sha:
            self._sha[path] = sha256_of(path)
        return self._sha[path]

    def facts(self) -> EngineFacts:
        """The engine as the history records it, for the model loaded or the server (of a
        pool: the member in use)."""
        in_use = self._in_use()
        if in_use is not None:
            return in_use.facts()
        server = self.server
        if server is not None:
            return EngineFacts(f"{server.url} {server.model}", self.model_sha256(), server.url,
                               None)  # fmt: skip
        if self._model is None or self._loaded is None:
            raise BadRequest("no model is loaded")
        path = self._model[0]
        return EngineFacts(str(path), self.model_sha256(path), "local",
                           self._loaded.kv_cache_type)  # fmt: skip

    # ----- loading and connecting -----

    def load(self, path: Path, settings: LoadSettings, *, model_sha256: str = "") -> LoadedModel:
        """Load ``path`` in the local engine (a server is let go first); ``model_sha256`` when
        the caller has read it already. If llama.cpp dies loading it, the engine is replaced by
        a fresh one holding no model (loading the same file again would likely crash again) and
        the EngineCrashedError goes on."""
        self._disconnect()
        path = Path(path)
        if model_sha256:
            self._sha[path] = model_sha256
        try:
            loaded = self._host.load(path, settings)
            counter = host_counter(path, self._host)
        except EngineCrashedError:
            self.unload()
            raise
        self._model, self._counter, self._loaded = (path, settings), counter, loaded
        return loaded

    def calibrated(self, path: Path, settings: LoadSettings, model_sha256: str, *,
                   fresh: bool = False, trials: tuple[LoadSettings, ...] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   cancelled: Callable[[], bool] = lambda: False,
                   ) -> tuple[Calibration, bool]:  # fmt: skip
        """The fastest settings for this model on this machine: cached ones (measured False),
        or measured now (True) when there are none or ``fresh``. Raises Cancelled."""
        if not fresh:
            machine = machine_key(self._host.start())
            found = cached(model_sha256, machine, settings.kv_cache_type)
            if found is not None:
                return found, False
        todo = list(trials) if trials is not None else candidates(settings)
        if progress is not None:
            progress(0, len(todo))
        found = calibrate(self._host, Path(path), model_sha256, settings, trials=todo,
                          progress=progress, cancelled=cancelled, use_cache=False)  # fmt: skip
        return found, True

    def connect(self, spec: ServerSpec) -> LoadedModel:
        """Run jobs on the server ``spec`` names; the local engine's model is let go once the
        server answers (one engine at a time). What is known of its context, as a LoadedModel."""
        t0 = time.perf_counter()
        token = self._cancel = CancelToken()  # cancel() stops the connecting too
        remote = connect_remote(spec, token.is_set)
        try:
            info, counter = remote.info, remote.counter()
        except BaseException:
            remote.close()
            raise
        self._replace_host()
        self._disconnect()
        self._remote, self._counter, self._model = remote, counter, None
        self._server_gguf = Path(spec.model_path).expanduser() if spec.model_path else None
        self._loaded = LoadedModel(f"{info.url} {info.model}", info.n_ctx, info.n_ctx_train or 0,
                                   0, 0, 0, 0, False, "", False, time.perf_counter() - t0,
                                   info.warnings)  # fmt: skip
        return self._loaded

    def connect_pool(self, specs: Sequence[ServerSpec], *, smallest_context: bool = False,
                     on_change: Callable[[PoolMember], None] | None = None,
                     ) -> LoadedModel:  # fmt: skip
        """Run jobs on a pool of the servers ``specs`` name (app/services/server_pool.py), each
        job on the first member up, moved to the next when its server is lost mid-job; the
        local engine's model and any server are let go once the pool answers. BadRequest (one
        sentence) when the servers disagree on the model, or on the context size unless
        ``smallest_context``; ``on_change(member)`` when a member is lost or answers again (a
        probe thread calls it). What is known of the pool's context, as a LoadedModel."""
        from app.services.server_pool import ServerPool  # noqa: PLC0415 (it builds on this module)

        t0 = time.perf_counter()
        token = self._cancel = CancelToken()  # cancel() stops the connecting too
        pool = ServerPool(specs, new_session=JobEngine, smallest_context=smallest_context,
                          on_change=on_change)  # fmt: skip
        try:
            warnings = pool.connect(token.is_set)
            member = _first_up(pool)
        except BaseException:
            pool.close()
            raise
        self._replace_host()
        self._disconnect()
        self._pool, self._member, self._model, self._server_gguf = pool, member, None, None
        loaded = member.session.loaded if member.session is not None else None
        assert loaded is not None
        self._loaded = replace(loaded, n_ctx=pool.n_ctx, warnings=tuple(warnings),
                               load_seconds=time.perf_counter() - t0)  # fmt: skip
        return self._loaded

    def unload(self) -> None:
        """No model and no server: a fresh engine child waits."""
        self._replace_host()
        self._disconnect()
        self._model = self._counter = self._loaded = None

    def count(self, text: str) -> int:
        counter = self.counter
        if counter is None:
            raise BadRequest("load a model or connect to a server first")
        return counter.count(text)

    # ----- jobs -----

    def cancel(self) -> None:
        """Stop the running job at once (any thread): the job at its next step, the engine now."""
        self._cancel.set()
        in_use = self._in_use()
        remote = self._remote
        if in_use is not None:
            in_use.cancel()
        elif remote is not None:
            remote.cancel()
        elif self._pool is None:
            self._host.cancel()

    def run(self, text: str, spec: JobSpec, *, planner: Planner | None = None,
            cancel: CancelToken | None = None) -> JobRun:  # fmt: skip
        """``spec`` on ``text``. ``planner`` (for this text and counter) holds the plans the face
        showed, so the job runs what was shown; others are ignored. ``cancel``: a token shared
        by jobs run side by side on a server (a batch), which :meth:`cancel` then stops together.
        A server keeps no KV state (``keep_kv`` is dropped) and cannot be audited (BadRequest)."""
        spec.check()
        if self._pool is not None:
            return self._run_on_pool(self._pool, text, spec, planner, cancel)
        counter, remote = self._counter, self._remote
        if counter is None or self._loaded is None:
            raise BadRequest("load a model or connect to a server first")
        if remote is not None and spec.audit:
            raise BadRequest(f"the audit needs the local engine: {NO_AUDIT}")
        if remote is not None and spec.keep_kv:
            spec = replace(spec, keep_kv=False)
        self._cancel = cancel = cancel if cancel is not None else CancelToken()
        options = spec.options(self._loaded.n_ctx, cancel)
        outcome = JobOutcome(spec, engine=self.facts())
        if spec.audit:  # the counter is the model's own tokenizer: the counts must match too
            outcome.audit = options["audit"] = Audit(self._host, exact_counts=True)
        if planner is not None and planner.counter is not counter:
            planner = None
        if planner is None:
            planner = Planner(text, counter)
        if spec.task == "ask" and remote is None:  # a follow-up keeps what its plans share
            options["resident_after"] = self._resident
        self._resident = None  # any job changes what the cache holds
        events = run_strategies(self.engine, text, counter, task=spec.task,
                                strategies=list(spec.strategies), planner=planner,
                                **options)  # fmt: skip
        return JobRun(self._keeping_resident(events), outcome,
                      lambda result: self._state_after(result, outcome))  # fmt: skip

    def _run_on_pool(self, pool: ServerPool, text: str, spec: JobSpec, planner: Planner | None,
                     cancel: CancelToken | None) -> JobRun:  # fmt: skip
        """``spec`` on the pool's member in use (the first up when it was lost since): checked
        now (BadRequest), run as its events are asked for (:meth:`_failing_over`)."""
        member = self._member
        session = member.session if member is not None else None
        if member is None or session is None:
            member = self._member = _first_up(pool)
            session = member.session
            if session is None:  # lost again meanwhile
                raise ServerError(member.reason or "no server of the pool answers")
        self._cancel = cancel = cancel if cancel is not None else CancelToken()
        first = session.run(text, spec, planner=planner, cancel=cancel)  # its checks: now
        outcome = JobOutcome(first.outcome.spec, engine=session.facts())
        doc = planner.doc if planner is not None else text
        events = self._failing_over(pool, member, first, doc=doc, outcome=outcome, cancel=cancel)
        return JobRun(events, outcome, lambda _result: None)  # a server keeps no KV state

    def _failing_over(self, pool: ServerPool, member: PoolMember, run: JobRun, *,
                      doc: Document | str, outcome: JobOutcome, cancel: CancelToken
                      ) -> Iterator[Any]:  # fmt: skip
        """The events of ``run`` on ``member``; when its server is lost mid-job, the strategy
        it was running (and those after it) run again from their start on the next member up,
        after a :class:`ServerLost`. What the lost server generated is never a result: its
        JobError and JobFinished are held back, and the StrategiesFinished at the end holds
        every strategy's whole result. With no member left, the error goes out as it came."""
        strategies = outcome.spec.strategies
        done: list[JobResult] = []  # results that stand, in the order of ``strategies``
        while True:
            reason = yield from self._until_lost(pool, member, run, done, cancel)
            if not reason:
                return
            lost, member = member, _next_up(pool, member, reason)
            lost.moved += 1
            self._member = member
            session = member.session
            if session is None:  # lost too, meanwhile
                raise ServerError(f"no server of the pool answers: {member.reason or reason}")
            outcome.engine = session.facts()
            yield ServerLost(lost.url, reason, member.url)
            rest = replace(outcome.spec, strategies=strategies[len(done) :])
            counter = session.counter
            assert counter is not None
            run = session.run(doc if isinstance(doc, str) else doc.text, rest,
                              planner=Planner(doc, counter), cancel=cancel)  # fmt: skip

    def _until_lost(self, pool: ServerPool, member: PoolMember, run: JobRun,
                    done: list[JobResult], cancel: CancelToken
                    ) -> Generator[Any, None, str]:  # fmt: skip
        """``run``'s events until it ends ("" returned) or ``member``'s server is lost while
        another member is up (why, returned; the events of the strategy cut are left out from
        its JobError on). A finished result that stands is added to ``done``."""
        events = iter(run)
        held: JobError | None = None  # said only once the job is known not to move
        try:
            while True:
                try:
                    ev = next(events)
                except StopIteration:
                    if held is not None:
                        yield held
                    return ""
                except (EngineError, ValueError) as exc:  # the job itself broke off
                    if _moves(pool, member, str(exc), cancel):
                        return str(exc)
                    raise
                if isinstance(ev, JobError):
                    held = ev
                    continue
                if (
                    isinstance(ev, JobFinished)
                    and ev.result.error
                    and _moves(pool, member, ev.result.error, cancel)
                ):
                    return ev.result.error
                if held is not None:
                    yield held
                    held = None
                if isinstance(ev, JobFinished):
                    done.append(ev.result)
                elif isinstance(ev, StrategiesFinished):  # this server's share, and before it
                    ev = StrategiesFinished(tuple(done))
                yield ev
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _keeping_resident(self, events: Iterator[Any]) -> Iterator[Any]:
        """The job's events; what its last job left resident in the cache is kept for the
        next ask (the core job takes it up only where the cache still holds it)."""
        for ev in events:
            if isinstance(ev, JobFinished):
                self._resident = ev.result.resident
            yield ev

    def resume(self, spec: ResumeSpec) -> JobRun:
        """Generate a version's reply again from its saved KV state, without evaluating its
        prompt (the local engine only)."""
        if not self._on_host:
            raise BadRequest(f"a rollback cannot resume instantly on a server: {NO_KV_STATE}")
        self._cancel = cancel = CancelToken()
        job = JobSpec(spec.task, (spec.strategy,), max_tokens=spec.max_tokens,
                      sampling=spec.sampling)  # fmt: skip
        events = resume(self._host, spec.state, spec.prompt_tokens, task=spec.task,
                        strategy=spec.strategy, max_tokens=spec.max_tokens, sources=spec.sources,
                        cancel=cancel, sampling=spec.sampling)  # fmt: skip
        return JobRun(events, JobOutcome(job, engine=self.facts()), lambda _result: None)

    def died(self, outcome: JobOutcome) -> str:
        """After a job: why the local engine is gone ("" while it lives, or with no model)."""
        if self._model is None or self._host.alive:
            return ""
        errors = [r.error for r in outcome.results if r.error]
        return (errors or [outcome.lost_state or "the engine process ended"])[-1]

    def restart(self) -> LoadedModel | None:
        """llama.cpp died: a new engine child, with the same model loaded again (None: there
        was none)."""
        self._replace_host()
        if self._model is None:
            return None
        path, settings = self._model
        return self.load(path, settings)

    def close(self) -> None:
        self._host.close()
        self._disconnect()

    # ----- plumbing -----

    def _state_after(self, result: JobResult, outcome: JobOutcome) -> KVState | None:
        try:
            return state_after(self._host, result)
        except EngineError as exc:  # the run stands; only its state is lost
            outcome.lost_state = str(exc)
            return None

    def _replace_host(self) -> None:
        self._host.close()
        self._host = EngineHost()
        if self._on_host:
            self._loaded = None

    def _disconnect(self) -> None:
        remote, self._remote = self._remote, None
        pool, self._pool, self._member = self._pool, None, None
        if remote is not None:
            remote.close()
            self._loaded = self._counter = None
        if pool is not None:
            pool.close()
            self._loaded = self._counter = None

    def _in_use(self) -> PoolSession | None:
        """The session of the pool's member jobs run on now; when it was lost since, the first
        member's up (the next job runs there). None: no pool, or no member answers."""
        pool, member = self._pool, self._member
        if pool is None or member is None:
            return None
        session = member.session
        if session is None:
            up = pool.up()
            session = up[0].session if up else None
        return session


def _first_up(pool: ServerPool) -> PoolMember:
    """The first member of ``pool`` that is up; ServerError when none is."""
    up = pool.up()
    if not up:
        reasons = "; ".join(f"{m.url}: {m.reason}" for m in pool.members if m.reason)
        raise ServerError(f"no server of the pool answers ({reasons})" if reasons
                          else "no server of the pool answers")  # fmt: skip
    return up[0]


def _moves(pool: ServerPool, member: PoolMember, reason: str, cancel: CancelToken) -> bool:
    """Whether a job that failed on ``member`` (``reason``) moves: it was not cancelled, the
    server no longer answers (it is then marked lost) and another member is up."""
    if cancel.is_set() or pool.answers(member):
        return False
    pool.lost(member, reason)
    return bool(pool.up())


def _next_up(pool: ServerPool, lost: PoolMember, reason: str) -> PoolMember:
    """The member a job lost with ``lost`` runs on next: the first up after it in the pool's
    order (wrapping round), else the first up; ServerError (``reason``) when none is."""
    up = pool.up()
    if not up:
        raise ServerError(reason)
    index = pool.members.index(lost)
    after = [m for m in pool.members[index + 1 :] + pool.members[:index] if m in up]
    return after[0] if after else up[0]
