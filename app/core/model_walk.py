"""Walking a folder for ``*.gguf`` files without getting lost: bounded in depth and entries,
following symbolic links but never around a loop.

Other programs' model folders hold symbolic links (the Hugging Face cache's snapshots point into
its blobs; a person links a model folder from another disk). Links are followed, but a folder
reached twice (a link to a parent) is read once, hidden folders (``.locks``, ``.no_exist``,
``.internal``) are skipped, and a walk stops after ``max_entries`` entries with a sentence
saying so, so a home folder added by mistake costs a moment, not minutes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.core.cancelled import Cancelled

MAX_ENTRIES = 20_000  # directory entries looked at per walk
SUFFIX = ".gguf"

StopCheck = Callable[[], bool] | None  # True once the scan is no longer wanted


def check_stop(stop: StopCheck) -> None:
    """Raise :class:`Cancelled` once ``stop`` says so: scans call it for each entry."""
    if stop is not None and stop():
        raise Cancelled


@dataclass
class Walk:
    """The ``*.gguf`` files found, folder by folder (each folder's names sorted), the folders
    read (to watch), and why the walk stopped early, if it did."""

    files: list[tuple[Path, list[Path]]] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def find_gguf(root: Path, max_depth: int, max_entries: int = MAX_ENTRIES,
              stop: StopCheck = None) -> Walk:  # fmt: skip
    """The ``*.gguf`` regular files (or links to one) under ``root``, ``max_depth`` folders
    deep at most (0: ``root`` itself only), breadth first, in name order; Cancelled as soon
    as ``stop`` says so."""
    walk = Walk()
    seen: set[tuple[int, int]] = set()
    entries = 0
    level = [root]
    for depth in range(max_depth + 1):
        below: list[Path] = []
        for folder in level:
            try:
                st = folder.stat()
                if (st.st_dev, st.st_ino) in seen:
                    continue  # a loop, or a second link to a folder already read
                seen.add((st.st_dev, st.st_ino))
                with os.scandir(folder) as it:
                    listed = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            walk.folders.append(folder)
            found: list[Path] = []
            for entry in listed:
                check_stop(stop)
                entries += 1
                if entries > max_entries:
                    walk.problems.append(
                        f"Stopped looking in {root} after {max_entries:,} entries.")  # fmt: skip
                    _keep(walk, folder, found)
                    return walk
                try:
                    if entry.name.lower().endswith(SUFFIX) and entry.is_file():
                        found.append(Path(entry.path))
                    elif (depth < max_depth and not entry.name.startswith(".")
                          and entry.is_dir()):  # fmt: skip
                        below.append(Path(entry.path))
                except OSError:
                    continue
            _keep(walk, folder, found)
        level = below
    return walk


def _keep(walk: Walk, folder: Path, found: list[Path]) -> None:
    if found:
        walk.files.append((folder, found))
