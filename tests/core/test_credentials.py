"""Which API key goes to which server: ``$CONTEXTLENS_API_KEY`` only to the server that
``$CONTEXTLENS_API_HOST`` names (a key exported in a shell must not go to every server it talks
to), the keyring's to its own server, and a one-sentence note when the environment's is held
back."""

from __future__ import annotations

from collections.abc import Iterator

import keyring
import pytest
from keyring.backend import KeyringBackend

from app.core.credentials import ENV_HOST, ENV_KEY, api_key, env_key_note, save_api_key

pytestmark = pytest.mark.unit


class _Memory(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.entries.pop((service, username), None)


@pytest.fixture
def ring(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Memory]:
    before = keyring.get_keyring()
    memory = _Memory()
    keyring.set_keyring(memory)
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_HOST, raising=False)
    yield memory
    keyring.set_keyring(before)


def test_the_environments_key_goes_only_to_the_server_it_names(
    ring: _Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEY, "sk-env")
    assert api_key("https://api.example.com") is None  # no host named: sent nowhere
    monkeypatch.setenv(ENV_HOST, "api.example.com")
    assert api_key("https://api.example.com/v1") == "sk-env"
    assert api_key("api.example.com:443") == "sk-env"
    assert api_key("http://api.example.com") is None  # not in clear to the same host
    assert api_key("https://evil.example.net") is None
    assert api_key("127.0.0.1:8080") is None


def test_the_keyring_answers_for_its_own_server_beside_the_environment(
    ring: _Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_api_key("gpu-box:8000", "sk-ring")  # kept under https://gpu-box:8000
    monkeypatch.setenv(ENV_KEY, "sk-env")
    monkeypatch.setenv(ENV_HOST, "https://api.example.com")
    assert api_key("https://gpu-box:8000") == "sk-ring"
    assert api_key("https://api.example.com") == "sk-env"
    assert api_key("http://gpu-box:8000") is None


def test_a_key_held_back_says_why_in_one_sentence(
    ring: _Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert env_key_note("https://api.example.com") is None  # no key in the environment
    monkeypatch.setenv(ENV_KEY, "sk-env")
    assert env_key_note("api.example.com") == (
        "$CONTEXTLENS_API_KEY is not sent to https://api.example.com: it goes only to the "
        "server $CONTEXTLENS_API_HOST names, and $CONTEXTLENS_API_HOST is not set (set "
        "$CONTEXTLENS_API_HOST=https://api.example.com to use it there)"
    )
    monkeypatch.setenv(ENV_HOST, "gpu-box:8000")
    assert "$CONTEXTLENS_API_HOST names another server (gpu-box:8000)" in (
        env_key_note("api.example.com") or "")  # fmt: skip
    assert env_key_note("https://gpu-box:8000") is None  # sent: nothing to say
