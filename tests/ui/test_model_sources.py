"""The model panel lists the models other tools keep, grouped by source under titles that cannot
be selected, and a model that lands in a watched folder appears without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QGuiApplication

from app.services import model_library
from app.ui.model_list import DETAILS_ROLE, SOURCE_ROLE
from app.ui.model_panel import ModelPanel
from tests.model_homes import Home, live_in, write_tiny_gguf


@pytest.fixture
def panel_home(layout: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Home:
    """The layout as this test's home, with its added folder in the model library."""
    home = live_in(layout, monkeypatch)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the folders added
    model_library.add_folder(home.added)
    return home


@pytest.fixture
def sources(qtbot, panel_home: Home, tmp_path: Path) -> ModelPanel:
    """A panel over the home's own folder, once the models other programs keep are listed."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    p = ModelPanel(panel_home.own, settings=settings)
    qtbot.addWidget(p)
    qtbot.waitUntil(lambda: "gemma3:270m" in rows(p), timeout=20_000)
    return p


def rows(panel: ModelPanel) -> list[str]:
    """Each row's text, a source's title in brackets."""
    out = []
    for i in range(panel.models.count()):
        item = panel.models.item(i)
        out.append(f"[{item.text()}]" if item.data(SOURCE_ROLE) else item.text())
    return out


def row_named(panel: ModelPanel, name: str) -> int:
    return rows(panel).index(name)


def test_the_list_groups_the_models_by_source(sources: ModelPanel, panel_home: Home) -> None:
    assert rows(sources) == [
        "[ContextLens models folder]", "not-a-model.gguf",
        "[LM Studio]", "bartowski/SmolLM2-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf",
        "[Ollama]", "gemma3:270m",
        "[Hugging Face cache]", "tiny-org/Tiny-GGUF/tiny-f32.gguf",
        "[llama.cpp cache]", "tiny-org_Tiny_cache.gguf",
        "[Added folders]", "big-00001-of-00003.gguf", "half/half-00001-of-00003.gguf",
    ]  # fmt: skip
    titles = [sources.models.item(i) for i in range(sources.models.count())
              if sources.models.item(i).data(SOURCE_ROLE)]  # fmt: skip
    assert all(t.flags() == Qt.ItemFlag.NoItemFlags for t in titles)  # cannot be selected
    assert sources.model_count() == 7 and panel_home.lm_studio_file in sources.chooser.listed()
    gemma = sources.models.item(row_named(sources, "gemma3:270m"))
    assert gemma.data(DETAILS_ROLE) == "268 M · Q4_K_M · 241.4 MiB"
    hover = sources.chooser.hover_text(str(panel_home.ollama_blob))
    assert hover is not None
    assert hover.splitlines()[:3] == [str(panel_home.ollama_blob), "Trained context: 32,768 tokens",
                                      "Family: gemma3"]  # fmt: skip
    half = sources.models.item(row_named(sources, "half/half-00001-of-00003.gguf"))
    assert half.data(DETAILS_ROLE).endswith(" · 2 of 3 parts present")
    bad = sources.models.item(row_named(sources, "not-a-model.gguf"))
    assert bad.data(DETAILS_ROLE) == "not a GGUF model llama.cpp can read"
    assert sources.models_note.isHidden()  # the only file skipped is the models folder's, listed


def test_an_ollama_blob_is_chosen_and_read_like_any_model(sources: ModelPanel, panel_home: Home,
                                                          qtbot) -> None:  # fmt: skip
    with qtbot.waitSignal(sources.info_ready, timeout=10_000) as blocker:
        sources.models.setCurrentRow(row_named(sources, "gemma3:270m"))
    assert blocker.args[0].architecture == "gemma3"
    assert sources.selected_model() == panel_home.ollama_blob
    assert sources.load_button.isEnabled()


def test_a_model_put_in_a_watched_folder_appears_without_a_restart(
    sources: ModelPanel, panel_home: Home, qtbot
) -> None:
    selected = sources.selected_model()
    repo = panel_home.lm_studio_file.parent
    write_tiny_gguf(repo / "SmolLM2-tiny-F32.gguf", "Tiny new")
    name = "bartowski/SmolLM2-GGUF/SmolLM2-tiny-F32.gguf"
    qtbot.waitUntil(lambda: name in rows(sources), timeout=20_000)
    write_tiny_gguf(panel_home.added / "new-folder" / "later.gguf", "Later")  # a new subfolder
    qtbot.waitUntil(lambda: "new-folder/later.gguf" in rows(sources), timeout=20_000)
    assert sources.selected_model() == selected  # the list grew; the choice stayed


def test_a_file_chosen_by_hand_is_listed_under_its_own_title(sources: ModelPanel, tmp_path: Path,
                                                             qtbot) -> None:  # fmt: skip
    elsewhere = write_tiny_gguf(tmp_path / "elsewhere" / "mine.gguf", "Mine")
    with qtbot.waitSignal(sources.info_ready, timeout=10_000):
        sources.select_model(elsewhere)
    assert rows(sources)[-2:] == ["[Chosen files]", f"mine.gguf ({elsewhere.parent})"]
    assert sources.selected_model() == elsewhere


def test_a_models_menu_copies_its_path_and_forgets_an_added_folder(
    sources: ModelPanel, panel_home: Home, qtbot
) -> None:
    ollama = sources.list_menu(row_named(sources, "gemma3:270m"))
    assert ollama is not None and [a.text() for a in ollama.actions()] == ["Copy Path"]
    ollama.actions()[0].trigger()
    assert QGuiApplication.clipboard().text() == str(panel_home.ollama_blob)
    added = sources.list_menu(row_named(sources, "big-00001-of-00003.gguf"))
    assert added is not None
    assert [a.text() for a in added.actions()] == ["Copy Path", f"Stop Listing {panel_home.added}"]
    added.actions()[1].trigger()
    qtbot.waitUntil(lambda: "[Added folders]" not in rows(sources), timeout=20_000)
    assert model_library.added_folders() == [] and panel_home.split_first.is_file()
    assert sources.list_menu(0) is None  # a source's title has no menu


def test_a_split_with_a_part_missing_cannot_be_loaded_and_says_why(
    sources: ModelPanel, qtbot
) -> None:
    with qtbot.waitSignal(sources.file_failed, timeout=10_000) as blocker:
        sources.models.setCurrentRow(row_named(sources, "half/half-00001-of-00003.gguf"))
    assert blocker.args[0] == ("half-00001-of-00003.gguf cannot be used: only 2 of its 3 parts "
                               "are here, and llama.cpp needs them all.")  # fmt: skip
    assert not sources.load_button.isEnabled()
    with qtbot.waitSignal(sources.info_ready, timeout=10_000):  # the whole split loads
        sources.models.setCurrentRow(row_named(sources, "big-00001-of-00003.gguf"))
    assert sources.load_button.isEnabled() and sources.error_text() == ""
