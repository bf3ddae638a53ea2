"""The workbench as a model without Qt: one document, its plan, the engine's state and the job.

The state and every decision about it live here, as napari's ``ViewerModel`` lives under its
Qt viewer: what is open, counted and planned, which plan answer is stale, what the person waits
for and what Cancel stops, when a job may start, where its versions go, what a rollback
resumes. The world comes in through ports (ports.py): slow work goes to a
:class:`Scheduler` and its answer comes back on this model's thread, the engine gets requests
and answers through the ``on_*`` methods, and each change goes out to a
:class:`WorkbenchEvents` sink, what the person is told as a typed :class:`Message`. The window's
`SessionModel` is the Qt bridge over it; a unit test drives it with plain fakes.

Slow work never runs on the model's thread: the engine owns llama.cpp (loads, jobs), a child
process plans and counts the document whenever its counter can be rebuilt there (stale plan
requests are skipped), the "plan" lane waits on it in order (or plans in this process when it
cannot), and store calls run on the "io" lane.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.core.cancelled import Cancelled
from app.core.documents import Document
from app.core.documents.isolated import read_document
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import DEFAULT_N_CTX, EngineCapabilities, LoadedModel
from app.core.gc_pause import freeze_long_lived, gc_paused, thaw_and_collect
from app.core.history_records import VersionInfo
from app.core.jobs.events import JobFinished, RingFallback
from app.core.planning.frame import FrameSource
from app.core.planning.plan import Plan
from app.core.planning.process import PlanProcess
from app.core.planning.strategies import Planner
from app.core.sampling import from_version
from app.core.tokens import CL100K_KEY, TokenCounter, cl100k, counter_key
from app.services import history, versions
from app.services.jobs import JobOutcome, JobSpec, ResumeSpec
from app.services.question_plans import SideBySide
from app.services.versions import History
from app.services.workbench import decisions
from app.services.workbench.decisions import JobChoices, Refusal, StartedJob
from app.services.workbench.engine_state import EngineState
from app.services.workbench.line import LineOfWork
from app.services.workbench.ports import (
    CalibrationPort,
    EnginePort,
    JobRequest,
    Message,
    Notice,
    Scheduler,
    WorkbenchEvents,
)
from app.services.workbench.waits import Waits

log = logging.getLogger(__name__)
REFUSED = {Refusal.NO_DOCUMENT: Notice.NO_DOCUMENT, Refusal.NO_MODEL: Notice.NO_MODEL,
           Refusal.NO_QUESTION: Notice.NO_QUESTION}  # fmt: skip


# a plan shown, what the view draws of it, and the plans of several questions side by side
_Planned = tuple[Plan, object, SideBySide | None]


def _no_index(_plan: Plan) -> object:
    return None


class WorkbenchModel:
    """The open document and its counts, the plan shown, the model or server the jobs run on,
    the job running and what the person waits for; read through its properties, changed by
    its methods (and the engine's answers, ``on_*``), every change said to ``events``."""

    def __init__(self, store: History | None, events: WorkbenchEvents, *, engine: EnginePort,
                 scheduler: Scheduler, calibration: CalibrationPort, n_ctx: int = DEFAULT_N_CTX,
                 plans: PlanProcess | None = None,
                 index: Callable[[Plan], object] = _no_index) -> None:  # fmt: skip
        """``plans``: the planning child (started on first use); ``index``: what the view
        draws of a plan, worked out on the plan lane with it (the event's second argument)."""
        self._events = events
        self._engine = engine
        self._scheduler = scheduler
        self._calibration = calibration
        self._index = index
        self._n_ctx = n_ctx  # the context plans are made for until a model is loaded
        self._choices = JobChoices()
        self._doc: Document | None = None
        self._doc_tokens: int | None = None
        self._doc_estimate: int | None = None  # cl100k tokens, once counted
        self._planner: Planner | None = None  # plans in this process when the child cannot
        self._plan: Plan | None = None
        self._plan_generation = 0
        self._plans_pending: set[int] = set()  # generations of the plans being made
        self._open_generation = 0
        self._open_cancel = threading.Event()  # set: the file being read is no longer wanted
        self._waits = Waits(events, calibration)  # what the person waits for
        self._plans = plans if plans is not None else PlanProcess()
        self._running = False
        self._starting: JobSpec | None = None  # a job whose plans are being made
        self._cancel_start = False
        self._comparing = False
        self._resuming: VersionInfo | None = None  # the version a rollback is generating for
        self._job_place: decisions.JobPlace | None = None  # the running job's document, target
        # the model or server the jobs run on, and its calibration
        self._state = EngineState(events, engine=engine, scheduler=scheduler,
                                  calibration=calibration, waits=self._waits)  # fmt: skip
        # the current session and version (the next Run goes on from them)
        self._line = LineOfWork(store, events, scheduler, desk=self)

    # ----- what it holds (read only) -----

    @property
    def engine_state(self) -> EngineState:
        """The model or server the jobs run on, its loading and its calibration."""
        return self._state

    @property
    def plans(self) -> PlanProcess:
        """The planning child."""
        return self._plans

    @property
    def document(self) -> Document | None:
        return self._doc

    @property
    def chosen_strategy(self) -> str:
        """The strategy chosen now (of a comparison, the version the next Run goes on from)."""
        return self._choices.strategy

    @property
    def document_tokens(self) -> int | None:
        """The document's tokens by the loaded model (None: not counted, or no model)."""
        return self._doc_tokens

    @property
    def document_estimate(self) -> int | None:
        """The document's cl100k tokens (None: not counted yet)."""
        return self._doc_estimate

    @property
    def plan(self) -> Plan | None:
        """The plan last shown."""
        return self._plan

    @property
    def choices(self) -> JobChoices:
        """The toolbar's choices the plans are made for."""
        return self._choices

    @property
    def current_session(self) -> int | None:
        """The history session of the open document's line of work (None: the next Run
        starts one)."""
        return self._line.current[0]

    @property
    def current_version(self) -> int | None:
        """The version the next Run branches from (None: the next Run starts a session)."""
        return self._line.current[1]

    @property
    def running(self) -> bool:
        """A job runs (or is being planned, or a rollback resumes)."""
        return self._running

    @property
    def resuming(self) -> VersionInfo | None:
        """The version a rollback is generating the reply of again, from its saved KV state."""
        return self._resuming

    @property
    def comparing(self) -> bool:
        """The job running compares strategies side by side."""
        return self._comparing

    @property
    def waiting_for(self) -> frozenset[str]:
        """What runs now: "open", "load", "plan", "run", "calibrate"."""
        return self._waits.now

    @property
    def cancellable(self) -> bool:
        """Something the person waits for can be cancelled (Esc)."""
        return self._waits.cancellable

    # ----- documents -----

    def open_document(self, path: Path) -> None:
        """Read (and decode, and extract) the file in the background, then show and plan it.
        Cancel (or opening another file) drops it: HTML, PDF and DOCX are read in a child
        process (app/core/documents/isolated.py), which is killed at once."""
        self._open_cancel.set()  # a file still being read is not wanted any more
        thaw_and_collect()  # what was frozen with the last document (below) is collected again
        cancel = self._open_cancel = threading.Event()
        self._open_generation += 1
        generation = self._open_generation
        self._waits.set("open", True, Message(Notice.OPENING, (path.name,)))

        def load() -> Document | None:
            # ~400k blocks, none of them garbage: the full collections their allocation triggers
            # would hold the GIL ~100 ms each. Frozen, later full collections skip them (they are
            # still freed by reference counting when the document is closed); the next opening
            # thaws them, with any cycle frozen alongside, and collects once.
            with gc_paused():
                try:
                    doc = read_document(path, cancel=cancel)
                except Cancelled:
                    return None  # whoever cancelled it has moved on: nothing to report
                freeze_long_lived()
            return doc

        def loaded(doc: Document | None) -> None:
            if doc is not None and generation == self._open_generation:
                self._on_document_loaded(doc)

        def failed(message: str) -> None:
            if generation == self._open_generation:
                self._waits.set("open", False)
                self._fail_with(message)

        self._scheduler.submit(load, loaded, failed, "io")

    def _on_document_loaded(self, doc: Document) -> None:
        self._waits.set("open", False)
        self._doc = doc
        self._doc_tokens = self._doc_estimate = None
        self._planner = None
        self._line.set(None, None)
        self._events.document_changed(doc)
        self._line.find(doc)
        self._show_counts()
        if self._state.loaded is not None:
            self._count_exact()
        self.update_plan()

    # ----- the plan of what reaches the model -----

    def choose(self, choices: JobChoices) -> None:
        """The toolbar's choices changed: the next plan is made for them."""
        self._choices = choices

    def _framing(self) -> Callable[[str, TokenCounter | None], tuple[str, int]]:
        """(instruction, reserve) per strategy, as the job that Run starts now will plan it:
        the plan the window shows is the plan the job runs. Call it off the model's thread
        (it may count the question, and build cl100k when no model is loaded)."""
        spec = self._choices.spec((self._choices.strategy,))

        def framing(strategy: str, counter: TokenCounter | None) -> tuple[str, int]:
            return spec.framing(strategy, counter if counter is not None else cl100k())

        return framing

    def _child_key(self, counter: TokenCounter | None) -> str | None:
        """The key the planning child rebuilds ``counter`` (None: cl100k) from, or None: plan
        here. cl100k is named, not built: building it costs ~0.2 s of this thread's time."""
        if self._doc is None or self._doc.path is None:
            return None  # the child reads the document from its file
        return CL100K_KEY if counter is None else counter_key(counter)

    def _frame_source(self) -> FrameSource:
        """What frames the document in a plan, as the job will frame it: the loaded GGUF, or
        the server's template (its GGUF here when given), or None."""
        server = self._state.server
        return server.frame if server is not None else self._state.model_path

    def _context(self) -> int:
        """The context plans are made for: the loaded model's, else the one chosen."""
        return self._state.loaded.n_ctx if self._state.loaded is not None else self._n_ctx

    def _local_planner(self, counter: TokenCounter) -> Planner:
        assert self._doc is not None
        if self._planner is None or self._planner.counter is not counter:
            self._planner = Planner(self._doc, counter)
        return self._planner

    def _planning(self) -> tuple[PlanProcess | Planner, str | None]:
        """(PlanProcess or Planner, child key): where the plans the window shows are made, with
        the loaded model's counter, else cl100k."""
        counter = self._engine.counter
        key = self._child_key(counter)
        if key is not None:
            return self._plans, key
        return self._local_planner(counter if counter is not None else cl100k()), None

    def update_plan(self, choices: JobChoices | None = None) -> None:
        """Plan the document for the chosen strategy and context, in the background (for
        ``choices`` when given: they are the toolbar's from now on)."""
        if choices is not None:
            self._choices = choices
        if self._doc is None:
            return
        self._plan_generation += 1
        generation = self._plan_generation
        strategy = self._choices.strategy
        question = self._choices.ranked_by
        spec = self._choices.spec((strategy,))
        n_ctx = self._context()
        model, framing, counter = self._frame_source(), self._framing(), self._engine.counter
        doc, (where, key), index = self._doc, self._planning(), self._index
        ticket = self._plans.ticket() if key is not None else None
        def work() -> _Planned | None:
            instruction, reserve = framing(strategy, counter)
            # A 50 MB document's plan and its index are ~400k objects, none of them garbage:
            # as with a document's blocks (open_document), no collection runs while they are
            # made and they are frozen (until the next document opens), or full collections of
            # 20-165 ms each hold the GIL.
            with gc_paused():
                plan = decisions.plan_shown(where, doc, key, strategy, model=model, n_ctx=n_ctx,
                                            reserve=reserve, instruction=instruction,
                                            question=question, ticket=ticket)  # fmt: skip
                side = None
                if plan is not None and decisions.asks_several(spec):
                    # several questions under `retrieve`: each its own plan, side by side
                    plans: list[Plan | None] = [plan]
                    for other in spec.questions[1:]:
                        plans.append(decisions.plan_shown(
                            where, doc, key, strategy, model=model, n_ctx=n_ctx,
                            reserve=reserve, instruction=instruction, question=other,
                            ticket=ticket))  # fmt: skip
                    made = [p for p in plans if p is not None]
                    side = decisions.several_questions(spec, made)
                    if len(made) < len(plans):  # superseded meanwhile
                        plan = None
                # off the model's thread
                planned = None if plan is None else (plan, index(plan), side)
                freeze_long_lived()
            return planned

        def settle() -> None:
            self._plans_pending.discard(generation)
            self._waits.set("plan", bool(self._plans_pending))

        def done(planned: _Planned | None) -> None:
            settle()
            if planned is not None and generation == self._plan_generation:
                self._plan, drawn, side = planned
                self._events.plan_changed(self._plan, drawn)
                self._events.question_plans_changed(side)

        def failed(message: str) -> None:
            settle()
            if generation == self._plan_generation:
                self._fail_with(message)

        self._plans_pending.add(generation)
        self._waits.set("plan", True, Message(Notice.PLANNING_STRATEGY, (strategy,)))
        self._scheduler.submit(work, done, failed, "plan")

    def _show_counts(self) -> None:
        if self._doc is None:
            return
        n_ctx = self._state.loaded.n_ctx if self._state.loaded else None
        doc = self._doc

        def show(n: int | None) -> None:
            if n is not None and doc is self._doc:
                self._doc_estimate = n
                self._events.counts_changed(len(doc.text), self._doc_tokens, n, n_ctx)

        if self._doc_estimate is not None:
            show(self._doc_estimate)
            return
        plans, key = self._plans, self._child_key(None)
        self._scheduler.submit(lambda: decisions.count_document(plans, doc, key, cl100k), show,
                               self._fail_with, "io")  # fmt: skip

    def _count_exact(self) -> None:
        """The document's tokens by the loaded model, then ``ready``."""
        doc, counter = self._doc, self._engine.counter
        if doc is None or counter is None:
            return
        key = self._child_key(counter)
        if key is None:  # llama.cpp counts (the engine thread), or a document without a file
            self._engine.count(doc.text)
            return
        self._events.status(Message(Notice.COUNTING), 0)
        plans = self._plans

        def counted(n: int | None) -> None:
            if n is not None and doc is self._doc:
                self.on_tokens_counted(n, len(doc.text))

        self._scheduler.submit(
            lambda: decisions.count_document(plans, doc, key, lambda: counter), counted,
            self._fail_with, "io")  # fmt: skip

    # ----- the model or server the jobs run on (engine_state.py) -----

    def on_server_connected(self, info: ServerInfo, loaded: LoadedModel) -> None:
        self._state.on_server_connected(info, loaded)
        self._model_changed()

    def on_model_loaded(self, info: ModelInfo, loaded: LoadedModel,
                        caps: EngineCapabilities | None) -> None:  # fmt: skip
        self._state.on_model_loaded(info, loaded, caps)
        self._model_changed()
        self._state.calibrate_apart()

    def _model_changed(self) -> None:
        """A model (or a server) is there: the document is counted and planned with it."""
        self._planner = None  # its exact counts now
        if self._doc is not None:
            self._count_exact()
            self.update_plan()
        else:
            self._events.ready()

    def on_unloaded(self) -> None:
        self._state.on_unloaded()
        self._planner = None
        self.update_plan()

    def on_tokens_counted(self, tokens: int, _chars: int) -> None:
        self._doc_tokens = tokens
        self._show_counts()
        self._events.status(Message(Notice.READY), 0)
        self._events.ready()

    # ----- jobs -----

    def _spec(self, choices: JobChoices, strategies: tuple[str, ...],
              retry: Callable[[], None]) -> JobSpec | None:  # fmt: skip
        spec = decisions.job_for(choices, strategies, document=self._doc is not None,
                                 model=self._state.loaded is not None)  # fmt: skip
        if spec is Refusal.NO_MODEL and self._events.model_needed(retry):
            return None  # the window offers a model, then runs it
        if spec is Refusal.NO_MODEL:
            self.fail(Message(REFUSED[spec]))
            return None
        if isinstance(spec, Refusal):  # what to do first, said in the status line: no error box
            self._events.status(Message(REFUSED[spec]), 0)
            return None
        return spec

    def run_job(self, choices: JobChoices, strategy: str | None = None) -> None:
        """Run the task under ``strategy`` (None: the one chosen)."""
        self._choices = choices
        spec = self._spec(choices, (strategy or choices.strategy,),
                          lambda: self.run_job(choices, strategy))  # fmt: skip
        if spec is not None:
            self._start(spec, comparing=False)

    def run_compare(self, choices: JobChoices, strategies: tuple[str, ...]) -> None:
        """Run the task under each of ``strategies``, side by side, and measure how much of
        the needles each keeps."""
        self._choices = choices
        spec = self._spec(choices, strategies, lambda: self.run_compare(choices, strategies))
        if spec is not None:
            self.measure_needles(strategies)
            self._start(spec, comparing=True)

    def measure_needles(self, strategies: tuple[str, ...]) -> None:
        """Each compared strategy's needle retention (the plans the window shows), in the
        background."""
        choices, doc = self._choices, self._doc
        if not choices.needles or doc is None:
            return
        model, counter = self._frame_source(), self._engine.counter
        n_ctx = self._context()
        where, key = self._planning()

        def work() -> list[tuple[str, float]] | None:
            return decisions.needle_retention(where, doc, key, choices=choices,
                                              strategies=strategies, counter=counter or cl100k(),
                                              model=model, n_ctx=n_ctx)  # fmt: skip

        def done(found: list[tuple[str, float]] | None) -> None:
            if found == []:
                self._events.status(Message(Notice.NO_NEEDLES), 0)
            for strategy, retention in found or ():
                self._events.needle_retention(strategy, retention)

        self._scheduler.submit(work, done, self._fail_with, "plan")

    def _start(self, spec: JobSpec, *, comparing: bool) -> None:
        """Show the job as running, plan it (in the child when it can), then hand it to the
        engine with a planner that holds those plans: the job plans the document as shown."""
        assert self._state.loaded is not None and self._doc is not None
        self._running, self._comparing = True, comparing
        session, version = self._line.current
        self._job_place = decisions.JobPlace(self._doc, versions.Target(session, version))
        self._events.job_started(StartedJob(self._state.loaded.n_ctx, spec.strategies, comparing))
        self._set_running(True)
        counter = self._engine.counter
        doc = self._doc
        if counter is None:  # the model is being loaded again: the engine says what is wrong
            self._engine.run_job(JobRequest(spec, doc.text))
            return
        key = self._child_key(counter)
        planner = Planner(doc, counter)
        if key is None:
            self._engine.run_job(JobRequest(spec, doc.text, planner))
            return
        plans, model, n_ctx = self._plans, self._frame_source(), self._state.loaded.n_ctx

        def work() -> list[Plan] | None:
            return decisions.job_plans(plans, doc, key, spec, counter, model=model, n_ctx=n_ctx)

        def done(made: list[Plan] | None) -> None:
            self._starting = None
            for plan in made or ():
                planner.remember(plan)
            if made is None or self._cancel_start:  # closing, or cancelled while planning
                self.on_job_done(JobOutcome(spec))
                return
            side = decisions.several_questions(spec, made)
            if side is not None:  # the plans it runs, side by side while it runs
                self._events.question_plans_changed(side)
                if self._job_place is not None:  # each question's version records its plan
                    self._job_place = replace(self._job_place,
                                              figures=decisions.question_figures(made))
            self._engine.run_job(JobRequest(spec, doc.text, planner))

        def failed(message: str) -> None:
            self._starting = None
            self._fail_with(message)
            self.on_job_done(JobOutcome(spec))

        self._starting, self._cancel_start = spec, False
        self._events.status(Message(Notice.PLANNING), 0)
        self._scheduler.submit(work, done, failed, "plan")

    def cancel(self) -> None:
        """Esc: stop whatever the person waits for — the job, the plan, the file being read."""
        if self._running:
            self._events.status(Message(Notice.CANCELLING), 0)
            self._cancel_start = self._starting is not None
            if self._starting is not None:
                self._plans.cancel()  # the job's plans are being made
            self._engine.cancel()
            return
        if "plan" in self._waits:
            self._plan_generation += 1  # a plan made here anyway is dropped when it arrives
            self._plans_pending.clear()
            self._plans.cancel()
            self._waits.set("plan", False, Message(Notice.PLANNING_CANCELLED))
        if "open" in self._waits:
            self._open_generation += 1
            self._open_cancel.set()
            self._waits.set("open", False, Message(Notice.OPENING_CANCELLED))
        if "calibrate" in self._waits:
            self._events.status(Message(Notice.CANCELLING_CALIBRATION), 0)
            self._engine.cancel()

    def _set_running(self, running: bool) -> None:
        self._events.running_changed(running)
        self._waits.set("run", running, Message(Notice.RUNNING) if running else None)

    def on_job_events(self, events: list[object]) -> None:
        for ev in events:
            if isinstance(ev, JobFinished) and ev.result.refused:
                self._events.status(Message(Notice.REFUSED, (ev.result.refused,)), 0)
            elif isinstance(ev, RingFallback):  # said while it runs, not only in the record
                self._events.status(Message(Notice.RING_FALLBACK, (ev.strategy, ev.reason)), 0)
        self._events.job_events(events)

    def on_job_done(self, outcome: JobOutcome) -> None:
        self._running = False
        self._set_running(False)
        reasons = tuple(r.finish_reason for r in outcome.results)
        prompt = sum(r.prompt_tokens for r in outcome.results)
        evaluated = sum(r.evaluated_tokens for r in outcome.results)
        if prompt:  # what the KV cache saved: a follow-up question evaluates only itself
            reused = max(0, prompt - evaluated)
            done = Message(Notice.DONE_REUSED, (reasons, evaluated, prompt, reused))
        else:
            done = Message(Notice.DONE, (reasons,))
        self._events.status(done, 0)
        self._report_audit(outcome)
        resumed, place = self._resuming, self._job_place
        self._resuming = self._job_place = None
        self._line.record(outcome, place, resumed)

    def _report_audit(self, outcome: JobOutcome) -> None:
        """A passed audit is a line in the status bar; a failed one is a warning with findings."""
        audit = outcome.audit
        if audit is None:
            return
        if audit.ok:
            self._events.status(Message.text(audit.summary()), 0)
            return
        shown = "\n".join(f"• {f}" for f in audit.findings[:10])
        self._fail_with(f"{audit.summary()}:\n{shown}")

    # ----- the line of work (line.py) and old versions -----

    def open_version(self, version_id: int) -> None:
        """Show an old version again (``version_opened``): its recorded reply for the output
        buffer, and, when it was made on the open document's text, its plan painted on the
        document (``plan_changed``; the plan shown is that plan until the next one is made).
        A run records its plan's figures, not its spans, so the plan is made again, in the
        background, when that is cheap and certain: with the model it ran on loaded (its
        tokenizer and chat frame), for its strategy, context, task and prompt, and shown only
        when it matches the recorded figures. The KV map is not rebuilt: it needs the run's
        events, which are not recorded. Opening does not change the current version (a
        rollback does)."""
        self._line.open_version(version_id, self._replanner(), self._index)

    def show_plan(self, plan: Plan, drawn: object) -> None:
        """An old version's plan, made again on the open document, painted on it (the plan
        shown until the next one is made)."""
        self._plan = plan
        self._events.plan_changed(plan, drawn)

    def _replanner(self) -> Callable[[versions.OpenedVersion], Plan | None]:
        """A function (for the plan lane) that makes a version's plan again as its job made
        it, or None when the model it ran on is not the one loaded or the plan differs from
        the recorded figures."""
        counter, sha, model = self._engine.counter, self._state.model_sha256, self._frame_source()
        doc, (where, key) = self._doc, self._planning()

        def replan(opened: versions.OpenedVersion) -> Plan | None:
            if counter is None or doc is None or not sha or opened.version.model_sha256 != sha:
                return None
            return decisions.replan_version(where, doc, key, opened, counter, model=model)

        return replan

    # ----- rollback with the KV state -----

    def rollback(self, version_id: int, resume: bool) -> None:
        """Roll back to a version (the History panel's Rollback): a new version equal to it,
        whose job and sampling come back (``version_restored``, ``sampling_restored``) and
        which becomes the current version when it is of the open document (the next Run
        branches from it). ``resume``: its reply is generated again from the KV state saved
        for the loaded model and context; a version without one is refused, with the
        command line's sentence, and nothing is written."""
        on = None
        if resume:
            state, loaded = self._state, self._state.loaded
            if loaded is None or state.model_path is None:
                self._events.failed(Message(Notice.NO_MODEL))
                return
            on = history.ResumeOn(model=state.model_path, model_sha256=state.model_sha256,
                                  n_ctx=loaded.n_ctx, cache_type=loaded.kv_cache_type)  # fmt: skip
        self._line.roll_back(version_id, on)

    def on_history_changed(self, changes: history.Changes) -> None:
        """A change the History panel made (a deletion, an undo, a branch, an import): the line
        of work follows it (a Run never goes on from a deleted version)."""
        self._line.hear(changes, self._doc)

    def restore_version(self, version: VersionInfo) -> None:
        """A version rolled back to: its job and sampling come back."""
        # the version's sampling comes back with it: the resumed reply and the next Run use it
        self._events.sampling_restored(from_version(version.settings))
        self._events.version_restored(version)

    def resume_version(self, version: VersionInfo, spec: ResumeSpec) -> None:
        """Generate the rolled-back version's reply again from its saved KV state."""
        assert self._state.loaded is not None
        self._running, self._comparing = True, False
        self._events.job_started(StartedJob(self._state.loaded.n_ctx, (version.strategy,),
                                            resumed=True, version=version,
                                            layout=spec.layout))  # fmt: skip
        self._set_running(True)
        self._events.status(Message(Notice.RESUMING), 0)
        self._resuming = version
        self._engine.resume(spec)

    # ----- errors, the engine's own news -----

    def fail(self, message: Message) -> None:
        """Tell the person something went wrong (``failed``); a load or a calibration being
        waited for has ended with it (the engine answers a failed load this way)."""
        log.warning("%s", message)
        self._waits.set("load", False)
        self._waits.set("calibrate", False)
        self._events.failed(message)

    def _fail_with(self, sentence: str) -> None:
        self.fail(Message.text(sentence))

    def on_failed(self, sentence: str) -> None:
        """The engine's own failure, one sentence."""
        self._fail_with(sentence)

    def on_restarted(self) -> None:
        self._events.status(Message(Notice.ENGINE_RESTARTED), 0)
        self._events.engine_restarted()

    def on_crashed(self, message: str) -> None:
        self.fail(Message(Notice.ENGINE_STOPPED, (message,)))

    def close(self) -> None:
        """Stop reading the file being read (its child is killed) and close the planning child
        (a plan in flight ends at once, superseded)."""
        self._open_generation += 1
        self._open_cancel.set()
        self._plans.close()
