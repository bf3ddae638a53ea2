"""The output buffer, the history, the strategy comparison and the document view follow
View ▸ Language live: switched while they show nothing, and while they show a run, versions,
results or a plan, each reads exactly as one built in the new language, and back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QThreadPool
from PySide6.QtWidgets import QWidget

from app.core.documents import document_from_text
from app.core.engine.types import KVState
from app.core.jobs.tasks import (
    ChunkEvaluated,
    ChunkQueued,
    JobFinished,
    JobResult,
    KVStats,
    LanesStarted,
    OutputSpan,
    PlanReady,
    StrategyStarted,
    TokenBatch,
)
from app.core.paths import sample_document
from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner
from app.core.tokens import cl100k
from app.services.history import History
from app.store.db import Database
from app.store.repository import Entry, Repository
from app.ui.buffer_panel import BufferPanel
from app.ui.compare_view import CompareView
from app.ui.document_view import DocumentView
from app.ui.history_dialogs import BranchDialog, DiffDialog
from app.ui.history_panel import HistoryPanel
from tests.store.kv_states import engine_state
from tests.ui.history_cells import font, row
from tests.ui.ui_texts import assert_follows_language

WAIT = 10_000
SHA = "m" * 64


def maker(qtbot, build: Callable[[], QWidget]) -> Callable[[], QWidget]:
    """``build`` as assert_follows_language's ``make``: each widget is closed after the test."""

    def make() -> QWidget:
        widget = build()
        qtbot.addWidget(widget)
        return widget

    return make


# ----- the output buffer ------------------------------------------------------------------------


def a_run(panel: BufferPanel) -> None:
    """A plan, one model call on a sliding-window model, and its finish."""
    panel.set_sliding_window(64, 5, 6)
    sources = ((0, 300), (300, 620))
    for ev in (
        PlanReady("head", 400, 180, 900, 1, 0.75, 3),
        ChunkQueued("summary", 0, 300, 90),
        ChunkQueued("summary", 300, 620, 90),
        ChunkEvaluated("summary", 0, 300, 90, 30, 120, 1),
        ChunkEvaluated("summary", 300, 620, 90, 120, 210, 1),
        TokenBatch("summary", "A short reply.", 4, 1, sources),
        KVStats(219, 512, 4_000_000),
        JobFinished(JobResult("summarize", "head", "length", 512, prompt_tokens=215,
                              completion_tokens=4, outputs=[OutputSpan(
                                  "summary", "A short reply.", sources, 1, "length")])),
    ):  # fmt: skip
        panel.on_event(ev)
    panel.queue.flush()


def lanes(panel: BufferPanel) -> None:
    """A batched map phase under way: two lanes, one with a chunk in its cache."""
    panel.on_event(ChunkQueued("window 1", 0, 300, 90))
    panel.on_event(LanesStarted(2, 3, 512))
    panel.on_event(ChunkEvaluated("window 1", 0, 300, 90, 30, 120, 1, lane=0))
    panel.queue.flush()


@pytest.mark.parametrize("fill", [None, a_run, lanes], ids=["empty", "run", "lanes"])
def test_the_buffer_follows_the_language(
    qtbot, compiled: Path, fill: Callable[[BufferPanel], None] | None
) -> None:
    def build() -> BufferPanel:
        panel = BufferPanel(512)
        if fill is not None:
            fill(panel)
        return panel

    assert_follows_language(maker(qtbot, build), compiled)


# ----- the history ------------------------------------------------------------------------------


def seed(repo: Repository) -> tuple[int, int, int]:
    """Two sessions: one of three versions (v1 with a KV state, its child v2 that ran out of
    room, v3 a question branched from v1), one of a single version."""
    out = OutputSpan("summary", "Short.", ((0, 100),), 1, "stop")
    content = {"task": "summarize", "strategy": "head", "prompt": "",
               "model_path": "/m.gguf", "model_sha256": SHA,
               "settings": {"n_ctx": 512, "max_tokens": 64}}  # fmt: skip
    result = JobResult("summarize", "head", "stop", 512, prompt_tokens=400,
                       completion_tokens=20, outputs=[out])  # fmt: skip
    state = KVState((1, 2, 3, 4), engine_state(4), 512, "f16", "/m.gguf")
    doc = document_from_text("The harbour at dawn. " * 50, name="harbour.txt")
    [v1] = repo.record(doc, "harbour", [Entry(content, result, state, prompt_tokens=3)])
    session = repo.get_version(v1).session
    repo.record(doc, "harbour", [
        Entry({**content, "strategy": "tail"}, JobResult("summarize", "tail", "length", 512)),
    ], session=session, parent=v1)  # fmt: skip
    question = {**content, "task": "ask", "strategy": "rolling", "prompt": "Who sails?"}
    [v3] = repo.record(doc, "harbour", [Entry(question, JobResult("ask", "rolling", "cancelled",
                                                                   512))],
                       session=session, parent=v1)  # fmt: skip
    other = document_from_text("Another text.", name="other.txt")
    repo.record(other, "other", [Entry(content, result)])
    return session, v1, v3


def history_maker(
    qtbot, repo: Repository, show: Callable[[HistoryPanel], None] | None = None
) -> Callable[[], QWidget]:
    def build() -> HistoryPanel:
        panel = HistoryPanel(History(repo))
        if show is not None:
            show(panel)
        return panel

    return maker(qtbot, build)


def read(qtbot) -> Callable[[QWidget], None]:
    """Settle a new panel: wait until its history has been read and shown."""

    def settle(panel: QWidget) -> None:
        assert isinstance(panel, HistoryPanel)
        with qtbot.waitSignal(panel.refreshed, timeout=WAIT):
            pass

    return settle


def test_an_empty_history_follows_the_language(qtbot, compiled: Path, repo: Repository) -> None:
    assert_follows_language(history_maker(qtbot, repo), compiled, read(qtbot))


def test_the_sessions_follow_the_language(qtbot, compiled: Path, repo: Repository) -> None:
    seed(repo)
    assert_follows_language(history_maker(qtbot, repo), compiled, read(qtbot))


def test_a_session_s_versions_follow_the_language_and_stay_as_they_were(
    qtbot, compiled: Path, repo: Repository
) -> None:
    session, v1, v3 = seed(repo)
    made: list[HistoryPanel] = []

    def show(panel: HistoryPanel) -> None:
        panel.set_current(session, v3)
        made.append(panel)

    def settle(panel: QWidget) -> None:
        read(qtbot)(panel)
        assert isinstance(panel, HistoryPanel)
        panel.select_versions(v1)  # a saved KV state: the rollback button says it is instant
        panel.tree.collapse(row(panel, v1))

    assert_follows_language(history_maker(qtbot, repo, show), compiled, settle)
    panel = made[0]  # switched there and back: nothing moved
    assert [v.id for v in panel.selected_versions()] == [v1]
    assert panel.current_version() == v3 and font(row(panel, v3)).bold()
    assert not panel.tree.isExpanded(row(panel, v1))
    assert panel.session_combo.currentData() == session


def test_a_read_only_history_s_note_follows_the_language(
    qtbot, compiled: Path, db: Database, repo: Repository
) -> None:
    seed(repo)
    read_only = Repository(dataclasses.replace(db, read_only=True))
    try:
        assert_follows_language(history_maker(qtbot, read_only), compiled, read(qtbot))
    finally:
        QThreadPool.globalInstance().waitForDone(WAIT)
        read_only.close()


def test_the_history_s_dialogs_follow_the_language(
    qtbot, compiled: Path, repo: Repository
) -> None:
    _session, v1, _v3 = seed(repo)
    version = repo.get_version(v1)
    assert_follows_language(maker(qtbot, lambda: BranchDialog(version)), compiled)
    assert_follows_language(maker(qtbot, lambda: DiffDialog("v1 → v1", "")), compiled)


# ----- the comparison ---------------------------------------------------------------------------


def compared(view: CompareView) -> None:
    """Two strategies, one finished (with needles set), one refused, one pane still waiting."""
    view.start(["head", "map-reduce", "tail"], needles={"head": 0.5})
    for strategy, finish, refused in (("head", "length", None), ("map-reduce", "stop", "Too big.")):
        view.on_event(StrategyStarted(strategy))
        view.on_event(PlanReady(strategy, 400, 180, 900, 2, 0.8, 4))
        view.on_event(TokenBatch("summary", "Some words.", 3, 1, ((0, 10),)))
        view.on_event(JobFinished(JobResult("summarize", strategy, finish, 512, seconds=1.5,
                                            refused=refused)))  # fmt: skip
    view.set_needle_retention("map-reduce", 1.0)


@pytest.mark.parametrize("fill", [None, compared], ids=["empty", "results"])
def test_the_comparison_follows_the_language(
    qtbot, compiled: Path, fill: Callable[[CompareView], None] | None
) -> None:
    def build() -> CompareView:
        view = CompareView()
        if fill is not None:
            fill(view)
        return view

    assert_follows_language(maker(qtbot, build), compiled)


# ----- the document view ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text() -> str:
    return sample_document().read_text(encoding="utf-8")[:20_000]


@pytest.fixture(scope="module")
def plans(text: str) -> dict[str, Plan]:
    planner = Planner(text, cl100k())
    return {"head": planner.plan("head", 1024), "rolling": planner.plan("rolling", 1024),
            "wide": planner.plan("head", 100_000)}  # fmt: skip


@pytest.mark.parametrize(
    "plan", [None, "", "head", "rolling", "wide"],
    ids=["empty", "document", "plan", "passes", "budget-off-scale"],
)  # fmt: skip
def test_the_document_view_follows_the_language(
    qtbot, compiled: Path, text: str, plans: dict[str, Plan], plan: str | None
) -> None:
    def build() -> DocumentView:
        view = DocumentView()
        if plan is None:
            return view
        view.set_document(text)
        if plan:
            view.set_counts(len(text), None, 5_000, 4096)
            view.show_plan(plans[plan])
            view.reveal(len(text) // 2)  # the caret in a span: the line below describes it
        return view

    assert_follows_language(maker(qtbot, build), compiled)
