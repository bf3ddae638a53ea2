"""The Sampling box: presets fill the fields, an edit makes the mix Custom, the choice is kept
across windows; and in the window on the real model, the next Run samples with it, its version
records it, and a rollback puts the version's sampling back and resumes with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QSettings

from app.core.engine.types import SamplingSettings
from app.core.paths import sample_document
from app.core.sampling import BALANCED, CREATIVE, DETERMINISTIC, PRESETS, stored
from app.ui.sampling_box import CUSTOM, SamplingBox
from tests.ui.windows import Windows


def test_presets_fill_the_fields_and_an_edit_makes_it_custom(qtbot, settings: QSettings) -> None:
    box = SamplingBox(settings)
    qtbot.addWidget(box)
    assert box.settings() == SamplingSettings()  # greedy by default
    assert box.preset.currentData() == DETERMINISTIC
    box.seed.setValue(7)
    for name in (BALANCED, CREATIVE, DETERMINISTIC):
        box.preset.setCurrentIndex(box.preset.findData(name))
        box.preset.activated.emit(box.preset.currentIndex())  # as a person's choice
        assert box.settings() == replace(PRESETS[name], seed=7)  # the seed stays
        assert box.preset.currentData() == name
    with qtbot.waitSignal(box.changed) as changed:
        box.temperature.setValue(0.3)
    assert changed.args[0].temperature == 0.3 and box.preset.currentData() == CUSTOM
    box.preset.activated.emit(box.preset.findData(CUSTOM))
    assert not box.more.isHidden() and box.more.isChecked()  # Custom shows the fields
    box.stop_loops.setChecked(False)
    assert box.settings().stop_on_repetition is False


def test_the_choice_is_kept_for_the_next_window(qtbot, settings: QSettings) -> None:
    first = SamplingBox(settings)
    qtbot.addWidget(first)
    chosen = replace(PRESETS[BALANCED], seed=11, dry_last_n=512)
    first.set_settings(chosen)
    second = SamplingBox(settings)
    qtbot.addWidget(second)
    assert second.settings() == chosen and second.preset.currentData() == CUSTOM
    settings.setValue("sampling/settings", '{"temperature": -4}')  # damaged: the default
    third = SamplingBox(settings)
    qtbot.addWidget(third)
    assert third.settings() == SamplingSettings()


def test_the_run_samples_with_the_box_and_a_rollback_brings_it_back(
    qtbot, make_window: Windows, tmp_path: Path, model_path: Path, settings: QSettings
) -> None:
    doc = tmp_path / "lexicon.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:1500], encoding="utf-8")
    window = make_window(model_path, doc, n_ctx=512, settings=settings)
    with qtbot.waitSignal(window.ready, timeout=120_000):
        window.show()
    window.max_tokens.setValue(12)
    box = window.sampling_box
    box.set_settings(replace(PRESETS[BALANCED], seed=3))
    chosen = box.settings()
    window.strategy_box.setCurrentIndex(window.strategy_box.findData("head"))
    with qtbot.waitSignal(window.job_finished, timeout=300_000) as done:
        window.run_job()
    [result] = done.args[0].results
    assert done.args[0].spec.sampling == chosen and result.text
    [version] = window.store.repo.history()
    assert version.settings["sampling"] == stored(chosen)
    box.set_settings(SamplingSettings())  # the person goes back to greedy …
    history = window.history
    with qtbot.waitSignal(history.refreshed, timeout=30_000):
        history.refresh()
    history.select_versions(version.id)
    with qtbot.waitSignal(window.job_finished, timeout=300_000) as done:
        history.rollback_selected()  # … and rolls back: the version's sampling returns
    [resumed] = done.args[0].results
    assert box.settings() == chosen
    assert resumed.evaluated_tokens == 1 and resumed.text
    _old, new = window.store.repo.history()
    assert new.settings["sampling"] == stored(chosen)
