"""The model panel on the real default model, offscreen: card, memory line, options, requests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.core.calibrate import Calibration, Trial
from app.core.engine.types import EngineCapabilities, LoadedModel, LoadSettings
from app.ui.model_list import SOURCE_ROLE
from app.ui.model_panel import ModelPanel

SIZE = r"([\d.,]+ [MG]iB)"
MEMORY = re.compile(
    rf"^Fits: {SIZE} of {SIZE} free at n_ctx [\d,]+, \w+ KV cache "
    rf"\(weights {SIZE}, KV cache {SIZE}, compute {SIZE}\)\.$"
)


def caps(gpu: bool) -> EngineCapabilities:
    return EngineCapabilities("test", "", gpu, 1)


@pytest.fixture
def panel(qtbot, models_dir: Path) -> ModelPanel:
    """A panel whose first model (the default one) has been read."""
    p = ModelPanel(models_dir)
    qtbot.addWidget(p)
    qtbot.waitUntil(lambda: p.card.value("arch") == "llama", timeout=10_000)
    return p


def _bytes(size: str) -> float:
    number, unit = size.split()
    return float(number.replace(",", "")) * (2**30 if unit == "GiB" else 2**20)


def memory_figures(p: ModelPanel) -> tuple[float, float, float]:
    """(KV cache, weights, total) from the panel's "Fits: …" line."""
    m = MEMORY.search(p.memory.text())
    assert m, p.memory.text()
    total, free, weights, kv, compute = (_bytes(g) for g in m.groups())
    assert 0 < total < free and abs(total - (weights + kv + compute)) < 0.02 * total
    return kv, weights, total


def type_into(qtbot, spin, text: str) -> None:
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin.lineEdit(), text)


def fit_figures(qtbot, p: ModelPanel, shown: str) -> tuple[float, float, float]:
    """:func:`memory_figures` once the fit line, computed off the GUI thread, answers for the
    options as they are now (its text holding ``shown``)."""
    qtbot.waitUntil(lambda: not p.memory.pending() and shown in p.memory.text(), timeout=10_000)
    return memory_figures(p)


def test_the_models_folder_and_the_default_model_card(
    panel: ModelPanel, model_path: Path, qtbot
) -> None:
    names = [panel.models.item(i).text() for i in range(panel.models.count())]
    assert names == ["ContextLens models folder", model_path.name, "broken.gguf"]  # *.gguf, sorted
    assert panel.selected_model() == panel._models_dir / model_path.name
    assert panel.card.value("layers") == "30"
    assert panel.card.value("ctx_train") == "8,192"
    assert panel.card.value("quant") == "Q4_1"
    assert panel.card.value("params") == "135 M"
    per_token = int(panel.card.value("kv").split()[0].replace(",", ""))
    assert per_token > 0 and "(f16)" in panel.card.value("kv")
    assert panel.load_button.isEnabled() and not panel.unload_button.isEnabled()
    assert panel.error_text() == ""


def test_the_real_models_folder_lists_the_default_model(qtbot, model_path: Path) -> None:
    p = ModelPanel(model_path.parent)
    qtbot.addWidget(p)
    names = [p.models.item(i).text() for i in range(p.models.count())]
    assert model_path.name in names


def test_a_broken_file_is_one_plain_sentence_and_cannot_be_loaded(panel: ModelPanel, qtbot) -> None:
    with qtbot.waitSignal(panel.file_failed, timeout=10_000) as blocker:
        panel.models.setCurrentRow(2)
    message = blocker.args[0]
    assert message.startswith("broken.gguf cannot be used: GGUF version 1 is obsolete")
    assert panel.error_text() == message
    assert not panel.load_button.isEnabled()
    assert panel.card.value("arch") == "–"
    # back to a good model: the error goes, Load comes back
    with qtbot.waitSignal(panel.info_ready, timeout=10_000):
        panel.models.setCurrentRow(1)
    assert panel.error_text() == "" and panel.load_button.isEnabled()


def test_browse_adds_any_file(panel: ModelPanel, qtbot, tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere" / "odd.gguf"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"nope")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(elsewhere), ""))
    with qtbot.waitSignal(panel.file_failed, timeout=10_000) as blocker:
        qtbot.mouseClick(panel.browse_button, Qt.MouseButton.LeftButton)
    assert panel.selected_model() == elsewhere
    assert "odd.gguf" in panel.models.currentItem().text()
    assert "not a GGUF file" in blocker.args[0]


def test_typing_a_context_size_updates_the_memory_line(panel: ModelPanel, qtbot) -> None:
    type_into(qtbot, panel.n_ctx, "1024")
    assert panel.n_ctx.value() == 1024
    small = fit_figures(qtbot, panel, "at n_ctx 1,024, f16 KV cache")
    type_into(qtbot, panel.n_ctx, "8192")
    large = fit_figures(qtbot, panel, "at n_ctx 8,192, f16 KV cache")
    assert large[0] > small[0] * 7  # the KV cache grows with n_ctx
    assert large[2] > small[2]
    assert large[1] == small[1] > 0  # the weights do not
    # a cheaper cache type: the KV figure drops
    panel.kv_type.setCurrentText("q4_0")
    assert fit_figures(qtbot, panel, "q4_0 KV cache")[0] < large[0] / 3


def test_gpu_layers_wait_for_capabilities_and_say_why_they_are_off(panel: ModelPanel) -> None:
    assert not panel.gpu_layers.isEnabled()
    assert "Checking" in panel.gpu_reason.text()
    panel.set_capabilities(caps(gpu=False))
    assert not panel.gpu_layers.isEnabled()
    assert "CPU only" in panel.gpu_reason.text() and "CPU only" in panel.gpu_layers.toolTip()
    assert panel.settings().n_gpu_layers == 0
    panel.set_capabilities(caps(gpu=True))
    assert panel.gpu_layers.isEnabled() and panel.gpu_reason.isHidden()
    assert panel.gpu_layers.maximum() == 31  # 30 layers and the output
    panel.gpu_layers.setValue(31)
    assert panel.settings().n_gpu_layers == 31
    assert panel.gpu_layers_value.text() == "all 31"
    panel.set_capabilities(caps(gpu=False))
    assert panel.gpu_layers.value() == 0


def test_the_panel_names_the_backend_the_build_runs_on(panel: ModelPanel) -> None:
    assert panel.backend.text() == "checking…"
    panel.set_capabilities(EngineCapabilities("0.3.36", "CPU : AVX2 = 1 | ", False, 1))
    assert panel.backend.text() == "CPU only"
    cuda = "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | CPU : AVX2 = 1 | "
    panel.set_capabilities(EngineCapabilities("0.3.36", cuda, True, 1))
    assert panel.backend.text() == "CUDA + CPU (GPU offload available)"
    assert "ARCHS = 890" in panel.backend.toolTip() and "0.3.36" in panel.backend.toolTip()


def test_a_quantized_cache_turns_flash_attention_on_and_refuses_without_it(
    panel: ModelPanel,
) -> None:
    assert not panel.flash_attn.isChecked()
    panel.kv_type.setCurrentText("q8_0")
    assert panel.flash_attn.isChecked()
    assert "needs flash attention" in panel.settings_note.text()
    assert panel.settings_error() == "" and panel.load_button.isEnabled()
    panel.flash_attn.setChecked(False)
    assert "needs flash attention turned on" in panel.settings_error()
    assert panel.settings_note.text() == panel.settings_error()
    assert not panel.load_button.isEnabled()
    panel.kv_type.setCurrentText("f16")
    assert panel.settings_error() == "" and panel.settings_note.text() == ""
    assert panel.load_button.isEnabled()


def test_load_requests_the_chosen_settings_and_shows_the_answer(panel: ModelPanel, qtbot) -> None:
    panel.set_capabilities(caps(gpu=True))
    type_into(qtbot, panel.n_ctx, "2048")
    panel.threads.setValue(1)
    panel.kv_type.setCurrentText("q8_0")
    panel.gpu_layers.setValue(5)
    with qtbot.waitSignal(panel.load_requested, timeout=1000) as blocker:
        qtbot.mouseClick(panel.load_button, Qt.MouseButton.LeftButton)
    path, settings = blocker.args
    assert path == panel.selected_model()
    expected = LoadSettings(n_ctx=2048, n_threads=1, n_gpu_layers=5, kv_cache_type="q8_0",
                            flash_attn=True)  # fmt: skip
    assert settings == expected
    assert not panel.load_button.isEnabled()  # busy until the window answers

    loaded = LoadedModel(str(path), 2048, 8192, 49152, 1, 1, 5, True, "q8_0", True, 0.42)
    panel.show_loaded(loaded)
    assert panel.load_button.isEnabled() and panel.unload_button.isEnabled()
    assert "context 2,048 tokens" in panel.status.text()
    assert "context 2,048, KV q8_0" in panel.card.value("loaded")
    with qtbot.waitSignal(panel.unload_requested, timeout=1000):
        qtbot.mouseClick(panel.unload_button, Qt.MouseButton.LeftButton)
    panel.show_unloaded()
    assert not panel.unload_button.isEnabled() and panel.status.text() == "No model loaded."

    panel.set_busy(True)
    assert not panel.load_button.isEnabled()
    panel.show_error("a context of 2,048 tokens needs about 9 GiB; 1 GiB of memory is free")
    assert panel.error_text().endswith("of memory is free.")
    assert panel.load_button.isEnabled()


def test_a_context_size_past_the_trained_one_keeps_every_digit_and_warns(
    panel: ModelPanel, qtbot
) -> None:
    """Issue 49 row 3: the field's maximum was the model's trained context (8,192), so typing
    131072 left 1,310 and 16384 left 1,638, without a word."""
    for typed, value in (("131072", 131_072), ("16384", 16_384)):
        type_into(qtbot, panel.n_ctx, typed)
        assert panel.n_ctx.value() == value and panel.settings().n_ctx == value
        assert panel.context_note.text() == ("Above the model's trained context of 8,192 "
                                             "tokens: answers may degrade.")  # fmt: skip
        assert panel.settings_error() == "" and panel.load_button.isEnabled()
    type_into(qtbot, panel.n_ctx, "2000000")  # past what ContextLens loads: one sentence
    assert panel.n_ctx.value() == 2_000_000
    assert panel.settings_error() == "A context size can be at most 1,048,576 tokens."
    assert panel.context_note.text() == panel.settings_error()
    assert not panel.load_button.isEnabled()
    type_into(qtbot, panel.n_ctx, "4096")
    assert panel.context_note.text() == "" and panel.load_button.isEnabled()


def test_a_new_context_size_offers_to_reload_beside_the_field(panel: ModelPanel, qtbot) -> None:
    assert panel.reload_button.isHidden()  # nothing loaded: Load, right under the field
    type_into(qtbot, panel.n_ctx, "1024")
    path = panel.selected_model()
    panel.show_loaded(LoadedModel(str(path), 1024, 8192, 49152, 2, 2, 0, False, "f16", True, 0.2))
    assert panel.reload_button.isHidden()  # the size loaded
    type_into(qtbot, panel.n_ctx, "16384")
    assert not panel.reload_button.isHidden()
    assert panel.reload_button.text() == "Reload with 16,384"
    with qtbot.waitSignal(panel.load_requested, timeout=1000) as blocker:
        qtbot.mouseClick(panel.reload_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0] == path and blocker.args[1].n_ctx == 16_384
    assert panel.reload_button.isHidden()  # loading
    panel.show_error("not enough memory")
    type_into(qtbot, panel.n_ctx, "2000000")  # refused: nothing to offer
    assert panel.reload_button.isHidden()
    type_into(qtbot, panel.n_ctx, "1024")
    assert panel.reload_button.isHidden()


def test_one_source_still_shows_its_title(panel: ModelPanel, qtbot) -> None:
    """Issue 49 row 11: a source's title appeared only once a second source was found."""
    qtbot.waitUntil(lambda: panel.chooser.library is not None, timeout=20_000)
    titles = [panel.models.item(i).data(SOURCE_ROLE) for i in range(panel.models.count())]
    assert titles == ["ContextLens", None, None]  # the models folder alone, titled
    assert panel.models.item(0).text() == "ContextLens models folder"


def _calibration(path: Path) -> Calibration:
    fast = LoadSettings(n_ctx=512, n_threads=2, n_threads_batch=2, n_batch=256, n_ubatch=256,
                        flash_attn=True)  # fmt: skip
    slow = LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1)
    return Calibration("ab" * 32, "machine", fast,
                       (Trial(slow, 98.2, 68.4), Trial(fast, 239.4, 140.2)))  # fmt: skip


def test_the_tuned_settings_line_progress_table_and_requests(panel: ModelPanel, qtbot) -> None:
    tuning = panel.tuning
    assert panel.use_tuned() and panel.tuned_text().startswith("Not calibrated yet")
    assert not tuning.table_button.isEnabled() and tuning.again_button.isEnabled()
    panel.batch.setValue(128)
    panel.ubatch.setValue(64)
    assert (panel.settings().n_batch, panel.settings().n_ubatch) == (128, 64)

    panel.set_busy(True)
    panel.show_calibrating(3, 8)
    assert panel.tuned_text() == "calibrating: 3/8 settings"
    assert tuning.cancel_button.isVisibleTo(panel) and not tuning.again_button.isEnabled()
    with qtbot.waitSignal(panel.calibration_cancel_requested, timeout=1000):
        qtbot.mouseClick(tuning.cancel_button, Qt.MouseButton.LeftButton)

    path = panel.selected_model()
    panel.show_calibration(path, _calibration(path), measured_now=True)
    assert panel.tuned_text() == ("Measured now. Tuned for this machine: 2 threads, batch 256, "
                                  "flash on — 239 prompt / 140 gen tok/s")  # fmt: skip
    assert not tuning.cancel_button.isVisibleTo(panel)
    assert tuning.table.rowCount() == 2 and tuning.table.item(0, 0).text() == "✓"
    assert [tuning.table.item(0, c).text() for c in range(1, 7)] == [
        "2", "256", "256", "on", "239", "140.2"]  # fmt: skip
    assert not tuning.table.isVisibleTo(panel)
    qtbot.mouseClick(tuning.table_button, Qt.MouseButton.LeftButton)
    assert tuning.table.isVisibleTo(panel)

    panel.show_loaded(LoadedModel(str(path), 512, 8192, 49152, 2, 2, 0, False, "f16", True, 0.1))
    assert tuning.again_button.isEnabled()
    with qtbot.waitSignal(panel.calibrate_requested, timeout=1000) as blocker:
        qtbot.mouseClick(tuning.again_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [path, panel.settings()] and not panel.load_button.isEnabled()
    panel.show_calibration_stopped("Calibration cancelled")
    assert panel.tuned_text().startswith("Calibration cancelled: loading with the values above. "
                                         "Tuned for this machine: 2 threads")  # fmt: skip

    tuning.use_tuned.setChecked(False)
    assert not panel.use_tuned() and not tuning.again_button.isEnabled()
    assert panel.tuned_text() == ("Tuned settings off: the values above are used. (Tuned: 2 "
                                  "threads, batch 256, flash on.)")  # fmt: skip


def test_a_relative_path_to_a_listed_model_selects_it(panel: ModelPanel, models_dir: Path,
                                                      monkeypatch) -> None:  # fmt: skip
    monkeypatch.chdir(models_dir.parent)
    count = panel.models.count()
    panel.select_model(Path(models_dir.name) / "broken.gguf")  # as `--model models/x.gguf`
    assert panel.models.count() == count and panel.models.currentRow() == 2
