"""Getting a model: the known models (the default one first) fetched into the models folder,
hash-checked, by the one fetcher both faces use (the window's dialog, ``contextlens-cli
fetch-model`` and ``make``); and any GGUF on the Hugging Face Hub, by name, into its cache."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.core.default_model import KnownModel, known_model
from app.core.model_fetch import CancelCheck, Progress, fetch_model
from app.services.errors import BadRequest


def model_named(name: str | None) -> KnownModel:
    """The known model called ``name`` (None: the default one); BadRequest names the choices."""
    try:
        return known_model(name)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def fetch(model: KnownModel, folder: Path | None = None, progress: Progress | None = None,
          cancel: CancelCheck | None = None) -> Path:  # fmt: skip
    """``model`` in ``folder`` (default: the models folder), downloaded when it is not there
    yet (an interrupted download resumes); ModelFetchError in one sentence, Cancelled."""
    return fetch_model(model, folder, progress, cancel)


def fetch_from_hub(reference: str, folder: Path | None = None, progress: Progress | None = None,
                   cancel: CancelCheck | None = None,
                   on_plan: Callable[[list[str], int], None] | None = None) -> Path:  # fmt: skip
    """The GGUF a Hugging Face reference names (``org/repo:Q4_K_M``, ``org/repo:FILE.gguf``, a
    link), fetched into the Hugging Face cache, or into ``folder``; an interrupted download
    resumes. HubReferenceError for a reference that names nothing, ModelFetchError in one
    sentence, Cancelled."""
    from app.core.hub_fetch import fetch_hub_model  # noqa: PLC0415 (huggingface_hub: on use)

    return fetch_hub_model(reference, folder, progress, cancel, on_plan=on_plan)


def hub_host() -> str:
    """The Hub's host, as shown before fetching ("huggingface.co", or a mirror's)."""
    from app.core.hub_fetch import endpoint_host  # noqa: PLC0415

    return endpoint_host()


def keep_hub_token(token: str) -> str:
    """Keep ``token`` in the keyring for the configured Hub; returns the Hub's address.
    CredentialError in one sentence."""
    from app.core.credentials import save_hub_token  # noqa: PLC0415
    from app.core.hub_fetch import endpoint  # noqa: PLC0415

    save_hub_token(endpoint(), token)
    return endpoint()


def forget_hub_token() -> tuple[str, bool]:
    """Remove the token kept for the configured Hub: (its address, whether one was kept)."""
    from app.core.credentials import forget_hub_token as forget  # noqa: PLC0415
    from app.core.hub_fetch import endpoint  # noqa: PLC0415

    return endpoint(), forget(endpoint())
