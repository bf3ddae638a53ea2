"""The folders a person added to the model list, kept in a small JSON file of the app's own.

A file rather than the window's QSettings so the command line (``contextlens-cli models``) and
the window list the same folders without Qt. ``model-folders.json`` in the config folder
(:func:`app.core.paths.config_dir`): ``{"folders": ["/abs/path", ...]}``. A file that cannot be
read is the same as none: the list is the person's convenience, never a reason to fail. It is
read through :mod:`.small_files` (a regular file, capped), as every small file a store holds.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from app.core import paths
from app.core.small_files import read_small_text

FILE_NAME = "model-folders.json"
MAX_FILE_BYTES = 1 << 20  # thousands of folders; a larger file is not one this app wrote


def folders_file() -> Path:
    return paths.config_dir() / FILE_NAME


def load_folders(file: Path | None = None) -> list[Path]:
    """The folders added, in the order they were added (none when the file is missing or bad)."""
    file = file or folders_file()
    try:
        data = json.loads(read_small_text(file, MAX_FILE_BYTES))
    except (OSError, ValueError, RecursionError):  # a FIFO, /dev/zero, not JSON, 200k "["
        return []
    listed = data.get("folders") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        return []
    return [Path(p) for p in listed if isinstance(p, str) and p]


def save_folders(folders: list[Path], file: Path | None = None) -> None:
    """Write the list whole, through a temporary file, so a crash leaves the old one."""
    file = file or folders_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"folders": [str(p) for p in folders]}, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_folder(folder: Path, file: Path | None = None) -> list[Path]:
    """Add ``folder`` (absolute, once) and return the list."""
    folder = folder.expanduser().absolute()
    folders = load_folders(file)
    if folder not in folders:
        folders.append(folder)
        save_folders(folders, file)
    return folders


def remove_folder(folder: Path, file: Path | None = None) -> list[Path]:
    """Forget ``folder`` (its models stay where they are) and return the list."""
    folder = folder.expanduser().absolute()
    folders = [p for p in load_folders(file) if p != folder]
    save_folders(folders, file)
    return folders
