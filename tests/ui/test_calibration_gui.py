"""Tuned settings in the window, offscreen on the real engine and the default model: the first load
is usable at once and calibrates in the background (progress, then the choice and its figures,
offered), a run does not wait for it, a later load applies the cached choice, Cancel keeps the
person's own values, and "Use tuned settings" off is obeyed and remembered.

The candidates are cut to one to three, and each trial to 32 prompt and 4 generated tokens, so
the file runs in seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.core import calibrate
from app.core.calibrate import AUTO_ENV, cached, machine_key
from app.core.default_model import sha256_of
from app.core.engine.types import LoadSettings
from app.ui import background_calibration
from app.ui.main_window import USE_TUNED_KEY, MainWindow
from tests.ui.windows import Windows

N_CTX = 512
SLOW = LoadSettings(n_ctx=N_CTX, n_threads=1, n_threads_batch=1, n_batch=32, n_ubatch=32)
QUICK = LoadSettings(n_ctx=N_CTX, n_threads=1, n_threads_batch=1, n_batch=256, n_ubatch=256,
                     flash_attn=True)  # fmt: skip

Factory = Callable[[], MainWindow]


@pytest.fixture
def open_calibrating_window(
    qtbot, make_window: Windows, tmp_path: Path, model_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Factory:  # fmt: skip
    """Windows that calibrate the model they load (short trials), sharing one settings file and
    one calibration cache, each with the model selected and a history of its own."""
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(AUTO_ENV, "1")
    monkeypatch.setattr(calibrate, "PROMPT_TOKENS", 32)  # shorter trials, the same procedure
    monkeypatch.setattr(calibrate, "GEN_TOKENS", 4)
    made: list[MainWindow] = []

    def make() -> MainWindow:
        w = make_window(None, None, n_ctx=N_CTX, db_path=tmp_path / f"h{len(made)}.db")
        made.append(w)
        w.session.calibration_trials = (SLOW, QUICK)
        with qtbot.waitSignal(w.model_panel.info_ready, timeout=10_000):
            w.model_panel.select_model(model_path)
        w.model_panel.n_ctx.setValue(N_CTX)
        return w

    return make


def progress_texts(w: MainWindow) -> list[str]:
    """The tuned-settings line each time the panel was told of progress."""
    seen: list[str] = []
    show = w.model_panel.show_calibrating

    def spy(done: int, total: int) -> None:
        show(done, total)
        seen.append(w.model_panel.tuned_text())

    w.model_panel.show_calibrating = spy  # type: ignore[method-assign]
    return seen


def load(qtbot, w: MainWindow, button: object | None = None) -> None:
    with qtbot.waitSignal(w.ready, timeout=120_000):
        qtbot.mouseClick(button or w.model_panel.load_button, Qt.MouseButton.LeftButton)
    assert not w.waiting_for


def loaded_settings(w: MainWindow) -> LoadSettings:
    """What the engine loaded the model with (the session keeps it to reload after a crash)."""
    settings = w.engine.driver.session.settings
    assert settings is not None
    return settings


def background_texts(w: MainWindow) -> list[str]:
    """The tuned-settings line each time the background calibration said how far it is."""
    seen: list[str] = []
    w.session.background_calibration.connect(
        lambda _done, _total: seen.append(w.model_panel.tuned_text())
    )  # connected after the panel: it reads what the panel shows
    return seen


def measuring(done: int, total: int) -> str:
    return (f"Measuring the fastest settings in the background: {done}/{total} tried. The "
            "model is ready to use meanwhile.")  # fmt: skip


def test_the_first_load_is_usable_at_once_and_its_calibration_is_offered(
    qtbot, open_calibrating_window: Factory, model_path: Path
) -> None:
    w = open_calibrating_window()
    assert w.model_panel.tuned_text().startswith("Not calibrated yet")
    w.model_panel.threads.setValue(2)
    mine = w.model_panel.settings()
    seen, before_load = background_texts(w), progress_texts(w)
    said: list[str] = []
    w.session.status.connect(lambda message, _ms: said.append(message))
    with qtbot.waitSignal(w.session.calibration_offered, timeout=120_000):
        load(qtbot, w)
        assert loaded_settings(w) == mine  # loaded at once, as chosen: nothing measured first
    assert seen == [measuring(0, 2), measuring(1, 2), measuring(2, 2)] and before_load == []
    assert not [m for m in said if m.startswith("Calibrating")]  # the load did not wait for it
    assert said[-1] == "Tuned settings are ready: see Speed in the model panel."
    cal = w.model_panel.tuning.calibration
    assert cal is not None and len(cal.trials) == 2
    assert cal.best == min(cal.trials, key=lambda t: t.seconds_per_call).settings
    text = w.model_panel.tuned_text()
    assert text.startswith("Tuned settings are ready: 1 thread, batch ")
    assert text.endswith("gen tok/s. Use them? (Later loads do.)") and " prompt / " in text
    assert loaded_settings(w) == mine  # offered, not applied
    assert cached(sha256_of(model_path), cal.machine) == cal
    use = w.model_panel.tuning.use_button
    assert use.isVisibleTo(w.model_panel)
    load(qtbot, w, use)  # "Use Them": the model loads again with the tuned knobs
    used = loaded_settings(w)
    assert used == cal.settings_for(mine)  # the tuned knobs, the panel's n_ctx
    assert used.n_ctx == N_CTX and used.n_threads == 1  # not the panel's 2 threads
    assert w.model_panel.tuned_text().startswith("Tuned for this machine: ")
    assert not use.isVisibleTo(w.model_panel)
    assert w.model_panel.tuning.table.rowCount() == 2
    w.model_panel.tuning.table_button.click()
    assert w.model_panel.tuning.table.isVisibleTo(w.model_panel)

    # a later start: the cached choice applies, nothing is measured
    again = open_calibrating_window()
    seen, before_load = background_texts(again), progress_texts(again)
    load(qtbot, again)
    assert seen == before_load == [] and again.model_panel.tuning.calibration == cal
    assert again.model_panel.tuned_text().startswith("Tuned for this machine: ")
    assert loaded_settings(again) == used and not again.session.background.running

    again.session.calibration_trials = (QUICK,)  # "Calibrate again" measures anew, then loads
    seen = progress_texts(again)
    load(qtbot, again, again.model_panel.tuning.again_button)
    assert seen == ["calibrating: 0/1 settings", "calibrating: 1/1 settings"]
    fresh = again.model_panel.tuning.calibration
    assert fresh is not None and fresh.best == QUICK and len(fresh.trials) == 1
    assert cached(sha256_of(model_path), fresh.machine) == fresh


def test_a_run_starts_while_the_first_calibration_waits(
    qtbot, open_calibrating_window: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    release = threading.Event()  # the calibration holds until the run is done
    real = background_calibration.calibrate_apart

    def held(*args: object, **kwargs: object) -> object:
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(background_calibration, "calibrate_apart", held)
    request.addfinalizer(release.set)  # a failed test does not keep it waiting
    w = open_calibrating_window()
    document = tmp_path / "notes.txt"
    document.write_text("The river rose in the spring. " * 8, encoding="utf-8")
    with qtbot.waitSignal(w.plan_shown, timeout=30_000):
        w.open_document(document)
    with qtbot.waitSignal(w.ready, timeout=60_000):  # loaded and counted: Run can start
        qtbot.mouseClick(w.model_panel.load_button, Qt.MouseButton.LeftButton)
    assert w.session.background.running and w.model_panel.tuning.calibration is None
    paused: list[bool] = []
    w.session.job_started.connect(lambda _job: paused.append(w.session.background.paused))
    w.max_tokens.setValue(4)
    with qtbot.waitSignal(w.job_finished, timeout=60_000):
        w.run_job()
    assert paused == [True]  # its trials wait while a job runs
    assert w.model_panel.tuning.calibration is None  # the run did not wait for it
    with qtbot.waitSignal(w.session.calibration_offered, timeout=120_000):
        release.set()
    assert w.model_panel.tuned_text().startswith("Tuned settings are ready: ")


def test_cancel_stops_the_background_calibration_and_keeps_the_persons_values(
    qtbot, open_calibrating_window: Factory, model_path: Path
) -> None:
    w = open_calibrating_window()
    w.session.calibration_trials = (SLOW, QUICK, SLOW)
    w.model_panel.threads.setValue(1)
    w.model_panel.batch.setValue(128)
    w.model_panel.ubatch.setValue(64)
    mine = w.model_panel.settings()
    clicked: list[bool] = []

    def cancel_at_once(_done: int, _total: int) -> None:
        if not clicked:  # the panel's Cancel, as soon as it shows
            assert w.model_panel.tuning.cancel_button.isVisibleTo(w.model_panel)
            clicked.append(True)
            qtbot.mouseClick(w.model_panel.tuning.cancel_button, Qt.MouseButton.LeftButton)

    w.session.background_calibration.connect(cancel_at_once)
    with qtbot.waitSignal(w.session.background_calibration_stopped, timeout=120_000):
        load(qtbot, w)
    assert clicked
    assert loaded_settings(w) == mine
    assert w.model_panel.tuned_text().startswith("Calibration cancelled. Not calibrated yet")
    assert not w.model_panel.tuning.cancel_button.isVisibleTo(w.model_panel)
    machine = machine_key(w.engine.driver.session.capabilities)
    assert cached(sha256_of(model_path), machine) is None  # the next load calibrates again
    assert w.model_panel.load_button.isEnabled()


def test_use_tuned_settings_off_loads_the_panels_values_and_is_remembered(
    qtbot, open_calibrating_window: Factory
) -> None:
    w = open_calibrating_window()
    assert w.model_panel.use_tuned()
    w.model_panel.tuning.use_tuned.setChecked(False)
    assert w.model_panel.tuned_text().startswith("Tuned settings off: the values above are used")
    assert not w.model_panel.tuning.again_button.isEnabled()
    w.model_panel.threads.setValue(1)
    w.model_panel.batch.setValue(64)
    w.model_panel.ubatch.setValue(64)
    seen, behind = progress_texts(w), background_texts(w)
    load(qtbot, w)
    assert seen == behind == [] and loaded_settings(w) == w.model_panel.settings()
    assert not w.session.background.running
    assert w.settings.value(USE_TUNED_KEY, True, type=bool) is False
    assert not open_calibrating_window().model_panel.use_tuned()  # the next start remembers it
