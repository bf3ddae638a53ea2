"""The engine's private folders: each names its owner, and those of processes that are gone are
removed by the next engine (a killed window cannot remove its own, and /dev/shm is memory)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from app.core.engine import scratch

pytestmark = pytest.mark.unit

GONE = 2**22 + 12_345  # above Linux's pid_max ceiling: no process has it


def _folder(where: Path, name: str, owner: int | None, age_s: float = 0) -> Path:
    folder = where / f"{scratch.PREFIX}{name}"
    folder.mkdir()
    (folder / "engine.log").write_text("a log", encoding="utf-8")
    if owner is not None:
        (folder / scratch.OWNER).write_text(str(owner), encoding="ascii")
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return folder


def test_only_the_folders_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    mine = _folder(tmp_path, "mine", os.getpid())
    dead = _folder(tmp_path, "dead", GONE)
    new_unowned = _folder(tmp_path, "new", None)
    old_unowned = _folder(tmp_path, "old", None, age_s=2 * scratch.UNOWNED_AGE_S)
    garbled = _folder(tmp_path, "garbled", None, age_s=60)
    (garbled / scratch.OWNER).write_bytes(b"\xff\xfe not a pid")
    a_file = tmp_path / f"{scratch.PREFIX}file"
    a_file.write_text("not a folder", encoding="utf-8")
    elsewhere = tmp_path / "kept-target"
    elsewhere.mkdir()
    link = tmp_path / f"{scratch.PREFIX}link"
    link.symlink_to(elsewhere)
    other = tmp_path / "other-app-folder"
    other.mkdir()

    removed = scratch.sweep(tmp_path)

    assert sorted(removed) == sorted([dead, old_unowned])
    assert not dead.exists() and not old_unowned.exists()
    for kept in (mine, new_unowned, garbled, a_file, link, elsewhere, other):
        assert kept.exists(), kept
    assert scratch.sweep(tmp_path) == []  # nothing more to do


def test_a_new_folder_names_its_owner_and_sweeps_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "base_dir", lambda: str(tmp_path))
    dead = _folder(tmp_path, "dead", GONE)
    folder = scratch.make()
    assert folder.parent == tmp_path and folder.name.startswith(scratch.PREFIX)
    assert (folder / scratch.OWNER).read_text(encoding="ascii") == str(os.getpid())
    assert folder.stat().st_mode & 0o077 == 0  # the owner's alone
    assert not dead.exists()


def test_a_folder_that_cannot_be_read_is_left_alone(tmp_path: Path) -> None:
    assert scratch.sweep(tmp_path / "missing") == []
