"""The "Get a Model from Hugging Face" dialog against the loopback Hub (tests/hub_server.py):
progress while it downloads, Cancel mid-transfer, the error sentence with Try Again (which
resumes), and the way there from the default model's dialog."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from app.core import credentials
from app.ui.model_fetch_dialog import HubFetchDialog, ModelFetchDialog
from tests.hub_server import COMMIT, TOKEN, hub, keyring_file, sha256

__all__ = ["hub", "keyring_file"]  # fixtures

BIG = "big/ggml-vocab-qwen2-F16.gguf"


def hub_dialog(qtbot, reference: str) -> HubFetchDialog:
    dialog = HubFetchDialog(reference=reference)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def test_the_dialog_downloads_with_progress(qtbot, hub, tmp_path: Path) -> None:
    state, endpoint = hub
    state.trickle_at, state.trickle_delay = 3_000_000, 0.005  # slow enough to see it move
    dialog = hub_dialog(qtbot, f"test-org/vocab-GGUF:{BIG}")
    assert dialog.windowTitle() == "Get a Model from Hugging Face"
    assert endpoint.removeprefix("http://") in dialog.note.text()
    assert state.log == []  # nothing asked before the person clicks
    with qtbot.waitSignal(dialog.fetched, timeout=60_000) as blocker:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: 0 < dialog.bar.value() < dialog.bar.maximum(), timeout=20_000)
        assert " of 5.9 MB" in dialog.amount.text() and not dialog.reference.isEnabled()
    path = blocker.args[0]
    cache = tmp_path / "hf-home" / "hub" / "models--test-org--vocab-GGUF" / "snapshots"
    assert path == cache / COMMIT / BIG
    assert sha256(path.read_bytes()) == sha256(state.repos["test-org/vocab-GGUF"][BIG])
    assert not dialog.isVisible() and dialog.result() == QDialog.DialogCode.Accepted


def test_cancel_stops_the_download_and_try_again_resumes(qtbot, hub, tmp_path: Path) -> None:
    state, _ = hub
    state.trickle_at = 500_000
    dialog = hub_dialog(qtbot, f"test-org/vocab-GGUF:{BIG}")
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.bar.value() > 500_000, timeout=20_000)
    with qtbot.waitSignal(dialog.cancelled, timeout=3_000):
        qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible() and not dialog.running()
    blobs = tmp_path / "hf-home" / "hub" / "models--test-org--vocab-GGUF" / "blobs"
    (partial,) = blobs.iterdir()
    have = partial.stat().st_size
    assert partial.name.endswith(".incomplete") and have > 500_000

    state.trickle_at = None
    again = hub_dialog(qtbot, f"test-org/vocab-GGUF:{BIG}")
    with qtbot.waitSignal(again.fetched, timeout=60_000):
        qtbot.mouseClick(again.download_button, Qt.MouseButton.LeftButton)
    assert state.gets(BIG)[-1].range == f"bytes={have}-" and not partial.exists()


def test_a_gated_model_says_why_and_try_again_with_a_token_fetches_it(qtbot, hub) -> None:
    state, endpoint = hub
    state.gated.add("test-org/gated-GGUF")
    dialog = hub_dialog(qtbot, "test-org/gated-GGUF")
    with qtbot.waitSignal(dialog.failed, timeout=20_000) as blocker:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0].startswith(
        "Could not get the model: this model needs a Hugging Face token: test-org/gated-GGUF")
    assert blocker.args[0].endswith(".") and dialog.error_text() == blocker.args[0]
    assert dialog.download_button.text() == "Try &Again" and dialog.isVisible()
    dialog.token.setText(f" {TOKEN} ")  # kept in the keyring, then used
    with qtbot.waitSignal(dialog.fetched, timeout=20_000):
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    assert credentials.hub_token(endpoint) == TOKEN
    assert state.log[-1].authorization == f"Bearer {TOKEN}"


def test_an_empty_reference_asks_for_one(qtbot, hub) -> None:
    state, _ = hub
    dialog = hub_dialog(qtbot, "")
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    assert dialog.error_text().startswith("Type a model's name first") and not dialog.running()
    assert state.log == []


def test_the_default_models_dialog_leads_there(qtbot, hub, tmp_path: Path) -> None:
    dialog = ModelFetchDialog(tmp_path / "models")
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.mouseClick(dialog.hub_button, Qt.MouseButton.LeftButton)
    hub_dialog_ = dialog.hub_dialog
    assert hub_dialog_ is not None and hub_dialog_.isVisible()
    hub_dialog_.reference.setText("test-org/split-GGUF")
    with qtbot.waitSignal(dialog.fetched, timeout=20_000) as blocker:
        qtbot.mouseClick(hub_dialog_.download_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0].name == "tiny-Q8_0-00001-of-00002.gguf"
    assert not dialog.isVisible() and dialog.result() == QDialog.DialogCode.Accepted
