"""The workbench's line of work: the history session and version the next Run goes on from.

Part of the Qt-free workbench (model.py): opening a document picks its latest line
of work, a finished job is recorded under the version current when it started (its versions
then become current), a rollback makes its version current (and resumes its reply from the
saved KV state), and the questions asked along the line to the current version (the thread a
follow-up continues) are read again whenever it moves. Store calls run on the scheduler's "io"
lane; an answer about a document no longer open changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from app.core.documents import Document
from app.core.history_records import VersionInfo
from app.core.planning.plan import Plan
from app.services import history, versions
from app.services.jobs import JobOutcome, ResumeSpec
from app.services.versions import History
from app.services.workbench import decisions
from app.services.workbench.ports import Message, Notice, Scheduler, WorkbenchEvents

log = logging.getLogger(__name__)


class Desk(Protocol):
    """What the line of work reads of the workbench (model.py) and asks of it."""

    @property
    def document(self) -> Document | None:
        """The document open now."""

    @property
    def chosen_strategy(self) -> str:
        """The strategy chosen now (of a comparison, the version to go on from)."""

    def fail(self, message: Message) -> None: ...

    def restore_version(self, version: VersionInfo) -> None:
        """A version rolled back to: its job and sampling come back."""

    def resume_version(self, version: VersionInfo, spec: ResumeSpec) -> None:
        """Generate ``version``'s reply again from its saved KV state."""

    def open_version(self, version_id: int) -> None:
        """Show an old version's reply again."""

    def show_plan(self, plan: Plan, drawn: object) -> None:
        """An old version's plan, made again on the open document, painted on it."""


class LineOfWork:
    """The current (session, version) of the open document; (None, None): the next Run starts
    a session."""

    def __init__(self, store: History | None, events: WorkbenchEvents, scheduler: Scheduler,
                 desk: Desk) -> None:  # fmt: skip
        self._store = store
        self._repo = store.repo if store is not None else None
        self._events = events
        self._scheduler = scheduler
        self._desk = desk
        self.current: tuple[int | None, int | None] = (None, None)  # session, version
        self._thread_reads = 0  # generation of the newest thread read; older answers are dropped

    def set(self, session: int | None, version: int | None) -> None:
        if (session, version) != self.current:
            self.current = (session, version)
            self._events.current_changed(session, version)
            self.read_thread()

    def read_thread(self) -> None:
        """The questions along the line of work to the current version, read in the background
        (a follow-up question continues this thread)."""
        repo, version = self._repo, self.current[1]
        self._thread_reads += 1
        generation = self._thread_reads
        if repo is None or version is None:
            self._events.thread_changed([], None)
            return

        def done(turns: list[versions.Turn]) -> None:
            if generation == self._thread_reads:
                self._events.thread_changed(turns, version)

        self._scheduler.submit(lambda: versions.thread(repo, version), done,
                               lambda m: log.warning("the thread was not read: %s", m))  # fmt: skip

    def find(self, doc: Document) -> None:
        """Opening a document picks its latest session (and that session's newest version) as
        current, so the next Run goes on with the document's line of work; a document never
        run starts a session at its first Run."""
        repo = self._repo
        if repo is None:
            return

        def found(line: tuple[int, int | None] | None) -> None:
            if line is not None and doc is self._desk.document and self.current == (None, None):
                self.set(*line)

        self._scheduler.submit(lambda: versions.latest_line(repo, doc), found,
                               lambda m: self._desk.fail(Message.text(m)))  # fmt: skip

    def hear(self, changes: history.Changes, doc: Document | None) -> None:
        """What the History panel changed: when the current version or its session was deleted,
        the line goes on from the document's latest line that is left (none: the next Run
        starts a session); a thread read again when versions came back."""
        session, version = self.current
        if version in changes.versions_removed or session in changes.sessions_removed:
            self.set(None, None)
            if doc is not None:
                self.find(doc)
        elif changes.versions_added and version is not None:
            self.read_thread()

    def record(self, outcome: JobOutcome, place: decisions.JobPlace | None,
               resumed: VersionInfo | None) -> None:  # fmt: skip
        """Store the job through the service the command line records with (a version per
        strategy with its run and KV state, in the current session under the current version,
        or in a new session; an ask of several questions: a version per question, each the
        child of the one before), or a resumed reply under the version the rollback made;
        then ``job_finished``."""
        repo = self._repo
        if repo is None or not outcome.results or (resumed is None and place is None):
            self._events.job_finished(outcome)
            return
        if resumed is not None:
            result = outcome.results[0]

            def work() -> versions.Recorded:
                return versions.record_resumed(repo, resumed, result)
        else:
            assert place is not None
            doc, target, figures = place.doc, place.target, place.figures

            def work() -> versions.Recorded:
                return versions.record_continuing(repo, doc, outcome, target,
                                                  figures=figures)  # fmt: skip

        made_on = place.doc if place is not None else None  # a resume: current already set
        self._scheduler.submit(work, lambda done: self._recorded(done, outcome, made_on),
                               lambda m: self._record_failed(m, outcome))  # fmt: skip

    def _recorded(self, done: versions.Recorded, outcome: JobOutcome,
                  made_on: Document | None) -> None:  # fmt: skip
        if done.session and made_on is not None and made_on is self._desk.document:  # still open
            chosen = self._desk.chosen_strategy
            self.set(done.session, decisions.version_to_go_on_from(done, outcome, chosen))
        if done.session:
            self._events.recorded(done.session)
            if made_on is None:  # a resumed reply: the current version's answer is new
                self.read_thread()
        self._events.job_finished(outcome)

    def _record_failed(self, message: str, outcome: JobOutcome) -> None:
        self._desk.fail(Message(Notice.NOT_RECORDED, (message,)))
        self._events.job_finished(outcome)

    def open_version(self, version_id: int, replan: Callable[[versions.OpenedVersion], Plan | None],
                     index: Callable[[Plan], object]) -> None:  # fmt: skip
        """Read an old version back (``version_opened``) on the plan lane; when it was made on
        the open document's text, its plan too (``Desk.show_plan``): the recorded one, or made
        again by ``replan`` (None when that is not cheap and certain), and ``index``: what the
        view draws of it."""
        repo, doc = self._repo, self._desk.document
        if repo is None:
            return

        def work() -> tuple[versions.OpenedVersion, Plan | None, object]:
            opened = versions.open_version(repo, version_id)
            plan = None
            if doc is not None and opened.document_sha256 == doc.sha256:
                plan = opened.plan if opened.plan is not None else replan(opened)
            return opened, plan, index(plan) if plan is not None else None

        def done(got: tuple[versions.OpenedVersion, Plan | None, object]) -> None:
            opened, plan, drawn = got
            if plan is not None and doc is self._desk.document:
                self._desk.show_plan(plan, drawn)
            self._events.version_opened(opened)

        self._scheduler.submit(work, done, lambda m: self._desk.fail(Message.text(m)), "plan")

    def roll_back(self, version_id: int, resume_on: history.ResumeOn | None) -> None:
        """Roll back to ``version_id`` through the one rollback service (history.rollback):
        the history hears what changed, the new version's job and sampling come back
        (``Desk.restore_version``), it becomes current when it is of the open document (the
        next Run branches from it); with ``resume_on`` its reply is generated again from the
        saved KV state (``Desk.resume_version``), and a version without one is refused before
        anything is written; without, the version it copies opens, whose reply it stands for."""
        store = self._store
        if store is None:
            return

        def work() -> history.RolledBack:
            return history.rollback(store, version_id, resume_on=resume_on)

        def done(answer: history.RolledBack) -> None:
            new, doc = answer.version, self._desk.document
            self._events.history_changed(answer)
            self._desk.restore_version(new)
            if doc is not None and answer.document_sha256 == doc.sha256:
                self.set(new.session, new.id)
            if answer.resume is not None:
                self._desk.resume_version(new, answer.resume)
                return
            self._desk.open_version(answer.copied.id)
            self._events.status(Message(Notice.ROLLED_BACK, (new.id,)), 0)

        self._scheduler.submit(work, done, lambda m: self._desk.fail(Message.text(m)))
