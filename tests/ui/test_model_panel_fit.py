"""The model panel's memory fit, off the GUI thread: computed on a pool thread once the options
stop changing, the last figure kept meanwhile, and only the answer for the latest options shown
(an answer for older ones, arriving late, is dropped)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QThreadPool

from app.core.memory_fit import Fit
from app.ui import model_fit
from app.ui.model_fit import FitInputs
from app.ui.model_panel import ModelPanel


class Recorder:
    """Stands in for :func:`app.ui.model_fit.fit_of`: records the thread and the context size
    of each computation, and holds those for ``hold_n_ctx`` until ``release`` is set."""

    def __init__(self) -> None:
        self.real = model_fit.fit_of
        self.calls: list[tuple[bool, int]] = []  # (on the GUI thread, n_ctx)
        self.hold_n_ctx: int | None = None
        self.held = threading.Event()  # a held computation has started
        self.release = threading.Event()
        self.finished = threading.Event()  # the held computation has returned

    def __call__(self, inputs: FitInputs) -> Fit:
        n_ctx = inputs.settings.n_ctx
        self.calls.append((threading.current_thread() is threading.main_thread(), n_ctx))
        if n_ctx == self.hold_n_ctx:
            self.held.set()
            self.release.wait(20)
            try:
                return self.real(inputs)
            finally:
                self.finished.set()
        return self.real(inputs)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    monkeypatch.setattr(model_fit, "fit_of", recorder)
    pool = QThreadPool.globalInstance()
    threads = pool.maxThreadCount()
    pool.setMaxThreadCount(max(threads, 4))  # a held computation must not starve the next
    yield recorder
    recorder.release.set()
    pool.setMaxThreadCount(threads)


@pytest.fixture
def fit_panel(qtbot, tmp_path: Path, model_path: Path, recorder: Recorder) -> ModelPanel:
    """A panel whose default model has been read, with the fit for its options shown."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / model_path.name).symlink_to(model_path)
    p = ModelPanel(folder)
    qtbot.addWidget(p)
    qtbot.waitUntil(lambda: p.card.value("arch") == "llama", timeout=10_000)
    qtbot.waitUntil(lambda: not p.memory.pending() and p.memory.shown() is not None,
                    timeout=10_000)  # fmt: skip
    return p


def settled(qtbot, p: ModelPanel) -> Fit:
    qtbot.waitUntil(lambda: not p.memory.pending(), timeout=10_000)
    fit = p.memory.shown()
    assert fit is not None
    return fit


def test_the_fit_comes_with_the_card_and_is_never_computed_on_the_gui_thread(
    fit_panel: ModelPanel, recorder: Recorder
) -> None:
    assert recorder.calls == [(False, fit_panel.n_ctx.value())]  # with the file's read, once
    assert fit_panel.memory.text().startswith("Fits: ")


def test_a_rapid_series_of_changes_computes_the_last_one_only(
    qtbot, fit_panel: ModelPanel, recorder: Recorder
) -> None:
    recorder.calls.clear()
    before = fit_panel.memory.text()
    for n_ctx in range(1024, 8193, 512):  # as fast as a held arrow key, or faster
        fit_panel.n_ctx.setValue(n_ctx)
    assert fit_panel.memory.pending() and fit_panel.memory.text() == before  # the last figure stays
    assert recorder.calls == []  # nothing computed while the changes come
    fit = settled(qtbot, fit_panel)
    assert fit.n_ctx == 8192 and "at n_ctx 8,192," in fit_panel.memory.text()
    assert recorder.calls == [(False, 8192)]


def test_typing_a_context_size_is_computed_once_it_pauses(
    qtbot, fit_panel: ModelPanel, recorder: Recorder
) -> None:
    recorder.calls.clear()
    fit_panel.n_ctx.lineEdit().selectAll()
    qtbot.keyClicks(fit_panel.n_ctx.lineEdit(), "6000")  # 6, 60, 600, 6000: four values
    assert fit_panel.n_ctx.value() == 6000
    assert settled(qtbot, fit_panel).n_ctx == 6000
    assert recorder.calls == [(False, 6000)]


def test_an_answer_for_older_options_arriving_late_is_dropped(
    qtbot, fit_panel: ModelPanel, recorder: Recorder
) -> None:
    recorder.hold_n_ctx = 1024
    fit_panel.n_ctx.setValue(1024)
    qtbot.waitUntil(recorder.held.is_set, timeout=10_000)  # its computation started, and waits
    fit_panel.n_ctx.setValue(2048)
    assert settled(qtbot, fit_panel).n_ctx == 2048  # the newer answer, shown first
    recorder.release.set()
    assert recorder.finished.wait(10)
    qtbot.wait(300)  # the old answer reaches the GUI thread, and is dropped there
    assert fit_panel.memory.shown() is not None and fit_panel.memory.shown().n_ctx == 2048
    assert "at n_ctx 2,048," in fit_panel.memory.text()
    assert all(not on_gui for on_gui, _n_ctx in recorder.calls)


def test_options_that_change_nothing_compute_nothing_and_no_model_needs_no_fit(
    qtbot, fit_panel: ModelPanel, recorder: Recorder
) -> None:
    recorder.calls.clear()
    fit_panel.set_busy(True)  # the options are checked again; they are the same
    fit_panel.set_busy(False)
    assert not fit_panel.memory.pending() and recorder.calls == []
    fit_panel.kv_type.setCurrentText("q8_0")  # turns flash attention on too: one computation
    fit = settled(qtbot, fit_panel)
    assert fit.kv_cache_type == "q8_0" and recorder.calls == [(False, fit_panel.n_ctx.value())]
    fit_panel.models.setCurrentRow(-1)  # nothing selected: said at once, nothing computed
    assert fit_panel.memory.text() == "KV cache: choose a model to see the memory it takes."
    assert not fit_panel.memory.pending()
