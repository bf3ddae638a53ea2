"""A keyring in a JSON file, for the CLI tests of `remote key` (no system keyring runs here).

Chosen by ``PYTHON_KEYRING_BACKEND=tests.file_keyring.FileKeyring`` with the file in
``$CONTEXTLENS_TEST_KEYRING``; it is registered nowhere else, so the app never picks it itself.
Importing it registers the class with keyring all the same (every subclass is a candidate for
keyring's chainer), so without that variable it ranks below zero, which the chainer skips: a test
of another file in the same process must not reach a keyring with no file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.compat import properties
from keyring.errors import PasswordDeleteError

ENV = "CONTEXTLENS_TEST_KEYRING"


class FileKeyring(KeyringBackend):
    @properties.classproperty
    def priority(cls) -> float:
        return 1 if ENV in os.environ else -1

    @property
    def _path(self) -> Path:
        return Path(os.environ[ENV])

    def _entries(self) -> dict[str, str]:
        try:
            return json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(f"{service}\n{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries[f"{service}\n{username}"] = password
        self._path.write_text(json.dumps(entries), encoding="utf-8")

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        if entries.pop(f"{service}\n{username}", None) is None:
            raise PasswordDeleteError("no such password")
        self._path.write_text(json.dumps(entries), encoding="utf-8")


@contextmanager
def chosen(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file keyring at ``path`` in place of the one in use, for the ``with`` block. The one in
    use is asked for first: keyring chooses its default on first use, and chosen while the
    variable is set that would be the file's, left in place after the block."""
    before = keyring.get_keyring()
    monkeypatch.setenv(ENV, str(path))
    keyring.set_keyring(FileKeyring())
    try:
        yield path
    finally:
        keyring.set_keyring(before)
