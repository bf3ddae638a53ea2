"""The disk caches (plans and counts, model cards) on ``diskcache``, trusting nothing in the folder.

``diskcache`` obeys each row of its database: a row whose ``mode`` says pickle is unpickled on
``get`` (code runs), a row's ``filename`` is joined to the folder, so an absolute one reads and,
on eviction or a "damaged entry" delete, removes a file anywhere, and its ``Settings`` table feeds
the ``Disk`` constructor and SQLite pragmas. Whoever can write the cache folder (a shared
``CONTEXTLENS_CACHE``, a cache copied from elsewhere) decides all of it. So here:

- values are bytes only, stored inline or in files the store names itself; a row that asks for
  anything else, or names a file outside the folder, is refused (ValueError: a damaged entry);
- every setting is given explicitly, and a store whose ``Settings`` table holds a key
  ``diskcache`` does not define is refused before it is opened (the caller clears it);
- the folder is created private (0700).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import DEFAULT_SETTINGS, METADATA, MODE_BINARY, MODE_RAW, UNKNOWN

MIN_FILE_SIZE = 1 << 15  # values from 32 KiB up go to files (diskcache's own default)
# Every setting diskcache reads from its table, given here so that the table decides none.
_SETTINGS: dict[str, Any] = {
    **DEFAULT_SETTINGS,
    "disk_min_file_size": MIN_FILE_SIZE,
    "disk_pickle_protocol": 5,
}
_KNOWN = frozenset(DEFAULT_SETTINGS) | frozenset(METADATA)


class ForeignStore(ValueError):
    """The folder holds a store this code did not make (or one changed by hand)."""


class BytesDisk(diskcache.Disk):  # type: ignore[misc]  # diskcache ships no type information
    """Bytes in, bytes out: no pickle, no text, no file outside the store's folder."""

    def __init__(self, directory: str, **_settings: Any) -> None:
        super().__init__(directory, min_file_size=MIN_FILE_SIZE, pickle_protocol=5)

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> tuple[int, int, Any, Any]:
        if read or type(value) is not bytes:
            raise TypeError("the cache keeps bytes only")
        stored: tuple[int, int, Any, Any] = super().store(value, read, key=key)
        return stored

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == MODE_RAW and filename is None:
            return super().fetch(mode, filename, value, read)
        if mode == MODE_BINARY and self._inside(filename):
            return super().fetch(mode, filename, value, read)
        raise ValueError("a cache row that is not bytes the cache wrote")

    def remove(self, file_path: str) -> None:
        if self._inside(file_path):
            super().remove(file_path)

    def _inside(self, filename: str | None) -> bool:
        """Whether ``filename`` names a file in the store's folder (as the store names them)."""
        if not isinstance(filename, str) or not filename or os.path.isabs(filename):
            return False
        folder: str = os.path.realpath(self._directory)
        full = os.path.realpath(os.path.join(folder, filename))
        return os.path.commonpath([folder, full]) == folder and full != folder


def private_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) readable by this user only; one that exists and is
    this user's is made private too."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        if not hasattr(os, "getuid") or folder.stat().st_uid == os.getuid():
            folder.chmod(0o700)


def _check_settings(folder: Path) -> None:
    """ForeignStore when the store's Settings table holds a key diskcache does not define."""
    db = folder / diskcache.core.DBNAME
    if not db.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as con:
            keys = {row[0] for row in con.execute("SELECT key FROM Settings")}
    except sqlite3.OperationalError:  # no Settings table yet: diskcache makes it
        return
    foreign = keys - _KNOWN
    if foreign:
        raise ForeignStore(f"a cache store with settings of its own ({sorted(foreign)[0]})")


def open_store(folder: Path, size_limit: int, **settings: Any) -> diskcache.Cache:
    """The store in ``folder`` (created private); OSError, sqlite3.Error or ForeignStore when it
    cannot be opened as one this code made."""
    private_folder(folder)
    _check_settings(folder)
    return diskcache.Cache(str(folder), disk=BytesDisk,
                           **{**_SETTINGS, "size_limit": size_limit, **settings})  # fmt: skip
