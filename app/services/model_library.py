"""The models on this machine, as both faces list them: ContextLens's own folder, the other
programs' folders and the folders the person added (:mod:`app.core.model_sources`).

The window and ``contextlens-cli models`` ask here, so they list the same models under the same
names; adding a folder is remembered for both (:mod:`app.core.model_folders`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.core import model_folders
from app.core.cancelled import Cancelled
from app.core.model_sources import (
    Discovery,
    FoundModel,
    OllamaDetails,
    Place,
    Problem,
    Source,
    discover,
    watch_folders,
)
from app.core.model_walk import StopCheck
from app.services.errors import BadRequest

__all__ = [
    "Cancelled",
    "Discovery",
    "FoundModel",
    "OllamaDetails",
    "Place",
    "Problem",
    "Source",
    "add_folder",
    "added_folders",
    "check_folders",
    "find_models",
    "remove_folder",
    "watch_folders",
]


def check_folders(folders: Sequence[Path]) -> list[Path]:
    """``folders`` made absolute; BadRequest (one sentence) for one that is not a folder."""
    checked: list[Path] = []
    for given in folders:
        folder = Path(given).expanduser().absolute()
        if not folder.is_dir():
            raise BadRequest(f"{folder} is not a folder")
        checked.append(folder)
    return checked


def added_folders() -> list[Path]:
    """The folders the person added to the list, in the order added."""
    return model_folders.load_folders()


def add_folder(folder: Path) -> list[Path]:
    """Remember ``folder`` for the list (it must exist) and return the folders added."""
    (checked,) = check_folders([folder])
    return model_folders.add_folder(checked)


def remove_folder(folder: Path) -> list[Path]:
    """Forget ``folder`` (nothing in it is touched) and return the folders added."""
    return model_folders.remove_folder(folder)


def find_models(own_folder: Path | None = None, extra_folders: Sequence[Path] = (),
                stop: StopCheck = None) -> Discovery:  # fmt: skip
    """Every model found: the models folder (``own_folder``, default the app's), the other
    programs' folders, the folders added, then ``extra_folders`` (this call only). ``stop``
    ends the search with Cancelled as soon as it says so."""
    folders = [*added_folders()]
    folders += [f for f in check_folders(extra_folders) if f not in folders]
    return discover(own_folder, folders, stop=stop)


# ----- how both faces say a listed model's figures -----


def count_text(n: int) -> str:
    """Parameters as a person reads them: "135 M", "7.2 B" (a test model's "32")."""
    if n >= 1e9:
        return f"{n / 1e9:,.1f} B"
    if n >= 1e6:
        return f"{n / 1e6:,.0f} M"
    return f"{n / 1e3:,.0f} K" if n >= 1e3 else f"{n:,}"


def size_text(n: int) -> str:
    """A file size: "93.8 MiB", "4.1 GiB" (a test model's "1.2 KiB")."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"
