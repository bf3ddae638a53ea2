"""API keys for inference servers, kept in the operating system's keyring.

A key is stored under the service ``ContextLens`` with the server's base URL as the user name, so
each server has its own. It is never written to the history database, an export, a settings file
or a log: the engine gets it at connect time and holds it in memory only. ``CONTEXTLENS_API_KEY``
gives a key for one run (scripts, CI) without touching the keyring.
"""

from __future__ import annotations

import os

from app.core.engine.remote_http import normalize_url

SERVICE = "ContextLens"
ENV_KEY = "CONTEXTLENS_API_KEY"


class CredentialError(RuntimeError):
    """The keyring could not be used; the message says why in one sentence."""


def _keyring():  # type: ignore[no-untyped-def]
    import keyring

    return keyring


def _failed(doing: str, exc: Exception) -> CredentialError:
    from keyring.errors import NoKeyringError

    if isinstance(exc, NoKeyringError):
        return CredentialError(
            f"cannot {doing}: this system has no keyring (install and unlock one, such as "
            f"GNOME Keyring or KWallet, or give the key in ${ENV_KEY} for each run)"
        )
    return CredentialError(f"cannot {doing}: the keyring said {exc}")


def api_key(url: str) -> str | None:
    """The key for the server at ``url``: ``$CONTEXTLENS_API_KEY``, else the keyring's, else
    None. A keyring that cannot be read counts as no key (the server will say if it needs one)."""
    from keyring.errors import KeyringError

    env = os.environ.get(ENV_KEY)
    if env:
        return env
    try:
        return _keyring().get_password(SERVICE, normalize_url(url))
    except (KeyringError, RuntimeError):
        return None


def save_api_key(url: str, key: str) -> None:
    """Keep ``key`` for the server at ``url`` in the keyring (replacing an earlier one)."""
    from keyring.errors import KeyringError

    if not key.strip():
        raise CredentialError("the API key is empty")
    try:
        _keyring().set_password(SERVICE, normalize_url(url), key.strip())
    except (KeyringError, RuntimeError) as exc:
        raise _failed("save the API key", exc) from None


def forget_api_key(url: str) -> bool:
    """Remove the key kept for ``url``; False when there was none."""
    from keyring.errors import KeyringError, PasswordDeleteError

    try:
        _keyring().delete_password(SERVICE, normalize_url(url))
    except PasswordDeleteError:
        return False
    except (KeyringError, RuntimeError) as exc:
        raise _failed("remove the API key", exc) from None
    return True
