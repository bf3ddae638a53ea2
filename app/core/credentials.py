"""API keys for inference servers, kept in the operating system's keyring.

A key is stored under the service ``ContextLens`` with the server's base URL as the user name, so
each server has its own. It is never written to the history database, an export, a settings file
or a log: the engine gets it at connect time and holds it in memory only. ``CONTEXTLENS_API_KEY``
gives a key for one run (scripts, CI) without touching the keyring, for the one server that
``CONTEXTLENS_API_HOST`` names (its address as ``--engine`` takes it): a key exported in a shell
must not go to every server that shell talks to. Without a matching ``CONTEXTLENS_API_HOST`` it is
not sent, and :func:`env_key_note` says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core import config
from app.core.engine.remote_http import normalize_url, same_server

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

SERVICE = "ContextLens"
ENV_KEY = config.API_KEY_ENV
ENV_HOST = config.API_HOST_ENV


class CredentialError(RuntimeError):
    """The keyring could not be used; the message says why in one sentence."""


def _keyring() -> KeyringBackend:
    """The keyring in use (keyring's own get_password and the rest call the same one)."""
    import keyring  # noqa: PLC0415 (keyring takes ~60 ms: only when a key is used)

    return keyring.get_keyring()


def _failed(doing: str, exc: Exception) -> CredentialError:
    from keyring.errors import NoKeyringError  # noqa: PLC0415 (see _keyring)

    if isinstance(exc, NoKeyringError):
        return CredentialError(
            f"cannot {doing}: this system has no keyring (install and unlock one, such as "
            f"GNOME Keyring or KWallet, or give the key in ${ENV_KEY} for each run, with the "
            f"server's address in ${ENV_HOST})"
        )
    return CredentialError(f"cannot {doing}: the keyring said {exc}")


def _env_key_for(url: str) -> str | None:
    """``$CONTEXTLENS_API_KEY`` when ``$CONTEXTLENS_API_HOST`` names the server at ``url``."""
    settings = config.current()
    key, host = settings.api_key, settings.api_host
    return key if key and host and same_server(host, url) else None


def env_key_note(url: str) -> str | None:
    """Why ``$CONTEXTLENS_API_KEY``, being set, is not sent to the server at ``url`` (one
    sentence), or None when it is sent or not set."""
    if not config.current().api_key or _env_key_for(url) is not None:
        return None
    address = normalize_url(url)
    host = config.current().api_host
    named = (f"${ENV_HOST} names another server ({host})" if host
             else f"${ENV_HOST} is not set")  # fmt: skip
    return (f"${ENV_KEY} is not sent to {address}: it goes only to the server ${ENV_HOST} "
            f"names, and {named} (set ${ENV_HOST}={address} to use it there)")  # fmt: skip


def api_key(url: str) -> str | None:
    """The key for the server at ``url``: ``$CONTEXTLENS_API_KEY`` when ``$CONTEXTLENS_API_HOST``
    names this server, else the keyring's, else None. A keyring that cannot be read counts as no
    key (the server will say if it needs one)."""
    from keyring.errors import KeyringError  # noqa: PLC0415 (see _keyring)

    env = _env_key_for(url)
    if env:
        return env
    try:
        return _keyring().get_password(SERVICE, normalize_url(url))
    except (KeyringError, RuntimeError):
        return None


def save_api_key(url: str, key: str) -> None:
    """Keep ``key`` for the server at ``url`` in the keyring (replacing an earlier one)."""
    from keyring.errors import KeyringError  # noqa: PLC0415 (see _keyring)

    if not key.strip():
        raise CredentialError("the API key is empty")
    try:
        _keyring().set_password(SERVICE, normalize_url(url), key.strip())
    except (KeyringError, RuntimeError) as exc:
        raise _failed("save the API key", exc) from None


def forget_api_key(url: str) -> bool:
    """Remove the key kept for ``url``; False when there was none."""
    from keyring.errors import KeyringError, PasswordDeleteError  # noqa: PLC0415 (see _keyring)

    try:
        _keyring().delete_password(SERVICE, normalize_url(url))
    except PasswordDeleteError:
        return False
    except (KeyringError, RuntimeError) as exc:
        raise _failed("remove the API key", exc) from None
    return True


# A Hugging Face token is kept the same way, under the Hub's address (``$HF_ENDPOINT``, or
# https://huggingface.co): a token for one Hub is never sent to another. ``$HF_TOKEN`` gives one
# for a run without the keyring (app/core/hub_fetch.py reads it first).
HUB_TOKEN_PREFIX = "Hugging Face token for "


def _hub_user(endpoint: str) -> str:
    return HUB_TOKEN_PREFIX + endpoint.strip().rstrip("/").lower()


def hub_token(endpoint: str) -> str | None:
    """The token kept for the Hub at ``endpoint``, or None (also when the keyring cannot be
    read: the Hub will say if the model needs one)."""
    from keyring.errors import KeyringError  # noqa: PLC0415 (see _keyring)

    try:
        return _keyring().get_password(SERVICE, _hub_user(endpoint))
    except (KeyringError, RuntimeError):
        return None


def save_hub_token(endpoint: str, token: str) -> None:
    """Keep ``token`` for the Hub at ``endpoint`` in the keyring (replacing an earlier one)."""
    from keyring.errors import KeyringError  # noqa: PLC0415 (see _keyring)

    token = token.strip()
    if not token:
        raise CredentialError("the Hugging Face token is empty")
    if any(c.isspace() for c in token):
        raise CredentialError("a Hugging Face token has no spaces in it (hf_…)")
    try:
        _keyring().set_password(SERVICE, _hub_user(endpoint), token)
    except (KeyringError, RuntimeError) as exc:
        raise _failed("save the Hugging Face token", exc) from None


def forget_hub_token(endpoint: str) -> bool:
    """Remove the token kept for the Hub at ``endpoint``; False when there was none."""
    from keyring.errors import KeyringError, PasswordDeleteError  # noqa: PLC0415 (see _keyring)

    try:
        _keyring().delete_password(SERVICE, _hub_user(endpoint))
    except PasswordDeleteError:
        return False
    except (KeyringError, RuntimeError) as exc:
        raise _failed("remove the Hugging Face token", exc) from None
    return True
