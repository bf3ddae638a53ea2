"""Getting a model: the known models (the default one first) fetched into the models folder,
hash-checked, by the one fetcher both faces use (the window's dialog, ``contextlens-cli
fetch-model`` and ``make``)."""

from __future__ import annotations

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
    yet (an interrupted download resumes); ModelFetchError in one sentence, FetchCancelled."""
    return fetch_model(model, folder, progress, cancel)
