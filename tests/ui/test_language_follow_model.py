"""View ▸ Language, live, in the model panel and the boxes it holds (the Server box, the tuned
settings) and in the Sampling box: switched while shown, each reads exactly as one built in the
new language, empty and showing a model, a server or a calibration, and back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget

from app.core.calibrate import Calibration, Trial
from app.core.engine.remote import ServerInfo
from app.core.engine.types import EngineCapabilities, LoadedModel, LoadSettings, SamplingSettings
from app.core.sampling import BALANCED, DETERMINISTIC
from app.ui.model_panel import ModelPanel
from app.ui.sampling_box import CUSTOM, SamplingBox
from app.ui.server_box import ServerBox
from app.ui.tuned_settings import TunedSettingsBox
from tests.ui.ui_texts import assert_follows_language

CUDA = "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | CPU : AVX2 = 1 | "
INFO = ServerInfo("http://gpu-box:8000", "llama-server", "m", 4096, "/props", None,
                  "the server (/tokenize)", False, "the server (/props)", None, "", True,
                  warnings=("a warning of the server's",))  # fmt: skip


def calibration() -> Calibration:
    fast = LoadSettings(n_ctx=512, n_threads=2, n_threads_batch=2, n_batch=256, n_ubatch=128,
                        flash_attn=True)  # fmt: skip
    slow = LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1, flash_attn=False)
    return Calibration("ab" * 32, "machine", fast,
                       (Trial(slow, 98.2, 68.4), Trial(fast, 239.4, 140.2)))  # fmt: skip


@pytest.fixture
def no_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.ui.server_box.api_key", lambda _url: None)


def panel_maker(
    qtbot, folder: Path, settings: QSettings, then: Callable[[ModelPanel], None] = lambda p: None
) -> Callable[[], QWidget]:
    """Builds a panel over ``folder``, waits for its first model's card, then does ``then``
    and waits for the memory fit of the options it leaves (computed off the GUI thread)."""

    def make() -> ModelPanel:
        panel = ModelPanel(folder, settings=settings)
        qtbot.addWidget(panel)
        if panel.models.count():
            qtbot.waitUntil(lambda: panel.card.value("arch") != "–", timeout=10_000)
        then(panel)
        qtbot.waitUntil(lambda: not panel.memory.pending(), timeout=10_000)
        return panel

    return make


def test_the_empty_model_panel_follows_the_language(
    qtbot, tmp_path: Path, compiled: Path, settings: QSettings, no_keyring: None
) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    assert_follows_language(panel_maker(qtbot, empty, settings), compiled)


def test_the_model_panel_with_a_model_loaded_follows_the_language(
    qtbot, models_dir: Path, compiled: Path, settings: QSettings, no_keyring: None
) -> None:
    def loaded(panel: ModelPanel) -> None:
        path = panel.selected_model()
        assert path is not None
        panel.set_capabilities(EngineCapabilities("0.3.36", CUDA, True, 1))
        panel.gpu_layers.setValue(panel.gpu_layers.maximum())  # "all 31"
        panel.show_loaded(LoadedModel(str(path), 2048, 8192, 49152, 2, 2, 31, True, "f16", True,
                                      0.42, ("a warning of the engine's",)))  # fmt: skip
        panel.show_calibration(path, calibration(), measured_now=True)
        panel.tuning.table_button.setChecked(True)

    assert_follows_language(panel_maker(qtbot, models_dir, settings, loaded), compiled)


def test_the_model_panel_with_a_broken_file_and_a_server_follows_the_language(
    qtbot, models_dir: Path, compiled: Path, settings: QSettings, no_keyring: None
) -> None:
    def broken(panel: ModelPanel) -> None:
        panel.set_capabilities(EngineCapabilities("0.3.36", "CPU : AVX2 = 1 | ", False, 1))
        with qtbot.waitSignal(panel.file_failed, timeout=10_000):
            panel.select_model(models_dir / "broken.gguf")
        panel.show_server(INFO)
        panel.show_calibration_stopped("Calibration cancelled")

    assert_follows_language(panel_maker(qtbot, models_dir, settings, broken), compiled)


def test_the_model_panel_calibrating_follows_the_language(
    qtbot, models_dir: Path, compiled: Path, settings: QSettings, no_keyring: None
) -> None:
    def calibrating(panel: ModelPanel) -> None:
        panel.set_busy(True)
        panel.show_calibrating(3, 8)

    assert_follows_language(panel_maker(qtbot, models_dir, settings, calibrating), compiled)


@pytest.mark.parametrize("connected", [False, True])
def test_the_server_box_follows_the_language(
    qtbot, compiled: Path, settings: QSettings, no_keyring: None, connected: bool
) -> None:
    def make() -> ServerBox:
        box = ServerBox(settings)
        qtbot.addWidget(box)
        if connected:
            box.show_connected(INFO)
        return box

    assert_follows_language(make, compiled)


def test_the_server_box_says_a_kept_key_in_the_new_language(
    qtbot, compiled: Path, settings: QSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.ui.server_box.api_key", lambda _url: "sk-kept")
    settings.setValue("server/url", "http://gpu-box:8000")

    def make() -> ServerBox:
        box = ServerBox(settings)
        qtbot.addWidget(box)
        return box

    assert_follows_language(make, compiled)


@pytest.mark.parametrize("state", ["empty", "offered", "off", "background", "stopped"])
def test_the_tuned_settings_follow_the_language(qtbot, compiled: Path, state: str) -> None:
    def make() -> TunedSettingsBox:
        box = TunedSettingsBox()
        qtbot.addWidget(box)
        if state == "offered":
            box.offer(calibration())
            box.table_button.setChecked(True)
        elif state == "off":
            box.show_calibration(calibration())
            box.use_tuned.setChecked(False)
        elif state == "background":
            box.show_background_progress(3, 8)
        elif state == "stopped":
            box.show_calibration(calibration())
            box.show_stopped("Calibration cancelled")
        return box

    assert_follows_language(make, compiled)


@pytest.mark.parametrize("state", ["default", "balanced", "custom"])
def test_the_sampling_box_follows_the_language(
    qtbot, compiled: Path, settings: QSettings, state: str
) -> None:
    made: list[SamplingBox] = []

    def make() -> SamplingBox:
        box = SamplingBox(settings)
        qtbot.addWidget(box)
        if state == "balanced":
            box.choose_preset(BALANCED, remember=False)
        elif state == "custom":
            box.set_settings(SamplingSettings(temperature=0.7, top_k=0, repeat_last_n=-1,
                                              dry_last_n=-1, seed=7), remember=False)  # fmt: skip
            box.more.setChecked(True)
        made.append(box)
        return box

    assert_follows_language(make, compiled)
    chosen = {"default": DETERMINISTIC, "balanced": BALANCED, "custom": CUSTOM}[state]
    assert made[0].preset.currentData() == chosen  # switched there and back, the preset stays
