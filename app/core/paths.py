"""Where resources, models, user data and caches live, whichever way the app was installed.

One module answers this so the CLI, the GUI, the engine child and the tests agree. The app runs
in three layouts, told apart by :func:`layout`:

- ``source``: a checkout (the folder above ``app/`` holds ``pyproject.toml``). Resources are
  ``<repo>/resources`` and models ``<repo>/models``, where the set-up fetches the default model.
- ``installed``: a wheel in some ``site-packages``. ``resources/`` ships inside the package as
  ``app/resources`` (see setup.py); models live in the user data folder.
- ``frozen``: the packaged build (PyInstaller, ``sys.frozen``). Resources are inside the bundle
  (``sys._MEIPASS``); models live in the user data folder.

Outside a checkout nothing is ever written next to the code: models, the history database
(``app/store/db.py``) and the log go to the user data and log folders, re-makeable artefacts to
the user cache folder. ``CONTEXTLENS_RESOURCES``, ``CONTEXTLENS_MODELS`` and ``CONTEXTLENS_CACHE``
override each folder in every layout.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

import platformdirs

from app.core import config

APP_NAME = "contextlens"  # the cache folder's name
DATA_NAME = "ContextLens"  # the user data folder's name, shared with the history database
_APP_DIR = Path(__file__).resolve().parents[1]  # the ``app`` package folder


class Layout(enum.StrEnum):
    SOURCE = "source"
    INSTALLED = "installed"
    FROZEN = "frozen"


def is_frozen() -> bool:
    """True in the packaged build, where ``sys.executable`` is the app, not a Python."""
    return bool(getattr(sys, "frozen", False))


def layout() -> Layout:
    if is_frozen():
        return Layout.FROZEN
    if (_APP_DIR.parent / "pyproject.toml").is_file():
        return Layout.SOURCE
    return Layout.INSTALLED


def project_root() -> Path:
    """The folder holding ``app/``: the checkout in a source tree, else where the package sits."""
    return _APP_DIR.parent


def bundle_dir() -> Path:
    """The frozen build's folder of bundled files (``_internal`` beside the executable)."""
    return Path(getattr(sys, "_MEIPASS", Path(sys.executable).resolve().parent))


def resources_dir() -> Path:
    """Icons, styles, translations and the sample document."""
    override = config.current().resources
    if override is not None:
        return override
    match layout():
        case Layout.FROZEN:
            return bundle_dir() / "resources"
        case Layout.SOURCE:
            return project_root() / "resources"
        case _:
            return _APP_DIR / "resources"


def user_data_dir() -> Path:
    """The person's own files: the history database and, outside a checkout, the models."""
    return Path(platformdirs.user_data_dir(DATA_NAME))


def config_dir() -> Path:
    """The person's settings that are files of the app's own (the folders added to the model
    list); the window's QSettings live beside them."""
    return Path(platformdirs.user_config_dir(DATA_NAME))


def models_dir() -> Path:
    """Where GGUF models are listed and the default model is fetched to."""
    override = config.current().models
    if override is not None:
        return override
    if layout() is Layout.SOURCE:
        return project_root() / "models"
    return user_data_dir() / "models"


def cache_dir() -> Path:
    """Downloads and built artefacts that can be re-made (never user data)."""
    override = config.current().cache
    return override if override is not None else Path(platformdirs.user_cache_dir(APP_NAME))


def sample_document() -> Path:
    """The long public-domain text the app opens when started with no document."""
    return resources_dir() / "samples" / "jargon-file-4.4.7.txt"


def list_models(folder: Path | None = None) -> list[Path]:
    """Every ``*.gguf`` in the models folder, sorted by name."""
    folder = folder or models_dir()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
