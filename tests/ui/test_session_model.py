"""The session model without a window, offscreen: it opens a real document, counts and plans it
for the choices it is given, refuses a job it cannot run in words, and on the real default model
loads, counts, runs, records and resumes a job from its KV state, saying each change with a
signal. The tests read only its public state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Signal

from app.core.engine.types import LoadSettings
from app.core.jobs.tasks import planning
from app.core.planning.strategies import Planner, plan_for
from app.core.tokens import cl100k
from app.services.history import History
from app.services.workbench.ports import EVENTS
from app.store.repository import Repository
from app.ui.session_model import JobChoices, SessionModel, StartedJob
from tests.conftest import DATA

DOC = DATA / "sample.md"  # ~350 tokens: more than the context holds
N_CTX = 256
WAIT = 120_000


@pytest.fixture
def session(qtbot, repo: Repository) -> Iterator[SessionModel]:
    model = SessionModel(History(repo), n_ctx=N_CTX)
    model.choose(JobChoices(max_tokens=32))  # room for the reply in the small context
    yield model
    model.close()


def _open(qtbot, session: SessionModel) -> None:
    with qtbot.waitSignal(session.plan_changed, timeout=WAIT):
        session.open_document(DOC)


def test_a_document_is_opened_counted_and_planned_without_a_model(
    qtbot, session: SessionModel
) -> None:
    waits: list[frozenset[str]] = []
    counts: list[tuple[object, ...]] = []
    session.waits_changed.connect(waits.append)
    session.counts_changed.connect(lambda *args: counts.append(args))
    opened: list[object] = []
    session.document_changed.connect(opened.append)
    with qtbot.waitSignal(session.plan_changed, timeout=WAIT) as shown:
        session.open_document(DOC)
        assert session.waiting_for == {"open"} and session.cancellable
    doc, plan = session.document, shown.args[0]
    assert doc is not None and doc.path == DOC and waits[0] == {"open"}
    assert opened == [doc] and plan is session.plan and plan.strategy == "head"
    assert plan.kept[0].start == 0 and plan.dropped  # the document overflows the context
    qtbot.waitUntil(lambda: bool(counts) and not session.waiting_for, timeout=WAIT)
    assert counts[-1] == (len(doc.text), None, cl100k().count(doc.text), None)  # no model
    assert session.document_estimate == counts[-1][2] and session.document_tokens is None
    assert session.loaded is None and session.model_path is None and not session.running


def test_the_plan_is_made_for_the_choices_given(qtbot, session: SessionModel) -> None:
    _open(qtbot, session)
    chosen = JobChoices(task="ask", question="Which words come first?", strategy="tail",
                        max_tokens=64)  # fmt: skip
    with qtbot.waitSignal(session.plan_changed, timeout=WAIT) as shown:
        session.update_plan(chosen)
    plan = shown.args[0]
    assert session.choices == chosen and session.plan is plan
    doc = session.document
    assert doc is not None and plan.kept[-1].end == len(doc.text)
    counter = cl100k()  # no model: the window's estimate frames the plan
    instruction, reserve = planning("ask", "tail", counter, max_tokens=64,
                                    questions=(chosen.question,))  # fmt: skip
    here = plan_for(Planner(doc, counter), "tail", None, instruction=instruction, n_ctx=N_CTX,
                    reserve=reserve)  # fmt: skip
    assert plan == here  # the plan of the job the same choices would run


def test_a_job_it_cannot_run_is_refused_in_words(qtbot, session: SessionModel) -> None:
    told: list[str] = []
    said: list[str] = []
    started: list[StartedJob] = []
    session.failed.connect(told.append)
    session.status.connect(lambda line, _ms: said.append(line))
    session.job_started.connect(started.append)
    session.run_job(JobChoices())
    assert said[-1] == "Open a document first." and told == []  # a line, not an error box
    _open(qtbot, session)
    session.run_job(JobChoices())
    session.run_compare(JobChoices(), ("head", "tail"))
    assert told == ["Load a model first.", "Load a model first."]
    assert started == [] and not session.running and "run" not in session.waiting_for


def test_a_job_on_the_real_model_is_recorded_and_resumes_from_its_kv_state(
    qtbot, session: SessionModel, repo: Repository, model_path: Path
) -> None:
    _open(qtbot, session)
    loaded: list[object] = []
    session.model_loaded.connect(lambda _info, model, _caps: loaded.append(model))
    with qtbot.waitSignal(session.ready, timeout=WAIT):
        session.load_model(model_path, LoadSettings(n_ctx=N_CTX))
    assert loaded == [session.loaded] and session.loaded is not None
    assert session.loaded.n_ctx == N_CTX and session.model_path == model_path
    counter = session.engine.driver.counter
    doc = session.document
    assert counter is not None and doc is not None
    assert session.document_tokens == counter.count(doc.text)  # exact, by the model
    qtbot.waitUntil(lambda: len(session.model_sha256) == 64, timeout=WAIT)

    started: list[StartedJob] = []
    running: list[bool] = []
    recorded: list[int] = []
    session.job_started.connect(started.append)
    session.running_changed.connect(running.append)
    session.recorded.connect(recorded.append)
    choices = JobChoices(strategy="head", max_tokens=8)
    with qtbot.waitSignal(session.job_finished, timeout=300_000) as done:
        session.run_job(choices)
    [result] = done.args[0].results
    assert result.finish_reason in ("stop", "length") and result.text
    assert started == [StartedJob(N_CTX, ("head",))] and running == [True, False]
    assert not session.running and "run" not in session.waiting_for
    [version] = repo.history()
    assert recorded == [version.session] and version.strategy == "head"
    assert version.model_sha256 == session.model_sha256 and repo.kv_states(version.id)

    restored: list[object] = []
    session.sampling_restored.connect(restored.append)
    with qtbot.waitSignal(session.job_finished, timeout=300_000) as done:
        session.rollback(version.id, True)  # what the history panel asks for
    rolled_back = repo.history()[-1]
    assert rolled_back.parent == version.id
    [resumed] = done.args[0].results
    assert resumed.evaluated_tokens == 1  # the prompt came from the saved state
    assert resumed.text == result.text and restored == [choices.sampling]
    assert started[-1] == StartedJob(N_CTX, ("head",), resumed=True, layout=started[-1].layout)
    assert {kind for kind, *_ in started[-1].layout} >= {"system", "chunk"}  # the cache it left
    assert repo.runs(rolled_back.id)[0]["outputs"][0]["text"] == result.text


def test_retrieve_plans_the_question_typed(qtbot, session: SessionModel) -> None:
    """The plan shown for `retrieve` ranks the document against the question in the box (as
    the job will): each question its own kept spans, with their rank and the terms matched."""
    _open(qtbot, session)
    plans = {}
    for question in ("How are documents decoded and counted?", "Which strategy keeps the end?"):
        chosen = JobChoices(task="ask", question=question, strategy="retrieve", max_tokens=32)
        with qtbot.waitSignal(session.plan_changed, timeout=WAIT) as shown:
            session.update_plan(chosen)
        plan = shown.args[0]
        assert plan.strategy == "retrieve" and plan.question == question and plan.dropped
        ranked = [s for s in plan.kept if s.rank is not None]
        assert ranked and all(s.terms for s in ranked)
        plans[question] = {(s.start, s.end) for s in plan.kept}
    assert len({frozenset(spans) for spans in plans.values()}) == 2  # not the same spans


def test_needles_are_measured_on_the_plans_for_the_question(qtbot, session: SessionModel) -> None:
    """Compare's needles column: the share of the needles each strategy's plan keeps, for
    `retrieve` the plan made for the question asked (not a refusal for want of one)."""
    _open(qtbot, session)
    text = session.document.text
    needle = "counted in tokens and cut into chunks"
    assert needle in text and text.index(needle) > 0
    session.choose(JobChoices(task="ask", question="How are documents counted in tokens?",
                              strategy="retrieve", max_tokens=32, needles=(needle,)))  # fmt: skip
    found: dict[str, float] = {}
    session.needle_retention.connect(lambda strategy, share: found.update({strategy: share}))
    session.measure_needles(("retrieve", "tail"))
    qtbot.waitUntil(lambda: len(found) == 2, timeout=WAIT)
    assert found == {"retrieve": 1.0, "tail": 0.0}


def test_each_event_of_the_workbench_model_is_a_signal_of_the_same_name() -> None:
    """The bridge turns the Qt-free model's events into its signals 1:1, by name."""
    for name in EVENTS:
        assert isinstance(getattr(SessionModel, name), Signal), name
    assert {"plan_changed", "status", "failed", "model_needed"} <= set(EVENTS)


def test_a_wait_ends_with_the_line_it_began_with_though_the_language_changed(
    qtbot, session: SessionModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window clears a wait's status line by its text: the line as it was shown, not as
    the notice would be said in the language chosen since."""
    said: list[str] = []
    over: list[str] = []
    session.status.connect(lambda text, _ms: said.append(text))
    session.status_over.connect(over.append)
    with qtbot.waitSignal(session.plan_changed, timeout=WAIT):
        session.open_document(DOC)
        monkeypatch.setattr(session, "tr", lambda text: text.upper(), raising=False)
    qtbot.waitUntil(lambda: not session.waiting_for, timeout=WAIT)
    assert said[0] == f"Opening {DOC.name}…"
    assert said[0] in over and said[0].upper() not in over
