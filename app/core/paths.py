"""Where resources, models and downloads live.

One module answers this so the CLI, the GUI and the tests agree. A source checkout keeps models in
``<repo>/models``; ``CONTEXTLENS_MODELS`` overrides it (for an installed wheel, or a shared folder).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "contextlens"
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def project_root() -> Path:
    """The folder holding ``app/``, ``resources/`` and ``models/`` in a source checkout."""
    return _PACKAGE_ROOT


def resources_dir() -> Path:
    return Path(os.environ.get("CONTEXTLENS_RESOURCES", _PACKAGE_ROOT / "resources"))


def models_dir() -> Path:
    return Path(os.environ.get("CONTEXTLENS_MODELS", _PACKAGE_ROOT / "models"))


def cache_dir() -> Path:
    """Downloads and built artefacts that can be re-made (never user data)."""
    return Path(os.environ.get("CONTEXTLENS_CACHE", platformdirs.user_cache_dir(APP_NAME)))


def sample_document() -> Path:
    """The long public-domain text the app opens when started with no document."""
    return resources_dir() / "samples" / "jargon-file-4.4.7.txt"


def list_models(folder: Path | None = None) -> list[Path]:
    """Every ``*.gguf`` in the models folder, sorted by name."""
    folder = folder or models_dir()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
