"""The Server box says, before connecting, that an API key is about to go unencrypted to another
machine, and keeps saying it once connected, ahead of what the server reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.core.credentials import ENV_HOST, ENV_KEY
from app.core.engine.remote import ServerInfo
from app.ui.server_box import ServerBox

CLEAR = ("the API key goes to gpu-box:8000 over plain HTTP, unencrypted, where anyone on the "
         "network in between can read it (use https:// if the server offers it)")  # fmt: skip


@pytest.fixture
def box(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ServerBox:
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_HOST, raising=False)
    monkeypatch.setattr("app.ui.server_box.api_key", lambda _url: None)  # no keyring here
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    widget = ServerBox(settings)
    qtbot.addWidget(widget)
    return widget


def _info(url: str) -> ServerInfo:
    return ServerInfo(url, "llama-server", "m", 4096, "/props", None, "the server (/tokenize)",
                      True, "the server (/props)", 4, "/slots", True,
                      warnings=("a warning of the server's",))  # fmt: skip


def test_a_key_over_plain_http_is_said_before_and_after_connecting(box: ServerBox) -> None:
    asked: list[object] = []
    box.connect_requested.connect(lambda spec, _local: asked.append(spec))
    box.url.setText("http://gpu-box:8000")
    box.key.setText("sk-typed")
    box._request()
    assert len(asked) == 1 and asked[0].api_key == "sk-typed"  # type: ignore[attr-defined]
    assert box.message.text() == CLEAR  # said as the request leaves, before any answer
    box.show_connected(_info("http://gpu-box:8000"))
    assert box.message.text() == f"{CLEAR} a warning of the server's"


@pytest.mark.parametrize("url", ["https://gpu-box:8000", "http://127.0.0.1:8080", "gpu-box:8000"])
def test_nothing_is_said_over_https_on_this_machine_or_without_a_key(
    box: ServerBox, url: str
) -> None:
    box.url.setText(url)
    box.key.setText("sk-typed")
    box._request()
    assert box.message.text() == ""
    box.show_disconnected()
    box.url.setText("http://gpu-box:8000")
    box.key.clear()
    box._request()  # no key: nothing goes in clear
    assert box.message.text() == ""


def test_a_key_of_the_environment_held_back_is_said(
    box: ServerBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEY, "sk-env")
    box.url.setText("https://gpu-box:8000")
    box._request()
    assert box.message.text().startswith("$CONTEXTLENS_API_KEY is not sent to "
                                         "https://gpu-box:8000")  # fmt: skip
