"""The window on the real engine, the real default model and a real history file, offscreen:
open, plan, run, cancel, survive an engine crash, compare, roll back, and never block."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QImage

from app.core.jobs.tasks import DEFAULT_LANES, SUMMARIZE, TokenBatch
from app.core.paths import sample_document
from app.core.planning.strategies import Planner, plan_for
from app.ui.main_window import REPLAN_DELAY_MS, MainWindow
from app.ui.run_status import STEPS
from tests.ui.windows import Windows

N_CTX = 512


@pytest.fixture
def short_doc(tmp_path: Path) -> Path:
    """About 3,000 tokens of the sample: several times the test context, quick to run."""
    path = tmp_path / "lexicon.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:12_000], encoding="utf-8")
    return path


@pytest.fixture
def window(qtbot, make_window: Windows, model_path: Path, short_doc: Path) -> MainWindow:
    """The window with the default model loaded and short_doc planned; replies of 8 tokens."""
    w = make_window(model_path, short_doc, n_ctx=N_CTX)
    with qtbot.waitSignal(w.ready, timeout=120_000):
        w.show()
    w.max_tokens.setValue(8)
    return w


def _open_brief(qtbot, w: MainWindow, tmp_path: Path) -> None:
    """About 900 tokens instead of 3,000: a multi-pass job has two windows here, not seven."""
    brief = tmp_path / "brief.txt"
    brief.write_text(sample_document().read_text(encoding="utf-8")[:4_000], encoding="utf-8")
    with qtbot.waitSignal(w.plan_shown, timeout=60_000):
        w.open_document(brief)


def _run(qtbot, w: MainWindow, strategy: str) -> object:
    w.strategy_box.setCurrentIndex(w.strategy_box.findData(strategy))
    with qtbot.waitSignal(w.job_finished, timeout=300_000) as done:
        w.run_job()
    return done.args[0]


def _watch_status(w: MainWindow) -> list[tuple[str, int, int, bool]]:
    """What the run's status said after each batch of its events (its line, the bar's value and
    maximum), and whether the status bar showed a line then."""
    seen: list[tuple[str, int, int, bool]] = []
    w.job_events.connect(lambda _events: seen.append(
        (*w.run_status.shown, w.run_line.isVisible())))  # fmt: skip
    return seen


def test_the_window_loads_the_model_and_plans_the_document(qtbot, window: MainWindow) -> None:
    assert window.session.loaded is not None and window.session.loaded.n_ctx == N_CTX
    # before any run, the KV stage shows the context that was loaded
    assert f"0 of {N_CTX:,} positions in use" in window.buffers.kv_label.text()
    with qtbot.waitSignal(window.plan_shown, timeout=60_000) as shown:
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("tail"))
    tail = shown.args[0]
    with qtbot.waitSignal(window.plan_shown, timeout=60_000) as shown:
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))
    head = shown.args[0]
    assert (tail.strategy, head.strategy) == ("tail", "head")
    # the plan is shown: "Planning head…" does not stay in the status bar
    qtbot.waitUntil(lambda: "Planning" not in window.statusBar().currentMessage(), timeout=5_000)
    assert head.kept[0].start == 0 and tail.kept[-1].end == len(window.session.document.text)
    assert head.dropped and tail.dropped  # the document is several times the context


def test_plans_and_counts_come_from_the_planning_process(qtbot, window: MainWindow) -> None:
    pid = window.session.plans.pid
    assert pid is not None, "the window planned in its own process"
    with qtbot.waitSignal(window.plan_shown, timeout=60_000) as shown:
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("entropy"))
    counter = window.engine.driver.counter
    here = plan_for(Planner(window.session.document, counter), "entropy", window.session.model_path,
                    instruction=SUMMARIZE, n_ctx=N_CTX, reserve=8)  # fmt: skip
    assert shown.args[0] == here
    assert window.session.document_tokens == counter.count(window.session.document.text)
    window.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # closing the window ended the child


def test_the_plan_shown_is_the_plan_the_job_runs(
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    """Multi-pass strategies and questions change the budget (partial-summary prompts, room for
    the question): the window plans with the job's own framing."""
    _open_brief(qtbot, window, tmp_path)
    cases = (("summarize", "map-reduce", ""), ("ask", "head", "Which words come first?"))
    for task, strategy, question in cases:
        window.task_box.setCurrentIndex(window.task_box.findData(task))
        window.strategy_box.setCurrentIndex(window.strategy_box.findData(strategy))
        window.question.setText(question)
        qtbot.wait(REPLAN_DELAY_MS + 200)  # the replan the question schedules, then ours
        with qtbot.waitSignal(window.plan_shown, timeout=60_000) as shown:
            window.update_plan()
        with qtbot.waitSignal(window.job_finished, timeout=300_000) as done:
            window.run_job()
        [result] = done.args[0].results
        plan = shown.args[0]
        assert result.plan["budget"] == plan.budget, (task, strategy)
        assert result.plan["total_tokens"] == plan.total_tokens
        assert len(result.plan["windows"]) == len(plan.windows)


def test_a_job_streams_into_the_buffers_and_is_recorded(qtbot, window: MainWindow) -> None:
    seen = _watch_status(window)
    outcome = _run(qtbot, window, "head")
    [result] = outcome.results
    # the status bar said the phase and its progress, on a bar that was never a busy animation
    lines = [line for line, *_ in seen]
    assert any(line.startswith("head · prompt ") for line in lines), lines
    assert any(line.startswith("head · reply: ") for line in lines), lines
    assert all(maximum == STEPS for _, _, maximum, _ in seen), seen
    assert any(shown for *_, shown in seen), "the status bar showed no line"
    values = [value for _, value, _, _ in seen]
    assert values == sorted(values) and values[-1] > values[0], values
    assert not window.run_line.isVisible() and not window.progress.isVisible()
    assert result.finish_reason in ("stop", "length") and result.kv_peak_cells <= N_CTX
    assert result.text and result.text in window.buffers.output_text()
    [version] = window.store.repo.history()
    assert version.strategy == "head" and window.store.repo.runs(version.id)
    assert window.store.repo.kv_states(version.id), "the KV state is kept for an instant rollback"


def test_an_audited_run_holds_exactly_the_spans_the_document_view_shows_kept(
    qtbot, window: MainWindow
) -> None:
    window.audit_action.setChecked(True)
    with qtbot.waitSignal(window.plan_shown, timeout=60_000):
        window.strategy_box.setCurrentIndex(window.strategy_box.findData("middle"))
    outcome = _run(qtbot, window, "middle")
    audit = outcome.audit
    assert audit is not None and audit.ok, audit.findings
    assert audit.counts.calls == 1 and audit.counts.chunks >= 2
    assert window.statusBar().currentMessage().startswith("audit passed: 1 job(s)")
    view, text = window.document_view, window.session.document.text
    evaluated = audit.evaluated
    for a, b in evaluated:  # every chunk llama.cpp held is painted kept...
        assert view.span_at(a)[1] and view.span_at(b - 1)[1], (a, b)
    held = [False] * len(text)
    for a, b in evaluated:
        held[a:b] = [True] * (b - a)
    for offset in range(0, len(text), 97):  # ...and what is painted kept is what it held
        span = view.span_at(offset)
        if span is not None and text[offset].strip():
            assert span[1] == held[offset], offset


def test_a_map_phase_runs_in_the_lanes_chosen_in_the_job_menu(
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    assert window.controls.lanes() == DEFAULT_LANES  # the default, until the person chooses
    _open_brief(qtbot, window, tmp_path)
    window.controls.lanes_actions[2].trigger()
    assert window.controls.lanes() == 2 and window.settings.value("lanes", type=int) == 2
    seen = _watch_status(window)
    outcome = _run(qtbot, window, "map-reduce")
    [result] = outcome.results
    assert result.lanes == 2 and result.finish_reason in ("stop", "length")
    windows = len(result.plan["windows"])
    assert windows >= 2  # a window for each lane at least
    # the status bar counted the windows, each an equal share of its bar
    assert any(f"Window 2 of {windows}" in line for line, *_ in seen), seen
    assert any(maximum == windows * STEPS for _, _, maximum, _ in seen), seen
    assert [o.step for o in result.outputs][-1] == "summary"
    for out in result.outputs:  # each lane's reply reached the output stage whole
        assert out.text in window.buffers.output_text()
    window.controls.lanes_actions[0].trigger()
    assert window.controls.lanes() is None and window.settings.value("lanes", type=int) == 0
    outcome = _run(qtbot, window, "map-reduce")
    assert outcome.results[0].lanes is None  # one window at a time


def test_a_later_launch_s_context_size_loads_the_model_again_or_is_refused(
    qtbot, window: MainWindow, tmp_path: Path, model_path: Path
) -> None:
    """``contextlens --n-ctx 1024 FILE`` beside this window (tests/ui/test_single_instance.py
    hands the options over): the file opens and the model loads again at 1,024; what the
    window cannot honour is refused in one sentence."""
    assert window.launch_refusal({"n_ctx": 8}) == (
        "--n-ctx 8 is not a context size ContextLens loads (16 to 1,048,576).")
    assert window.launch_refusal({"lang": "tlh"}).startswith(
        "--lang tlh is not one of this window's choices: system, ")
    assert window.launch_refusal({"n_ctx": 1024, "theme": "dark"}) == ""
    brief = tmp_path / "brief.txt"
    brief.write_text(sample_document().read_text(encoding="utf-8")[:4_000], encoding="utf-8")
    window.take_launch([brief], {"n_ctx": 1024})
    qtbot.waitUntil(lambda: window.session.loaded is not None
                    and window.session.loaded.n_ctx == 1024
                    and window.document_path == brief, timeout=60_000)  # fmt: skip
    assert Path(window.session.loaded.path) == model_path
    assert window.model_panel.n_ctx.value() == 1024
    qtbot.waitUntil(lambda: f"of {1024:,} positions" in window.buffers.kv_label.text(),
                    timeout=10_000)  # fmt: skip

    window.run_job()
    qtbot.waitUntil(lambda: window.session.running, timeout=10_000)
    refusal = window.launch_refusal({"n_ctx": 2048})
    assert refusal.startswith("The running ContextLens window is busy with a run"), refusal
    with qtbot.waitSignal(window.job_finished, timeout=120_000):
        window.session.cancel()
    assert window.session.loaded.n_ctx == 1024  # refused: nothing was loaded again


def test_enter_in_the_question_box_asks_it(qtbot, window: MainWindow) -> None:
    window.task_box.setCurrentIndex(window.task_box.findData("ask"))
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))
    window.question.setFocus()
    qtbot.keyClicks(window.question, "Who wrote this?")
    with qtbot.waitSignal(window.job_finished, timeout=120_000) as done:
        qtbot.keyClick(window.question, Qt.Key.Key_Return)
    [result] = done.args[0].results
    assert result.task == "ask" and window.store.repo.history()[0].prompt == "Who wrote this?"
    qtbot.keyClick(window.question, Qt.Key.Key_Return)  # the next Enter asks again...
    assert window.session.running
    qtbot.keyClick(window.question, Qt.Key.Key_Return)  # ...but not twice at once
    with qtbot.waitSignal(window.job_finished, timeout=120_000):
        pass
    assert len(window.store.repo.history()) == 2


def test_quitting_during_a_run_asks_then_cancels_and_cleans_up(
    qtbot, window: MainWindow
) -> None:
    """The person closing the window mid-run is asked; "keep running" keeps it; quitting
    cancels the run and leaves no engine process and no /dev/shm folder behind."""
    window.max_tokens.setValue(200)
    window.run_job()
    qtbot.waitUntil(lambda: window.session.running, timeout=10_000)
    child = psutil.Process(window.engine.driver.engine_pid)
    folder = Path(next(a for a in child.cmdline() if a.endswith("cancel.flag"))).parent
    assert folder.is_dir()
    asked: list[bool] = []
    window.confirm_quit = lambda: asked.append(True) or False  # "Keep running"
    window.controls.quit_action.trigger()
    assert asked == [True] and window.isVisible() and window.session.running
    window.confirm_quit = lambda: asked.append(True) or True  # "Quit"
    window.controls.quit_action.trigger()
    assert len(asked) == 2 and not window.isVisible()
    child.wait(timeout=30)
    assert not folder.exists()


def test_cancel_stops_a_running_job(qtbot, window: MainWindow) -> None:
    window.max_tokens.setValue(400)
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))

    def cancel_on_first_text(events: list) -> None:
        if any(isinstance(ev, TokenBatch) for ev in events):
            window.cancel()

    window.job_events.connect(cancel_on_first_text)  # on the GUI thread, like a person
    with qtbot.waitSignal(window.job_finished, timeout=300_000) as done:
        window.run_job()
    assert done.args[0].results[0].finish_reason == "cancelled"
    assert window.run_action.isEnabled() and not window.cancel_action.isEnabled()


def test_an_engine_crash_mid_job_restarts_the_engine_and_keeps_the_window(
    qtbot, window: MainWindow
) -> None:
    window.max_tokens.setValue(400)

    def kill_on_first_text(events: list) -> None:
        pid = window.engine.driver.engine_pid
        if pid and any(isinstance(ev, TokenBatch) for ev in events):
            os.kill(pid, signal.SIGKILL)

    window.job_events.connect(kill_on_first_text)
    with qtbot.waitSignals([window.engine_restarted, window.job_finished], timeout=300_000):
        window.run_job()
    window.job_events.disconnect(kill_on_first_text)
    assert "engine" in window.last_error.lower()
    window.max_tokens.setValue(8)
    outcome = _run(qtbot, window, "head")  # the new engine, same model, same window
    assert outcome.results[0].finish_reason in ("stop", "length")


def test_compare_runs_three_strategies_side_by_side(qtbot, window: MainWindow) -> None:
    text = window.session.document.text
    first, last = text[200:240], text[-300:-260]  # a fact near the start, one near the end
    window.needles.setText(f"{first} | {last}")
    with qtbot.waitSignal(window.job_finished, timeout=600_000) as done:
        window.run_compare(["head", "tail", "entropy"])
    assert [r.strategy for r in done.args[0].results] == ["head", "tail", "entropy"]
    rows = window.compare.summary()
    assert [row[0] for row in rows] == ["head", "tail", "entropy"]
    needles = window.compare.COLUMNS.index("needles")
    qtbot.waitUntil(
        lambda: all(r[needles] != "–" for r in window.compare.summary()), timeout=60_000
    )
    by_strategy = {r[0]: r[needles] for r in window.compare.summary()}
    assert by_strategy["head"] == "50%" and by_strategy["tail"] == "50%"  # one end each
    for name in ("head", "tail", "entropy"):
        assert window.compare.panes[name].output.toPlainText().strip()
    assert len(window.store.repo.history()) == 3


def _kv_agrees(qtbot, w: MainWindow) -> None:
    """The KV map and the gauge say the same number of cells (the gauge redraws on a timer)."""
    qtbot.waitUntil(lambda: w.gauges.kv_bar.value() == w.buffers.kv.used, timeout=5_000)
    assert w.buffers.kv.used > 0


def test_rollback_resumes_from_the_kv_state(
    qtbot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    window.max_tokens.setValue(24)
    outcome = _run(qtbot, window, "head")
    reply = outcome.results[0].text
    _kv_agrees(qtbot, window)
    [version] = window.store.repo.history()
    with qtbot.waitSignal(window.session.version_opened, timeout=30_000):
        window.session.open_version(version.id)  # Open: the stored reply; the cache as it is
    assert reply and reply in window.buffers.output_text()
    _kv_agrees(qtbot, window)
    window.buffers.reset(N_CTX)  # nothing shown: the rollback must show the reply itself
    history = window.history
    with qtbot.waitSignal(history.refreshed, timeout=30_000):
        history.refresh()
    assert history.has_kv(version.id)  # shown as an instant rollback
    history.select_versions(version.id)
    with qtbot.waitSignal(window.job_finished, timeout=300_000) as done:
        history.rollback_selected()  # the panel makes the version; the window resumes it
    [resumed] = done.args[0].results
    assert resumed.evaluated_tokens == 1  # the prompt came from the saved state
    assert resumed.text == reply and reply in window.buffers.output_text()
    _kv_agrees(qtbot, window)
    old, new = window.store.repo.history()  # the rollback version holds the resumed run
    assert new.parent == old.id and window.store.repo.runs(new.id)[0]["outputs"][0]["text"]

    # without a KV state to resume from, a rollback shows the reply recorded
    window.buffers.reset(N_CTX)
    monkeypatch.setattr(history, "has_kv", lambda _version: False)
    history.select_versions(old.id)
    with qtbot.waitSignal(window.session.version_opened, timeout=30_000):
        history.rollback_selected()
    assert reply in window.buffers.output_text()
    assert window.statusBar().currentMessage().startswith("Rolled back to a new version")


def test_app_entry_point_runs_the_demo_and_saves_a_screenshot(tmp_path: Path) -> None:
    shot = tmp_path / "window.png"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "CONTEXTLENS_DB": str(tmp_path / "d")}
    proc = subprocess.run(
        [sys.executable, "-m", "app.ui.main", "--demo", "--n-ctx", "1024",
         "--screenshot", str(shot)],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(shot))
    assert not image.isNull() and image.width() > 800 and image.height() > 500


def test_a_bad_model_is_reported_in_plain_words(qtbot, tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(32))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(bad, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.failed, timeout=30_000) as blocker:
        w.show()
    assert "version 1 is obsolete" in blocker.args[0]
    w.close()
