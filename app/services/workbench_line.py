"""The workbench's line of work: the history session and version the next Run goes on from.

Part of the Qt-free workbench (workbench_model.py): opening a document picks its latest line
of work, a finished job is recorded under the version current when it started (its versions
then become current), a rollback makes its version current (and resumes its reply from the
saved KV state), and the questions asked along the line to the current version (the thread a
follow-up continues) are read again whenever it moves. Store calls run on the scheduler's "io"
lane; an answer about a document no longer open changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.core.documents import Document
from app.core.engine.types import LoadedModel
from app.services import versions, workbench
from app.services.jobs import JobOutcome, ResumeSpec
from app.services.workbench_ports import Message, Notice, Scheduler, WorkbenchEvents
from app.store.repository import Repository, VersionInfo

log = logging.getLogger(__name__)


class LineOfWork:
    """The current (session, version) of the open document; (None, None): the next Run starts
    a session."""

    def __init__(self, repo: Repository | None, events: WorkbenchEvents, scheduler: Scheduler, *,
                 document: Callable[[], Document | None], chosen: Callable[[], str],
                 fail: Callable[[Message], None]) -> None:  # fmt: skip
        """``document``: the document open now; ``chosen``: the strategy chosen now (of a
        comparison, the version to go on from)."""
        self._repo = repo
        self._events = events
        self._scheduler = scheduler
        self._document = document
        self._chosen = chosen
        self._fail = fail
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
            if line is not None and doc is self._document() and self.current == (None, None):
                self.set(*line)

        self._scheduler.submit(lambda: versions.latest_line(repo, doc), found,
                               lambda m: self._fail(Message.text(m)))  # fmt: skip

    def record(self, outcome: JobOutcome, place: workbench.JobPlace | None,
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
        if done.session and made_on is not None and made_on is self._document():  # still open
            chosen = self._chosen()
            self.set(done.session, workbench.version_to_go_on_from(done, outcome, chosen))
        if done.session:
            self._events.recorded(done.session)
            if made_on is None:  # a resumed reply: the current version's answer is new
                self.read_thread()
        self._events.job_finished(outcome)

    def _record_failed(self, message: str, outcome: JobOutcome) -> None:
        self._fail(Message(Notice.NOT_RECORDED, (message,)))
        self._events.job_finished(outcome)

    def roll_back(self, version: VersionInfo, has_kv: bool, *, doc: Document | None,
                  loaded: LoadedModel | None, model_sha256: str,
                  resume: Callable[[VersionInfo, ResumeSpec], None],
                  show: Callable[[int], None]) -> None:  # fmt: skip
        """A version made by rolling back becomes current when it is of the open document
        ``doc`` (the next Run branches from it); with a KV state (``has_kv``) for the ``loaded``
        model and context, ``resume`` generates its reply again from that state, and without
        one ``show`` opens the version it copies (its parent), whose reply it stands for."""
        repo, sha = self._repo, model_sha256
        if repo is None:
            return
        resumable = has_kv and loaded is not None and bool(sha)
        n_ctx = loaded.n_ctx if loaded is not None else 0
        cache_type = loaded.kv_cache_type if loaded is not None else None

        def work() -> workbench.Rollback:
            return workbench.rollback(repo, version, doc, resumable=resumable, model_sha256=sha,
                                      n_ctx=n_ctx, cache_type=cache_type)  # fmt: skip

        def done(answer: workbench.Rollback) -> None:
            same, spec = answer.same_document, answer.resume
            if same and doc is self._document():
                self.set(version.session, version.id)
            if resumable and spec is not None:
                resume(version, spec)
                return
            if version.parent is not None:
                show(version.parent)
            if not resumable:
                self._events.status(Message(Notice.ROLLED_BACK, (version.id,)), 0)
            else:
                self._events.status(Message(Notice.NO_KV_STATE), 0)

        self._scheduler.submit(work, done, lambda m: self._fail(Message.text(m)))
