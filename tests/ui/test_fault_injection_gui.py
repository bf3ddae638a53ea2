"""The window when the engine child dies mid-run (issue 7, item 3, fault injection), offscreen on
the real engine, the real default model, a real document and a real history file.

The engine's one-shot fault is armed through the environment before the window starts its engine
(tests/fault_injection.py): the child kills itself with SIGKILL, SIGSEGV or SIGABRT after a drawn
number of generated tokens. The window survives and says what happened, the document and the
history are intact, the text generated before the crash is in the history, a new engine has the
model loaded again, and the next run works. One signal runs in the normal suite, the others (and
crashes while loading and while saving the KV state) with SLOW=1.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.core.engine.types import LoadSettings
from app.ui.history_columns import Column
from app.ui.main_window import MainWindow
from tests.conftest import DATA
from tests.fault_injection import Draw, arm, check_crash_sentence, draw, tally_of
from tests.ui.history_cells import row, text

DOC = DATA / "sample.docx"  # 280 tokens: more than the context holds
N_CTX = 256
MAX_TOKENS = 16
SEED = 4711

_rng = random.Random(SEED)
GENERATE = {sig: draw(_rng, "generate", sig) for sig in ("SIGSEGV", "SIGKILL", "SIGABRT")}

Factory = Callable[[Draw], MainWindow]


@pytest.fixture
def open_window(
    qtbot, tmp_path: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Factory]:
    """A window on the sample document whose engine child has ``fault`` armed."""
    made: list[MainWindow] = []

    def make(fault: Draw) -> MainWindow:
        """The window, once the model is loaded and the document counted (after a crash while
        loading: once it has said so)."""
        arm(monkeypatch, tmp_path, fault)
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        w = MainWindow(model_path, DOC, n_ctx=N_CTX, db_path=tmp_path / "h.db",
                       settings=settings)  # fmt: skip
        qtbot.addWidget(w)
        made.append(w)
        with qtbot.waitSignal(w.failed if fault.phase == "load" else w.ready,
                              timeout=120_000):  # fmt: skip
            w.show()
        w.max_tokens.setValue(MAX_TOKENS)
        w.strategy_box.setCurrentIndex(w.strategy_box.findData("head"))
        return w

    yield make
    for w in made:
        w.close()


def _run(qtbot, w: MainWindow, *, crash: bool = False) -> object:
    """Run the job and wait for it to be recorded (and, after a crash, for the new engine)."""
    signals = [w.engine_restarted, w.job_finished] if crash else [w.job_finished]
    outcomes: list[object] = []
    w.job_finished.connect(outcomes.append)
    try:
        with qtbot.waitSignals(signals, timeout=300_000, order="none"):
            w.run_job()
    finally:
        w.job_finished.disconnect(outcomes.append)
    [outcome] = outcomes
    return outcome


def _history(w: MainWindow) -> list[dict]:
    assert w.store is not None
    repo = w.store.repo
    return [{**run, "version": v} for v in repo.history() for run in repo.runs(v.id)]


def _crash_mid_run(qtbot, w: MainWindow, fault: Draw, config: pytest.Config) -> None:
    pid = w.engine.driver.engine_pid
    doc, shown = w.session.document, w.document_view.text.toPlainText()
    outcome = _run(qtbot, w, crash=True)
    tally_of(config).add(fault)

    # The window survived and said what happened, in words naming the signal.
    assert w.isVisible() and w.run_action.isEnabled()
    assert w.last_error.startswith("The engine stopped: the engine process died"), w.last_error
    assert fault.signal in w.last_error
    [result] = outcome.results
    assert result.finish_reason == "error"
    check_crash_sentence(result.error, fault)
    [out] = result.outputs
    assert out.finish_reason == "error" and out.text  # the text generated before the crash
    assert out.text in w.buffers.output_text()

    # The document is intact, and the history holds the run with its partial output and error.
    assert w.session.document is doc and w.document_view.text.toPlainText() == shown
    [stored] = _history(w)
    assert stored["finish_reason"] == "error" and stored["error"] == result.error
    assert [o["text"] for o in stored["outputs"]] == [out.text]
    qtbot.waitUntil(lambda: bool(w.history.versions()), timeout=30_000)
    [version] = w.history.versions()
    assert text(row(w.history, version.id), Column.FINISH).startswith("error")

    # A new engine has the model, and the next run works.
    assert w.session.loaded is not None and w.engine.driver.engine_pid not in (None, pid)
    again = _run(qtbot, w)
    [ok] = again.results
    assert ok.finish_reason in ("stop", "length") and ok.error is None
    assert ok.text.startswith(out.text)  # greedy decoding: the crash cut the same reply short
    assert len(_history(w)) == 2


def test_a_segfault_mid_run_leaves_the_window_and_the_session_intact(
    qtbot, open_window: Factory, pytestconfig: pytest.Config
) -> None:
    fault = GENERATE["SIGSEGV"]
    _crash_mid_run(qtbot, open_window(fault), fault, pytestconfig)


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGABRT"])
def test_a_kill_or_abort_mid_run_leaves_the_window_and_the_session_intact(
    qtbot, open_window: Factory, pytestconfig: pytest.Config, sig: str
) -> None:
    fault = GENERATE[sig]
    _crash_mid_run(qtbot, open_window(fault), fault, pytestconfig)


@pytest.mark.slow
def test_a_crash_while_loading_leaves_no_model_and_the_window_works(
    qtbot, open_window: Factory, pytestconfig: pytest.Config
) -> None:
    fault = draw(random.Random(SEED + 1), "load", "SIGABRT")
    w = open_window(fault)
    tally_of(pytestconfig).add(fault)
    assert w.isVisible()
    assert w.last_error.startswith("the engine process died while loading")
    assert "cannot load this file as it is" in w.last_error
    assert fault.signal in w.last_error
    # A file that killed llama.cpp while loading would do so again: the window does not load it
    # by itself. The person loads it again, on the new engine.
    assert w.session.loaded is None and w.session.document is not None
    with qtbot.waitSignal(w.ready, timeout=120_000):
        w.load_model(w.session.model_path, LoadSettings(n_ctx=N_CTX))
    w.max_tokens.setValue(MAX_TOKENS)
    [ok] = _run(qtbot, w).results
    assert ok.finish_reason in ("stop", "length") and ok.text


@pytest.mark.slow
def test_a_crash_while_saving_the_kv_state_keeps_the_finished_run(
    qtbot, open_window: Factory, pytestconfig: pytest.Config
) -> None:
    fault = Draw("save", "SIGKILL", 0)  # the state saved right after the job, for rollback
    w = open_window(fault)
    pid = w.engine.driver.engine_pid
    outcome = _run(qtbot, w, crash=True)
    tally_of(pytestconfig).add(fault)
    [result] = outcome.results
    assert result.finish_reason in ("stop", "length") and result.text and not outcome.states
    [stored] = _history(w)
    assert stored["outputs"][-1]["text"] == result.text and not w.store.repo.kv_states(
        stored["version"].id
    )
    assert w.isVisible() and w.engine.driver.engine_pid not in (None, pid)
    [ok] = _run(qtbot, w).results
    assert ok.finish_reason in ("stop", "length") and ok.text == result.text
    assert w.last_error.startswith("The engine stopped: ")
    assert fault.signal in w.last_error, w.last_error
