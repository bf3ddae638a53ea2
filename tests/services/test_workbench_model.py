"""The workbench model without Qt: a real document read from a file, cl100k counts, a real
SQLite history, and plain fakes for its ports (a scheduler whose queue the test drains, an
engine that records the requests and is answered by hand, a calibration that records what it
is asked, a planning child that plans in this process). No model, no Qt, no process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.core import calibrate
from app.core.documents import Document
from app.core.engine.types import KVState, LoadedModel, LoadSettings
from app.core.jobs.events import RingFallback
from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner, plan_for
from app.core.tokens import CL100K_KEY, TokenCounter, cl100k
from app.services import history
from app.services.workbench.decisions import JobChoices, StartedJob
from app.services.workbench.model import WorkbenchModel
from app.services.workbench.ports import (
    EVENTS,
    CalibrationJob,
    JobRequest,
    Message,
    Notice,
    TuneSpec,
)
from app.store.repository import Repository
from tests.services.outcomes import outcome

pytestmark = pytest.mark.unit

N_CTX = 256
SHA = "m" * 64
TEXT = "".join(f"Paragraph {i} tells of the harbour and its boats. " * 6 + "\n\n"
               for i in range(40))  # fmt: skip


class Queue:
    """The scheduler: each submission waits in order until the test runs it."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[[], Any], Callable[[Any], None],
                                 Callable[[str], None], str]] = []  # fmt: skip

    def submit(self, work: Callable[[], Any], done: Callable[[Any], None],
               failed: Callable[[str], None], lane: str = "io") -> None:  # fmt: skip
        self.waiting.append((work, done, failed, lane))

    def run_next(self) -> str:
        work, done, failed, lane = self.waiting.pop(0)
        try:
            result = work()
        except Exception as exc:
            failed(str(exc))
        else:
            done(result)
        return lane

    def drain(self) -> list[str]:
        """Run everything, answers that ask for more included; the lanes, in order."""
        lanes = []
        while self.waiting:
            lanes.append(self.run_next())
        return lanes


class Engine:
    """The engine port: requests are recorded, answers come from the test."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, tuple[Any, ...]]] = []
        self.counter: TokenCounter | None = None
        self.cancels = 0

    def _ask(self, name: str, *args: Any) -> None:
        self.requests.append((name, args))

    def load(self, path: str, settings: LoadSettings) -> None:
        self._ask("load", path, settings)

    def load_tuned(self, path: str, settings: LoadSettings, tune: TuneSpec) -> None:
        self._ask("load_tuned", path, settings, tune)

    def connect_server(self, spec: object) -> None:
        self._ask("connect_server", spec)

    def connect_pool(self, specs: object, smallest_context: bool) -> None:
        self._ask("connect_pool", specs, smallest_context)

    def unload(self) -> None:
        self._ask("unload")

    def count(self, text: str) -> None:
        self._ask("count", text)

    def run_job(self, request: JobRequest) -> None:
        self._ask("run_job", request)

    def resume(self, spec: object) -> None:
        self._ask("resume", spec)

    def cancel(self) -> None:
        self.cancels += 1

    def model_sha256(self, path: Path) -> str:
        return SHA

    def asked(self, name: str) -> list[tuple[Any, ...]]:
        return [args for asked, args in self.requests if asked == name]


class Calibration:
    def __init__(self) -> None:
        self.job: CalibrationJob | None = None
        self.running = False
        self.busy: list[bool] = []
        self.cancels: list[bool] = []  # quiet or not

    def start(self, job: CalibrationJob) -> None:
        self.job, self.running = job, True

    def set_busy(self, busy: bool) -> None:
        self.busy.append(busy)

    def cancel(self, *, quiet: bool = False) -> None:
        self.cancels.append(quiet)
        if quiet:
            self.job = None


class Plans:
    """The planning child's stand-in: the same answers, made in this process with cl100k."""

    def __init__(self) -> None:
        self.tickets = 0
        self.cancels = 0
        self.framed: list[object] = []  # the frame source each plan was asked for
        self.closed = False

    def ticket(self) -> int:
        self.tickets += 1
        return self.tickets

    def plan(self, doc: Document, key: str, strategy: str, **kw: Any) -> Plan:
        """Framed without a chat template: the test's model path names no GGUF."""
        assert key == CL100K_KEY
        kw.pop("ticket")
        self.framed.append(kw.pop("model"))
        return plan_for(Planner(doc, cl100k()), strategy, None, **kw)

    def count(self, doc: Document, key: str) -> int:
        assert key == CL100K_KEY
        return cl100k().count(doc.text)

    def cancel(self) -> bool:
        self.cancels += 1
        return True

    def close(self) -> None:
        self.closed = True


class Events:
    """The event sink: every event, in order, with its arguments."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[Any, ...]]] = []
        self.offers_model = False

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name not in EVENTS:
            raise AttributeError(name)
        return lambda *args: self.seen.append((name, args))

    def model_needed(self, retry: Callable[[], None]) -> bool:
        self.seen.append(("model_needed", (retry,)))
        return self.offers_model

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for seen, args in self.seen if seen == name]

    def said(self) -> list[Message]:
        return [args[0] for args in self.of("status")]

    def take(self) -> list[tuple[str, tuple[Any, ...]]]:
        seen, self.seen = self.seen, []
        return seen


class Bench:
    def __init__(self, repo: Repository | None, tmp_path: Path) -> None:
        self.queue, self.engine, self.calibration = Queue(), Engine(), Calibration()
        self.events, self.plans, self.repo = Events(), Plans(), repo
        store = history.History(repo) if repo is not None else None
        self.model = WorkbenchModel(store, self.events, engine=self.engine, scheduler=self.queue,
                                    calibration=self.calibration, n_ctx=N_CTX,
                                    plans=self.plans, index=lambda plan: ("drawn", plan.strategy),
                                    )  # type: ignore[arg-type]  # fmt: skip
        self.model.choose(JobChoices(max_tokens=32))
        self.path = tmp_path / "harbour.txt"
        self.path.write_text(TEXT, encoding="utf-8")

    def open(self) -> Document:
        self.model.open_document(self.path)
        self.queue.drain()
        doc = self.model.document
        assert doc is not None
        return doc

    def load(self, *, n_ctx: int = N_CTX) -> LoadedModel:
        self.model.engine_state.load_model(Path("/m.gguf"), LoadSettings(n_ctx=n_ctx))
        self.queue.drain()  # the sha256
        self.engine.counter = cl100k()
        loaded = LoadedModel("/m.gguf", n_ctx, 8192, 49152, 4, 4, 0, False, "f16", False, 0.25)
        self.model.on_model_loaded(None, loaded, None)  # type: ignore[arg-type]
        self.queue.drain()
        return loaded


@pytest.fixture
def workbench(repo: Repository, tmp_path: Path) -> Bench:
    """The workbench model on a real history, its ports scripted (Bench)."""
    return Bench(repo, tmp_path)


def _plan_here(doc: Document, strategy: str, choices: JobChoices) -> Plan:
    spec = choices.spec((strategy,))
    instruction, reserve = spec.framing(strategy, cl100k())
    return plan_for(Planner(doc, cl100k()), strategy, None, instruction=instruction,
                    n_ctx=N_CTX, reserve=reserve, question=choices.ranked_by)  # fmt: skip


def test_a_document_is_opened_counted_and_planned(workbench: Bench) -> None:
    m, events = workbench.model, workbench.events
    m.open_document(workbench.path)
    assert m.waiting_for == {"open"} and m.cancellable and m.document is None
    assert events.said() == [Message(Notice.OPENING, ("harbour.txt",))]
    assert workbench.queue.drain() == ["io", "io", "io", "plan"]  # read; line, counts; plan
    doc = m.document
    assert doc is not None and doc.path == workbench.path and doc.text == TEXT
    assert events.of("document_changed") == [(doc,)]
    assert events.of("counts_changed") == [(len(TEXT), None, cl100k().count(TEXT), None)]
    assert m.document_estimate == cl100k().count(TEXT) and m.document_tokens is None
    [(plan, drawn)] = events.of("plan_changed")
    assert plan == _plan_here(doc, "head", m.choices) and plan.dropped  # it overflows
    assert m.plan is plan and drawn == ("drawn", "head") and workbench.plans.tickets == 1
    assert events.of("waits_changed")[-1] == (frozenset(),) and not m.waiting_for
    # the waits' lines are taken back when they end; a document never run has no line yet
    assert events.of("status_over") == [(Message(Notice.OPENING, ("harbour.txt",)),),
                                        (Message(Notice.PLANNING_STRATEGY, ("head",)),)]
    assert (m.current_session, m.current_version) == (None, None)
    assert workbench.calibration.busy[0] is True and workbench.calibration.busy[-1] is False


def test_a_plan_answered_after_a_newer_one_was_asked_is_dropped(workbench: Bench) -> None:
    m, events = workbench.model, workbench.events
    doc = workbench.open()
    events.take()
    m.update_plan(JobChoices(strategy="tail", max_tokens=32))
    m.update_plan(JobChoices(strategy="middle", max_tokens=32))
    assert m.waiting_for == {"plan"}
    workbench.queue.run_next()  # tail's answer: stale, and the newer plan is still being made
    assert events.of("plan_changed") == [] and m.waiting_for == {"plan"}
    workbench.queue.run_next()
    [(plan, _drawn)] = events.of("plan_changed")
    assert plan.strategy == "middle" and m.plan is plan and not m.waiting_for
    assert plan == _plan_here(doc, "middle", m.choices)


def test_cancel_drops_the_plan_being_made_and_the_file_being_read(workbench: Bench) -> None:
    m, events = workbench.model, workbench.events
    doc = workbench.open()
    shown = m.plan
    events.take()
    m.update_plan(JobChoices(strategy="tail", max_tokens=32))
    m.cancel()
    assert workbench.plans.cancels == 1 and not m.waiting_for and not m.cancellable
    assert events.said()[-1] == Message(Notice.PLANNING_CANCELLED)
    assert events.of("status_over") == [(Message(Notice.PLANNING_STRATEGY, ("tail",)),)]
    workbench.queue.drain()
    assert events.of("plan_changed") == [] and m.plan is shown  # made anyway, dropped

    other = workbench.path.with_name("other.txt")
    other.write_text("Another text.", encoding="utf-8")
    m.open_document(other)
    m.cancel()
    assert not m.waiting_for and events.said()[-1] == Message(Notice.OPENING_CANCELLED)
    workbench.queue.drain()
    assert m.document is doc and len(events.of("document_changed")) == 0


def test_cancel_while_a_job_is_planned_ends_it_before_the_engine_sees_it(workbench: Bench) -> None:
    m, events = workbench.model, workbench.events
    workbench.open()
    workbench.load()
    events.take()
    m.run_job(JobChoices(max_tokens=8))
    assert m.running and "run" in m.waiting_for
    m.cancel()
    assert workbench.engine.cancels == 1 and workbench.plans.cancels == 1
    assert events.said()[-1] == Message(Notice.CANCELLING)
    workbench.queue.drain()
    assert workbench.engine.asked("run_job") == [] and not m.running and not m.waiting_for
    [(finished,)] = events.of("job_finished")
    assert finished.results == [] and events.of("running_changed") == [(True,), (False,)]
    assert Message(Notice.DONE, ((),)) in events.said()


def test_a_run_that_cannot_start_says_why(workbench: Bench) -> None:
    m, events = workbench.model, workbench.events
    m.run_job(JobChoices())
    assert events.said()[-1] == Message(Notice.NO_DOCUMENT)  # said, not an error box
    assert events.of("failed") == []
    workbench.open()
    m.run_compare(JobChoices(), ("head", "tail"))
    assert events.of("failed")[-1] == (Message(Notice.NO_MODEL),)
    events.offers_model = True  # the window offers a model, then runs what was asked
    m.run_job(JobChoices())
    [(retry,)] = events.of("model_needed")[-1:]
    assert len(events.of("failed")) == 1
    workbench.load()
    m.run_job(JobChoices(task="ask", question=""))
    assert events.said()[-1] == Message(Notice.NO_QUESTION)
    assert events.of("job_started") == [] and not m.running
    retry()  # the model is there now: the run asked for before starts
    assert events.of("job_started") == [(StartedJob(N_CTX, ("head",)),)] and m.running


def test_a_job_runs_is_recorded_and_the_current_version_moves_to_it(workbench: Bench) -> None:
    m, events, engine, repo = workbench.model, workbench.events, workbench.engine, workbench.repo
    assert repo is not None
    doc = workbench.open()
    loaded = workbench.load()
    state = m.engine_state
    assert state.loaded is loaded and state.model_sha256 == SHA
    assert state.model_path == Path("/m.gguf")
    assert Message(Notice.MODEL_LOADED, (0.25,)) in events.said()
    assert m.document_tokens == cl100k().count(TEXT) and events.of("ready") == [()]
    events.take()
    m.run_job(JobChoices(strategy="head", max_tokens=8))
    assert events.of("job_started") == [(StartedJob(N_CTX, ("head",)),)]
    assert events.said()[-2:] == [Message(Notice.RUNNING), Message(Notice.PLANNING)]
    workbench.queue.drain()
    [(request,)] = engine.asked("run_job")
    assert request.text == TEXT and request.spec.strategies == ("head",)
    assert request.planner is not None and request.planner.doc is doc
    assert workbench.plans.framed[-1] == Path("/m.gguf")  # the job's plans, framed by its model
    m.on_job_events([RingFallback("rolling", "no shift")])
    assert events.said()[-1] == Message(Notice.RING_FALLBACK, ("rolling", "no shift"))
    done = outcome("head", max_tokens=8)
    m.on_job_done(done)
    assert not m.running and "run" not in m.waiting_for
    assert events.said()[-1] == Message(Notice.DONE_REUSED, (("stop",), 0, 50, 50))
    assert events.of("job_finished") == []  # not before it is recorded
    workbench.queue.drain()
    [version] = repo.history()
    assert events.of("recorded") == [(version.session,)]
    assert events.of("job_finished") == [(done,)]
    assert (m.current_session, m.current_version) == (version.session, version.id)
    assert events.of("current_changed") == [(version.session, version.id)]
    [(turns, of)] = events.of("thread_changed")
    assert of == version.id and turns == []  # a summary asks no question

    events.take()  # the next run goes on from it: a child of the version
    m.run_job(JobChoices(strategy="tail", max_tokens=8))
    workbench.queue.drain()
    m.on_job_done(outcome("tail", max_tokens=8))
    workbench.queue.drain()
    child = repo.history(version.session)[-1]
    assert child.parent == version.id and m.current_version == child.id


def test_opening_a_document_goes_on_with_its_line_of_work(workbench: Bench, tmp_path: Path) -> None:
    workbench.open()
    workbench.load()
    workbench.model.run_job(JobChoices(max_tokens=8))
    workbench.queue.drain()
    workbench.model.on_job_done(outcome("head", max_tokens=8))
    workbench.queue.drain()
    again = Bench(workbench.repo, tmp_path)
    again.open()
    assert (again.model.current_session, again.model.current_version) == (
        workbench.model.current_session, workbench.model.current_version)  # fmt: skip


def test_a_rollback_without_and_with_a_kv_state(workbench: Bench) -> None:
    m, events, engine, repo = workbench.model, workbench.events, workbench.engine, workbench.repo
    assert repo is not None
    workbench.open()
    workbench.load()
    m.run_job(JobChoices(max_tokens=8))
    workbench.queue.drain()
    m.on_job_done(outcome("head", max_tokens=8))
    workbench.queue.drain()
    [version] = repo.history()
    events.take()

    m.rollback(version.id, False)
    workbench.queue.drain()
    back = repo.history()[-1]
    assert back.parent == version.id and m.current_version == back.id and not m.running
    assert [name for name, _ in events.seen][:3] == ["history_changed", "sampling_restored",
                                                     "version_restored"]  # fmt: skip
    [(changes,)] = events.of("history_changed")
    assert changes.version == back and changes.resume is None
    assert events.said() == [Message(Notice.ROLLED_BACK, (back.id,))]

    events.take()
    before = repo.history()
    m.rollback(version.id, True)  # a KV state asked for, none saved for this model: refused
    workbench.queue.drain()
    assert repo.history() == before and engine.asked("resume") == []
    [(failure,)] = events.of("failed")
    assert failure == Message.text(history.no_saved_state(version.id, "m.gguf"))
    assert events.of("history_changed") == [] and m.current_version == back.id

    state = KVState((1, 2, 3, 4), b"kv" * 8, N_CTX, "f16", "/m.gguf")
    repo.save_kv_state(version.id, state, SHA, prompt_tokens=3)
    events.take()
    m.rollback(version.id, True)
    workbench.queue.drain()
    third = repo.history()[-1]
    assert third.parent == version.id
    [(spec,)] = engine.asked("resume")
    assert (spec.state.tokens, spec.state.data, spec.prompt_tokens) == (state.tokens, state.data, 3)
    assert spec.saved_version == version.id and m.running
    assert events.of("job_started") == [(StartedJob(N_CTX, ("head",), resumed=True),)]
    assert events.said()[-1] == Message(Notice.RESUMING) and m.current_version == third.id
    m.on_job_done(outcome("head", reply="Again.", max_tokens=8))
    workbench.queue.drain()
    assert repo.runs(third.id)[0]["outputs"][0]["text"] == "Again.\nMore."
    assert events.of("recorded") == [(version.session,)] and not m.running
    assert m.current_version == third.id  # a resumed reply records under its own version


def test_the_waits_and_what_cancel_can_stop(workbench: Bench) -> None:
    m, events, calibration = workbench.model, workbench.events, workbench.calibration
    state = m.engine_state
    state.load_model(Path("/m.gguf"), LoadSettings(n_ctx=N_CTX))
    assert m.waiting_for == {"load"} and not m.cancellable  # a load runs to its end
    assert events.said() == [Message(Notice.LOADING, ("m.gguf",))]
    m.fail(Message.text("no such file"))  # the engine answers a failed load this way
    assert not m.waiting_for and events.of("failed") == [(Message.text("no such file"),)]
    assert events.of("status_over")[-1] == (Message(Notice.LOADING, ("m.gguf",)),)
    state.on_calibration_progress(1, 4)
    assert m.waiting_for == {"calibrate"} and m.cancellable
    m.cancel()
    assert workbench.engine.cancels == 1
    assert events.said()[-1] == Message(Notice.CANCELLING_CALIBRATION)
    state.on_calibration_stopped("Calibration cancelled")
    assert not m.waiting_for and events.of("calibration_stopped") == [("Calibration cancelled",)]
    waits = [args[0] for args in events.of("waits_changed")]
    assert waits == [{"load"}, set(), set(), {"calibrate"}, set()]
    assert calibration.busy == [True, False, False, True, False]


def test_a_tuned_load_looks_up_its_calibration_then_measures_it_apart(
    workbench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(calibrate.AUTO_ENV, raising=False)
    m, events = workbench.model, workbench.events
    engine, calibration = workbench.engine, workbench.calibration
    state = m.engine_state
    settings = LoadSettings(n_ctx=N_CTX)
    state.load_model(Path("/m.gguf"), settings, tuned=True)
    assert engine.requests == [] and calibration.cancels == [True]  # the sha256 comes first
    workbench.queue.drain()
    [(path, asked, tune)] = engine.asked("load_tuned")
    assert (path, asked, tune) == ("/m.gguf", settings, TuneSpec(SHA, trials=()))
    state.on_status("Calibrating…")  # only the cache is asked: nothing is measured
    state.on_calibration_progress(0, 4)
    state.on_calibration_stopped("none cached")
    assert events.said() == [Message(Notice.LOADING, ("m.gguf",))] and "calibrate" not in (
        m.waiting_for)  # fmt: skip
    loaded = LoadedModel("/m.gguf", N_CTX, 8192, 49152, 4, 4, 0, False, "f16", False, 0.5)
    m.on_model_loaded(None, loaded, None)  # type: ignore[arg-type]
    assert calibration.job == CalibrationJob(Path("/m.gguf"), SHA, settings, None)
    state.on_background_progress(1, 4)
    assert events.of("background_calibration") == [(1, 4)]
    found = object()
    state.on_background_finished(CalibrationJob(Path("/x.gguf"), SHA, settings), found)
    assert events.of("calibration_offered") == []  # not the job running
    state.on_background_finished(calibration.job, found)  # type: ignore[arg-type]
    assert events.of("calibration_offered") == [(Path("/m.gguf"), found)]
    assert events.said()[-1] == Message(Notice.TUNED_READY)
    m.close()
    assert workbench.plans.closed


def test_the_line_of_work_follows_a_deletion_made_in_the_history(workbench: Bench) -> None:
    m, repo = workbench.model, workbench.repo
    assert repo is not None
    workbench.open()
    workbench.load()
    for n in (8, 9):
        m.run_job(JobChoices(max_tokens=n))
        workbench.queue.drain()
        m.on_job_done(outcome("head", max_tokens=n))
        workbench.queue.drain()
    v1, v2 = repo.history()
    assert v2.parent == v1.id and m.current_version == v2.id
    store = history.History(repo)
    m.on_history_changed(history.delete(store, versions=[v2.id]))  # what the panel reports
    workbench.queue.drain()
    assert (m.current_session, m.current_version) == (v1.session, v1.id)
    m.on_history_changed(history.delete(store, sessions=[v1.session]))
    workbench.queue.drain()
    assert (m.current_session, m.current_version) == (None, None)  # the next Run starts one
