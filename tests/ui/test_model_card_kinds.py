"""The model panel names Gemma 3's sliding window and that it is a base model, before loading
(the card) and at load (the status line, from the engine's warning)."""

from __future__ import annotations

from pathlib import Path

from app.core.engine.gguf import BASE_MODEL_NOTE
from app.core.engine.types import LoadedModel
from app.ui.model_panel import ModelPanel


def test_the_card_and_the_load_line_name_the_window_and_the_base_model(
    qtbot, tmp_path: Path, gemma_path: Path, model_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / gemma_path.name).symlink_to(gemma_path)
    (folder / model_path.name).symlink_to(model_path)
    panel = ModelPanel(folder)
    qtbot.addWidget(panel)
    rows = {panel.models.item(i).text(): i for i in range(panel.models.count())}
    panel.models.setCurrentRow(rows[gemma_path.name])
    qtbot.waitUntil(lambda: panel.card.value("arch") == "gemma3", timeout=10_000)
    assert panel.card.value("attention") == "sliding window of 512 tokens on 15 of 18 layers"
    assert panel.card.value("kind") == BASE_MODEL_NOTE
    assert panel.card.value("kv") == "18,432 bytes (f16)"

    warning = f"{BASE_MODEL_NOTE} (it has no chat template)"
    loaded = LoadedModel(str(gemma_path), 8192, 32768, 262144, 2, 2, 0, False, "f16", False,
                         0.4, (warning,), is_base_model=True)  # fmt: skip
    panel.show_loaded(loaded)
    assert warning in panel.status.text()

    panel.models.setCurrentRow(rows[model_path.name])
    qtbot.waitUntil(lambda: panel.card.value("arch") == "llama", timeout=10_000)
    assert panel.card.value("attention") == "full attention on all 30 layers"
    assert panel.card.value("kind") == "chat model (it has a chat template)"
